"""The header line: workspace, backend, model, run state and progress, tokens and cost."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class RunStatus:
    """What the header shows; the app replaces it as events arrive."""

    workspace: str = ""
    backend: str = ""
    model: str = ""
    llm_ok: bool = True
    state: str = "opening"         # opening, idle, starting, running, pausing, paused, finished, stopped, failed
    run_id: str | None = None
    iteration: int | None = None
    iterations: int | None = None
    tokens: int = 0
    cost: float = 0.0

    def but(self, **changes) -> "RunStatus":
        return replace(self, **changes)


STATE_SYMBOL = {"running": "▶", "starting": "▶", "pausing": "‖", "paused": "‖", "finished": "■", "stopped": "■",
                "failed": "✗", "budget": "■", "idle": "", "opening": "…", "unavailable": "✗"}
STATE_LABEL = {"unavailable": "workspace not open"}


class RunHeader(Widget):
    """One line at the top of the main screen."""

    COMPONENT_CLASSES = {"run-header--title", "run-header--state", "run-header--problem", "run-header--dim"}
    DEFAULT_CSS = """
    RunHeader { height: 1; width: 100%; }
    """

    status: reactive[RunStatus] = reactive(RunStatus, layout=False)

    def on_mount(self) -> None:
        if hasattr(self.app, "run_status"):  # follow the app's run state
            self.watch(self.app, "run_status", self._follow, init=True)

    def _follow(self, status: RunStatus) -> None:
        self.status = status

    def render(self) -> Text:
        s = self.status
        style = lambda name: self.get_component_rich_style(f"run-header--{name}", partial=True)  # noqa: E731
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(" EvoKernel", style=style("title"))
        sep = (" · ", style("dim"))
        out.append_text(Text.assemble(sep, s.workspace or "…", sep, s.backend or "…", sep))
        if s.llm_ok and s.model:
            out.append(f"model {s.model}")
        else:
            out.append("no LLM endpoint", style=style("problem"))
        out.append_text(Text.assemble(sep))
        label = f"{STATE_SYMBOL.get(s.state, '')} {STATE_LABEL.get(s.state, s.state)}".strip()
        if s.run_id:
            label += f" · run {s.run_id}"
        if s.iteration is not None and s.iterations:
            label += f" · iter {min(s.iteration + 1, s.iterations)}/{s.iterations}"
        out.append(label, style=style("state"))
        out.append_text(Text.assemble(sep, f"{_tokens(s.tokens)} tok", sep, f"${s.cost:.2f}"))
        return out


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"
