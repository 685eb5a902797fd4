"""Prompts for drafting and refining, and the compact text an attempt leaves in memory.

A prompt is a system message (the role and the answer format) and a user message in sections:
the task's PyTorch reference (never trimmed), where the kernel runs (backend, threads, the ISA
``-march=native`` enables, caches, the measured roofline ceilings, the tolerance), API knowledge,
resident rules, memory items (each tagged ``[mem:<id>]`` so the answer can cite what it used, framed
by title, outcome and the lines of code that matter) and, when refining, the start point's full
code with its roofline, the best kernel so far when it differs, and the variants already tried with
their one-line ``Change:`` summaries, latency ± noise and verdict. A prompt over ``MAX_PROMPT_CHARS``
loses memory code first, then memory items, then API items; the reference, the machine and the
start point are never cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.tasks import Task, cases_section
from store import Experience, OutcomeSummary
from verifier.backends import backend_device, display_name, source_suffix
from verifier.outcome import speed_words
from verifier.task import TaskSpec

if TYPE_CHECKING:
    from core.llm import Message
    from verifier.machine.roofline import RooflineMeter

MAX_PROMPT_CHARS = 48_000
MEMORY_CODE_LINES = (40, 20, 8, 0)   # lines of code per memory item, tried in turn until the prompt fits


SYSTEM = """You are an expert kernel engineer. You write {backend} kernels that replace a PyTorch \
reference operator exactly (same outputs within the stated tolerance) and run faster.

