"""The memory browser's list: one row per experience with its filters' fields and its values, an
attempt first by its ``#n`` (the number the attempt tree gives it)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from evotui.messages import ExperienceHighlighted
from evotui.widgets import marks
from evotui.widgets.table import Table, fit

LABELS = {"number": "#", "task": "task", "kind": "kind", "stage": "stage", "source": "src", "q1": "Q1", "q2": "Q2",
          "reward": "reward", "adoptions": "adopt", "title": "title"}
WIDTHS = {"kind": 13, "stage": 6, "source": 5, "q1": 5, "q2": 5, "reward": 6, "adoptions": 5}
MIN_TITLE = 24        # below this the other columns give way (the title names the task and stage too)
DROPS = ("adoptions", "stage", "source", "task", "kind")


def _number(item: dict[str, Any]) -> str:
    """An attempt's ``#n`` as its task's attempt tree shows it; "" for knowledge (seeds, rules)."""
    return f"#{item['number']}" if item.get("number") is not None else ""


class MemoryList(Table):
    """Experience summaries (dicts of ``core.memory.summary``); moving the cursor posts
    ``ExperienceHighlighted``. The title takes the width the other columns leave."""

    DEFAULT_CSS = """
    MemoryList { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.items: list[dict[str, Any]] = []
        self.column_plan: list[tuple[str, int]] = []

    def on_mount(self) -> None:
        self._ensure_columns()

    def on_resize(self) -> None:
        if self._plan() != self.column_plan:
            self.show(self.items, keep=True)

    def _ensure_columns(self) -> None:
        """Columns exist before the first rows, whichever comes first: mounting or data."""
        if not self.columns:
            self.column_plan = self._plan()
            for key, width in self.column_plan:
                self.add_column(LABELS[key], key=key, width=width)

    def _plan(self) -> list[tuple[str, int]]:
        width = self.scrollable_content_region.width or 200
        padding = 2 * self.cell_padding
        natural = {**WIDTHS, "task": max([len(i["task"]) for i in self.items] + [8]),
                   "number": max([len(_number(i)) for i in self.items] + [2])}
        cols = fit([(k, natural[k]) for k in LABELS if k != "title"], width - MIN_TITLE - padding, padding, DROPS)
        title = max(MIN_TITLE, width - sum(w + padding for _, w in cols) - padding)
        return [*cols, ("title", title)]

    @property
    def current_id(self) -> str | None:
        """The experience under the cursor."""
        if not self.items or not self.row_count:
            return None
        return str(self.items[min(self.cursor_row, len(self.items) - 1)]["id"])

    def show(self, items: list[dict[str, Any]], keep: bool = False) -> None:
        """Show ``items``; the cursor goes to the first (``keep``: stays where it is)."""
        row = self.cursor_row if keep else 0
        self.items = items
        plan = self._plan()
        if plan != self.column_plan:
            self.column_plan = plan
            self.clear(columns=True)
            for key, width in plan:
                self.add_column(LABELS[key], key=key, width=width)
        else:
            self.clear()
        for item in items:
            cells = {"number": Text(_number(item), justify="right"),
                     "task": Text(item["task"], no_wrap=True, overflow="ellipsis"), "kind": item["kind"],
                     "stage": item["stage"] or "–", "source": item["source"],
                     "q1": Text(marks.q(item["q1"]), justify="right"), "q2": Text(marks.q(item["q2"]), justify="right"),
                     "reward": Text(marks.reward(item["reward"]), justify="right"),
                     "adoptions": Text(str(item["adoptions"]), justify="right"),
                     "title": Text(item["title"], no_wrap=True, overflow="ellipsis")}
            self.add_row(*(cells[key] for key, _ in self.column_plan), key=item["id"])
        if items:
            self.move_cursor(row=min(row, len(items) - 1), animate=False)
            self.keep_cursor_visible()
            if not keep:
                # through our own queue: processing it gives the table the idle pass that sizes its columns
                self.call_later(self.post_message, ExperienceHighlighted(items[0]["id"]))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value is not None:
            self.post_message(ExperienceHighlighted(event.row_key.value))
