"""? or F1: every key of the workbench and what the marks mean, on one screen."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("r", "start a run (the marked tasks, else all, after a question); again pauses it; again resumes it"),
    ("s", "run only the task under the cursor"),
    ("space", "mark or unmark a task for the next run"),
    ("/", "filter the tasks by id, category, stage or level (escape clears it)"),
    ("home / end", "first / last row"),
    ("tab", "next pane (tasks, attempts, code, events)"),
    ("v", "verify the selected attempt again (or kernels/<task>/); records nothing"),
    ("e", "open kernels/<task>/ in $VISUAL or $EDITOR; saving re-verifies it and logs a hand edit"),
    ("p", "promote the selected attempt: put its files in kernels/<task>/"),
    ("d", "the attempt's code, its diff against its parent, or the model's answer (in turn)"),
    ("m", "the memory browser (m or escape: back; o: next order; f5: refresh)"),
    ("t", "next theme (remembered for this workspace)"),
    ("ctrl+p", "every command by name"),
    ("? / f1", "this help (escape closes it)"),
    ("q", "quit (a run in progress stops and can be resumed)"),
)
MARKS = (
    ("✓ ✗ ·", "a gate passed, failed, not reached (fmt, hack, build, corr, perf)"),
    ("2 ×3", "attempt #2; the same code came back 3 times (stored once)"),
    ("└ 4", "attempt #4 was made from the attempt above it (a refinement or a hand edit)"),
    ("reward", "drafts ±1; refinements and edits: how much faster than the best so far, -1 if broken"),
)


def help_text() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row(Text("Keys", style="bold underline"), "")
    for key, what in KEYS:
        grid.add_row(key, what)
    grid.add_row("", "")
    grid.add_row(Text("Marks", style="bold underline"), "")
    for mark, what in MARKS:
        grid.add_row(mark, what)
    return grid


class HelpScreen(ModalScreen[None]):
    """The keys and marks; escape, ?, f1 or q closes it."""

    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("question_mark", "dismiss", "Close", show=False),
                Binding("f1", "dismiss", "Close", show=False), Binding("q", "dismiss", "Close", show=False)]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 100%; height: auto; max-height: 100%; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(), id="help-text")

    def action_dismiss(self) -> None:
        self.dismiss(None)
