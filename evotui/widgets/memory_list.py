"""The memory browser's list: one row per experience with its filters' fields and its values."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from evotui.messages import ExperienceHighlighted
from evotui.widgets import marks
from evotui.widgets.table import Table

COLUMNS = (("task", "task"), ("kind", "kind"), ("stage", "stage"), ("source", "src"), ("q1", "Q1"), ("q2", "Q2"),
           ("reward", "reward"), ("adoptions", "adopt"), ("title", "title"))
TITLE_WIDTH = 16


class MemoryList(Table):
    """Experience summaries (dicts of ``core.memory.summary``); moving the cursor posts
    ``ExperienceHighlighted``."""

    DEFAULT_CSS = """
    MemoryList { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.items: list[dict] = []

    def on_mount(self) -> None:
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        """Columns exist before the first rows, whichever comes first: mounting or data."""
        if self.columns:
            return
        for key, label in COLUMNS:
            self.add_column(label, key=key, width=TITLE_WIDTH if key == "title" else None)

    @property
    def current_id(self) -> str | None:
        """The experience under the cursor."""
        if not self.items or not self.row_count:
            return None
        return self.items[min(self.cursor_row, len(self.items) - 1)]["id"]

    def show(self, items: list[dict]) -> None:
        """Show ``items``; the cursor goes to the first."""
        self._ensure_columns()
        self.items = items
        self.clear()
        for item in items:
            self.add_row(
                item["task"], item["kind"], item["stage"] or "–", item["source"],
                Text(marks.q(item["q1"]), justify="right"), Text(marks.q(item["q2"]), justify="right"),
                Text(marks.reward(item["reward"]), justify="right"), Text(str(item["adoptions"]), justify="right"),
                Text(item["title"], no_wrap=True, overflow="ellipsis"),
                key=item["id"],
            )
        if items:
            self.move_cursor(row=0, animate=False)
            # through our own queue: processing it gives the table the idle pass that sizes its columns
            self.call_later(self.post_message, ExperienceHighlighted(items[0]["id"]))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value is not None:
            self.post_message(ExperienceHighlighted(event.row_key.value))
