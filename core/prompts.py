"""Prompts for drafting and refining, and the compact text an attempt leaves in memory.

A prompt is a system message (the role and the answer format; the ``MEMORY USED`` line only when the
prompt shows items to cite) and a user message in sections: the task's PyTorch reference (never
trimmed), where the kernel runs (backend, threads, the ISA ``-march=native`` enables, caches, the
measured roofline ceilings, the tolerance), the rules the anti-hack gate enforces (its own table,
``verifier.gates.antihack.rules``), this task's own earlier attempts (one entry per idea, with every
verdict, whatever start point they came from), when refining the start point's full code with its
roofline and the best kernel's when it differs, then API knowledge, resident rules and memory items
from other tasks (each tagged ``[mem:<id>]`` so the answer can cite what it used), with code only when
they bear on the task (``relevant``), else as lessons.

What a prompt says is true for it: a kernel appears as the paired ratios of the window it was verified
in (``in_window``, the words of ``verifier.verdict.words``), and the prompt shows one absolute time,
the start point's (the best's in the refinement baseline), said with its window. A prompt over its budget
(``MAX_PROMPT_CHARS``, or what the model's context leaves beside the answer: ``core.budget``) loses memory code
first, then memory items, then the parts ranked by ``HISTORY_RANK`` and after (older ideas, API items, resident
rules, the other ideas, the code of a failed last attempt or of the best, the verifier's rules said in short, the
machine's caches and roofline), and says what it left out (``Prompt.left_out``); the reference, the backend, ISA
and tolerance, the start point's code and the ask are never cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core import budget as budget_module
from core.attempts import outcome_of
from core.kinship import KernelKind, kind_of, kind_of_signature, relevance
from core.tasks import Task, cases_section, timed_cases
from store import Experience
from verifier import (
    Outcome,
    TaskSpec,
    Tolerance,
    VerifyConfig,
    backend_device,
    display_name,
    form_prompt,
    source_suffix,
    speed_legend,
    speed_words,
    tolerance_for,
)

if TYPE_CHECKING:
    from core.llm import Message
    from verifier import RooflineMeter

MAX_PROMPT_CHARS = budget_module.MAX_PROMPT_CHARS   # a prompt's characters with no model context known
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
in the kernels (forward may only allocate outputs, reshape and call the library)."""

CITE = """After the code, write one line `MEMORY USED: mem:<id>, ...` naming the memory items you actually relied on \
(or `MEMORY USED: none`)."""


def system_message(backend: str, *, cite: bool = False, form: str = "kernel-launch") -> str:
    """The role and the answer format; ``cite`` (the prompt shows memory items to cite) adds the
    ``MEMORY USED`` line, which a prompt without items never asks for. ``form``: the candidate form the
    workspace asks for, where the backend takes several (its ``form_prompt`` names the files and layout)."""
    text = SYSTEM.format(backend=display_name(backend), suffix=source_suffix(backend)) + _form_section(backend, form)
    return text + "\n" + CITE if cite else text


def _form_section(backend: str, form: str) -> str:
    """What the backend asks for ``form`` beyond the kernel-launch answer (an Ascend custom-op project's files
    and layout: ``verifier.backends.ascend_project.form_prompt``); "" for kernel-launch or a one-form backend."""
    return form_prompt(backend, form)


# -- where the kernel runs ---------------------------------------------------------------------------


