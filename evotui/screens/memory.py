"""The memory browser: on the left the experiences, filterable by task, kind, stage, backend and source
and sortable by Q1, Q2, reward, recency or adoptions; on the right the selected one's outcome, values,
Q history, the tasks that retrieved or adopted it, its parent and children (enter opens one), and its
code. Attempts are numbered ``#n`` as in the main screen's attempt tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Select

from core.memory import KINDS, SORTS, SOURCES
from evotui import keys
from evotui.messages import ExperienceHighlighted, ExperienceLoaded, MemoryLoaded, MemoryQueryChanged, RelativeChosen
from evotui.widgets.experience_detail import ExperienceDetail
from evotui.widgets.marks import plural
from evotui.widgets.memory_list import MemoryList
from evotui.widgets.run_header import RunHeader

if TYPE_CHECKING:
    from evotui.app import EvoKernelApp


def _backends() -> list[str]:
    """Every backend in the table (plugins too), then "" (knowledge of no backend)."""
    from core.doctor import backend_names

    return [*backend_names(), ""]


FILTERS = ("task", "kind", "stage", "backend", "source")


def _label(value: str) -> str:
    return value if value else "none"


class MemoryScreen(Screen):
    """Experiences on the left, the selected one in full on the right."""

    BINDINGS = keys.bindings("memory")
    DEFAULT_CSS = """
    MemoryScreen { layout: vertical; }
    MemoryScreen #panes { height: 1fr; }
    MemoryScreen #left { width: 60%; }
    MemoryScreen #filters { grid-size: 3 2; grid-gutter: 0 1; height: 2; padding: 0 1; }
    MemoryScreen #filters Select { width: 1fr; }
    MemoryScreen MemoryList, MemoryScreen ExperienceDetail {
        border: round $panel-lighten-2;
        border-title-align: left;
        border-subtitle-align: right;
    }
    MemoryScreen MemoryList:focus, MemoryScreen ExperienceDetail:focus { border: round $primary; }
    MemoryScreen ExperienceDetail { width: 1fr; padding: 0 1; }
    """

    @property
    def workbench(self) -> EvoKernelApp:
        """The app as the workbench it is: its readers and engine host."""
        return cast("EvoKernelApp", self.app)

    def __init__(self, task_ids: list[str]) -> None:
        super().__init__()
        self.task_ids = task_ids
        self.sort = "recency"
        self.filters: dict[str, str | None] = {name: None for name in FILTERS}
        self.shown_id: str | None = None
        self.opened_id: str | None = None    # a parent or child opened from the detail (not in the list)

    def compose(self) -> ComposeResult:
        yield RunHeader()
        with Horizontal(id="panes"):
            with Vertical(id="left"):
                with Grid(id="filters"):
                    yield Select([(t, t) for t in [*self.task_ids, "*"]], prompt="task: any", id="task", compact=True)
                    yield Select([(k, k) for k in KINDS], prompt="kind: any", id="kind", compact=True)
                    yield Select([(_label(s), s) for s in ("draft", "refine", "")], prompt="stage: any", id="stage",
                                 compact=True)
                    yield Select([(_label(b), b) for b in _backends()], prompt="backend: any", id="backend",
                                 compact=True)
                    yield Select([(s, s) for s in SOURCES], prompt="source: any", id="source", compact=True)
                    yield Select([(f"sort: {s}", s) for s in SORTS], value=self.sort, allow_blank=False, id="sort",
                                 compact=True)
                yield MemoryList(id="memory")
            yield ExperienceDetail(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(MemoryList).border_title = "Memory"
        self.query_one(ExperienceDetail).border_title = "Experience"
        self.query_one(MemoryList).focus()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.query_one(ExperienceDetail).restyle())
        self.post_message(MemoryQueryChanged(dict(self.filters), self.sort))

    # -- the query ----------------------------------------------------------------------------------

    def set_filter(self, name: str, value: str | None) -> None:
        """Set one filter (None: any) the way choosing it in its drop-down does."""
        self.query_one(f"#{name}", Select).value = Select.BLANK if value is None else value

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        name = event.select.id
        if name == "sort":
            self.sort = str(event.value)
        elif name in self.filters:
            self.filters[name] = None if event.value is Select.BLANK else str(event.value)
        self.post_message(MemoryQueryChanged(dict(self.filters), self.sort))

    def on_memory_query_changed(self, message: MemoryQueryChanged) -> None:
        self.query_one(MemoryList).border_subtitle = "loading…"
        self.workbench.load_memory(message.filters, message.sort, self)

    def action_open_filter(self) -> None:
        """/: open the task filter's drop-down (arrows and enter choose; tab moves to the next filter)."""
        select = self.query_one("#task", Select)
        select.focus()
        select.expanded = True

    def action_show_help(self) -> None:
        """? or F1: the keys and marks, as on the main screen."""
        from evotui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    def action_refresh(self) -> None:
        self.post_message(MemoryQueryChanged(dict(self.filters), self.sort))

    def action_next_sort(self) -> None:
        select = self.query_one("#sort", Select)
        select.value = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def on_memory_loaded(self, message: MemoryLoaded) -> None:
        if message.filters != self.filters or message.sort != self.sort:
            return  # an older query's answer
        listing = self.query_one(MemoryList)
        listing.show(message.items)
        shown = len(message.items)
        more = f" (first {shown})" if shown < message.total else ""
        listing.border_subtitle = f"{plural(message.total, 'experience')}{more} · by {message.sort}"
        if not message.items:
            self.shown_id = None
            self.query_one(ExperienceDetail).show_message("Nothing matches these filters.")

    def on_experience_highlighted(self, message: ExperienceHighlighted) -> None:
        if message.exp_id == self.query_one(MemoryList).current_id and message.exp_id != self.shown_id:
            self.opened_id = None
            self.workbench.load_experience(message.exp_id, self)

    def on_relative_chosen(self, message: RelativeChosen) -> None:
        """A parent or child chosen in the detail: the list's cursor goes to it when the list holds it,
        else the detail shows it alone (the list keeps its filters and its cursor)."""
        listing = self.query_one(MemoryList)
        ids = [item["id"] for item in listing.items]
        if message.exp_id in ids:
            listing.move_cursor(row=ids.index(message.exp_id), animate=False)
            if listing.current_id == self.shown_id:   # already there: nothing else will load it
                return
        self.opened_id = message.exp_id
        self.workbench.load_experience(message.exp_id, self)

    def on_experience_loaded(self, message: ExperienceLoaded) -> None:
        if message.exp is None or message.exp.id not in (self.query_one(MemoryList).current_id, self.opened_id):
            return
        self.shown_id = message.exp.id
        self.query_one(ExperienceDetail).show(message.exp, message.number, message.parent, message.children)
