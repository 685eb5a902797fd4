"""The header line: workspace, backend, model, run state and progress, tokens and cost."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rich.style import Style
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
    cluster: str = ""              # the Ray cluster verification runs on ("" = this machine)
    nodes: int = 0                 # its nodes that can verify this backend
    cluster_waiting: bool = False  # no node can: the run waits for one
    sizing: str = ""               # --size-scale auto sizing in the background: "sizing 7/376"

    def but(self, **changes: Any) -> RunStatus:
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
        def style(name: str) -> Style:
            return self.get_component_rich_style(f"run-header--{name}", partial=True)
        label = f"{STATE_SYMBOL.get(s.state, '')} {STATE_LABEL.get(s.state, s.state)}".strip()
        # (text, style, rank): on a narrow terminal the highest ranks go first, so the run's state,
        # progress, tokens and cost stay in view and the workspace name and backend give way
        parts: list[tuple[str, str, int]] = [(" EvoKernel", "title", 0), (s.workspace or "…", "", 6),
                                             (s.backend or "…", "", 5)]
        if s.llm_ok and s.model:
            parts.append((f"model {s.model}", "", 3))
        else:
            parts.append(("no LLM endpoint", "problem", 1))
        if s.cluster:
            text = f"cluster {s.cluster} · {s.nodes} node{'s' if s.nodes != 1 else ''}"
            parts.append((text + (" · waiting for workers" if s.cluster_waiting else ""),
                          "problem" if s.cluster_waiting or not s.nodes else "", 4))
        parts.append((label, "state", 0))
        if s.sizing:
            parts.append((s.sizing, "state", 3))
        if s.run_id:
            parts.append((f"run {s.run_id}", "state", 4))
        if s.iteration is not None and s.iterations:
            parts.append((f"iter {min(s.iteration + 1, s.iterations)}/{s.iterations}", "state", 0))
        parts += [(f"{_tokens(s.tokens)} tok", "", 2), (f"${s.cost:.2f}", "", 2)]
        width = self.size.width or 10_000
        for rank in range(6, 0, -1):
            if sum(len(t) for t, _, _ in parts) + 3 * (len(parts) - 1) <= width:
                break
            parts = [p for p in parts if p[2] != rank]
        out = Text(no_wrap=True, overflow="ellipsis")
        for n, (text, name, _) in enumerate(parts):
            if n:
                out.append(" · ", style=style("dim"))
            out.append(text, style=style(name) if name else "")
        return out


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"