@dataclass
class PromptFacts:
    """What every prompt says about where kernels run, gathered once from the verifier: machine facts
    (``verifier.machine.facts.machine_facts``), measured ceilings and task profiles (``verifier.machine.roofline``),
    and the backend's tolerances. Built with ``from_verifier``; a bare ``PromptFacts(backend)`` says
    only what the backend's name implies."""

    backend: str
    machine: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, Any] | None = None
    config: VerifyConfig = field(default_factory=VerifyConfig)   # the verifier's settings (a bare one's: defaults)
    tolerance: Callable[[TaskSpec], Tolerance] | None = None   # the verifier's tolerance_for
    meter: RooflineMeter | None = None   # for cached task profiles
    form: str = "kernel-launch"          # the candidate form the workspace asks for (Config.form)
    timed_cases: int = field(default_factory=lambda: VerifyConfig().timed_cases)   # [verifier] timed_cases

    @classmethod
    def from_verifier(cls, verifier: Any, backend: str) -> PromptFacts:
        facts = cls(backend)
        facts.tolerance = verifier.tolerance_for   # what its gates apply (VerifierProtocol), stated as applied
        vb = getattr(verifier, "backend", None)
        config = getattr(verifier, "config", None)
        if vb is None or config is None:
            return facts
        facts.config = config     # the workspace's [verifier] settings: how an old case's interval is judged
        try:
            from verifier import machine_facts

            facts.machine = machine_facts(vb, config.threads)
        except Exception:  # the prompt says less; generation goes on
            facts.machine = {"threads": getattr(config, "threads", 0)}
        facts.meter = getattr(verifier, "roofline", None)
        facts.timed_cases = int(getattr(config, "timed_cases", facts.timed_cases))
        facts.ceilings = facts.meter.cached_ceilings() if facts.meter is not None else None
        return facts

    def prepare(self, tasks: Sequence[Task], ceilings: bool = True) -> None:
        """Count the tasks' rooflines and measure the ceilings (blocking: run it in a thread; prompts built
        after it carry them). ``ceilings`` False counts the tasks only (a few seconds: the engine waits for
        it, so the first prompt already knows each task's kind, ``kind``)."""
        if self.meter is not None:
            self.meter.prepare([t.spec() for t in tasks], ceilings=ceilings)

    def current_ceilings(self) -> dict[str, Any] | None:
        """The ceilings as the verifier's meter holds them now: the performance gate measures them again during a
        run (a kernel or PyTorch faster than the floor, a kernel above the FMA ceiling) and keeps the best of all
        measurements, so a prompt made later says the later ones; every figure of one prompt (the machine, the
        start point's share, the memory items') is said against these (``roofline_point``)."""
        if self.meter is not None:
            found = self.meter.cached_ceilings()
            if found:
                self.ceilings = found
        return self.ceilings

    def kind(self, task: Task) -> KernelKind:
        """What the task's kernel is (``core.kinship``): its family from the traced graph, its regime on this
        machine's roofline, its dtypes (a multi-case task's from its cases)."""
        from verifier import case_dtypes

        dtypes = [d for case in task.cases for d in case_dtypes(case)]
        return kind_of(task.ops, task.category, self.profile(task), self.current_ceilings(), self.backend, dtypes)

    def tolerance_of(self, task: Task) -> Tolerance:
        """``task``'s tolerance per output dtype as the verifier applies it: the verifier's own
        (``from_verifier``), else ``verifier.tolerance`` with this bare one's backend and settings."""
        if self.tolerance is not None:
            return self.tolerance(task.spec())
        from verifier import get_backend

        return tolerance_for(task.spec(), self.config, get_backend(self.backend))

    def tolerance_for(self, task: Task) -> tuple[float, float]:
        """(atol, rtol) for float32 outputs of ``task`` as the verifier will apply them."""
        return self.tolerance_of(task)("float32")

    def profile(self, task: Task) -> dict[str, Any] | None:
        if self.meter is None:
            return None
        try:
            return self.meter.cached_profile(task.spec())
        except Exception:
            return None

    def part(self, task: Task) -> Part:
        """``section`` as a prompt part: in full, or, when the model's context cannot hold it beside the reference and
        the rules, its short form (backend, threads, ISA and tolerance; no caches, ceilings or roofline)."""
        return Part(((self.section(task), "", 0),
                     (self.section(task, short=True), "the caches, ceilings and roofline of where the kernel runs",
                      MACHINE_RANK)))

    def section(self, task: Task, *, short: bool = False) -> str:
        """``## Where your kernel runs``: backend, threads, ISA, caches, ceilings, this task's roofline, tolerance
        (``short``: backend, threads, ISA and tolerance only)."""
        from verifier import describe_roofline_cases, describe_roofline_profile

        m = self.machine
        lines = []
        threads = m.get("threads")
        if backend_device(self.backend) == "cpu":
            lines.append(f"- Backend: {display_name(self.backend)}; CPU {m.get('cpu', 'unknown')}.")
            if threads and short:
                lines.append(f"- Threads: {threads} OpenMP thread{'s' if threads != 1 else ''}, set by the verifier "
                             "(do not set the count yourself).")
            elif threads:
                lines.append(f"- Threads: your kernel runs with {threads} OpenMP thread{'s' if threads != 1 else ''} "
                             f"(OMP_NUM_THREADS={threads}, set by the verifier for PyTorch and your kernel alike; "
                             "do not set the thread count yourself).")
            if m.get("isa"):
                lines.append(_compiler_line(m, short=short))
        else:
            name = display_name(self.backend)
            device = m.get("device") or "device not detected here"
            limits = ", ".join(f"{k} {v}" for k, v in (m.get("device_limits") or {}).items())
            lines.append(f"- Backend: {name}; device: {device}" + (f" ({limits})" if limits else "") + ".")
            lines.append("- Device ceilings are not measured by EvoKernel on this backend (untested without such a "
                         "device); host CPU: " + str(m.get("cpu", "unknown")) + ".")
        if m.get("caches") and backend_device(self.backend) == "cpu" and not short:
            lines.append(f"- Caches your kernel can count on: {usable_caches(m['caches'])}.")
        elif m.get("caches_text") and backend_device(self.backend) == "cpu" and not short:
            lines.append(f"- Caches: {m['caches_text']}.")
        c = self.current_ceilings()   # measured by the first timed candidate, and again when the gate asks
        if c and not short:
            lines.append(f"- Measured ceilings with {c.get('threads', threads)} threads: "
                         f"memory {c['triad_gbps']:.1f} GB/s (STREAM triad), "
                         f"compute {c['fma_gflops']:.0f} GFLOP/s fp32 (FMA loop){_measured(c)}.")
        profile = None if short else self.profile(task)
        if profile and _multi_case(task):     # over the cases a verification times, never case 0 alone
            timed = timed_cases(task, self.timed_cases)
            lines.append(f"- This task's roofline: {describe_roofline_cases(profile, timed, c)}.")
        elif profile:
            lines.append(f"- This task's roofline: {describe_roofline_profile(profile, c)}.")
        cases = cases_section(task, self.tolerance_of(task), self.timed_cases)
        if cases:    # the tolerance depends on each output's dtype: stated once, per dtype, with the cases
            lines.append("- Correctness: every output must match the reference within the tolerance of its "
                         "dtype (per dtype under Cases below), with NaN/Inf where the reference has them.")
            lines.append(cases)
        else:
            atol, rtol = self.tolerance_for(task)
            lines.append("- Correctness: every output must match the reference within "
                         f"atol={_num(atol)} and rtol={_num(rtol)} (float32, {self.backend} backend), "
                         "with NaN/Inf where the reference has them.")
        return "## Where your kernel runs\n" + "\n".join(lines)


def _compiler_line(m: dict[str, Any], *, short: bool = False) -> str:
    """What ``-march=native`` enables, as the compiler reports it. The extensions are what g++ found on
    this CPU and will use; the name is g++'s own for that set, which on a virtual machine may not be the
    processor's model (a VM reported "rocketlake" beside avx512bf16 and AMX, which Rocket Lake lacks)."""
    width = m.get("vector_bits") or 0
    vectors = f"; {width}-bit vectors: {width // 32} floats per register" if width else ""
    named = (f" (g++ calls this target `{m['arch']}`; on a virtual machine that name may not match the CPU model: "
             "go by the extensions listed, which the compiler detected here)") if m.get("arch") and not short else ""
    refused = [r.split(":", 1)[0] for r in m.get("isa_refused") or []]
    not_here = (f" It also enables {', '.join(refused)}, which the CPU reports but which do not run here (a program "
                "using them was refused): do not use them." if refused else "")
    return (f"- Compiler: {m.get('compiler', 'g++')} {m.get('flags', '')}; -march=native enables "
            f"{', '.join(m['isa'])}{vectors}{named}.{not_here}")