Begin your answer with one line `Change: <one sentence: what this version does differently and why \
it should be faster>` (for a first version, the approach it takes).
Then give complete files in fenced code blocks that name their file, for example:
```cpp file=kernel{suffix}
...
```
```python file=model.py
...
```
model.py must define `class ModelNew(nn.Module)` with the same constructor arguments as the reference \
`Model`, load the kernels with `from verifier.runtime import load; lib = load()`, and do all computation \
in the kernels (forward may only allocate outputs, reshape and call the library).
After the code, write one line `MEMORY USED: mem:<id>, ...` naming the memory items you actually relied on \
(or `MEMORY USED: none`)."""


def system_message(backend: str) -> str:
    return SYSTEM.format(backend=display_name(backend), suffix=source_suffix(backend))


# -- where the kernel runs ---------------------------------------------------------------------------


@dataclass
class PromptFacts:
    """What every prompt says about where kernels run, gathered once from the verifier: machine facts
    (``verifier.machine.machine_facts``), measured ceilings and task profiles (``verifier.machine.roofline``),
    and the backend's tolerances. Built with ``from_verifier``; a bare ``PromptFacts(backend)`` says
    only what the backend's name implies."""

    backend: str
    machine: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, Any] | None = None
    tolerance: Callable[[TaskSpec], Callable[[str], tuple[float, float]]] | None = None  # spec -> dtype -> tolerances
    meter: RooflineMeter | None = None   # for cached task profiles

    @classmethod
    def from_verifier(cls, verifier: Any, backend: str) -> PromptFacts:
        facts = cls(backend)
        vb = getattr(verifier, "backend", None)
        config = getattr(verifier, "config", None)
        if vb is None or config is None:
            return facts
        try:
            from verifier.machine import machine_facts

            facts.machine = machine_facts(vb, config.threads)
        except Exception:  # the prompt says less; generation goes on
            facts.machine = {"threads": getattr(config, "threads", 0)}
        facts.meter = getattr(verifier, "roofline", None)
        facts.ceilings = facts.meter.cached_ceilings() if facts.meter is not None else None
        facts.tolerance = getattr(verifier, "tolerance_for", None)
        return facts

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Count the tasks' rooflines and measure the ceilings (blocking: run it in a thread beside
        the first attempts; prompts built after it carry them)."""
        if self.meter is not None:
            self.meter.prepare([t.spec() for t in tasks])

    def tolerance_for(self, task: Task) -> tuple[float, float]:
        """(atol, rtol) for float32 outputs of ``task`` as the verifier will apply them."""
        if self.tolerance is not None:
            return self.tolerance(task.spec())("float32")
        from verifier.backends import get_backend

        try:
            atol, rtol = get_backend(self.backend).tolerance("float32")
        except Exception:
            atol = rtol = 1e-2
        spec = task.spec()   # a task may set its own ATOL / RTOL
        return (spec.atol if spec.atol is not None else atol, spec.rtol if spec.rtol is not None else rtol)

    def profile(self, task: Task) -> dict[str, Any] | None:
        if self.meter is None:
            return None
        try:
            return self.meter.cached_profile(task.spec())
        except Exception:
            return None

    def section(self, task: Task) -> str:
        """``## Where your kernel runs``: backend, threads, ISA, caches, ceilings, this task's roofline, tolerance."""
        from verifier.machine.roofline import describe_profile

        m = self.machine
        lines = []
        threads = m.get("threads")
        if backend_device(self.backend) == "cpu":
            lines.append(f"- Backend: {display_name(self.backend)}; CPU {m.get('cpu', 'unknown')}.")
            if threads:
                lines.append(f"- Threads: your kernel runs with {threads} OpenMP thread{'s' if threads != 1 else ''} "
                             f"(OMP_NUM_THREADS={threads}, set by the verifier for PyTorch and your kernel alike; "
                             "do not set the thread count yourself).")
            if m.get("isa"):
                width = m.get("vector_bits") or 0
                lines.append(f"- Compiler: {m.get('compiler', 'g++')} {m.get('flags', '')}; -march=native targets "
                             f"{m.get('arch') or 'this CPU'} with {', '.join(m['isa'])}"
                             + (f" ({width}-bit vectors: {width // 32} floats per register)." if width else "."))
        else:
            name = display_name(self.backend)
            device = m.get("device") or "device not detected here"
            limits = ", ".join(f"{k} {v}" for k, v in (m.get("device_limits") or {}).items())
            lines.append(f"- Backend: {name}; device: {device}" + (f" ({limits})" if limits else "") + ".")
            lines.append("- Device ceilings are not measured by EvoKernel on this backend (untested without such a "
                         "device); host CPU: " + str(m.get("cpu", "unknown")) + ".")
        if m.get("caches_text") and backend_device(self.backend) == "cpu":
            lines.append(f"- Caches: {m['caches_text']}.")
        if self.ceilings is None and self.meter is not None:   # measured by the first timed candidate
            self.ceilings = self.meter.cached_ceilings()
        c = self.ceilings
        if c:
            lines.append(f"- Measured ceilings with {c.get('threads', threads)} threads: "
                         f"memory {c['triad_gbps']:.1f} GB/s (STREAM triad), "
                         f"compute {c['fma_gflops']:.0f} GFLOP/s fp32 (FMA loop).")
        profile = self.profile(task)
        if profile:
            lines.append(f"- This task's roofline: {describe_profile(profile, c)}.")
        atol, rtol = self.tolerance_for(task)
        lines.append("- Correctness: every output must match the reference within "
                     f"atol={_num(atol)} and rtol={_num(rtol)} (float32, {self.backend} backend), "
                     "with NaN/Inf where the reference has them.")
        lines += [s for s in [cases_section(task, self.backend, self.tolerance)] if s]
        return "## Where your kernel runs\n" + "\n".join(lines)


# -- rendering attempts and memory -------------------------------------------------------------------


def _fence(name: str, lines: list[str]) -> str:
    lang = "python" if name.endswith(".py") else "cpp"
    return f"```{lang} file={name}\n" + "\n".join(lines) + "\n```"


def _code(files: dict[str, str], *, kernels_only: bool = False) -> str:
    """Every file in full (start points and the best kernel are never cut)."""
    parts = []
    for name, text in files.items():
        if kernels_only and name == "model.py" and len(files) > 1:
            continue
        parts.append(_fence(name, text.rstrip().splitlines()))
    return "\n".join(parts)


_SIGNAL = (("#pragma", 5), ("extern \"C\"", 6), ("__global__", 6), ("_mm", 4), ("__m", 4), ("vld", 4), ("svld", 4),
           ("for (", 3), ("for(", 3), ("__restrict", 2), ("alignas", 2), ("aligned", 2), ("float32x4", 4),
           ("<<<", 5), ("__shared__", 5), ("AscendC", 4), ("DataCopy", 4), ("Tiling", 3), ("const int", 1),
           ("constexpr", 2), ("static inline", 2), ("#include <immintrin", 3), ("#include <arm_neon", 3),
           ("+=", 1), ("fma", 3), ("std::max", 1), ("expf", 2), ("exp(", 2))


