"""Gate 5, performance: what the timing window says, and whether every timed call was right.

The harness (``verifier.harness.window``) times the reference, the candidate and, when refining, the task's
best interleaved in one window, each in its own process, on the same fresh inputs per round. Here:

- every timed round's candidate output is compared with the reference's output *on the same
  inputs* at random positions, and the two calls after timing at every position (a kernel that
  cheats on some calls, stops working, or replays a result fails, whichever call it picks);
- the op trace and the launcher count of every timed call (PyTorch compute, or a call that skips the
  library, fails the anti-hack gate);
- speedup = reference / candidate and gain = best / candidate: the median over the window's rounds
  of the two calls' ratio in each round (adjacent calls share the machine's load of the moment),
  each with a bootstrap interval over the rounds, judged by ``verifier.verdict`` ("faster"/"slower" only
  when the interval excludes 1 and the change is at least ``min_speed_change``; "noisy" when it reaches
  further than ``noise_limit`` from equal speed; else "same speed");
- flags for review: implausible speedups, latencies below the memory-bandwidth floor, device event
  times far below the wall clock (work outside the current stream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from verifier.harness.compare import Agreement, compare_outputs
from verifier.outcome import Outcome
from verifier.tolerance import Tolerance
from verifier.verdict import NOISE_LIMIT, words
from verifier.verdict import judge as verdict_of
from verifier.window_stats import Window, geomean_ratio, paired_ratio, summarize

if TYPE_CHECKING:
    from verifier.harness.reference import Reference

FAILED_AS = "performance"


def fail_pytorch_compute(out: Outcome, ops: dict[str, int], message: str) -> None:
    """Fail the anti-hack gate for the aten ops the op trace saw (``{ops}`` in ``message`` lists them)."""
    listed = ", ".join(f"aten.{k} x{v}" for k, v in sorted(ops.items()))
    out.fail("anti_hack", message.format(ops=listed))
    out.gate("anti_hack").details["dynamic"] = ops


def judge(result: dict[str, Any], outputs: dict[str, Any], ref: Reference, tolerance: Tolerance, out: Outcome, *,
          min_speed_change: float, implausible_speedup: float, best_hash: str = "",
          noise_limit: float = NOISE_LIMIT) -> None:
    """Decide the performance gate from the perf job's ``result`` and ``outputs`` (see module doc)."""
    if result.get("signals_changed"):
        out.fail("anti_hack", f"the kernel changed signal handling ({', '.join(result['signals_changed'][:4])}) "
                              "in the timing window: kernels may not install handlers or timers")
        out.gate("performance").status = "failed"
        return
    forbidden = [ops for ops in result.get("forbidden", []) if ops]
    if forbidden:
        ops: dict[str, int] = {}
        for found in forbidden:
            for name, n in found.items():
                ops[name] = ops.get(name, 0) + n
        fail_pytorch_compute(out, ops, f"on {len(forbidden)} of {len(result['forbidden'])} calls in the timing window, "
                                       "forward ran PyTorch compute ({ops}): the kernel must do the work on every call")
        out.gate("performance").status = "failed"
        return
    skipped = sum(1 for calls in result.get("calls", []) if not any(calls.values()))
    if skipped:
        out.fail("anti_hack", f"on {skipped} of {len(result['calls'])} calls in the timing window, forward did not "
                              "call the kernel library: every call's result must come from your kernels")
        out.gate("performance").status = "failed"
        return
    for meta, pair in zip(result.get("checks", []), outputs.get("checks", [])):
        problem = check_call(meta, pair, ref, tolerance)
        if problem:
            out.fail("correctness", f"a call's outputs, taken the moment it reported done, were not the reference's: "
                                    f"{problem}. Every call must compute from its inputs and be "
                                    "finished when it reports done: no results kept from earlier calls, no calls done "
                                    "partly or after")
            out.gate("performance").status = "failed"
            return

    window = Window(**result["window"])
    samples, wall, clock = window.samples, window.wall, window.clock
    cand = summarize(samples["candidate"], clock, wall.get("candidate"))
    reference = summarize(samples["reference"], clock, wall.get("reference"))
    speed = paired_ratio(samples["reference"], samples["candidate"])
    out.latency_ms, out.latency_spread_ms = cand.median_ms, cand.spread_ms
    out.reference_ms, out.speedup, out.speedup_ci = reference.median_ms, speed.value, speed.to_list()
    out.vs_reference = verdict_of(speed, min_speed_change, noise_limit)
    out.timing_rounds = window.rounds
    preempted = sum(window.preempted or [])
    kept = f"{window.rounds} rounds" + (f", {preempted} preempted" if preempted else "")
    message = (f"{out.latency_ms:.3f} ms (median; IQR {cand.spread_ms:.3f}), reference {out.reference_ms:.3f} ms in "
               f"the same window ({kept}); speedup {speed.value:.2f}x [{speed.low:.2f}, {speed.high:.2f}]")
    details: dict[str, Any] = {"timing": cand.to_dict(), "reference_timing": reference.to_dict(),
                               "rounds": window.rounds, "preempted": sum(window.preempted or [])}
    if "best" in samples:
        best = summarize(samples["best"], clock, wall.get("best"))
        gain = paired_ratio(samples["best"], samples["candidate"])
        out.best_ms, out.gain, out.gain_ci = best.median_ms, gain.value, gain.to_list()
        out.vs_best, out.best_hash = verdict_of(gain, min_speed_change, noise_limit), best_hash
        message += f"; {words(out.vs_best, gain.value, gain.to_list(), 'the best')} ({out.best_ms:.3f} ms)"
        details["best_timing"] = best.to_dict()
    elif result.get("best_error"):
        message += f"; the task's best could not be timed beside it ({result['best_error']})"
    unread = result.get("memory") or {}
    if unread:   # the calls' outputs came from the sides themselves, not from the harness's reading
        message += "; " + "; ".join(f"the {side}'s outputs as it reported them: {why}" for side, why in unread.items())
    flag(ref, out, cand.to_dict(), input_bytes=int(result.get("input_bytes", 0)),
         implausible_speedup=implausible_speedup)
    if "candidate" in unread:   # a `done` its own thread forged is not caught where the harness cannot read
        out.flags.append("the harness could not read the candidate's memory, so its timed calls' outputs are its "
                         "own report: review before trusting")
    out.pass_gate("performance", message, **details)