def usable_caches(caches: Sequence[dict[str, Any]]) -> str:
    """The caches as a kernel can use them: the private ones per core, and of a shared one at most the
    slice the verifier's cache flush counts (``verifier.machine.FLUSH_SHARED_SHARE``), because a VM
    reports its host's whole L3 ("L3 480 MiB shared by 2 cpus"), which no kernel here can hold."""
    from verifier import FLUSH_SHARED_SHARE, human_bytes

    private, shared = [], []
    for c in caches:
        name = f"L{c['level']}" + ("d" if c.get("type") == "Data" else "")
        if c.get("shared_by", 1) <= 1:
            private.append(f"{name} {human_bytes(c['bytes'])}")
        elif c["bytes"] > FLUSH_SHARED_SHARE:
            shared.append(f"at most {human_bytes(FLUSH_SHARED_SHARE)} of the shared {name} (the system reports "
                          f"{human_bytes(c['bytes'])} shared by {c['shared_by']} cpus, a virtual machine's view of "
                          "its host: block for the private caches)")
        else:
            shared.append(f"{name} {human_bytes(c['bytes'])} shared by {c['shared_by']} cpus")
    parts = ([" and ".join(private) + " per core"] if private else []) + shared
    return "; ".join(parts) or "not reported"


def _measured(c: dict[str, Any]) -> str:
    """How the ceilings were had: best of how many measurements, when and under what load."""
    said = []
    if c.get("measurements"):
        said.append(f"best of {c['measurements']} measurement{'s' if c['measurements'] != 1 else ''}")
    if c.get("load") is not None:
        said.append(f"load {c['load']:.1f} when last measured")
    return f" ({'; '.join(said)})" if said else ""


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


def _ms(outcome: Outcome) -> str:
    text = f"{outcome.latency_ms or 0:.3f} ms"
    if outcome.latency_spread_ms is not None:
        text += f" ± {outcome.latency_spread_ms:.3f} (IQR)"
    return text


def verdict(outcome: Outcome, best_name: str = "the best then") -> str:
    """One line: feasible with its own latency ± noise, and what its window's paired ratios say
    (``speed_words``: against PyTorch, and against ``best_name`` when a best was timed beside it), or the
    failing gate and why. The only time shown is the kernel's own: PyTorch's and the best's times in that
    window are other kernels' figures, said as ratios."""
    if not outcome.verified:
        return "not verified"
    if outcome.feasible:
        text = f"feasible, {_ms(outcome)}"
        if outcome.speedup:
            text += f" ({speed_words(outcome.vs_reference, outcome.speedup, outcome.speedup_ci, 'PyTorch')})"
        if outcome.gain is not None and outcome.vs_best:
            text += f"; {speed_words(outcome.vs_best, outcome.gain, outcome.gain_ci, best_name)}"
        return text + _unchecked(outcome)
    message = " ".join(str(outcome.message).split())
    if message.startswith(f"{outcome.failed_gate}: "):   # the gate is named once
        message = message[len(str(outcome.failed_gate)) + 2:]
    return f"failed at {outcome.failed_gate}: {message[:400]}"


def in_window(outcome: Outcome, best_name: str = "the best then") -> str:
    """A kernel as a prompt states it: feasible with the paired ratios of the one window it was verified
    in ("1.17x faster than PyTorch [1.14, 1.24]; 1.07x slower than the start point [1.05, 1.08]"), or
    the failing gate and why. No absolute time: times from different windows are not comparable (the
    machine's load differs), and a prompt that showed a kernel's 9.3 ms beside another's 7.8 ms "1.05x
    slower" contradicted itself. A prompt shows one absolute time, the start point's (``own_time``)."""
    if not outcome.verified or not outcome.feasible:
        return verdict(outcome)
    said = []
    if outcome.speedup:
        said.append(speed_words(outcome.vs_reference, outcome.speedup, outcome.speedup_ci, "PyTorch"))
    if outcome.gain is not None and outcome.vs_best:
        said.append(speed_words(outcome.vs_best, outcome.gain, outcome.gain_ci, best_name))
    return "feasible" + (": " + "; ".join(said) if said else "") + _unchecked(outcome)


def _unchecked(outcome: Outcome) -> str:
    """What a feasible verdict the harness could not fully check says beside its figures (``Outcome.not_judged``: a
    review flag): that it counts for nothing, and why."""
    why = outcome.not_judged
    return f"; not judged: {why}: no reward, never a best or a start point" if why else ""


def own_time(outcome: Outcome) -> str:
    """The kernel's own median and spread, said with the window it comes from (or "" when untimed). The spread
    is the IQR, a width: "10.206 ms ± 4.728 (IQR)" read as a half-width said twice the spread there was."""
    if not outcome.timed:
        return ""
    spread = f" (IQR {outcome.latency_spread_ms:.3f})" if outcome.latency_spread_ms is not None else ""
    return f"{outcome.latency_ms or 0:.3f} ms{spread}, its median in the window it was verified in"


NOISY_SPREAD = 0.10    # a time whose IQR is more than this share of its median gives its roofline share as a range


