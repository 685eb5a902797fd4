"""The task table: one row per task of the suite, with live status while a run or an edit is in flight."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from core.attempts import TaskRow
from evotui.messages import TaskHighlighted
from evotui.widgets import marks
from evotui.widgets.table import Table

STATUS_FLUSH_S = 0.25
COLUMNS = (("mark", " "), ("id", "id"), ("stage", "stage"), ("iter", "iter"), ("best", "best"), ("status", "status"),
           ("level", "lvl"), ("category", "category"))
# Columns whose cells change while a run goes on get a fixed width (a changed cell does not resize
# its column); the others are sized to the suite.
WIDTHS = {"mark": 1, "stage": 6, "iter": 7, "best": 7, "status": 24}


class TaskTable(Table):
    """Tasks with stage, iterations used/budget, best speedup, live status, level and category.

    Space marks tasks (a run covers the marked ones, else all); moving the cursor posts
    ``TaskHighlighted``."""

    BINDINGS = [Binding("space", "toggle_mark", "Mark")]
    COMPONENT_CLASSES = {"task-table--ok", "task-table--fail", "task-table--busy", "task-table--dim",
                         "task-table--mark"}
    DEFAULT_CSS = """
    TaskTable { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.rows_by_id: dict[str, TaskRow] = {}
        self.status: dict[str, tuple[str, str]] = {}     # task -> (text, tone: ok|fail|busy|dim)
        self.marked: set[str] = set()
        self.filter_text = ""                          # / narrows the rows to tasks matching it
        self.shown: list[str] = []                     # the ids on screen, in order
        self._stale: set[str] = set()

    def on_mount(self) -> None:
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        """Columns exist before the first rows, whichever comes first: mounting or data."""
        if self.columns:
            return
        for key, label in COLUMNS:
            self.add_column(label, key=key, width=WIDTHS.get(key))

    # -- content ------------------------------------------------------------------------------------

    @property
    def current_task(self) -> str | None:
        """The task under the cursor."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value

    def matches(self, row: TaskRow) -> bool:
        """Whether ``row`` passes the filter (words in any order, in id, category, stage or level)."""
        if not self.filter_text.strip():
            return True
        hay = f"{row.id} {row.category} {row.stage} level{row.level} l{row.level}".lower()
        return all(word in hay for word in self.filter_text.lower().split())

    def set_filter(self, text: str) -> None:
        """Show only the tasks matching ``text`` (marks and statuses of hidden tasks are kept)."""
        self.filter_text = text
        self.show_rows(list(self.rows_by_id.values()))

    def show_rows(self, rows: list[TaskRow]) -> None:
        """Show ``rows`` (those passing the filter); the cursor stays on its task."""
        self._ensure_columns()
        keep = self.current_task
        self.rows_by_id = {r.id: r for r in rows}
        visible = [r.id for r in rows if self.matches(r)]
        if visible == self.shown:
            for task_id in visible:
                self._refresh_row(task_id)
            return
        self.shown = visible
        self.clear()
        for task_id in visible:
            self.add_row(*self._cells(task_id), key=task_id)
        if keep in visible:
            self.move_cursor(row=visible.index(keep))
        self.call_later(self.refresh)   # a message of our own: its idle pass sizes the columns

    def update_task(self, task_id: str, **changes) -> None:
        """Change fields of one task's row (stage, used, budget, best_speedup, ...)."""
        if task_id in self.rows_by_id:
            self.rows_by_id[task_id] = replace(self.rows_by_id[task_id], **changes)
            if task_id in self.shown:
                self._refresh_row(task_id)

    def set_status(self, task_id: str, text: str, tone: str = "dim") -> None:
        """The live status of a task (tone: ok, fail, busy or dim). Drawn in batches, at most every
        ``STATUS_FLUSH_S`` seconds: gate verdicts of several tasks arrive in quick bursts."""
        self.status[task_id] = (text, tone)
        if not self._stale:
            self.set_timer(STATUS_FLUSH_S, self._draw_statuses)
        self._stale.add(task_id)

    @property
    def drawn(self) -> bool:
        """Every status set so far is on screen (none waits for the next batch)."""
        return not self._stale

    def _draw_statuses(self) -> None:
        stale, self._stale = self._stale, set()
        for task_id in stale & set(self.shown):
            self.update_cell(task_id, "status", self._status_cell(task_id))

    def restyle(self) -> None:
        """Recolour every row (after a theme change)."""
        for task_id in self.shown:
            self._refresh_row(task_id, force=True)

    def _refresh_row(self, task_id: str, force: bool = False) -> None:
        """Redraw the cells of a row whose text changed (each update costs the table a re-measure);
        ``force``: all of them (their colours changed)."""
        row = self.get_row(task_id)
        for (key, _), old, new in zip(COLUMNS, row, self._cells(task_id)):
            if force or old != new:
                self.update_cell(task_id, key, new)

    def _style(self, tone: str):
        return self.get_component_rich_style(f"task-table--{tone}", partial=True)

    def _status_cell(self, task_id: str) -> Text:
        text, tone = self.status.get(task_id, ("", "dim"))
        return Text(text, style=self._style(tone), no_wrap=True, overflow="ellipsis")

    def _cells(self, task_id: str) -> list:
        r = self.rows_by_id[task_id]
        best = Text(marks.speedup(r.best_speedup), style=self._style("ok") if r.best_speedup else "")
        stage = Text(r.stage, style=self._style("ok") if r.stage == "refine" else "")
        mark = Text("●" if task_id in self.marked else " ", style=self._style("mark"))
        return [mark, r.id, stage, f"{r.used}/{r.budget}", best, self._status_cell(task_id), str(r.level), r.category]

    # -- events -------------------------------------------------------------------------------------

    def action_toggle_mark(self) -> None:
        task = self.current_task
        if task is None:
            return
        self.marked ^= {task}
        self.update_cell(task, "mark", Text("●" if task in self.marked else " ", style=self._style("mark")))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value is not None:
            self.post_message(TaskHighlighted(event.row_key.value))
