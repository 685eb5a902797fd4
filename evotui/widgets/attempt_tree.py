"""A task's attempts as a tree: drafts are roots, refinements hang under their start point. Each line
has the attempt's number, stage, a mark per gate, latency, reward and who wrote it (the best one's
number is highlighted; its speedup is in the pane's title)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from core.attempts import AttemptLine, default_attempt
from evotui.messages import AttemptHighlighted
from evotui.widgets import marks
from evotui.widgets.table import Table, fit

GATE_COLUMNS = tuple(marks.GATE_LABELS.items())
MAX_DRAWN_DEPTH = 8


def tree_prefix(line: AttemptLine) -> str:
    """Box-drawing indentation: "│ ├ " and friends, capped so deep chains stay readable."""
    if line.depth == 0:
        return ""
    guides = "".join("  " if last else "│ " for last in line.ancestors_last[1:])
    branch = "└ " if line.last_child else "├ "
    text = guides + branch
    cap = 2 * MAX_DRAWN_DEPTH
    return ("…" + text[-cap + 1:]) if len(text) > cap else text


class AttemptTree(Table):
    """The attempts of one task. Moving the cursor posts ``AttemptHighlighted``."""

    COMPONENT_CLASSES = {"attempt-tree--pass", "attempt-tree--fail", "attempt-tree--skip",
                         "attempt-tree--human", "attempt-tree--best"}
    DEFAULT_CSS = """
    AttemptTree { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.task_id: str | None = None
        self.attempt_lines: list[AttemptLine] = []
        self.column_plan: list[str] = []
        self._followed: str | None = None    # the attempt ``show`` took the cursor to (not a hand move)

    def on_mount(self) -> None:
        self._ensure_columns()

    def on_resize(self) -> None:
        if self._plan() != self.column_plan:
            self._rebuild()

    def _ensure_columns(self) -> None:
        """Columns exist before the first rows, whichever comes first: mounting or data."""
        if not self.columns:
            self.column_plan = self._plan()
            self._add_columns()

    def _plan(self) -> list[str]:
        """The columns that fit the pane: a mark column per gate, else the five marks in one "gates"
        column; then the stage, then the author go (the tree's shape and the colour still say them)."""
        lines = self.attempt_lines
        index = max([len(tree_prefix(x)) + len(str(x.index)) + (len(f" ×{x.repeats + 1}") if x.repeats else 0)
                     for x in lines] + [2])
        ms_width = max([len(marks.ms(x.latency_ms)) for x in lines] + [3])
        natural = {"index": index, "stage": 6, "gates": 5, "ms": ms_width, "reward": 6, "source": 5,
                   **{gate: len(label) for gate, label in GATE_COLUMNS}}
        width = self.scrollable_content_region.width or 10_000
        padding = 2 * self.cell_padding
        wide = ["index", "stage", *(g for g, _ in GATE_COLUMNS), "ms", "reward", "source"]
        if sum(natural[k] + padding for k in wide) <= width:
            return wide
        compact = ["index", "stage", "gates", "ms", "reward", "source"]
        return [k for k, _ in fit([(k, natural[k]) for k in compact], width, padding, ("stage", "source"))]

    def _add_columns(self) -> None:
        labels = {"index": "#", "stage": "stage", "gates": "gates", "ms": "ms", "reward": "reward",
                  "source": "src", **dict(GATE_COLUMNS)}
        for key in self.column_plan:
            self.add_column(labels[key], key=key)

    def _rebuild(self) -> None:
        self.column_plan = self._plan()
        row = self.cursor_row
        self.clear(columns=True)
        self._add_columns()
        for line in self.attempt_lines:
            self.add_row(*self._cells(line), key=line.id)
        if self.attempt_lines:
            self.move_cursor(row=min(row, len(self.attempt_lines) - 1), animate=False)
            self.keep_cursor_visible()

    @property
    def current(self) -> AttemptLine | None:
        """The attempt under the cursor."""
        if not self.attempt_lines or not self.row_count:
            return None
        return self.attempt_lines[min(self.cursor_row, len(self.attempt_lines) - 1)]

    def show(self, task_id: str, lines: list[AttemptLine], follow: str | None = None) -> None:
        """Show ``lines``. A cursor moved by hand stays on its attempt; otherwise it goes to ``follow``
        (the attempt just recorded: its verdict is what a person waits for), else the best attempt (else
        the newest), so a run's progress shows without touching a key."""
        self._ensure_columns()
        keep = self.current.id if self.current and task_id == self.task_id else None
        if keep is not None and keep in (getattr(default_attempt(self.attempt_lines), "id", None), self._followed):
            keep = None   # the cursor was where it starts or where it was taken (not moved by hand): it follows
        self.task_id, self.attempt_lines = task_id, lines
        plan = self._plan()
        if plan != self.column_plan:
            self.column_plan = plan
            self.clear(columns=True)
            self._add_columns()
        else:
            self.clear()
        for line in lines:
            self.add_row(*self._cells(line), key=line.id)
        if not lines:
            return
        ids = [line.id for line in lines]
        self._followed = follow if follow in ids and keep not in ids else None
        if keep in ids:
            target = ids.index(keep)
        elif follow in ids:
            target = ids.index(follow)
        else:  # a new task: its best attempt, else its newest
            first = default_attempt(lines)
            target = ids.index(first.id) if first is not None else 0
        self.move_cursor(row=target, animate=False)
        self.keep_cursor_visible()
        # Say it ourselves (moving to the row the cursor is on posts nothing; the screen drops repeats),
        # through our own queue: processing it gives the table the idle pass that sizes its columns.
        self.call_later(self.post_message, AttemptHighlighted(task_id, ids[target]))

    def restyle(self) -> None:
        """Recolour (after a theme change)."""
        if self.task_id is not None:
            self.show(self.task_id, self.attempt_lines)

    def _style(self, name: str):
        return self.get_component_rich_style(f"attempt-tree--{name}", partial=True)

    def _cells(self, line: AttemptLine) -> list:
        index = Text(tree_prefix(line)) + Text(str(line.index), style=self._style("best") if line.best else "")
        if line.repeats:   # the same code came back this many more times (not stored twice)
            index.append(f" ×{line.repeats + 1}", style=self._style("skip"))
        tone = {"passed": "pass", "failed": "fail", "skipped": "skip"}
        if line.not_judged:   # the tool failed at that gate, not the kernel: no verdict there
            tone["failed"] = "skip"
        gate_marks = {gate: Text(marks.NOT_JUDGED if line.not_judged and status == "failed" else marks.mark(status),
                                 style=self._style(tone.get(status, "skip")), justify="center")
                      for gate, status in line.gates}
        gates = Text()
        for gate, _ in line.gates:
            gates.append_text(gate_marks[gate])
        cells = {"index": index, "stage": line.stage, "gates": gates, **gate_marks,
                 "ms": Text(marks.ms(line.latency_ms), justify="right"),
                 "reward": Text(marks.reward(line.reward), justify="right"),
                 "source": Text(line.source, style=self._style("human") if line.source == "human" else "")}
        return [cells[key] for key in self.column_plan]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if self.task_id is not None and event.row_key is not None and event.row_key.value is not None:
            self.post_message(AttemptHighlighted(self.task_id, event.row_key.value))