def roofline_point(outcome: Outcome, ceilings: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The kernel's place on the roofline said against ``ceilings`` (the prompt's: ``PromptFacts.current_ceilings``),
    from the bytes, FLOPs and time its window recorded; the stored point when no ceilings are given or it was
    already taken against these. A stored point carries the ceilings of the moment it was verified, and the gate
    measures them again during a run: softmax's refine prompt said "memory 22.1 GB/s ... floor 3.043 ms" above its
    start point's "72 % of the 24.1 GB/s triad ceiling (...; floor 2.788 ms)"."""
    point = outcome.roofline
    if not (isinstance(point, dict) and ceilings and ceilings.get("triad_gbps") and ceilings.get("fma_gflops")):
        return point
    if not point.get("latency_ms") or "bytes" not in point or "flops" not in point:
        return point
    if (point.get("ceiling_gbps"), point.get("ceiling_gflops")) == (ceilings["triad_gbps"], ceilings["fma_gflops"]):
        return point
    from verifier import assess_roofline

    return assess_roofline({"bytes": point["bytes"], "flops": point["flops"]}, float(point["latency_ms"]),
                           ceilings) or point


def roofline_line(outcome: Outcome, *, own: bool = False, ceilings: dict[str, Any] | None = None) -> str:
    """``Roofline: memory-bound: 41 % of the 28.0 GB/s triad ceiling (...)`` or "" when unknown; ``own``:
    the start point's or best's line, said to come from its own time. When PyTorch, in the same window,
    ran faster than the roofline's floor, the line says so: the ceiling was measured too low (one
    measurement under load; a triad is not a read-only stream), and a kernel "at 101 % of the ceiling"
    while PyTorch is faster beside it must not read as a kernel at its limit. ``ceilings``: the prompt's, which
    the line is said against (``roofline_point``)."""
    point = roofline_point(outcome, ceilings)
    if not (isinstance(point, dict) and point.get("summary")):
        return ""
    line = f"Roofline: {point['summary']}" + (" (from its own time above)" if own else "")
    floor, ref = point.get("floor_ms"), outcome.reference_ms
    median, spread = outcome.latency_ms, outcome.latency_spread_ms
    if point.get("fraction") and median and spread and spread > NOISY_SPREAD * median and spread < 2 * median:
        # one share from a noisy time is a guess: a draft at "8.9 ms ± 3.7 -> 30 %" whose equal successor ran 5.25 ms
        share = point["fraction"] * median
        lo, hi = share / (median + spread / 2), share / (median - spread / 2)
        line += (f"; its time was noisy (IQR {100 * spread / median:.0f} % of its median), so its share is "
                 f"anywhere between {100 * lo:.0f} % and {100 * hi:.0f} %")
    if floor and ref and 0 < ref < floor:
        line += (f"; PyTorch ran at {100 * floor / ref:.0f} % of this ceiling in the same window: the ceiling "
                 "was measured too low, so this floor is no limit")
    return line


def case_speeds(outcome: Outcome, task: Task, facts: PromptFacts | None = None) -> str:
    """A multi-case kernel's timed cases, one line each, as its window measured them: the case, its speed
    beside PyTorch in its own window (``speed_words``; the gate's verdict, or its rule on the interval for an
    outcome stored before cases kept their verdicts) and its share of that case's roofline floor. "" for a
    single-case kernel. 7_sum's refinements were guesses: its fp32 [64, 64, 64] case ran 0.74-0.79x and its
    fp16 column sums 1.11x, and no prompt said so."""
    from verifier import Ratio, assess_roofline, case_number, describe_case, judge_ratio

    timed = sorted((c for c in outcome.cases if c.get("speedup") is not None), key=lambda c: int(c.get("case", 0)))
    if not timed:
        return ""
    cases = task.spec().cases
    profile = facts.profile(task) if facts is not None else None
    counted = (profile or {}).get("cases") or []
    config = facts.config if facts is not None else VerifyConfig()   # the workspace's rule, as the gate judged
    rows = []
    for c in timed:
        k = int(c.get("case", 0))
        verdict, ci = str(c.get("vs_reference") or ""), c.get("speedup_ci")
        if not verdict and ci and len(ci) == 2:
            verdict = judge_ratio(Ratio(float(c["speedup"]), float(ci[0]), float(ci[1])), config.min_speed_change,
                                  config.noise_limit)
        said = speed_words(verdict, float(c["speedup"]), ci, "PyTorch")
        point = (assess_roofline(counted[k], c.get("latency_ms"), facts.current_ceilings() if facts else None)
                 if k < len(counted) else None)
        roof = (f"; {100 * point['fraction']:.0f} % of its {point['bound']}-bound roofline floor"
                if point and point.get("fraction") else "")
        inputs = describe_case(cases[k]) if k < len(cases) else "case"
        rows.append(f"- #{case_number(cases, k)} ({inputs}): {said}{roof}")
    return "Each timed case in its own window, beside PyTorch:\n" + "\n".join(rows)


def attempt_text(outcome: Outcome) -> str:
    """What an attempt teaches, in memory: its verdict (the code travels with it)."""
    return verdict(outcome)


def change_of(exp: Experience) -> str:
    """The attempt's own one-line summary of what it changed (the answer's ``Change:`` line)."""
    return str((exp.extra or {}).get("change") or "").strip()


TRACE_KINDS = ("draft_trace", "refine_trace", "human_edit")   # an attempt, as opposed to knowledge


def relevant(exp: Experience, task: Task | None, kind: KernelKind | None = None) -> bool:
    """Whether another task's attempt is worth its code in ``task``'s prompt. With the task's ``kind``
    (``core.kinship``): a working kernel that is kin (its family, or shared identity ops); a failed one shows
    as a lesson only (its Change line and why it failed). Without: it shares a traced op or the category with
    ``task``, or ``task`` cited it before, or another operator than its own cited it and it kept a positive
    value. The rest show as a lesson: gelu's draft code in a cumsum prompt was half the prompt and no help."""
    if task is None or exp.kind not in TRACE_KINDS:
        return True
    if kind is not None:
        return outcome_of(exp).feasible and relevance(kind_of_signature(exp.signature), kind) > 0
    sig = exp.signature or {}
    if set(sig.get("ops") or ()) & set(task.ops) or (sig.get("category") and sig.get("category") == task.category):
        return True
    others = [t for t in exp.adopted_by if t != exp.task_id]
    return task.id in others or (bool(others) and max(exp.q1, exp.q2) > 0)


