"""Before a run over the whole suite starts: how many tasks, how many model calls at most, and the
budgets that bound it. y or enter starts it, n or escape does not."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from evotui import keys


def confirm_text(tasks: int, iterations: int, model: str, token_budget: int | None,
                 cost_budget: float | None) -> Text:
    """What the question says (also read by tests)."""
    text = Text()
    text.append(f"Start a run over all {tasks:,} tasks?\n\n", style="bold")
    text.append(f"{tasks:,} tasks × {iterations} iterations: up to {tasks * iterations:,} answers from {model} "
                "and as many verifications.\n")
    limits = []
    if token_budget:
        limits.append(f"{token_budget:,} tokens")
    if cost_budget:
        limits.append(f"${cost_budget:.2f}")
    text.append("Budget: " + (" or ".join(limits) + ", whichever is spent first" if limits else
                              "no token or cost limit (token_budget, cost_budget under [llm])") + ".\n")
    text.append("\nTo run fewer, mark tasks with space (or s runs the task under the cursor).", style="dim")
    return text


class ConfirmRunScreen(ModalScreen[bool]):
    """Asks before starting a run over every task; dismisses with True to start it."""

    BINDINGS = keys.bindings("confirm")
    DEFAULT_CSS = """
    ConfirmRunScreen { align: center middle; }
    ConfirmRunScreen > Vertical {
        width: 84; max-width: 100%; height: auto; padding: 1 2; border: thick $warning; background: $surface;
    }
    ConfirmRunScreen Horizontal { height: auto; margin-top: 1; }
    ConfirmRunScreen Button { margin-right: 2; }
    """

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.text, id="confirm-text")
            with Horizontal():
                yield Button("Start (y)", variant="warning", id="start")
                yield Button("Cancel (n)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "start")

    def action_answer(self, start: bool) -> None:
        self.dismiss(start)
