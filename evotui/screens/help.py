"""? or F1: every key of the workbench and what the marks mean, on one screen."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from evotui import keys

MARKS = (
    ("✓ ✗ ·", "a gate passed, failed, not reached (fmt, hack, build, corr, perf)"),
    ("2 ×3", "attempt #2; the same code came back 3 times (stored once)"),
    ("└ 4", "attempt #4 was made from the attempt above it (a refinement or a hand edit)"),
    ("reward", "drafts ±1; refinements and edits: how much faster than the best so far, -1 if broken"),
)


VALUES = (
    ("kernel", "the attempt's own verdict and speed, from its own verification"),
    ("Q1", "its value as an example retrieved when drafting (moved by the rewards of drafts it was shown to)"),
    ("Q2", "its value as a start point to refine from (moved by its own reward, then its children's)"),
    ("reward", "what its own verification earned: drafts ±1; refinements and edits against the best so far"),
    ("? not judged", "the tool failed its verification: no reward, no value, never a parent or start point"),
)


def help_text(screen: str = "main") -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row(Text("Keys of the memory browser" if screen == "memory" else "Keys", style="bold underline"), "")
    for key, what in keys.help_lines(screen):
        grid.add_row(key, what)
    grid.add_row("", "")
    grid.add_row(Text("Values" if screen == "memory" else "Marks", style="bold underline"), "")
    for mark, what in (VALUES if screen == "memory" else MARKS):
        grid.add_row(mark, what)
    return grid


class HelpScreen(ModalScreen[None]):
    """The keys and marks (of the memory browser: its keys and what its values are); escape, ?, f1 or q
    closes it."""

    BINDINGS = keys.bindings("help")
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 100%; height: auto; max-height: 100%; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    """

    def __init__(self, screen: str = "main") -> None:
        super().__init__()
        self.for_screen = screen

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(self.for_screen), id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