def render_experience(exp: Experience, *, with_code: bool = True, max_lines: int = 40,
                      ceilings: dict[str, Any] | None = None) -> str:
    """A memory item framed by what it shows: for an attempt, its task, stage and in-window verdict, its
    change and roofline (against the prompt's ``ceilings``), the lines that matter; for knowledge, its title
    and text."""
    head = f"[mem:{exp.id}] "
    refusal = (exp.extra or {}).get("refusal") if exp.kind == "rule" else None
    if refusal:
        count, tasks = int(exp.extra.get("count", 1)), [str(t) for t in exp.extra.get("tasks", [])]
        named = ", ".join(tasks[:4]) + (f" and {len(tasks) - 4} more" if len(tasks) > 4 else "")
        attempts = f"{count} attempt{'s' if count != 1 else ''}" + (f": {named}" if named else "")
        return (head + f"Refused before at the anti_hack gate on this backend ({attempts}): {refusal}. "
                "The rules above say so; write it another way.")
    if exp.kind in ("best_practice", "rule", "api_template"):
        return head + f"{exp.title}\n{exp.text}"
    who = "a person's hand edit" if exp.source == "human" else (exp.stage or "attempt")
    where = f"task {exp.task_id}" if exp.task_id not in ("", "*") else "general"
    item = kind_of_signature(exp.signature) if exp.kind in TRACE_KINDS else None
    category = ((f"{item.family}" + (f", {item.regime}-bound" if item.regime else "")) if item is not None
                else (exp.signature or {}).get("category"))
    result = outcome_of(exp)
    if exp.kind in TRACE_KINDS:
        body = head + f"{where}{f' ({category})' if category else ''}, {who}: {in_window(result)}"
    else:
        body = head + f"{exp.title or where} ({where}, {who}): {in_window(result)}"
    change = change_of(exp)
    if change:
        body += f"\nChange: {change}"
    if not with_code:    # a lesson: what was tried and what it gave
        return body
    roof = roofline_line(result, ceilings=ceilings)
    if roof:
        body += f"\n{roof}"
    if exp.text and exp.text != verdict(result) and exp.text != attempt_text(result):
        body += f"\n{exp.text}"
    if exp.files and max_lines > 0:
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


def _multi_case(task: Task) -> bool:
    """A task whose sizes are its cases (a case file, or more than one case): its prompts state sizes and
    tolerances per case and dtype, never one size set or one float32 tolerance."""
    return bool(task.case_file) or len(task.cases) > 1


def _task_section(task: Task) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in task.sizes.items())
    if _multi_case(task):
        # a multi-case task's sizes are its cases (## Cases below), which may differ from its case file's
        changed = task.cases != task.original_cases or task.case_notes
        sizes_text = ("the cases listed under Cases below, not those of its case file"
                      + (f" ({'; '.join(task.case_notes)})" if task.case_notes else "")
                      if changed else "the cases listed under Cases below")
        scaled = ""
    else:
        sizes_text = sizes or "as written"
        scaled = f" ({task.scale_note()})" if task.size_overrides else ""
    return (f"## Task {task.name} (level {task.level}, {task.category})\n"
            f"Reference implementation (PyTorch). Sizes: {sizes_text}{scaled}. "
            "Your kernel must also handle other sizes (it is checked at a second, ragged shape).\n"
            f"```python\n{task.source.strip()}\n```")


def _rules_enforced(backend: str = "cpu", form: str = "kernel-launch") -> Part:
    """``## Rules the verifier enforces``: the anti-hack gate's own rule table, every rule (``backend``'s own
    too, for the ``form`` asked for), in full; in its short form (each rule in a few words) only when the model's
    context cannot hold the full table beside the reference and the machine."""
    from verifier import contract_text

    head = "## Rules the verifier enforces (a candidate that breaks one is refused at the anti_hack gate"
    return Part(((f"{head})\n" + contract_text(backend, form), "", 0),
                 (f"{head}, which names the rule)\n" + contract_text(backend, form, short=True),
                  "the rules the verifier enforces in full (given in short)", CONTRACT_RANK)))


def _api_section(api: Sequence[Experience]) -> str:
    return "## API knowledge\n" + "\n\n".join(f"### {e.title}\n{e.text}" for e in api) if api else ""


def _rules_section(rules: Sequence[Experience]) -> str:
    return ("## Rules kept resident (refusals seen before on this backend; items that correct kernels of several "
            "operators cited)\n" + "\n".join(render_experience(e, with_code=False) for e in rules) if rules else "")


CLOSEST_CODE_LINES = {40: 200, 20: 80, 8: 40, 0: 0}   # the closest kernel's lines at each of MEMORY_CODE_LINES


def _memory_section(memory: Sequence[Experience], max_lines: int, task: Task | None = None,
                    kind: KernelKind | None = None, reused: frozenset[str] | set[str] = frozenset(),
                    ceilings: dict[str, Any] | None = None) -> str:
    """Items from other tasks: an attempt relevant to ``task`` (``relevant``) with its code, the others as
    lessons (their Change line and verdict). With the task's ``kind``, the section says what the kernel is,
    and the first working kernel of its family (the closest, shown first) comes with all its code that fits,
    to be reused, unless this task's attempts already cited it (``reused``): then its key lines, like the
    others (a fused GEMM's refine prompts carried the matmul kernel its start point was built from in full,
    16 k characters, and no answer cited it again)."""
    if not memory:
        return ""
    closest = next((e.id for e in memory if kind is not None and e.kind in TRACE_KINDS and relevant(e, task, kind)
                    and (kind_of_signature(e.signature) or kind).family == kind.family), None)
    head = "## Memory: earlier attempts on other tasks and lessons (cite the ones you use)"
    if kind is not None:
        head += (f"\nThis task's kernel is {kind.words()}. Kernels of other tasks come first by how close they are"
                 + ("; the first is the closest working kernel of this family, which this task's attempts already "
                    "reused: its key lines" if closest and closest in reused else
                    "; the first is the closest working kernel of this family, in full: reuse it where it fits"
                    if closest else ""))
    if closest in reused:
        closest = None
    return head + "\n" + "\n\n".join(
        render_experience(e, with_code=relevant(e, task, kind),
                          max_lines=CLOSEST_CODE_LINES.get(max_lines, max_lines) if e.id == closest else max_lines,
                          ceilings=ceilings)
        for e in memory)


