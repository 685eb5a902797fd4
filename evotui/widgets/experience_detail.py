"""The memory browser's detail pane: one experience's outcome, values, Q history, who retrieved or
adopted it, its text and its code."""

from __future__ import annotations

import time
from pathlib import PurePath

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from core.attempts import outcome_of
from evotui.widgets import marks
from evotui.widgets.code_view import LEXERS, file_order, highlight, pane_background

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], low: float = -1.0, high: float = 1.0) -> str:
    """Q values in [-1, 1] as a row of block characters."""
    span = (high - low) or 1.0
    return "".join(SPARKS[max(0, min(len(SPARKS) - 1, int((v - low) / span * (len(SPARKS) - 1) + 0.5)))]
                   for v in values)


def unwrap(text: str) -> str:
    """Seed texts are wrapped at ~100 columns in their files; join the lines of each paragraph so the
    pane wraps them to its own width. Code blocks, lists and headings keep their lines."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            out.append(line)
            continue
        joinable = (not fenced and stripped and out and out[-1].strip() and not out[-1].strip().startswith("```")
                    and not stripped.startswith(("-", "*", "#", "|", ">")) and not line.startswith(("    ", "\t"))
                    and not stripped[:2].rstrip(".").isdigit())
        if joinable:
            out[-1] = out[-1].rstrip() + " " + stripped
        else:
            out.append(line)
    return "\n".join(out)


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if ts else "–"


class ExperienceDetail(VerticalScroll):
    """Renders an Experience (``show``) or a hint (``show_message``)."""

    COMPONENT_CLASSES = {"experience-detail--title", "experience-detail--dim", "experience-detail--pass",
                         "experience-detail--fail"}
    DEFAULT_CSS = """
    ExperienceDetail { height: 1fr; }
    ExperienceDetail > #detail { width: 100%; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.can_focus = True
        self.exp = None

    def compose(self):
        yield Static(Text("Select an experience.", style="dim"), id="detail")

    def show_message(self, text: str) -> None:
        self.exp = None
        self.query_one("#detail", Static).update(Text(text, style="dim"))

    def show(self, exp) -> None:
        self.exp = exp
        self.query_one("#detail", Static).update(self._renderable(exp))
        self.scroll_home(animate=False)

    def restyle(self) -> None:
        if self.exp is not None:
            self.show(self.exp)

    def _style(self, name: str):
        return self.get_component_rich_style(f"experience-detail--{name}", partial=True)

    def _renderable(self, exp) -> RenderableType:
        dim = self._style("dim")
        parts: list[RenderableType] = [Text(exp.title or exp.id, style=self._style("title"))]
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style=dim, no_wrap=True)
        facts.add_column()
        facts.add_row("id", exp.id)
        facts.add_row("task", exp.task_id)
        facts.add_row("kind", f"{exp.kind} · stage {exp.stage or '–'} · {exp.source} · {exp.backend or 'any backend'}")
        if exp.model:
            facts.add_row("model", exp.model)
        facts.add_row("created", utc(exp.created_at))
        if exp.parent_id:
            facts.add_row("parent", exp.parent_id)
        facts.add_row("values", f"Q1 {marks.q(exp.q1)} ({exp.n1} updates) · Q2 {marks.q(exp.q2)} ({exp.n2} updates)"
                                f" · reward {marks.reward(exp.reward)}")
        retrieved = ", ".join(f"{t} ×{n}" for t, n in sorted(exp.retrieved_by.items(), key=lambda kv: (-kv[1], kv[0])))
        facts.add_row("retrieved by", retrieved or "no task yet")
        facts.add_row("adopted by", ", ".join(exp.adopted_by) or "no task yet")
        parts.append(facts)

        if exp.outcome:
            parts.append(Rule("outcome", align="left", style=dim))
            out = outcome_of(exp)
            parts.append(Text(marks.verdict(out), style=self._style("pass" if out.feasible else "fail")))
            gates = Table.grid(padding=(0, 1))
            for _ in range(3):
                gates.add_column(no_wrap=False)
            for g in out.gates:
                tone = {"passed": "pass", "failed": "fail"}.get(g.status, "dim")
                gates.add_row(Text(marks.mark(g.status), style=self._style(tone)), g.name, Text(g.message, style=dim))
            parts.append(gates)

        if exp.q_history:
            parts.append(Rule("Q history (oldest first)", align="left", style=dim))
            for stage, label in (("draft", "Q1"), ("refine", "Q2")):
                values = [h["q"] for h in exp.q_history if h.get("stage") == stage]
                if values:
                    parts.append(Text.assemble((f"{label} ", dim), sparkline(values), f"  {marks.q(values[-1])}"))
            history = Table.grid(padding=(0, 1))
            for _ in range(4):
                history.add_column(no_wrap=True)
            for h in exp.q_history[-12:]:
                history.add_row(Text("Q1" if h.get("stage") == "draft" else "Q2", style=dim), h.get("task") or "–",
                                f"reward {marks.reward(h.get('reward'))}", f"→ {marks.q(h.get('q'))}")
            parts.append(history)

        if exp.text and not exp.files:
            parts.append(Rule("text", align="left", style=dim))
            parts.append(Text(unwrap(exp.text)))
        theme = "monokai" if self.app.current_theme.dark else "friendly"
        for name in file_order(exp.files):
            parts.append(Rule(name, align="left", style=dim))
            code = highlight(exp.files[name], LEXERS.get(PurePath(name).suffix, "text"), theme, pane_background(self))
            code = code.copy()
            code.end = "\n"      # the cached highlight ends without a line break: the next rule would join it
            parts.append(code)
        return Group(*parts)
