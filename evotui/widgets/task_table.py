"""The task table: one row per task of the suite, with live status while a run or an edit is in flight."""

from __future__ import annotations

import time
from dataclasses import replace

from rich.cells import cell_len
from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from core.attempts import TaskRow
from evotui import keys
from evotui.messages import StatusesDrawn, TaskHighlighted
from evotui.widgets import marks
from evotui.widgets.table import Table, fit

STATUS_FLUSH_S = 0.25
LABELS = {"mark": " ", "id": "id", "stage": "stage", "iter": "iter", "best": "best", "status": "status",
          "level": "lvl", "category": "category"}
# Every column has a fixed width (a changed cell does not resize its column, and a narrow pane is
# laid out once per resize): ids and categories are sized to the suite, the live ones to their content.
WIDTHS = {"mark": 1, "stage": 6, "iter": 7, "best": 7, "status": 24, "level": 3}
DROPS = ("category", "level", "stage")   # what a narrow pane gives up first; then the status narrows
MIN_STATUS = 12
MIN_ID = 10


class TaskTable(Table):
    """Tasks with stage, iterations used/budget, best speedup, live status, level and category.

    Space marks tasks (a run covers the marked ones, else all); moving the cursor posts
    ``TaskHighlighted``."""

    BINDINGS = keys.bindings("tasks")
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
        self.column_plan: list[tuple[str, int]] = []        # the columns on screen (key, width)
        self._stale: set[str] = set()
        self._drawn_at = 0.0            # when the last batch of statuses was drawn (time.monotonic)

    def on_mount(self) -> None:
        self._ensure_columns()

    def on_resize(self) -> None:
        self._lay_out()

    def _ensure_columns(self) -> None:
        """Columns exist before the first rows, whichever comes first: mounting or data."""
        if not self.columns:
            self._lay_out(force=True)

    def _plan(self) -> list[tuple[str, int]]:
        """The columns that fit the pane, in order (key, width)."""
        rows = self.rows_by_id.values()
        natural = {**WIDTHS, "id": max([len(r.id) for r in rows] + [8]),
                   "category": max([len(r.category) for r in rows] + [8])}
        width = self.scrollable_content_region.width or 10_000
        padding = 2 * self.cell_padding
        cols = fit([(k, natural[k]) for k in LABELS], width, padding, DROPS)
        over = sum(w + padding for _, w in cols) - width
        if over > 0:
            cols = [(k, max(MIN_STATUS, w - over) if k == "status" else w) for k, w in cols]
        over = sum(w + padding for _, w in cols) - width
        if over > 0:   # long ids (a public suite's) are cut, with …, before the status goes below its minimum
            cols = [(k, max(MIN_ID, w - over) if k == "id" else w) for k, w in cols]
        return cols

    def _lay_out(self, force: bool = False) -> None:
        """Rebuild the columns when what fits changed (a resize, a suite with longer ids)."""
        plan = self._plan()
        if plan == self.column_plan and not force:
            return
        self.column_plan = plan
        keep = self.current_task if self.columns else None
        self.clear(columns=True)
        for key, width in plan:
            self.add_column(LABELS[key], key=key, width=width)
        for task_id in self.shown:
            self.add_row(*self._cells(task_id), key=task_id)
        if keep in self.shown:
            self.move_cursor(row=self.shown.index(keep), animate=False)
        self.keep_cursor_visible()

    # -- content ------------------------------------------------------------------------------------

    @property
    def current_task(self) -> str | None:
        """The task under the cursor."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value

    def matches(self, row: TaskRow) -> bool:
        """Whether ``row`` passes the filter (words in any order, in id, category, stage or level)."""
        if not self.filter_text.strip():
            return True
        hay = f"{row.id} {row.category} {row.stage} level{row.level} l{row.level}".lower()
        return all(word in hay for word in self.filter_text.lower().split())

    def _ranked(self, ids: list[str]) -> list[str]:
        """With a filter, the task it names exactly first, then those whose id starts with it, then the
        rest, each in the suite's order (``softmax`` before ``log_softmax``)."""
        text = self.filter_text.strip().lower()
        if not text:
            return ids
        return sorted(ids, key=lambda i: (i.lower() != text, not i.lower().startswith(text)))

    def set_filter(self, text: str) -> None:
        """Show only the tasks matching ``text`` (marks and statuses of hidden tasks are kept)."""
        self.filter_text = text
        self.show_rows(list(self.rows_by_id.values()))

    def show_rows(self, rows: list[TaskRow]) -> None:
        """Show ``rows`` (those passing the filter); the cursor stays on its task."""
        self._ensure_columns()
        keep = self.current_task
        self.rows_by_id = {r.id: r for r in rows}
        visible = self._ranked([r.id for r in rows if self.matches(r)])
        if visible == self.shown:
            for task_id in visible:
                self._refresh_row(task_id)
            return
        self.shown = visible
        if self._plan() != self.column_plan:
            self._lay_out()
            return
        self.clear()
        for task_id in visible:
            self.add_row(*self._cells(task_id), key=task_id)
        if keep in visible:
            self.move_cursor(row=visible.index(keep))
        self.keep_cursor_visible()
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
        if not self._stale:   # after a quiet spell at once, else with the batch
            self.set_timer(max(0.01, self._drawn_at + STATUS_FLUSH_S - time.monotonic()), self._draw_statuses)
        self._stale.add(task_id)

    @property
    def drawn(self) -> bool:
        """Every status set so far is on screen (none waits for the next batch)."""
        return not self._stale

    def _draw_statuses(self) -> None:
        stale, self._stale = self._stale, set()
        self._drawn_at = time.monotonic()
        if "status" in dict(self.column_plan):
            for task_id in stale & set(self.shown):
                self.update_cell(task_id, "status", self._status_cell(task_id))
        self.post_message(StatusesDrawn(tuple(sorted(stale))))

    def cut_status(self, task_id: str | None) -> str:
        """``task_id``'s whole status when its cell does not hold it (cut with …, or no status column at
        this width), else "": the screen's status line shows it."""
        text = self.status.get(task_id or "", ("", ""))[0]
        width = dict(self.column_plan).get("status", 0)
        return text if text and cell_len(text) > width else ""

    def restyle(self) -> None:
        """Recolour every row (after a theme change)."""
        for task_id in self.shown:
            self._refresh_row(task_id, force=True)

    def _refresh_row(self, task_id: str, force: bool = False) -> None:
        """Redraw the cells of a row whose text changed (each update costs the table a re-measure);
        ``force``: all of them (their colours changed)."""
        row = self.get_row(task_id)
        for (key, _), old, new in zip(self.column_plan, row, self._cells(task_id)):
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
        cells = {"mark": mark, "id": Text(r.id, no_wrap=True, overflow="ellipsis"), "stage": stage,
                 "iter": f"{r.used}/{r.budget}", "best": best, "status": self._status_cell(task_id),
                 "level": str(r.level), "category": Text(r.category, no_wrap=True, overflow="ellipsis")}
        return [cells[key] for key, _ in self.column_plan]

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