def _join(parts: Sequence[str]) -> str:
    return "\n\n".join(p for p in parts if p)


class Prompt(list["Message"]):
    """A prompt's messages (a list of (role, content), as every caller reads them), and what was left out of it to
    fit its budget, in words (``left_out``: said in the prompt log and the request's event)."""

    left_out: tuple[str, ...] = ()
    smallest: bool = False      # nothing more could be cut (it may still be over its budget)
    shown: tuple[str, ...] | None = None   # the memory items it shows, by id (None: not a fitted prompt)

    @property
    def chars(self) -> int:
        return sum(len(c) for _, c in self)


@dataclass(frozen=True)
class Part:
    """A part of a prompt's head that can be said shorter when the budget asks: its forms, the full one first, each
    shorter one with what it leaves out and the rank at which it is taken (lower ranks are taken first)."""

    forms: tuple[tuple[str, str, int], ...]

    @classmethod
    def whole(cls, text: str) -> Part:
        """A part never cut (the reference, the machine, the start point's code, the ask)."""
        return cls(((text, "", 0),))


HISTORY_RANK, API_RANK, RULES_RANK, HISTORY_REST_RANK, CODE_RANK, CONTRACT_RANK, MACHINE_RANK = 1, 2, 3, 4, 5, 6, 7
"""The order knowledge and history go when a prompt is over its budget, after the memory items (their code first):
this task's older ideas (all but the latest ``HISTORY_KEPT``), API items, resident rules, the rest of the ideas,
the code of the last failed attempt or of the best kernel (when it is not the start point), the rules the verifier
enforces, which then come in their short form (``contract_text(short=True)``), and last the machine's caches,
ceilings and roofline (``PromptFacts.part``)."""
HISTORY_KEPT = 3


def _fit(head: Sequence[str | Part], api: Sequence[Experience], rules: Sequence[Experience],
         memory: Sequence[Experience], tail: Sequence[str], budget: int = MAX_PROMPT_CHARS, task: Task | None = None,
         kind: KernelKind | None = None, reused: frozenset[str] | set[str] = frozenset(),
         ceilings: dict[str, Any] | None = None) -> Fitted:
    """``head`` (task, machine, start point...), knowledge, ``tail`` (the ask) within ``budget`` characters, whether
    any item to cite (a rule or a memory item) is left in it, and what was left out.

    Knowledge is cut first, memory first: its code shrinks to key lines, then to none, then the lowest-ranked items
    go; then the head's shortenable parts and the other knowledge by rank (``HISTORY_RANK`` ...). The reference, the
    machine, the start point's code and the ask are never cut, so a long reference stays whole even when that
    leaves the prompt over budget (``Fitted.smallest``: nothing more could go)."""
    memory, api, rules = list(memory), list(api), list(rules)
    parts = [p if isinstance(p, Part) else Part.whole(p) for p in head]
    level = [0] * len(parts)
    counts = {"memory": len(memory), "api": len(api), "rules": len(rules)}
    code_lines = MEMORY_CODE_LINES[0]

    def text() -> str:
        return _join([*(p.forms[n][0] for p, n in zip(parts, level)), _api_section(api), _rules_section(rules),
                      _memory_section(memory, code_lines, task, kind, reused, ceilings), *tail])

    def fitted(smallest: bool = False) -> Fitted:
        notes = []
        if memory and code_lines < MEMORY_CODE_LINES[0]:
            notes.append(f"memory items' code cut to {code_lines} key lines" if code_lines else
                         "memory items' code (their Change lines and verdicts kept)")
        for name, words in (("memory", "memory items"), ("api", "API knowledge items"), ("rules", "resident rules")):
            kept = {"memory": len(memory), "api": len(api), "rules": len(rules)}[name]
            if kept < counts[name]:
                notes.append(f"{counts[name] - kept} of {counts[name]} {words}")
        notes += [p.forms[n][1] for p, n in zip(parts, level) if n and p.forms[n][1]]
        return Fitted(text(), bool(rules or memory), tuple(notes), smallest, tuple(e.id for e in memory))

    if len(text()) <= budget:
        return fitted()
    for lines in MEMORY_CODE_LINES:
        code_lines = lines
        if len(text()) <= budget:
            return fitted()
    while memory:
        memory.pop()
        if len(text()) <= budget:
            return fitted()
    for rank in sorted({f[2] for p in parts for f in p.forms[1:]} | {API_RANK, RULES_RANK}):
        if rank == API_RANK or rank == RULES_RANK:
            items = api if rank == API_RANK else rules
            while items:
                items.pop()
                if len(text()) <= budget:
                    return fitted()
            continue
        for i, part in enumerate(parts):
            while level[i] < len(part.forms) - 1 and part.forms[level[i] + 1][2] == rank:
                level[i] += 1
                if len(text()) <= budget:
                    return fitted()
    return fitted(smallest=True)


@dataclass(frozen=True)
class Fitted:
    """The user message ``_fit`` made: its text, whether it shows items to cite, what was left out, and whether
    nothing more could be cut."""

    text: str
    cite: bool
    left_out: tuple[str, ...] = ()
    smallest: bool = False
    shown: tuple[str, ...] = ()     # the memory items left in it, by id


