"""The memory browser's detail pane: one experience's outcome, values, Q history, who retrieved or
adopted it, its text and its code; between its facts and its outcome, its parent and its children as
a list to open (``RelativeChosen``), each by its ``#n`` as the attempt tree numbers it."""

from __future__ import annotations

import time
from pathlib import PurePath
from typing import Any

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from core.attempts import outcome_of
from core.memory import earned
from evotui.messages import RelativeChosen
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
    ExperienceDetail > #detail, ExperienceDetail > #body { width: 100%; }
    ExperienceDetail > #family { height: auto; max-height: 8; border: none; padding: 0; margin: 1 0 0 0;
                                 text-wrap: nowrap; text-overflow: ellipsis; }
    ExperienceDetail > #family.-empty { display: none; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.can_focus = True
        self.exp = None
        self.number: int | None = None
        self.relatives: list[tuple[str, dict[str, Any]]] = []    # ("parent" | "child", summary), in the list's order
        self.decisions: list[tuple[str, str]] = []                # (what, why): core.memory.decisions

    def compose(self) -> ComposeResult:
        yield Static(Text("Select an experience.", style="dim"), id="detail")
        yield OptionList(id="family", classes="-empty")
        yield Static(id="body")

    def show_message(self, text: str) -> None:
        self.exp = None
        self.relatives = []
        self.query_one("#detail", Static).update(Text(text, style="dim"))
        self._show_family()
        self.query_one("#body", Static).update("")

    def show(self, exp: Any, number: int | None = None, parent: dict[str, Any] | None = None,
             children: list[dict[str, Any]] | None = None, decisions: list[tuple[str, str]] | None = None) -> None:
        """Show ``exp`` (``number``: its ``#n`` among its task's attempts) with its parent and children, and what
        was decided about it and why (``decisions``)."""
        self.exp, self.number = exp, number
        self.decisions = list(decisions or [])
        self.relatives = [*((("parent", parent),) if parent else ()), *(("child", c) for c in children or [])]
        self.query_one("#detail", Static).update(self._head(exp))
        self._show_family()
        self.query_one("#body", Static).update(self._body(exp))
        self.scroll_home(animate=False)

    def restyle(self) -> None:
        if self.exp is not None:
            family = dict(self.relatives)
            self.show(self.exp, self.number, family.get("parent"), [s for r, s in self.relatives if r == "child"],
                      self.decisions)

    def _show_family(self) -> None:
        family = self.query_one("#family", OptionList)
        family.clear_options()
        family.add_options([Option(self._relative(relation, item), id=item["id"]) for relation, item in self.relatives])
        family.set_class(not self.relatives, "-empty")
        if self.relatives:
            family.highlighted = 0

    def _relative(self, relation: str, item: dict[str, Any]) -> Text:
        """One line of the family list: "parent #4  relu draft: feasible · reward +1"."""
        dim = self._style("dim")
        label = f"#{item['number']}" if item.get("number") is not None else item["kind"]
        line = Text.assemble((f"{relation:<6} ", dim), (f"{label} ", self._style("title")), item["title"] or item["id"])
        if item.get("reward") is not None:
            line.append(f" · reward {marks.reward(item['reward'])}", style=dim)
        line.no_wrap, line.overflow = True, "ellipsis"
        return line

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.post_message(RelativeChosen(event.option.id))

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"experience-detail--{name}", partial=True)

    def _head(self, exp: Any) -> RenderableType:
        """The title (an attempt by its number first) and the facts; the hex id is one of them."""
        dim = self._style("dim")
        title = Text(exp.title or exp.id, style=self._style("title"))
        if self.number is not None:
            title = Text(f"#{self.number} · ", style=self._style("title")) + title
        parts: list[RenderableType] = [title]
        facts = Table.grid(padding=(0, 1))
        facts.add_column(style=dim, no_wrap=True)
        facts.add_column()
        facts.add_row("id", exp.id)
        facts.add_row("task", exp.task_id)
        facts.add_row("kind", f"{exp.kind} · stage {exp.stage or '–'} · {exp.source} · {exp.backend or 'any backend'}")
        if exp.model:
            facts.add_row("model", exp.model)
        facts.add_row("created", utc(exp.created_at))
        if exp.parent_id and not any(r == "parent" for r, _ in self.relatives):
            facts.add_row("parent", f"{exp.parent_id} (no longer in the memory)")
        out = outcome_of(exp)
        if out.verified:   # the kernel's own verdict and speed, which Q1 and Q2 are not
            facts.add_row("kernel", Text(marks.verdict(out), style=self._style("pass" if out.feasible else "fail")))
        facts.add_row("Q1", f"{marks.q(exp.q1)}: its value as an example retrieved when drafting ({exp.n1} updates)")
        facts.add_row("Q2", f"{marks.q(exp.q2)}: its value as a start point to refine from ({exp.n2} updates)")
        facts.add_row("reward", f"{marks.reward(exp.reward)}: what its own verification earned")
        retrieved = ", ".join(f"{t} ×{n}" for t, n in sorted(exp.retrieved_by.items(), key=lambda kv: (-kv[1], kv[0])))
        facts.add_row("retrieved by", retrieved or "no task yet")
        facts.add_row("adopted by", ", ".join(exp.adopted_by) or "no task yet")
        facts.add_row("earned", earned(exp))
        parts.append(facts)
        if self.decisions:   # what was decided about it, and why: its parent, its reward, the values it moved
            parts.append(Rule("why", align="left", style=dim))
            why = Table.grid(padding=(0, 1))
            why.add_column(style=dim, no_wrap=True)
            why.add_column()
            for what, said in self.decisions:
                why.add_row(what, said)
            parts.append(why)
        return Group(*parts)

    def _body(self, exp: Any) -> RenderableType:
        """The outcome gate by gate, the Q history, the text and the code."""
        dim = self._style("dim")
        parts: list[RenderableType] = []

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
            for _ in range(5):
                history.add_column(no_wrap=True)
            for h in exp.q_history[-12:]:
                how = "" if "cited" not in h else "cited" if h["cited"] else f"uncited, w {float(h.get('w', 0)):g}"
                history.add_row(Text("Q1" if h.get("stage") == "draft" else "Q2", style=dim), h.get("task") or "–",
                                f"reward {marks.reward(h.get('reward'))}", f"→ {marks.q(h.get('q'))}",
                                Text(how, style=dim))
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