def key_lines(text: str, max_lines: int) -> list[str]:
    """The lines of a kernel that show what it does (launchers, pragmas, intrinsics, loop nests),
    in order, with ``// ...`` where lines were left out; all of it when it is short enough."""
    lines = text.rstrip().splitlines()
    if len(lines) <= max_lines:
        return lines
    if max_lines <= 0:
        return []
    scores = []
    for i, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith("//") or s in ("{", "}", "};"):
            scores.append((-1, i))
            continue
        scores.append((sum(w for k, w in _SIGNAL if k in s), i))
    keep = sorted(i for _, i in sorted(scores, key=lambda p: (-p[0], p[1]))[:max_lines] if scores[i][0] >= 0)
    out, last = [], -1
    for i in keep:
        if i != last + 1:
            out.append("    // ...")
        out.append(lines[i])
        last = i
    if last != len(lines) - 1:
        out.append("    // ...")
    return out


def _ms(outcome: OutcomeSummary) -> str:
    text = f"{outcome.latency_ms or 0:.3f} ms"
    if outcome.latency_spread_ms is not None:
        text += f" ± {outcome.latency_spread_ms:.3f} (IQR)"
    return text


def _speed(verdict: str, ratio: float | None, ci: list[float] | None, other: str) -> str:
    """``speed_words``, except for a "noisy" window: the model reads that its speed is unknown (it
    cannot measure again; the verifier does)."""
    if verdict == "implausible":
        return (f"speed against {other} not trusted: it came out above this machine's measured compute ceiling "
                "even when measured again, which only skipped work can do")
    if verdict == "noisy":
        interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and len(ci) == 2 else ""
        return (f"speed against {other} unknown: the timing window was too noisy to judge (interval{interval}; "
                "the machine was busy), so it says nothing either way")
    return speed_words(verdict, ratio, ci, other)


def verdict(outcome: OutcomeSummary) -> str:
    """One line: feasible with latency ± noise and the speed measured in its own window (paired, with
    its interval: "same speed" when the noise cannot tell, "unknown" when the window was too noisy to
    judge), or the failing gate and why."""
    if not outcome.verified:
        return "not verified"
    if outcome.feasible:
        text = f"feasible, {_ms(outcome)}"
        if outcome.speedup:
            reference = f"{outcome.reference_ms or 0:.3f} ms"
            if outcome.vs_reference:
                words = _speed(outcome.vs_reference, outcome.speedup, outcome.speedup_ci,
                               f"PyTorch ({reference} in the same window)")
                text += f" ({words})"
            else:
                text += f" ({outcome.speedup:.2f}x vs PyTorch {reference})"
        if outcome.gain is not None and outcome.vs_best:
            text += f"; {_speed(outcome.vs_best, outcome.gain, outcome.gain_ci, 'the best then')}"
        return text
    message = " ".join(str(outcome.message).split())
    return f"failed at {outcome.failed_gate}: {message[:400]}"


def roofline_line(outcome: OutcomeSummary) -> str:
    """``Roofline: memory-bound: 41 % of the 28.0 GB/s triad ceiling (...)`` or "" when unknown."""
    point = outcome.roofline
    return f"Roofline: {point['summary']}" if isinstance(point, dict) and point.get("summary") else ""


def attempt_text(outcome: OutcomeSummary) -> str:
    """What an attempt teaches, in memory: its verdict (the code travels with it)."""
    return verdict(outcome)


def change_of(exp: Experience) -> str:
    """The attempt's own one-line summary of what it changed (the answer's ``Change:`` line)."""
    return str((exp.extra or {}).get("change") or "").strip()


def render_experience(exp: Experience, *, with_code: bool = True, max_lines: int = 40) -> str:
    """A memory item framed by what it shows: title, outcome, its change and roofline, the lines that matter."""
    head = f"[mem:{exp.id}] "
    if exp.kind in ("best_practice", "rule", "api_template"):
        return head + f"{exp.title}\n{exp.text}"
    who = "a person's hand edit" if exp.source == "human" else (exp.stage or "attempt")
    where = f"task {exp.task_id}" if exp.task_id not in ("", "*") else "general"
    result = exp.result
    body = head + f"{exp.title or where} ({where}, {who}): {verdict(result)}"
    change = change_of(exp)
    if change:
        body += f"\nChange: {change}"
    roof = roofline_line(result)
    if roof:
        body += f"\n{roof}"
    if exp.text and exp.text != verdict(result) and exp.text != attempt_text(result):
        body += f"\n{exp.text}"
    if with_code and exp.files and max_lines > 0:
        parts = []
        for name, text in exp.files.items():
            if name == "model.py" and len(exp.files) > 1:
                continue
            shown = key_lines(text, max_lines)
            total = len(text.rstrip().splitlines())
            note = f"  (key lines of {total})" if len(shown) < total or any(s == "    // ..." for s in shown) else ""
            parts.append(f"{name}{note}:\n" + _fence(name, shown))
        body += "\n" + "\n".join(parts)
    return body