def _messages(backend: str, fitted: Fitted, form: str = "kernel-launch") -> Prompt:
    """The system message (asking for ``MEMORY USED`` only when the user message shows items to cite, and for
    ``form``'s files) and the user message."""
    prompt = Prompt([("system", system_message(backend, cite=fitted.cite, form=form)), ("user", fitted.text)])
    prompt.left_out, prompt.smallest, prompt.shown = fitted.left_out, fitted.smallest, fitted.shown
    return prompt


def _user_budget(budget: int, backend: str, form: str) -> int:
    """What a prompt of ``budget`` characters leaves its user message (the system message with its cite line)."""
    return budget - len(system_message(backend, cite=True, form=form))


# -- this task's own history ---------------------------------------------------------------------------

HISTORY_IDEAS = 10   # ideas (distinct Change lines) of this task's recent attempts a prompt lists


def idea_of(exp: Experience) -> str:
    """The idea an attempt tried, for telling repeats apart: its Change line, lower-cased, words only
    (an attempt without one is its own idea)."""
    words = re.findall(r"[a-z0-9]+", change_of(exp).lower())
    return " ".join(words) or f"#{exp.id}"


def _history(history: Sequence[Experience], start: Experience | None, *, tagged: bool = True,
             marks: dict[str, str] | None = None, limit: int = HISTORY_IDEAS) -> str:
    """``### Ideas already tried on this task``: this task's recent attempts, successes and failures, one
    entry per idea (its Change line, where it started from, and the in-window verdict of every time it
    was tried), oldest first; the kernels shown in full elsewhere in the prompt are listed too, named by
    ``marks`` (id -> "the start point"), so the fix that became the best is an idea tried like any other.
    ``tagged``: with their ``[mem:<id>]`` (a prompt without memory to cite names none)."""
    marks = marks or {}
    groups: dict[str, list[Experience]] = {}
    for exp in sorted(history, key=lambda e: e.created_at):
        groups.setdefault(idea_of(exp), []).append(exp)
    ideas = sorted(groups.values(), key=lambda g: g[-1].created_at)[-limit:] if limit > 0 else []
    if not ideas:
        return ""
    start_hash = outcome_of(start).candidate_hash if start is not None else ""
    rows = []
    for tries in ideas:
        last = tries[-1]
        if last.parent_id is None:
            where = "a first version" if last.stage == "draft" else "from an earlier kernel"
        elif start is not None and last.parent_id == start.id:
            where = "from the start point"
        else:
            where = f"from [mem:{last.parent_id}]" if tagged else "from an earlier kernel"
        shown = [marks[t.id] for t in tries if t.id in marks]
        if shown:
            where += f"; it is {' and '.join(dict.fromkeys(shown))}"
        tag = f"[mem:{last.id}] " if tagged else ""
        head = f"- {tag}Change: {change_of(last) or '(no summary given)'} ({where})"
        said = []
        for t in tries:
            named = "the start point" if start_hash and outcome_of(t).best_hash == start_hash else "the best then"
            reward = f"; reward {t.reward:+.2f}" if t.reward is not None else ""
            said.append(f"{in_window(outcome_of(t), named)}{reward}")
        if len(tries) == 1:
            rows.append(f"{head}\n  -> {said[0]}")
        else:
            rows.append(f"{head}\n  tried {len(tries)} times:" + "".join(f"\n  -> {w}" for w in said))
    return ("### Ideas already tried on this task (successes and failures, newest last; do not propose one "
            "again: each time it was tried it gave the verdict shown)\n" + "\n".join(rows))


def _ideas(history: Sequence[Experience]) -> int:
    """How many ideas ``_history`` would list at most."""
    return min(HISTORY_IDEAS, len({idea_of(e) for e in history}))


def _history_part(before: str, history: Sequence[Experience], start: Experience | None, *,
                  marks: dict[str, str] | None = None) -> Part:
    """``before`` (a heading, a legend) and this task's ideas already tried, which a prompt over its budget lists
    fewer of (the latest ``HISTORY_KEPT``, then none: ``HISTORY_RANK``, ``HISTORY_REST_RANK``)."""
    full = _history(history, start, marks=marks)
    if not full:
        return Part.whole("")
    n = _ideas(history)
    forms = [(f"{before}{full}", "", 0)]
    if n > HISTORY_KEPT:
        forms.append((f"{before}{_history(history, start, marks=marks, limit=HISTORY_KEPT)}",
                      f"the {n - HISTORY_KEPT} oldest of {n} ideas already tried on this task", HISTORY_RANK))
    forms.append(("", f"the {n} idea{'s' if n != 1 else ''} already tried on this task", HISTORY_REST_RANK))
    return Part(tuple(forms))


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


def windows(shown: str) -> str:
    """How a prompt compares kernels, said once: paired ratios from one window, with the direction of
    their intervals; ``shown``: which absolute time the prompt gives, and from which window."""
    return f"{speed_legend()} Times from different windows are not comparable (the load differs): {shown}."


def _bound_hint(point: dict[str, Any]) -> str:
    """What is left to try for the start point's bound. Memory-bound is said with how close it already
    is: a kernel that streams once has no bytes left to cut (the cumsum prompt that said "stream once" to a
    kernel streaming once), so the levers left are the rate and the dependency chains."""
    if point.get("bound") == "memory":
        frac = point.get("fraction")
        at = f" at {100 * frac:.0f} % of the triad ceiling" if frac else ""
        return (f" It is memory-bound{at}, counting only the bytes the task must move (each input read once, each "
                "output written once). If the kernel moves more than that (a second pass, re-reading an input, a "
                "scratch buffer), cut that first; if it already streams once, what is left is the rate: keep every "
                "thread streaming the whole time (an even split, no serial phase), break loop-carried dependencies "
                "(a running sum or maximum) into independent chains, and use wide loads and stores.")
    if point.get("bound") == "compute":
        return " It is compute-bound: use the vector width and threads above, block for the caches, keep FMAs busy."
    return ""


