"""The first-run screen: what was created in the directory, and how to connect an LLM."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from evotui import keys
from evotui.widgets import marks

WHAT = {
    "evokernel.toml": "the workspace's settings: backend, suite, model, budgets",
    "kernels/": "a folder per task appears as you edit one (e) or a run finds a kernel",
    ".evokernel/": "the memory of experiences, build and reference caches",
}


def first_run_text(root: str, created: list[str], llm_ready: bool, *, suite: str = "builtin",
                   size_scale: float | str | None = None, backend: str = "cpu") -> Text:
    """What the screen says (also printed by tests)."""
    text = Text()
    text.append("Welcome to EvoKernel\n\n", style="bold")
    which = "the built-in task suite" if suite in ("", "builtin") else f"the task suite in {suite}"
    scaled = marks.sizes(size_scale)
    text.append(f"A new workspace in {root}, with {which}{f' ({scaled})' if scaled else ''} "
                f"and the {backend.upper() if backend == 'cpu' else backend} backend.\nCreated:\n")
    for name in created:
        text.append(f"  {name:<16}", style="bold")
        text.append(f"{WHAT.get(name, '')}\n")
    text.append("\nTo generate kernels, connect an OpenAI-compatible endpoint:\n")
    text.append("  export OPENAI_BASE_URL=http://localhost:8000/v1   ", style="bold")
    text.append("(vLLM; Ollama uses port 11434)\n")
    text.append("  export OPENAI_API_KEY=...                          ", style="bold")
    text.append("(if the endpoint needs one)\n")
    text.append("  export EVOKERNEL_MODEL=qwen3-coder                 ", style="bold")
    text.append("(the model's name)\n")
    text.append("or set base_url and model under [llm] in evokernel.toml (keep keys out of it).\n")
    if llm_ready:
        text.append("\nAn endpoint is configured already: press r to start a run.\n")
    text.append("\nWithout one the workbench still works: hand-edit kernels/<task>/, verify, browse memory.")
    text.append("\nTo watch a run with no LLM at all: evokernel run --model demo (canned answers, a demo).")
    return text


class FirstRunScreen(ModalScreen[None]):
    """Says what was created and how to connect an LLM; any of enter, escape or the button closes it."""

    BINDINGS = keys.bindings("first_run")
    DEFAULT_CSS = """
    FirstRunScreen { align: center middle; }
    FirstRunScreen > Vertical {
        width: 96; height: auto; padding: 1 2; border: thick $primary; background: $surface;
    }
    FirstRunScreen Button { margin-top: 1; }
    """

    def __init__(self, root: str, created: list[str], llm_ready: bool = False, *, suite: str = "builtin",
                 size_scale: float | str | None = None, backend: str = "cpu") -> None:
        super().__init__()
        self.root, self.created, self.llm_ready = root, created, llm_ready
        self.suite, self.size_scale, self.backend = suite, size_scale, backend

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(first_run_text(self.root, self.created, self.llm_ready, suite=self.suite,
                                        size_scale=self.size_scale, backend=self.backend), id="first-run-text")
            yield Button("Open the workbench", variant="primary", id="continue")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