def _task_section(task: Task) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in task.sizes.items())
    scaled = f" ({task.scale_note()})" if task.size_overrides else ""
    return (f"## Task {task.id} (level {task.level}, {task.category})\n"
            f"Reference implementation (PyTorch). Sizes: {sizes or 'as written'}{scaled}. "
            "Your kernel must also handle other sizes (it is checked at a second, ragged shape).\n"
            f"```python\n{task.source.strip()}\n```")


def _api_section(api: Sequence[Experience]) -> str:
    return "## API knowledge\n" + "\n\n".join(f"### {e.title}\n{e.text}" for e in api) if api else ""


def _rules_section(rules: Sequence[Experience]) -> str:
    return ("## Rules learned across operators\n" + "\n".join(render_experience(e, with_code=False) for e in rules)
            if rules else "")


def _memory_section(memory: Sequence[Experience], max_lines: int) -> str:
    if not memory:
        return ""
    return ("## Memory: earlier attempts and lessons (cite the ones you use)\n"
            + "\n\n".join(render_experience(e, max_lines=max_lines) for e in memory))


def _join(parts: Sequence[str]) -> str:
    return "\n\n".join(p for p in parts if p)


def _fit(head: Sequence[str], api: Sequence[Experience], rules: Sequence[Experience], memory: Sequence[Experience],
         tail: Sequence[str], budget: int = MAX_PROMPT_CHARS) -> str:
    """``head`` (task, machine, start point...), knowledge, ``tail`` (the ask) within ``budget``.

    Only knowledge is cut, memory first: its code shrinks to key lines, then to none, then the
    lowest-ranked items go; then API items from the last. ``head`` and ``tail`` are never cut, so a
    long reference stays whole even when that leaves the prompt over budget."""
    memory, api = list(memory), list(api)

    def text(lines: int) -> str:
        return _join([*head, _api_section(api), _rules_section(rules), _memory_section(memory, lines), *tail])

    for lines in MEMORY_CODE_LINES:
        out = text(lines)
        if len(out) <= budget:
            return out
    while memory:
        memory.pop()
        out = text(0)
        if len(out) <= budget:
            return out
    while api:
        api.pop()
        out = text(0)
        if len(out) <= budget:
            return out
    return text(0)


# -- the prompts ---------------------------------------------------------------------------------------


def _num(x: float) -> str:
    """1e-4, 0.01, 2e-2 as an engineer writes them."""
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:g}"
    mantissa, exp = f"{x:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exp)}"


def _facts(facts: PromptFacts | None, backend: str) -> PromptFacts:
    return facts if facts is not None else PromptFacts(backend)


def draft_prompt(task: Task, backend: str, api: Sequence[Experience], rules: Sequence[Experience],
                 memory: Sequence[Experience], *, facts: PromptFacts | None = None) -> list[Message]:
    """Messages asking for a first correct kernel."""
    facts = _facts(facts, backend)
    atol, rtol = facts.tolerance_for(task)
    ask = ("## Your answer\nStart with the `Change:` line, then write model.py and the kernel source(s) for ModelNew. "
           f"Correctness first: match the reference's outputs within atol={_num(atol)}, rtol={_num(rtol)}, "
           "including NaN/Inf behaviour; then use the threads and vector width above.")
    return [("system", system_message(backend)),
            ("user", _fit([_task_section(task), facts.section(task)], api, rules, memory, [ask]))]


def _compare(child: OutcomeSummary, start: OutcomeSummary) -> str:
    """How a variant compares with the start point. Only a ratio measured in one window is a speed
    signal: when the variant was timed beside the start point (it was the best then), its paired gain;
    otherwise nothing beyond the verdict (two medians from different windows are not compared)."""
    if not child.feasible or child.gain is None or not child.vs_best:
        return ""
    if not start.candidate_hash or child.best_hash != start.candidate_hash:
        return ""
    return _speed(child.vs_best, child.gain, child.gain_ci, "the start point")


