"""The memory browser: on the left the experiences, filterable by task, kind, stage, backend and source
and sortable by Q1, Q2, reward, recency or adoptions; on the right the selected one's outcome, values,
Q history, the tasks that retrieved or adopted it, its parent and children (enter opens one), and its
code. Attempts are numbered ``#n`` as in the main screen's attempt tree."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input, Select

from core.memory import KINDS, SORTS, SOURCES
from evotui import keys
from evotui.messages import (
    ExperienceHighlighted,
    ExperienceLoaded,
    MemoryLoaded,
    ReadExperience,
    ReadMemory,
    RelativeChosen,
)
from evotui.widgets.experience_detail import ExperienceDetail
from evotui.widgets.marks import plural
from evotui.widgets.memory_list import MemoryList
from evotui.widgets.run_header import RunHeader


def _backends() -> list[str]:
    """Every backend in the table (plugins too), then "" (knowledge of no backend)."""
    from core.doctor import backend_names

    return [*backend_names(), ""]


FILTERS = ("task", "kind", "stage", "backend", "source")


def _label(value: str) -> str:
    return value if value else "none"


class MemoryScreen(Screen[None]):
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
    /* focus shows by more than a colour: a heavy border and a ▶ before the pane's title */
    MemoryScreen MemoryList:focus, MemoryScreen ExperienceDetail:focus-within { border: heavy $accent; }
    MemoryScreen #filters Select:focus-within { text-style: bold reverse; }
    MemoryScreen #family:focus { border-left: thick $accent; }
    MemoryScreen ExperienceDetail { width: 1fr; padding: 0 1; }
    MemoryScreen #search { display: none; height: 1; border: none; padding: 0 1; }
    MemoryScreen #search.shown { display: block; }
    """
    TITLES = {"memory": "Memory", "detail": "Experience"}

    def __init__(self, task_ids: list[str]) -> None:
        super().__init__()
        self.task_ids = task_ids
        self.sort = "recency"
        self.filters: dict[str, str | None] = {name: None for name in FILTERS}
        self.shown_id: str | None = None
        self.opened_id: str | None = None    # a parent or child opened from the detail (not in the list)
        self.search = ""                     # / : words every listed experience's title or code holds

    def compose(self) -> ComposeResult:
        yield RunHeader()
        with Horizontal(id="panes"):
            with Vertical(id="left"):
                box = Input(placeholder="search titles and code: every word (enter: the list; escape clears)",
                            id="search")
                box.can_focus = False   # until / opens it
                yield box
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
        self._title_panes()
        self.query_one(MemoryList).focus()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.query_one(ExperienceDetail).restyle())
        self._query()

    def _query(self) -> None:
        """Ask the app for the list under the filters, order and search now set."""
        self.query_one(MemoryList).border_subtitle = "loading…"
        self.post_message(ReadMemory(filters=dict(self.filters), sort=self.sort, search=self.search, reply_to=self))

    @property
    def focus_chain(self) -> list[Widget]:
        """Tab goes through the list, the experience and its parent and children first, then the filters
        (six drop-downs used now and then), not the other way round as their place on screen would have it."""
        chain = super().focus_chain
        grid = self.query_one("#filters")
        filters = [w for w in chain if grid in w.ancestors]
        return [w for w in chain if w not in filters] + filters

    def _title_panes(self) -> None:
        """The focused pane says so in its title (▶), not only by its border's colour."""
        for widget, name in ((self.query_one(MemoryList), "memory"), (self.query_one(ExperienceDetail), "detail")):
            widget.border_title = ("▶ " if widget.has_focus_within else "") + self.TITLES[name]

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self._title_panes()

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        self._title_panes()

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
        self._query()

    def action_open_filter(self) -> None:
        """f: open the task filter's drop-down (arrows and enter choose; tab moves to the next filter)."""
        select = self.query_one("#task", Select)
        select.focus()
        select.expanded = True

    def action_search(self) -> None:
        """/: search the titles and the code (typing narrows the list; enter back to it; escape clears)."""
        box = self.query_one("#search", Input)
        box.can_focus = True
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search":
            event.stop()
            self.search = event.value.strip()
            self._query()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search":
            event.stop()
            if not event.value.strip():
                event.input.remove_class("shown")
                event.input.can_focus = False
            self.query_one(MemoryList).focus()

    def action_back(self) -> None:
        """Escape: clear the search, else back to the workbench."""
        box = self.query_one("#search", Input)
        if box.has_class("shown") or box.value:
            box.value = ""
            box.remove_class("shown")
            box.can_focus = False
            self.search = ""
            self._query()
            self.query_one(MemoryList).focus()
            return
        self.app.pop_screen()

    def action_show_help(self) -> None:
        """? or F1: the memory browser's own keys, and what its values mean."""
        from evotui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen("memory"))

    def action_refresh(self) -> None:
        self._query()

    def action_next_sort(self) -> None:
        select = self.query_one("#sort", Select)
        select.value = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def on_memory_loaded(self, message: MemoryLoaded) -> None:
        if message.filters != self.filters or message.sort != self.sort or message.search != self.search:
            return  # an older query's answer
        listing = self.query_one(MemoryList)
        listing.show(message.items)
        shown = len(message.items)
        more = f" (first {shown})" if shown < message.total else ""
        found = f" · /{message.search}" if message.search else ""
        listing.border_subtitle = f"{plural(message.total, 'experience')}{more} · by {message.sort}{found}"
        if not message.items:
            self.shown_id = None
            self.query_one(ExperienceDetail).show_message("Nothing matches these filters.")

    def on_experience_highlighted(self, message: ExperienceHighlighted) -> None:
        if message.exp_id == self.query_one(MemoryList).current_id and message.exp_id != self.shown_id:
            self.opened_id = None
            self.post_message(ReadExperience(exp_id=message.exp_id, reply_to=self))

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
        self.post_message(ReadExperience(exp_id=message.exp_id, reply_to=self))

    def on_experience_loaded(self, message: ExperienceLoaded) -> None:
        if message.exp is None or message.exp.id not in (self.query_one(MemoryList).current_id, self.opened_id):
            return
        self.shown_id = message.exp.id
        self.query_one(ExperienceDetail).show(message.exp, message.number, message.parent, message.children,
                                              message.decisions)
