"""The event log: one line per thing worth knowing (attempts, value updates, edits, problems)."""

from __future__ import annotations

import time
from collections import deque

from rich.text import Text
from textual import events
from textual.widgets import RichLog

FLUSH_S = 0.5
AT_ONCE = 4         # batches written at once within FLUSH_S before lines wait for the next batch
now = time.time     # the time of a line that does not bring its own (tests fix it for screenshots)


class EventLog(RichLog):
    """A bounded log; ``add`` writes a line with an optional time and a tone (ok, fail, warn, dim).

    Lines are written in batches at most every ``FLUSH_S`` seconds: each write grows the log and
    so lays out the screen again, and a run can log several lines a second. The first ``AT_ONCE`` batches
    of any ``FLUSH_S`` are written at once (a save's "verifying" and its verdict, "the same code as #N", a
    moment later, both show as soon as they are known)."""

    COMPONENT_CLASSES = {"event-log--ok", "event-log--fail", "event-log--warn", "event-log--dim",
                         "event-log--time"}
    DEFAULT_CSS = """
    EventLog { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=2000, min_width=20, wrap=True, markup=False, highlight=False, **kwargs)
        self.lines_written: deque[str] = deque(maxlen=2000)   # plain text, for tests and copy-paste
        self._kept: deque[Text] = deque(maxlen=2000)          # the styled lines, wrapped again on a resize
        self._pending: list[Text] = []
        self._wrapped_at = 0
        self._flushed: deque[float] = deque(maxlen=AT_ONCE)   # when the latest batches were written

    def add(self, text: str, tone: str = "", at: float | None = None) -> None:
        line = Text()
        at = now() if at is None else at      # every line says when
        if at is not None:
            line.append(time.strftime("%H:%M:%S ", time.localtime(at)),
                        style=self.get_component_rich_style("event-log--time", partial=True))
        style = self.get_component_rich_style(f"event-log--{tone}", partial=True) if tone else ""
        line.append(text, style=style)
        self.lines_written.append(line.plain)
        if not self._pending:
            busy = len(self._flushed) == AT_ONCE and self._flushed[0] + FLUSH_S > time.monotonic()
            self.set_timer(self._flushed[0] + FLUSH_S - time.monotonic() if busy else 0.01, self._flush)
        self._pending.append(line)

    @property
    def drawn(self) -> bool:
        """Every line added so far is on screen (none waits for the next batch)."""
        return not self._pending

    def _flush(self) -> None:
        lines, self._pending = self._pending, []
        self._flushed.append(time.monotonic())
        self._wrapped_at = self.scrollable_content_region.width
        for line in lines:
            self._kept.append(line)
            self.write(line)

    def on_resize(self, event: events.Resize) -> None:
        """A new width: write the kept lines again, wrapped to it (RichLog wraps once, when written)."""
        width = self.scrollable_content_region.width
        if width == self._wrapped_at or not self._kept:
            return
        self._wrapped_at = width
        self.clear()
        for line in self._kept:
            self.write(line, scroll_end=False)
        self.scroll_end(animate=False)