def _tried(children: Sequence[Experience], start: Experience) -> str:
    rows = []
    for c in children:
        change = change_of(c) or "(no summary given)"
        compared = _compare(c.result, start.result)
        reward = f"reward {c.reward:+.2f}" if c.reward is not None else "no reward"
        rows.append(f"- [mem:{c.id}] Change: {change}\n  -> {verdict(c.result)}"
                    + (f"; {compared}" if compared else "") + f"; {reward}")
    return "### Variants already tried from this start point (do not repeat them)\n" + "\n".join(rows)


def _beside(what: str, best_ms: float | None) -> str:
    """The refinement's goal: faster than the best in one timing window (the best's own latency came
    from another window, busier or quieter, so it is no target by itself)."""
    if not best_ms:
        return "make it faster"
    return (f"it is timed beside {what} in one window and counts only if faster there; {what} took "
            f"{best_ms:.3f} ms when it was measured, in another window")


def refine_prompt(task: Task, backend: str, api: Sequence[Experience], rules: Sequence[Experience],
                  memory: Sequence[Experience], start: Experience, children: Sequence[Experience],
                  best_ms: float | None, *, best: Experience | None = None,
                  facts: PromptFacts | None = None) -> list[Message]:
    """Messages asking for a faster variant of ``start`` (its code in full, and the best kernel's when it differs)."""
    facts = _facts(facts, backend)
    start_text = f"## Start point [mem:{start.id}]: {verdict(start.result)}"
    if change_of(start):
        start_text += f"\nChange that made it: {change_of(start)}"
    if roofline_line(start.result):
        start_text += f"\n{roofline_line(start.result)}"
    start_text += "\n" + _code(start.files)
    if children:
        start_text += "\n" + _tried(children, start)
    if best is not None and best.id != start.id and best.files:
        best_text = (f"## Best kernel so far [mem:{best.id}]: {verdict(best.result)}"
                     + (f"\n{roofline_line(best.result)}" if roofline_line(best.result) else "")
                     + "\nIt differs from the start point; borrow from it where it helps.\n" + _code(best.files))
        goal = _beside("the best so far", best_ms)
    elif best is not None and best.id == start.id:
        best_text = "## Best kernel so far\nThe start point above is the best kernel so far."
        goal = _beside("the start point", best_ms)
    else:
        best_text = (f"## Best kernel so far\n{best_ms:.3f} ms (its code is not available here)." if best_ms else "")
        goal = f"the best so far is {best_ms:.3f} ms" if best_ms else "make it faster"
    point = start.result.roofline or {}
    hint = ""
    if point.get("bound") == "memory":
        hint = " It is memory-bound: cut bytes moved (fuse passes, avoid re-reading, stream once) before adding FLOPs."
    elif point.get("bound") == "compute":
        hint = " It is compute-bound: use the vector width and threads above, block for the caches, keep FMAs busy."
    ask = (f"## Your answer\nWrite a faster variant of the start point ({goal}).{hint} Keep it correct; change one or "
           "two things at a time (parallelism, vectorisation, blocking, fusion, memory traffic) and start with the "
           "one-line `Change:` saying what you changed.")
    head = [_task_section(task), facts.section(task), start_text, best_text]
    return [("system", system_message(backend)), ("user", _fit(head, api, rules, memory, [ask]))]


def feedback_prompt(task: Task, backend: str, api: Sequence[Experience], last: Experience | None,
                    best: Experience | None, *, facts: PromptFacts | None = None) -> list[Message]:
    """The refinement baseline: feedback from the last attempt only, no shared memory."""
    facts = _facts(facts, backend)
    head = [_task_section(task), facts.section(task)]
    if best is not None:
        roof = roofline_line(best.result)
        head.append(f"## Your best kernel so far: {verdict(best.result)}" + (f"\n{roof}" if roof else "")
                    + "\n" + _code(best.files))
    if last is not None and (best is None or last.id != best.id):
        head.append(f"## Your last attempt: {verdict(last.result)}\n" + _code(last.files))
    ask = ("Fix the last attempt." if best is None else "Write a faster variant of your best kernel.")
    return [("system", system_message(backend)),
            ("user", _fit(head, api, [], [], ["## Your answer\nStart with the `Change:` line. " + ask]))]
