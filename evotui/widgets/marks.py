"""How the workbench writes gates, times, speedups and rewards: one place, so every pane agrees."""

from __future__ import annotations

from pathlib import Path

from core.attempts import Outcome
from core.policy import UNJUDGED
from core.prompts import verdict as core_verdict

GATE_LABELS = {"format": "fmt", "anti_hack": "hack", "build": "build", "correctness": "corr", "performance": "perf"}
MARKS = {"passed": "✓", "failed": "✗", "skipped": "·"}


NOT_JUDGED = "?"
"""The mark of the gate where the tool (not the kernel) failed a verification: no verdict."""


def mark(status: str) -> str:
    """✓ passed, ✗ failed, · not reached."""
    return MARKS.get(status, "·")


def attempt_label(number: int | None, human: bool, stage: str | None = None) -> str:
    """An attempt as the task table's status (``stage`` None: "#7", "#7 edit") and the log ("#7 refine",
    "#7 hand edit") name it: by its ``#n`` in the task's attempt tree, never the run's iteration."""
    n = f"#{number}" if number is not None else ""
    what = ("hand edit" if stage is not None else "edit") if human else (stage or "")
    return " ".join(part for part in (n, what) if part)


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def speedup(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def reward(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:+.0f}" if float(value).is_integer() else f"{value:+.2f}"


def q(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def noisy(r: Outcome) -> bool:
    return bool({r.vs_reference, r.vs_best} & set(UNJUDGED))


def verdict(r: Outcome) -> str:
    """One line: "✓ 0.190 ms, 2.31×, 41% of roofline (memory-bound)" or "✗ build: <message>". The speedup
    shows as a ratio only when its window says faster or slower; otherwise in the words every surface
    uses (``verifier.verdict.word``): "✓ 0.190 ms, same speed", "✓ 0.190 ms, too noisy"; a comparison with
    the best that judged nothing says so (``verifier.verdict.note``: "timing too noisy to judge")."""
    from core.policy import verdict_note, verdict_word

    if r.not_judged:    # the tool failed, or a feasible verdict it could not fully check (a review flag)
        return f"{NOT_JUDGED} not judged: {' '.join(r.not_judged.split())}"
    if r.feasible:
        parts = [f"✓ {ms(r.latency_ms)} ms"]
        word = verdict_word(r.vs_reference, r.speedup_ci) if r.vs_reference else ""
        if r.speedup is not None:
            parts.append(speedup(r.speedup) if word in ("", "faster", "slower") else word)
        if verdict_note(r.vs_best):
            parts.append(verdict_note(r.vs_best))
        roof = r.roofline or {}
        if roof.get("fraction") is not None:   # #12: share of this machine's roofline (verifier.machine.roofline)
            parts.append(f"{100 * roof['fraction']:.0f}% of roofline ({roof.get('bound')}-bound)")
        return ", ".join(parts)
    message = " ".join(r.message.split())   # one line: compiler output has many
    prefix = f"{r.failed_gate or '?'}: "
    return f"✗ {message if message.startswith(prefix) else prefix + message}".strip()


def full_verdict(r: Outcome) -> str:
    """The verdict in the core's words (the same as the prompts and the CLI): the latency with its
    spread, the speed against PyTorch with its interval and the reference's time in the same window,
    the gain over the best with its interval; a failure as ``verdict`` writes it."""
    if not r.feasible or r.not_judged:
        return verdict(r)
    text = "✓ " + core_verdict(r).removeprefix("feasible, ")
    if r.reference_ms:     # a person reads PyTorch's own time too; prompts give only the ratio
        text += f" · PyTorch {r.reference_ms:.3f} ms in the same window"
    if r.flags:            # what the verifier asks a person to review, as the CLI and the memory say it
        text += " · flagged: " + "; ".join(r.flags)
    return text


def sizes(size_scale: float | str | None) -> str:
    """"sizes ×0.5", "sizes scaled: auto", or "" (the task's own sizes)."""
    if size_scale in (None, "", 1, 1.0, "1"):
        return ""
    return "sizes scaled: auto" if str(size_scale) == "auto" else f"sizes ×{size_scale}"


def shown_path(path: str | Path) -> str:
    """A path as a person reads it: relative to the current folder when under it, else with ``~``."""
    full = Path(path).expanduser().resolve()
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + str(full.relative_to(base.resolve()))
        except ValueError:
            continue
    return str(full)


def suite_name(suite: str, size_scale: float | str | None = None, *, full: bool = False) -> str:
    """"the built-in suite", "suite level1" (the folder's name) or, ``full``, its whole path; then the sizes."""
    where = shown_path(suite) if full else Path(suite).name
    name = "the built-in suite" if suite in ("", "builtin") else f"suite {where}"
    scaled = sizes(size_scale)
    return f"{name} · {scaled}" if scaled else name


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """"1 attempt", "3 attempts" (``nouns`` for irregular plurals)."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def short_verdict(r: Outcome) -> str:
    """A few words: "✓ 0.190 ms, 2.31×" or "✗ build" (the whole message goes where there is room)."""
    if r.not_judged:
        return f"{NOT_JUDGED} not judged"
    return verdict(r) if r.feasible else f"✗ {r.failed_gate or '?'}"


def failure_text(r: Outcome) -> str:
    """The whole failure, line breaks kept (compiler output is many lines): the gate, its message, and
    every gate's own message that says more."""
    message = r.message.rstrip()
    lines = [f"✗ failed at {r.failed_gate or '?'}:", message]
    for g in r.gates:   # a gate's own message only when it says more (not the outcome's message again)
        if g.status == "failed" and g.message and g.message.rstrip() not in message:
            lines.append(f"{g.name}: {g.message.rstrip()}")
    return "\n".join(line for line in lines if line)


def waiting_words(seconds: float, tokens: int, sent: bool) -> str:
    """A model call in flight in a few words (the workbench's status, the run's live table): "queued 12 s" (waiting
    for a request slot, ``[llm] concurrency``), "asking 42 s" (sent, no token yet), "answering 95 s · 1,204 tok"."""
    if not sent:
        return f"queued {seconds:.0f} s"
    if not tokens:
        return f"asking {seconds:.0f} s"
    return f"answering {seconds:.0f} s · {tokens:,} tok"