def draft_prompt(task: Task, backend: str, api: Sequence[Experience], rules: Sequence[Experience],
                 memory: Sequence[Experience], *, facts: PromptFacts | None = None,
                 history: Sequence[Experience] = (), kind: KernelKind | None = None,
                 budget: int = MAX_PROMPT_CHARS) -> Prompt:
    """Messages asking for a first correct kernel (``history``: this task's earlier attempts, when any failed;
    the newest of them is shown with its code and why it failed, to be fixed or replaced). Every method
    drafts with this prompt; only evokernel's carries memory (``rules``, ``memory``). ``budget``: the characters
    the prompt should fit in (``core.budget``: what the model's context leaves beside the answer)."""
    facts = _facts(facts, backend)
    atol, rtol = facts.tolerance_for(task)
    within = ("within each dtype's tolerance (under Cases)" if _multi_case(task)
              else f"within atol={_num(atol)}, rtol={_num(rtol)}")
    last = max(history, key=lambda e: e.created_at) if history else None
    fix: Part = Part.whole("")
    if last is not None and last.files and not outcome_of(last).feasible:
        said = f"## Your last attempt [mem:{last.id}]: {in_window(outcome_of(last))}"
        fix = Part(((said + "\n" + _code(last.files), "", 0), (said, "the last attempt's code", CODE_RANK)))
    ask = ("## Your answer\nStart with the `Change:` line, then write model.py and the kernel source(s) for ModelNew"
           + (" (fix the last attempt, or write a new first kernel if its approach cannot work)"
              if fix.forms[0][0] else "")
           + f". Correctness first: match the reference's outputs {within}, "
           "including NaN/Inf behaviour; then use the threads and vector width above.")
    tried = _history_part(f"## This task so far\n{windows('so this prompt shows none')}\n", history, None)
    head: list[str | Part] = [_task_section(task), facts.part(task), _rules_enforced(backend, facts.form), tried, fix]
    return _messages(backend, _fit(head, api, rules, memory, [ask], _user_budget(budget, backend, facts.form),
                                   task=task, kind=kind, ceilings=facts.current_ceilings()), facts.form)


def refine_prompt(task: Task, backend: str, api: Sequence[Experience], rules: Sequence[Experience],
                  memory: Sequence[Experience], start: Experience, history: Sequence[Experience], *,
                  best: Experience | None = None, facts: PromptFacts | None = None,
                  kind: KernelKind | None = None, budget: int = MAX_PROMPT_CHARS) -> Prompt:
    """Messages asking for a faster variant of ``start`` (its code in full, and the best kernel's when it
    differs), with this task's earlier attempts (``history``, one entry per idea, whatever start point
    they came from, the start point and the best among them). One absolute time, the start point's in its
    own window; everything else as paired ratios. The prompt says what the variant is judged against:
    the best, timed beside it in one window (``core.methods``: the best is timed beside every attempt)."""
    facts = _facts(facts, backend)
    ceilings = facts.current_ceilings()    # every share of this prompt against the ceilings its machine part says
    start_text = f"## Start point [mem:{start.id}]: {in_window(outcome_of(start))}"
    if own_time(outcome_of(start)):
        start_text += f"\nIts own time: {own_time(outcome_of(start))}."
    start_text += "\n" + windows("this prompt shows one absolute time, the start point's above")
    if best is not None and best.id == start.id:
        start_text += "\nIt is the best kernel so far."
        goal = "it is timed beside the start point, the best so far, in one window and counts only if faster there"
    elif best is not None:
        start_text += (f"\nIt is not the best kernel so far: that is [mem:{best.id}], shown below. Your variant is "
                       "judged against the best, not against this start point.")
        goal = ("it is timed beside the best so far, not beside the start point, in one window and counts only if "
                "faster than the best there")
    else:
        goal = "it is timed beside PyTorch"
    if change_of(start):
        start_text += f"\nChange that made it: {change_of(start)}"
    if roofline_line(outcome_of(start), ceilings=ceilings):
        start_text += f"\n{roofline_line(outcome_of(start), own=True, ceilings=ceilings)}"
    if case_speeds(outcome_of(start), task, facts):
        start_text += "\n" + case_speeds(outcome_of(start), task, facts)
    start_text += "\n" + _code(start.files)
    marks = {start.id: "the start point"}
    if best is not None:
        marks[best.id] = "the start point, the best so far" if best.id == start.id else "the best kernel so far"
    known = {h.id for h in history}
    everything = [*history, *(e for e in (start, best) if e is not None and e.id not in known and e.task_id == task.id)]
    tried = _history_part("", list({e.id: e for e in everything}.values()), start, marks=marks)
    best_text = Part.whole("")
    if best is not None and best.id != start.id and best.files:
        said = f"## Best kernel so far [mem:{best.id}]: {in_window(outcome_of(best))}"
        best_text = Part(((said + "\nIt differs from the start point; borrow from it where it helps.\n"
                           + _code(best.files), "", 0), (said, "the best kernel's code", CODE_RANK)))
    hint = _bound_hint(roofline_point(outcome_of(start), ceilings) or {})
    ask = (f"## Your answer\nWrite a faster variant of the start point ({goal}).{hint}"
           " Keep it correct; change one or two things at a time (parallelism, vectorisation, blocking, fusion, "
           "memory traffic), try an idea not listed as tried, and start with the one-line `Change:` saying what "
           "you changed.")
    head: list[str | Part] = [_task_section(task), facts.part(task), _rules_enforced(backend, facts.form), start_text,
                              tried, best_text]
    reused = {str(c) for e in [start, *history] for c in (e.extra or {}).get("cited", [])}
    return _messages(backend, _fit(head, api, rules, memory, [ask], _user_budget(budget, backend, facts.form),
                                   task=task, kind=kind, reused=reused, ceilings=ceilings), facts.form)
