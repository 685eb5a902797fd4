"""The base of the workbench's tables."""

from __future__ import annotations

from typing import Any

from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable

from evotui import keys


class Table(DataTable[Any]):
    """A DataTable that redraws once it has measured rows just added, when it had to draw before.

    DataTable sizes auto-width columns in an idle pass after rows are added; a frame drawn before that
    pass is cached with the old widths and stays on screen until the cursor moves (it shows on a busy
    machine: columns cut to their labels). Such a table drops its cached lines after the pass.
    """

    BINDINGS = keys.bindings("table")

    _drawn_unmeasured = False

    def keep_cursor_visible(self) -> None:
        """Scroll so the cursor's row is on screen (after rows were replaced or the pane resized)."""
        if self.row_count:
            self.call_after_refresh(self._scroll_cursor_into_view, False)

    def action_first_row(self) -> None:
        """Home: the first row (DataTable's own Home scrolls sideways)."""
        if self.row_count:
            self.move_cursor(row=0)

    def action_last_row(self) -> None:
        """End: the last row."""
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)

    def render_lines(self, crop: Region) -> list[Strip]:
        if self._require_update_dimensions:   # drawing rows DataTable has not measured yet
            self._drawn_unmeasured = True
        return super().render_lines(crop)

    def on_idle(self) -> None:
        if self._require_update_dimensions and self._drawn_unmeasured:   # DataTable measures after this
            self._drawn_unmeasured = False
            self.call_next(self._redraw_measured)

    def _redraw_measured(self) -> None:
        self.notify_style_update()   # DataTable's way of dropping its rendered lines
        self.refresh()


def fit(columns: list[tuple[str, int]], width: int, padding: int, drops: tuple[str, ...]) -> list[tuple[str, int]]:
    """The columns (key, width) that fit in ``width``: dropping ``drops`` in order until they do.
    Each column also takes ``padding`` cells."""
    cols = list(columns)
    for key in drops:
        if sum(w + padding for _, w in cols) <= width:
            break
        cols = [c for c in cols if c[0] != key]
    return cols
