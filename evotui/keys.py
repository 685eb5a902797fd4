"""Every key of the workbench, as data, in one place: the classes that bind them take their
``BINDINGS`` from here (``bindings``), the help screen lists them (``help_lines``) and the command
palette is generated from them (``commands``), so a key, its footer label, its help line and its
palette entry cannot drift apart.

The table's order is the help screen's order; each class binds its own keys in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class Key:
    """One key binding (or, with ``owner="textual"``, a key Textual binds itself, listed for help)."""

    keys: str              # Textual key names, comma-separated: "question_mark,f1"
    action: str            # the action, in its owner's namespace: "app.verify", "toggle_diff"
    label: str             # the footer's label
    owner: str             # who binds it: app, main, tasks, table, memory, help, confirm, first_run, textual
    #                        (and memory_textual: a key Textual binds on the memory browser, for its help)
    show: bool = True      # shown in the footer
    shown_as: str = ""     # how help and the palette write the key ("?", "/"); default: ``keys``
    help: str = ""         # the help screen's line ("" keeps it off the help screen)
    command: str = ""      # the palette's title ("" keeps it out of the palette)
    command_help: str = ""  # the palette's second line

    @property
    def display(self) -> str:
        return self.shown_as or self.keys

    def binding(self) -> Binding:
        return Binding(self.keys, self.action, self.label, show=self.show)


KEYS: tuple[Key, ...] = (
    Key("r", "app.run_toggle", "Run/pause", "main",
        help="start a run (the marked tasks, else all, after a question); again pauses it; again resumes it",
        command="Run: start, pause or resume", command_help="Marked tasks, or all of the suite"),
    Key("s", "app.run_task", "Run task", "main", help="run only the task under the cursor",
        command="Run the selected task", command_help="Only the task under the cursor"),
    Key("space", "toggle_mark", "Mark", "tasks", help="mark or unmark a task for the next run",
        command="Mark or unmark the task for the next run", command_help="A run covers the marked tasks"),
    Key("slash", "filter", "Filter", "main", show=False, shown_as="/",
        help="filter the tasks by id, category, stage or level (escape clears it)",
        command="Filter the tasks", command_help="By id, category, stage or level"),
    Key("home", "first_row", "First", "table", show=False, shown_as="home / end", help="first / last row"),
    Key("end", "last_row", "Last", "table", show=False),
    Key("tab", "app.focus_next", "Next pane", "textual", help="next pane (tasks, attempts, code, events)"),
    Key("v", "app.verify", "Verify", "main",
        help="verify the selected attempt again (or kernels/<task>/); records nothing",
        command="Re-verify the selected attempt", command_help="Verify again; nothing is recorded"),
    Key("e", "app.edit", "Edit", "main",
        help="open kernels/<task>/ in $VISUAL or $EDITOR; saving re-verifies it and logs a hand edit",
        command="Edit the candidate in $EDITOR", command_help="kernels/<task>/; saving re-verifies it"),
    # ? lists every key; the footer only the daily ones
    Key("p", "app.promote", "Promote", "main", show=False,
        help="promote the selected attempt: put its files in kernels/<task>/",
        command="Promote the selected attempt", command_help="Put its files in kernels/<task>/"),
    Key("d", "toggle_diff", "Diff/code", "main", show=False,
        help="the attempt's code, its diff against its parent, the model's answer, or its hot loops' assembly",
        command="Diff, code, answer or assembly of the attempt",
        command_help="The code, the diff against its parent, the model's raw answer, the hot loops"),
    Key("c", "compare", "Compare", "main", show=False,
        help="compare: mark the selected attempt, then c on another shows the two side by side",
        command="Compare two attempts side by side", command_help="c marks one, c on another compares"),
    Key("m", "memory", "Memory", "app", help="the memory browser (m or escape: back; o: next order; f5: refresh)",
        command="Memory browser", command_help="Experiences, filterable and sortable"),
    Key("t", "next_theme", "Theme", "app", show=False, help="next theme (remembered for this workspace)",
        command="Theme: switch dark/light", command_help="Remembered per workspace"),
    Key("ctrl+p", "app.command_palette", "Palette", "textual", help="every command by name"),
    Key("question_mark,f1", "help", "Help", "main", shown_as="? / f1", help="this help (escape closes it)",
        command="Help: keys and marks", command_help="Every key of the workbench"),
    Key("escape", "escape", "Close", "main", show=False),
    Key("q", "quit", "Quit", "app", help="quit (a run in progress stops and can be resumed)"),
    # the memory browser (its own help lists these)
    Key("escape", "back", "Back", "memory", help="clear the search, else back to the workbench (m too)"),
    Key("slash", "search", "Search", "memory", shown_as="/",
        help="search the titles and the code (every word; enter: back to the list; escape clears it)"),
    Key("f", "open_filter", "Filters", "memory",
        help="the filters: open the task filter (arrows and enter choose; tab: the next filter)"),
    Key("o", "next_sort", "Sort", "memory", help="the next order: Q1, Q2, reward, recency, adoptions"),
    Key("f5", "refresh", "Refresh", "memory", help="read the memory again"),
    Key("question_mark,f1", "show_help", "Help", "memory", shown_as="? / f1", help="this help (escape closes it)"),
    Key("tab", "app.focus_next", "Next", "memory_textual",
        help="next: the list, the experience, its parent and children, then the filters"),
    Key("enter", "select", "Open", "memory_textual", show=False,
        help="open the parent or child under the cursor; attempts are #n as in the attempt tree"),
    # dialogs
    Key("escape", "close", "Close", "help"),
    Key("question_mark", "close", "Close", "help", show=False),
    Key("f1", "close", "Close", "help", show=False),
    Key("q", "close", "Close", "help", show=False),
    Key("y", "answer(True)", "Start", "confirm"),
    Key("enter", "answer(True)", "Start", "confirm", show=False),
    Key("n", "answer(False)", "Cancel", "confirm"),
    Key("escape", "answer(False)", "Cancel", "confirm"),
    Key("escape", "close", "Close", "first_run"),
    Key("enter", "close", "Close", "first_run", show=False),
    Key("q", "app.quit", "Quit", "first_run"),    # the first screen of `make run`: q quits there too
)


def bindings(owner: str) -> list[BindingType]:
    """The ``BINDINGS`` of the class that ``owner`` names, in the table's order."""
    return [key.binding() for key in KEYS if key.owner == owner]


MEMORY_OWNERS = ("memory", "memory_textual")


def help_lines(screen: str = "main") -> list[tuple[str, str]]:
    """(key, what it does) for the help screen of ``screen``: the workbench's, or the memory browser's own."""
    memory = screen == "memory"
    return [(key.display, key.help) for key in KEYS if key.help and (key.owner in MEMORY_OWNERS) == memory]


def commands() -> list[Key]:
    """The keys that are also commands of the palette (each titled with its key, ``"Filter the tasks (/)"``)."""
    return [key for key in KEYS if key.command]


def command_title(key: Key) -> str:
    return f"{key.command} ({key.display})"
