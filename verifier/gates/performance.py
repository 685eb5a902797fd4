"""Gate 5, performance: what the timing windows say, whether every timed call was right, and the verdict.

The harness (``verifier.window.harness``, run by ``verifier.harness.job_runner``) times the reference, the
candidate and, when refining, the task's best interleaved in one window, each in its own process, on the
same fresh inputs per round. ``check`` is the whole gate, in this order:

1. windows: one for a task, one per timed case for a multi-case task (the cases that bring a new dtype first,
   at most ``timed_cases``, every one timed, their rounds sharing the cases' budget), each read by ``measured``:
   - every timed round's candidate output is compared with the reference's output *on the same
     inputs* at random positions, and the two calls after timing at every position (a kernel that
     cheats on some calls, stops working, or replays a result fails, whichever call it picks);
   - the op trace and the launcher count of every timed call (PyTorch compute, or a call that skips the
     library, fails the anti-hack gate);
   - speedup = reference / candidate and gain = best / candidate: the median over the window's rounds
     of the two calls' ratio in each round (adjacent calls share the machine's load of the moment), each
     with a bootstrap interval over the rounds (a multi-case task: geometric means over the cases);
   - flags for review: implausible speedups, latencies below the memory-bandwidth floor, device event
     times far below the wall clock (work outside the current stream);
2. the kernel's place on this machine's roofline (``verifier.machine.roofline``); a memory-bound kernel,
   or PyTorch beside it, under the triad floor has the ceilings measured again;
3. the windows are measured once more when they were too noisy to judge, or when the kernel came out
   above this machine's FMA ceiling (impossible without skipping work: the ceilings, perhaps measured
   under load, are measured again too);
4. the verdicts, once, by ``verifier.verdict.judge`` ("faster"/"slower" only when the interval excludes 1
   and the change is at least ``min_speed_change``; "noisy" when it reaches further than ``noise_limit``
   from equal speed; "implausible" for a kernel still above the ceiling, flagged; else "same"), and the
   gate passed with a message that says them (``settle``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from verifier import verdict
from verifier.compare import Agreement, compare_outputs
from verifier.jobs import pick_positions
from verifier.machine.roofline import MAX_CEILING_MEASUREMENTS, RooflineMeter, below_floor
from verifier.outcome import Outcome
from verifier.tolerance import Tolerance
from verifier.verdict import NOISE_LIMIT, Ratio, words
from verifier.window.stats import Window, geomean_ratio, paired_ratio, summarize

if TYPE_CHECKING:
    from verifier.config import VerifyConfig
    from verifier.reference import Reference
    from verifier.task import TaskSpec

FAILED_AS = "performance"

Measure = Callable[["Reference", "int | None", "float | None"], "tuple[dict[str, Any], dict[str, Any]] | None"]
"""Runs one timing window for the reference restricted to the trials it times (the case, for a multi-case
task, and its share of the cases' budget in seconds): the window's ``(result, outputs)``, or None when the
candidate's side failed (the outcome says why)."""


@dataclass
class Measured:
    """What a task's windows measured, before any verdict: the paired ratios against the reference and
    (when the best was timed beside the candidate) against the best, and the gate's message and details."""

    speed: Ratio
    gain: Ratio | None
    message: str                      # the times and the speedup with its interval
    tail: str = ""                    # said after the verdict against the best (per case; a best not timed)
    details: dict[str, Any] = field(default_factory=dict)


def fail_pytorch_compute(out: Outcome, ops: dict[str, int], message: str) -> None:
    """Fail the anti-hack gate for the aten ops the op trace saw (``{ops}`` in ``message`` lists them)."""
    listed = ", ".join(f"aten.{k} x{v}" for k, v in sorted(ops.items()))
    out.fail("anti_hack", message.format(ops=listed))
    out.gate("anti_hack").details["dynamic"] = ops


def measured(result: dict[str, Any], outputs: dict[str, Any], ref: Reference, tolerance: Tolerance, out: Outcome, *,
             best_hash: str = "", implausible_speedup: float = 50.0) -> Measured | None:
    """One window's ``result`` and ``outputs`` (``verifier.window.harness``): every timed call checked (a
    failure fails its gate: None), then the window's times and paired ratios in ``out``, with the flags.
    No verdict: ``settle`` says it, once the gate knows whether the window is measured again."""
    if result.get("signals_changed"):
        out.fail("anti_hack", f"the kernel changed signal handling ({', '.join(result['signals_changed'][:4])}) "
                              "in the timing window: kernels may not install handlers or timers")
        out.gate("performance").status = "failed"
        return None
    forbidden = [ops for ops in result.get("forbidden", []) if ops]
    if forbidden:
        ops: dict[str, int] = {}
        for found in forbidden:
            for name, n in found.items():
                ops[name] = ops.get(name, 0) + n
        fail_pytorch_compute(out, ops, f"on {len(forbidden)} of {len(result['forbidden'])} calls in the timing window, "
                                       "forward ran PyTorch compute ({ops}): the kernel must do the work on every call")
        out.gate("performance").status = "failed"
        return None
    skipped = sum(1 for calls in result.get("calls", []) if not any(calls.values()))
    if skipped:
        out.fail("anti_hack", f"on {skipped} of {len(result['calls'])} calls in the timing window, forward did not "
                              "call the kernel library: every call's result must come from your kernels")
        out.gate("performance").status = "failed"
        return None
    for meta, pair in zip(result.get("checks", []), outputs.get("checks", [])):
        problem = check_call(meta, pair, ref, tolerance)
        if problem:
            out.fail("correctness", f"a call's outputs, taken the moment it reported done, were not the reference's: "
                                    f"{problem}. Every call must compute from its inputs and be "
                                    "finished when it reports done: no results kept from earlier calls, no calls done "
                                    "partly or after")
            out.gate("performance").status = "failed"
            return None

    window = Window(**result["window"])
    samples, wall, clock = window.samples, window.wall, window.clock
    cand = summarize(samples["candidate"], clock, wall.get("candidate"))
    reference = summarize(samples["reference"], clock, wall.get("reference"))
    speed = paired_ratio(samples["reference"], samples["candidate"])
    out.latency_ms, out.latency_spread_ms = cand.median_ms, cand.spread_ms
    out.reference_ms, out.speedup, out.speedup_ci = reference.median_ms, speed.value, speed.to_list()
    out.timing_rounds = window.rounds
    preempted = sum(window.preempted or [])
    kept = f"{window.rounds} rounds" + (f", {preempted} preempted" if preempted else "")
    message = (f"{out.latency_ms:.3f} ms (median; IQR {cand.spread_ms:.3f}), reference {out.reference_ms:.3f} ms in "
               f"the same window ({kept}); speedup {speed.value:.2f}x [{speed.low:.2f}, {speed.high:.2f}]")
    details: dict[str, Any] = {"timing": cand.to_dict(), "reference_timing": reference.to_dict(),
                               "rounds": window.rounds, "preempted": sum(window.preempted or [])}
    gain = None
    tail = ""
    if "best" in samples:
        best = summarize(samples["best"], clock, wall.get("best"))
        gain = paired_ratio(samples["best"], samples["candidate"])
        out.best_ms, out.gain, out.gain_ci, out.best_hash = best.median_ms, gain.value, gain.to_list(), best_hash
        details["best_timing"] = best.to_dict()
    elif result.get("best_error"):
        tail = f"; the task's best could not be timed beside it ({result['best_error']})"
    unread = result.get("memory") or {}
    if unread:   # the calls' outputs came from the sides themselves, not from the harness's reading
        tail += "; " + "; ".join(f"the {side}'s outputs as it reported them: {why}" for side, why in unread.items())
    flag(ref, out, cand.to_dict(), input_bytes=int(result.get("input_bytes", 0)),
         implausible_speedup=implausible_speedup)
    if "candidate" in unread:   # a `done` its own thread forged is not caught where the harness cannot read
        out.flags.append("the harness could not read the candidate's memory, so its timed calls' outputs are its "
                         "own report and its threads ran while it settled between calls: review before trusting")
    return Measured(speed, gain, message, tail, details)


def measured_cases(cases: list[tuple[int, dict[str, Any], dict[str, Any], Reference]], tolerance: Tolerance,
                   out: Outcome, *, best_hash: str = "", implausible_speedup: float = 50.0,
                   named: Sequence[dict[str, Any]] = ()) -> Measured | None:
    """A multi-case task (verifier.cases): ``cases`` holds, per case, (its index, the window's result and
    outputs, the reference restricted to that case's trials), each timed in its own window. Every case is
    read like a single task (checks, re-checks, flags); a failure in any case is the candidate's failure,
    named by case (None). Then speedup and gain over the best are geometric means over the cases of each
    case's paired ratio, with a bootstrap interval over every case's rounds, and the latencies are
    geometric means; each case is reported in the message and the details (``cases``), named by its number
    (``named``: the task's cases, ``verifier.cases.case_number``)."""
    from verifier.cases import case_geomean, case_number

    parts: list[tuple[int, Outcome, Window]] = []
    for case, result, outputs, ref in cases:
        part = Outcome.start(out.task, out.backend)
        if measured(result, outputs, ref, tolerance, part, best_hash=best_hash,
                    implausible_speedup=implausible_speedup) is None:
            assert part.failed_gate is not None
            failed = part.gate(part.failed_gate)
            out.fail(failed.name, f"case {case_number(named, case)}: {failed.message}", **failed.details)
            if failed.name != FAILED_AS:
                out.gate(FAILED_AS).status = "failed"
            return None
        out.flags += [f"case {case_number(named, case)}: {f}" for f in part.flags]
        parts.append((case, part, Window(**result["window"])))
    speed = geomean_ratio([(w.samples["reference"], w.samples["candidate"]) for _, _, w in parts])
    # every case passed its checks, so each has its times
    latency = [float(p.latency_ms or 0.0) for _, p, _ in parts]
    spread = [float(p.latency_spread_ms or 0.0) for _, p, _ in parts]
    out.latency_ms = case_geomean(latency)
    out.latency_spread_ms = out.latency_ms * max(s / max(lat, 1e-12) for s, lat in zip(spread, latency))
    out.reference_ms = case_geomean([float(p.reference_ms or 0.0) for _, p, _ in parts])
    out.speedup, out.speedup_ci = speed.value, speed.to_list()
    out.timing_rounds = min(w.rounds for _, _, w in parts)
    message = (f"{out.latency_ms:.3f} ms, reference {out.reference_ms:.3f} ms (geometric means over {len(parts)} "
               f"cases, each case in its own window); speedup {speed.value:.2f}x [{speed.low:.2f}, {speed.high:.2f}]")
    gain = None
    if all("best" in w.samples for _, _, w in parts):
        gain = geomean_ratio([(w.samples["best"], w.samples["candidate"]) for _, _, w in parts])
        out.best_ms = case_geomean([float(p.best_ms or 0.0) for _, p, _ in parts])
        out.gain, out.gain_ci, out.best_hash = gain.value, gain.to_list(), best_hash
    per_case: list[dict[str, Any]] = [
        {"case": case, "number": case_number(named, case), "latency_ms": p.latency_ms, "reference_ms": p.reference_ms,
         "speedup": p.speedup, "speedup_ci": p.speedup_ci, "gain": p.gain, "gain_ci": p.gain_ci, "rounds": w.rounds}
        for case, p, w in parts]
    # each case's figures are its own window's: the medians of each side's calls, and the median of the rounds'
    # paired ratios (not one median over the other: a round slowed for both sides cancels in its ratio)
    tail = "; " + ", ".join(f"case {c['number']}: {c['latency_ms']:.3f} ms, {c['speedup']:.2f}x" for c in per_case)
    return Measured(speed, gain, message, tail, {"cases": per_case, "rounds": out.timing_rounds})


def verdicts(m: Measured, *, min_speed_change: float, noise_limit: float = NOISE_LIMIT,
             plausible: bool = True) -> tuple[str, str]:
    """(against the reference, against the best or "") for what ``m`` measured: ``verifier.verdict.judge``."""
    against_best = "" if m.gain is None else verdict.judge(m.gain, min_speed_change, noise_limit, plausible=plausible)
    return verdict.judge(m.speed, min_speed_change, noise_limit, plausible=plausible), against_best


def settle(out: Outcome, m: Measured, *, min_speed_change: float, noise_limit: float = NOISE_LIMIT,
           plausible: bool = True, notes: tuple[str, ...] = ()) -> None:
    """The verdicts, once (``verdicts``), and the gate passed with the message that says them, then
    ``notes`` (the cases timed, a second window, the roofline)."""
    out.vs_reference, out.vs_best = verdicts(m, min_speed_change=min_speed_change, noise_limit=noise_limit,
                                             plausible=plausible)
    for case in m.details.get("cases") or []:   # a multi-case task: each case's own verdicts, by the same rule
        speed = Ratio(float(case["speedup"] or 0.0), *(case.get("speedup_ci") or [0.0, 0.0]))
        case["vs_reference"] = verdict.judge(speed, min_speed_change, noise_limit)
        gain = None if case.get("gain") is None else Ratio(float(case["gain"]), *(case.get("gain_ci") or [0.0, 0.0]))
        case["vs_best"] = "" if gain is None else verdict.judge(gain, min_speed_change, noise_limit)
    message = m.message
    if m.gain is not None:
        message += f"; {words(out.vs_best, m.gain.value, m.gain.to_list(), 'the best')} ({out.best_ms:.3f} ms)"
    message += m.tail + "".join(f"; {n}" for n in notes if n)
    out.pass_gate(FAILED_AS, message, **m.details)


def check(task: TaskSpec, ref: Reference, out: Outcome, *, measure: Measure, roofline: RooflineMeter,
          tolerance: Tolerance, config: VerifyConfig, best_hash: str = "", with_best: bool = False) -> None:
    """The whole gate (see the module's docstring): the windows, the roofline, a second window when the
    first was too noisy or the kernel above the ceiling, and the verdicts, decided once, at the end.
    ``measure`` runs one window; ``with_best``: the best is timed beside the candidate (its share of the
    cases' budget counts)."""
    cases = sorted({t.case for t in ref.trials if t.case is not None})
    flags = len(out.flags)
    window = partial(_timed, task, ref, out, cases, measure=measure, roofline=roofline, tolerance=tolerance,
                     config=config, best_hash=best_hash, with_best=with_best)
    got = window(first=True)
    if got is None:
        return
    again = ""
    if got.noisy or not got.plausible:
        fraction = float((out.roofline or {}).get("fraction") or 0.0)
        again = ("the first window was too noisy to judge" if got.noisy else
                 f"the first window put it at {100 * fraction:.0f} % of this machine's FMA ceiling")
        if not got.plausible:
            roofline.ceilings(remeasure=True)
        del out.flags[flags:]   # what the first window flagged: the second's words are the verdict's
        got = window(first=False)
        if got is None:
            return
    notes = got.notes + ([f"measured twice ({again})"] if again else [])
    if out.roofline:
        notes.append(str(out.roofline["summary"]))
        if below_floor(out.roofline):
            out.flags.append(below_floor(out.roofline))
        if not got.plausible:
            out.flags.append(f"{100 * float(out.roofline.get('fraction') or 0.0):.0f} % of this machine's FMA ceiling "
                             "after measuring the ceilings and the kernel again: impossible without skipping "
                             "work; review before trusting")
    settle(out, got.m, min_speed_change=config.min_speed_change, noise_limit=config.noise_limit,
           plausible=got.plausible, notes=tuple(notes))
    if len(cases) > 1:   # each case's times and verdicts beside its correctness (settle said the verdicts)
        out.add_case_times(got.m.details.get("cases") or [])
        timed_cases = {int(c["case"]) for c in got.m.details.get("cases") or []}
        for c in out.cases:
            c["timed"] = int(c.get("case", -1)) in timed_cases


@dataclass
class _Timed:
    """One window's measurement as the gate weighs it: what it measured, what it adds to the verdict's words,
    whether the kernel is possible on this machine's roofline and whether the window was too noisy."""

    m: Measured
    notes: list[str]
    plausible: bool
    noisy: bool


def _timed(task: TaskSpec, ref: Reference, out: Outcome, cases: list[int], *, measure: Measure,
           roofline: RooflineMeter, tolerance: Tolerance, config: VerifyConfig, best_hash: str, with_best: bool,
           first: bool) -> _Timed | None:
    """One window (each chosen case's of a multi-case task), its place on the roofline (the ceilings measured
    again after a first window under the memory floor), and whether it judges; None when a side failed (``out``
    says why)."""
    notes: list[str] = []
    if len(cases) > 1:
        m = _measured_cases(task, ref, out, cases, measure, tolerance, config, best_hash, with_best, notes)
    else:
        base = ref.restricted([i for i, t in enumerate(ref.trials) if not t.overrides][:3])
        got = measure(base, None, None)
        m = None if got is None else measured(*got, base, tolerance, out, best_hash=best_hash,
                                              implausible_speedup=config.implausible_speedup)
    if m is None:
        return None
    out.roofline = roofline.point(task, out.latency_ms) if len(cases) <= 1 and out.latency_ms else None
    if first and under_memory_floor(out, roofline):
        # the kernel or PyTorch beside it ran faster than the memory roofline's floor: the triad,
        # perhaps measured under load, is measured again (the best of all measurements is kept)
        roofline.ceilings(remeasure=True)
        out.roofline = roofline.point(task, out.latency_ms)
    noisy = verdict.NOISY in verdicts(m, min_speed_change=config.min_speed_change, noise_limit=config.noise_limit)
    return _Timed(m, notes, verdict.plausible(out.roofline), noisy)


def _measured_cases(task: TaskSpec, ref: Reference, out: Outcome, cases: list[int], measure: Measure,
                    tolerance: Tolerance, config: VerifyConfig, best_hash: str, with_best: bool, notes: list[str]
                    ) -> Measured | None:
    """A multi-case task's windows, one per chosen case (``[verifier] timed_cases``, in ``timing_order``), their
    timed rounds sharing the cases' budget; ``notes`` says which cases were not timed."""
    from verifier.cases import timing_order, untimed_dtypes

    chosen = timing_order(task.cases, cases)[:config.timed_cases] if task.cases else cases
    left_out = untimed_dtypes(task.cases, cases, chosen) if task.cases else []
    # the windows' timed rounds share the cases' budget; a side never gets more than on its own
    budget_s = min(config.timing_budget_s, config.cases_timing_budget_s / (len(chosen) * (2 + bool(with_best))))
    windows: list[tuple[int, dict[str, Any], dict[str, Any], Reference]] = []
    # every chosen case is timed, whatever the machine's load: which cases a task's speedup is the
    # mean of depends on its cases alone (8 of 44 in one run, 6 in the other for the same kernel)
    for k in chosen:
        sub = ref.restricted([i for i, t in enumerate(ref.trials) if t.case == k and not t.overrides
                              and not t.widened][:3])
        got = measure(sub, k, budget_s)
        if got is None:
            return None
        windows.append((k, *got, sub))
    windows.sort(key=lambda w: w[0])
    m = measured_cases(windows, tolerance, out, best_hash=best_hash, implausible_speedup=config.implausible_speedup,
                       named=task.cases)
    if m is None:
        return None
    timed = [w[0] for w in windows]
    if len(timed) < len(cases):
        notes.append(timed_words(timed, len(cases), config.timed_cases, task.cases, left_out))
        m.details.update(timed_cases=timed, not_timed=sorted(set(cases) - set(timed)))
    return m


def under_memory_floor(out: Outcome, roofline: RooflineMeter) -> bool:
    """Whether a memory-bound kernel, or PyTorch in its window, took less than the roofline's floor
    while the ceilings may still be low (measured fewer than ``MAX_CEILING_MEASUREMENTS`` times).
    Either is possible with data kept in a large cache, so it is not flagged; but the first reason to
    suspect is a triad measured while something else ran, and the prompts and the report divide by it."""
    point = out.roofline
    if not point or point.get("bound") != "memory" or not point.get("floor_ms"):
        return False
    ceilings = roofline.cached_ceilings() or {}
    if int(ceilings.get("measurements", 1)) >= MAX_CEILING_MEASUREMENTS:
        return False
    floor = float(point["floor_ms"])
    return any(0 < float(ms or 0) < floor for ms in (out.latency_ms, out.reference_ms))


def timed_words(timed: list[int], total: int, most: int, cases: Sequence[dict[str, Any]] = (),
                left_out: Sequence[str] = ()) -> str:
    """Which of a multi-case task's cases the windows timed, in words (by their numbers, as every case is
    shown), and the dtypes no timed case has when there were more dtypes than timed-case slots."""
    from verifier.cases import case_number

    numbers = ", ".join(f"#{case_number(cases, k)}" for k in sorted(timed))
    dtypes = ("every dtype timed at least once" if not left_out else
              f"no slot left to time {', '.join(left_out)} (raise [verifier] timed_cases to time them)")
    return (f"timed {len(timed)} of {total} cases ({numbers}): first the cases that bring a new dtype, then the "
            f"largest others, at most {most} ([verifier] timed_cases); {dtypes}; the others were checked for "
            "correctness only")


def check_call(meta: dict[str, Any], pair: dict[str, Any], ref: Reference, tolerance: Tolerance) -> str | None:
    """None when the candidate's output of one call agrees with the reference's on the same inputs."""
    expected, got = pair["expected"], pair["got"]
    what = meta.get("what", "a timed call")
    if expected.get("shapes") != got.get("shapes"):
        return f"{what}: output shapes {got.get('shapes')}, expected {expected.get('shapes')}"
    trial = int(meta.get("trial", 0))
    noise = ref.noise[trial] if trial < len(ref.noise) else [0.0] * len(expected["leaves"])
    sampled = any(e.numel() != _numel(shape) for e, shape in zip(expected["leaves"], expected.get("shapes", [])))
    # Places where the reference itself differs between two runs (a duplicate-index scatter) are not
    # compared; a sampled output's are picked at its positions (the round's ``seed`` draws them, as it drew the
    # values). Leaving such an output out whole let a kernel skip the work on every timed call (red team, #35).
    masks = ref.ignore[trial] if trial < len(getattr(ref, "ignore", [])) else None
    ignore = None
    if masks and any(m is not None for m in masks):
        shapes = expected.get("shapes") or [list(e.shape) for e in expected["leaves"]]
        positions = (pick_positions([_numel(s) for s in shapes], int(meta["seed"]), meta.get("limit"))
                     if "seed" in meta else [None] * len(shapes))
        ignore = []
        for e, m, idx, shape in zip(expected["leaves"], masks, positions, shapes):
            if m is None or tuple(m.shape) == tuple(e.shape):
                ignore.append(m)
            elif idx is not None and list(m.shape) == list(shape):
                ignore.append(m.reshape(-1)[idx])
            else:   # positions unknown: nothing can be compared
                ignore.append(torch.ones(e.shape, dtype=torch.bool))
    verdict = compare_outputs(expected, got, noise, tolerance,
                              what=what + (" (at random positions)" if sampled else ""), ignore=ignore)
    return None if isinstance(verdict, Agreement) else verdict.message


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def flag(ref: Reference, out: Outcome, timing: dict[str, Any] | None = None, *, input_bytes: int = 0,
         implausible_speedup: float = 50.0) -> None:
    """Flags for review (the verdict stands; a person or the LLM inspection looks again)."""
    if timing and timing.get("clock") == "events" and timing.get("wall_median_ms") is not None:
        gap = timing["wall_median_ms"] - timing["median_ms"]
        if gap > max(0.1, timing["median_ms"]):
            out.flags.append(f"device events saw {timing['median_ms']:.3f} ms but each call took "
                             f"{timing['wall_median_ms']:.3f} ms until the device was idle: work may run outside "
                             "the current stream; review before trusting")
    if out.speedup is not None and out.speedup > implausible_speedup:
        out.flags.append(f"speedup {out.speedup:.1f}x exceeds {implausible_speedup:g}x: review before trusting")
    # a time under the memory floor is flagged where the roofline point is made, from the same floor as its
    # summary (verifier.machine.roofline.below_floor)