def judge_cases(cases: list[tuple[int, dict[str, Any], dict[str, Any], Reference]], tolerance: Tolerance,
                out: Outcome, *, min_speed_change: float, implausible_speedup: float, best_hash: str = "",
                noise_limit: float = NOISE_LIMIT) -> None:
    """A multi-case task (verifier.cases): ``cases`` holds, per case, (its index, the perf job's result
    and outputs, the reference restricted to that case's trials), each timed in its own window. Every
    case is judged like a single task (checks, re-checks, flags); a failure in any case is the
    candidate's failure, named by case. Then speedup and gain over the best are geometric means over
    the cases of each case's paired ratio, with a bootstrap interval over every case's rounds, and the
    latencies are geometric means; each case is reported in the gate's message and details."""
    from verifier.cases import case_geomean

    parts: list[tuple[int, Outcome, Window]] = []
    for case, result, outputs, ref in cases:
        part = Outcome.start(out.task, out.backend)
        judge(result, outputs, ref, tolerance, part, min_speed_change=min_speed_change,
              implausible_speedup=implausible_speedup, best_hash=best_hash, noise_limit=noise_limit)
        if part.failed_gate is not None:
            failed = part.gate(part.failed_gate)
            out.fail(failed.name, f"case {case + 1}: {failed.message}", **failed.details)
            if failed.name != FAILED_AS:
                out.gate(FAILED_AS).status = "failed"
            return
        out.flags += [f"case {case + 1}: {f}" for f in part.flags]
        parts.append((case, part, Window(**result["window"])))
    speed = geomean_ratio([(w.samples["reference"], w.samples["candidate"]) for _, _, w in parts])
    # every case passed its gate, so each has its times
    latency = [float(p.latency_ms or 0.0) for _, p, _ in parts]
    spread = [float(p.latency_spread_ms or 0.0) for _, p, _ in parts]
    out.latency_ms = case_geomean(latency)
    out.latency_spread_ms = out.latency_ms * max(s / max(lat, 1e-12) for s, lat in zip(spread, latency))
    out.reference_ms = case_geomean([float(p.reference_ms or 0.0) for _, p, _ in parts])
    out.speedup, out.speedup_ci = speed.value, speed.to_list()
    out.vs_reference = verdict_of(speed, min_speed_change, noise_limit)
    out.timing_rounds = min(w.rounds for _, _, w in parts)
    message = (f"{out.latency_ms:.3f} ms, reference {out.reference_ms:.3f} ms (geometric means over {len(parts)} "
               f"cases, each case in its own window); speedup {speed.value:.2f}x [{speed.low:.2f}, {speed.high:.2f}]")
    if all("best" in w.samples for _, _, w in parts):
        gain = geomean_ratio([(w.samples["best"], w.samples["candidate"]) for _, _, w in parts])
        out.best_ms = case_geomean([float(p.best_ms or 0.0) for _, p, _ in parts])
        out.gain, out.gain_ci, out.vs_best = gain.value, gain.to_list(), verdict_of(gain, min_speed_change, noise_limit)
        out.best_hash = best_hash
        message += f"; {words(out.vs_best, gain.value, gain.to_list(), 'the best')} ({out.best_ms:.3f} ms)"
    per_case: list[dict[str, Any]] = [
        {"case": case, "latency_ms": p.latency_ms, "reference_ms": p.reference_ms, "speedup": p.speedup,
         "speedup_ci": p.speedup_ci, "vs_reference": p.vs_reference, "gain": p.gain, "gain_ci": p.gain_ci,
         "vs_best": p.vs_best, "rounds": w.rounds} for case, p, w in parts]
    message += "; " + ", ".join(f"case {c['case'] + 1}: {c['latency_ms']:.3f} ms, {c['speedup']:.2f}x"
                                for c in per_case)
    out.pass_gate(FAILED_AS, message, cases=per_case, rounds=out.timing_rounds)


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
    # compared; a sampled output has lost its positions, so such an output is not compared at all.
    masks = ref.ignore[trial] if trial < len(getattr(ref, "ignore", [])) else None
    ignore = None
    if masks and any(m is not None for m in masks):
        ignore = []
        for e, m in zip(expected["leaves"], masks):
            whole = m is not None and tuple(m.shape) == tuple(e.shape)
            ignore.append(None if m is None else m if whole else torch.ones(e.shape, dtype=torch.bool))
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
