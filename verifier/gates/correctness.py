"""Gate 4, correctness: the trial plan of one verification and the verdict on what the candidate's
sandboxed job returned, against the reference's outputs (which the candidate never sees).

The plan (fresh seeds from the operating system every time, see verifier.inputs): ``trials`` at the
task's own shape over its own range (the task's draw, uniform, heavy-tailed, a spike), two widened
ones (sign-symmetric, at the task's magnitude and at 8x it) unless the task sets
``WIDEN_INPUTS = False``, then a smaller, a larger and a tiny second shape when the reference accepts them, their
sizes' remainders drawn afresh (so a mishandled vector tail shows); a multi-case task (verifier.cases) runs that
plan on each of its cases instead of second shapes. The job calls every instance more than once, in an order
drawn here (``call_schedule``).

The verdict, trial by trial: the run-time anti-hack checks first (signal handling changed, PyTorch
compute in forward, a library never called, work escaping the stream: these fail ``anti_hack``), then
inputs unchanged, then the outputs (verifier.compare). Every failure names its trial
(distribution, seed, shape).
What the reference itself could not decide is said in the verdict: widened trials dropped (the
task's precondition), places where two runs of the reference differ (not compared), eval mode.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field
from typing import Any

from verifier.compare import Agreement, compare_outputs, compare_picked
from verifier.inputs import Trial, case_trials, shape_trial, trial_plan
from verifier.jobs import REPEAT_SAMPLES, CandidateResult, ShapeSearch, TrialReport
from verifier.reference import Reference
from verifier.task import TaskSpec, second_shape_candidates, widen_inputs
from verifier.tolerance import Tolerance


@dataclass
class Verdict:
    """The gate's decision: passed, or the gate that failed (``correctness`` or ``anti_hack``) and why."""

    passed: bool
    message: str
    gate: str = "correctness"
    trial: int | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


def plan(task: TaskSpec, trials: int, second_shape: bool) -> tuple[list[Trial], list[ShapeSearch]]:
    """This verification's trials and the second shapes for the reference to look for (their sizes drawn
    afresh: ``verifier.task.second_shape_candidates``)."""
    base = trial_plan(trials, widen=widen_inputs(task.source))
    if task.cases:  # a multi-case task's own cases replace the second shapes
        return case_trials(base, len(task.cases)), []
    shapes: list[ShapeSearch] = []
    if second_shape:
        for kind, candidates in second_shape_candidates(task.source, task.size_overrides).items():
            shapes.append(ShapeSearch(kind, candidates, shape_trial(kind, {})))
    return base, shapes


# At most this many instances are alive at once in a correctness job (each holds its parameters).
LIVE_INSTANCES = 3


def call_schedule(trials: list[Trial], rng: random.Random | None = None) -> list[tuple[int, int]]:
    """The order in which the candidate's job calls its trials (``verifier.jobs.CandidateJob.schedule``),
    drawn from the operating system (``rng`` for tests): every trial once, and every instance
    (``Trial.instance``) once or twice more on one of its trials' inputs, so no instance can tell a checked
    call by its count; the instances interleaved at random, at most ``LIVE_INSTANCES`` alive at once. A
    trial's first call is (trial, 0); a repeated one carries the seed of the positions it keeps."""
    rng = rng if rng is not None else random.Random(secrets.randbits(64))
    groups: dict[Any, list[int]] = {}
    for i, trial in enumerate(trials):
        groups.setdefault(trial.instance, []).append(i)
    pending = []
    for members in groups.values():
        calls = [*members, *(rng.choice(members) for _ in range(rng.choice((1, 2))))]
        rng.shuffle(calls)
        pending.append(calls)
    rng.shuffle(pending)
    live: list[list[int]] = []
    order: list[tuple[int, int]] = []
    seen: set[int] = set()
    while pending or live:
        if pending and (not live or (len(live) < LIVE_INSTANCES and rng.random() < 0.5)):
            live.append(pending.pop())
        calls = rng.choice(live)
        i = calls.pop()
        order.append((i, rng.getrandbits(62) | 1 if i in seen else 0))
        seen.add(i)
        if not calls:
            live.remove(calls)
    return order


def notes(ref: Reference) -> list[str]:
    """What the verdict says about the reference itself, one line each."""
    lines = []
    if ref.eval_mode:
        lines.append(ref.eval_mode)
    lines += ref.nondeterministic
    lines += [f"widened trial {d}" for d in ref.dropped]
    cases = len({t.case for t in ref.trials if t.case is not None})
    kinds = {t.shape for t in ref.trials if t.overrides}
    if cases:
        lines.append(f"over {cases} cases")
    elif not kinds:
        lines.append("no second shape: the reference accepts none")
    else:
        if "larger" not in kinds:
            lines.append("no larger second shape: the reference accepts none within the limits")
        if "tiny" not in kinds:
            lines.append("no tiny second shape: the reference accepts none")
    return lines


def _run_time_problem(report: TrialReport, what: str, i: int) -> Verdict | None:
    """The run-time anti-hack checks of one call (they fail ``anti_hack``), or None."""
    if report.signals_changed:
        return Verdict(False, f"the kernel changed signal handling ({', '.join(report.signals_changed[:4])}): "
                              "kernels may not install handlers or timers", "anti_hack", i)
    if report.forbidden_ops:
        listed = ", ".join(f"aten.{k} x{v}" for k, v in sorted(report.forbidden_ops.items()))
        return Verdict(False, f"forward ran PyTorch compute ({listed}): the kernel must do the work", "anti_hack",
                       i, details={"dynamic": report.forbidden_ops})
    if not report.calls:
        return Verdict(False, "forward never called the kernel library: the result must come from your kernels",
                       "anti_hack", i)
    if report.escaped_stream:
        return Verdict(False, f"{what}: output {report.escaped_stream[0]} changed after the current stream had "
                              "finished: the kernel's work ran outside the stream passed to the launcher (a side "
                              "stream or the per-thread default stream); launch on that stream", "anti_hack", i)
    return None


def judge(ref: Reference, result: CandidateResult, outputs: dict[str, Any],
          tolerance: Tolerance, cases: tuple[dict[str, Any], ...] = (),
          schedule: list[tuple[int, int]] | None = None) -> Verdict:
    """The verdict on the candidate's trials (``result``, ``outputs`` from its job) against ``ref``: each
    trial's first call, then every repeated call of ``schedule`` (the order the harness gave the job) at the
    positions its seed draws. A multi-case task (``cases``, the spec's) is judged case by case: every case's
    trials are compared, the verdict's ``details["cases"]`` holds each case's own verdict (its inputs, correct
    or not, its largest error, the first failure's words), and a failure names its case with its shapes and
    dtypes."""
    said = notes(ref)
    suffix = ("; " + "; ".join(said)) if said else ""
    repeats = [(i, seed) for i, seed in (schedule or []) if seed]
    if len(result.trials) < len(ref.trials) or len(result.repeats) != len(repeats):
        return Verdict(False, f"the candidate's job reported {len(result.trials)} of {len(ref.trials)} trials and "
                              f"{len(result.repeats)} of {len(repeats)} repeated calls")
    max_abs = max_rel = 0.0
    per_case: dict[int, dict[str, Any]] = {}
    first_failure: Verdict | None = None
    for i, seed, report, got, what in _numbered_calls(ref, result, outputs, schedule or [], repeats, bool(cases)):
        if seed and report.trial != i:
            return Verdict(False, f"the candidate's job called trial {report.trial + 1} where the harness asked for "
                                  f"trial {i + 1}", trial=i)
        problem = _run_time_problem(report, what, i)
        if problem is not None:
            return problem
        entry = _case_entry(per_case, cases, ref.trials[i].case)
        if entry is not None and not entry["correct"]:
            continue   # this case has failed already: its first failure is what it says
        where = f"case {entry['number']} ({entry['inputs']}), " if entry is not None else ""
        found = _check_call(ref, i, seed, report, got, what, where, tolerance)
        if isinstance(found, Agreement):
            max_abs, max_rel = max(max_abs, found.max_abs_error), max(max_rel, found.max_rel_error)
            if entry is not None and not seed:
                entry["trials"] += 1
                entry["max_abs_error"] = max(entry["max_abs_error"], found.max_abs_error)
                entry["max_rel_error"] = max(entry["max_rel_error"], found.max_rel_error)
            continue
        if entry is None:
            found.message += suffix
            return found
        entry.update(correct=False, message=found.message, max_abs_error=found.max_abs_error,
                     max_rel_error=found.max_rel_error, trial=i)
        first_failure = first_failure or found
    return _overall(ref, [per_case[k] for k in sorted(per_case)], first_failure, len(repeats), said, suffix,
                    max_abs, max_rel)


def _numbered_calls(ref: Reference, result: CandidateResult, outputs: dict[str, Any], schedule: list[tuple[int, int]],
                    repeats: list[tuple[int, int]], cases: bool = False
                    ) -> list[tuple[int, int, TrialReport, Any, str]]:
    """Every call to judge, (trial, seed, its report, its outputs, how a verdict names it): each trial's first
    call, then the repeated ones; a call after an instance's first says which of its calls it was. With ``cases``
    the verdict names the case (by its number, ``verifier.cases.case_number``), the trial does not again."""
    calls = [(i, 0, report, outputs["trials"][i]) for i, report in enumerate(result.trials[:len(ref.trials)])]
    calls += [(i, seed, report, got) for (i, seed), report, got in zip(repeats, result.repeats, outputs["repeats"])]
    nth: dict[tuple[int, int], int] = {}     # each call's number among its instance's calls
    counted: dict[Any, int] = {}
    for i, seed in schedule:
        counted[ref.trials[i].instance] = nth[(i, seed)] = counted.get(ref.trials[i].instance, 0) + 1
    named = []
    for i, seed, report, got in calls:
        what = f"trial {i + 1} ({ref.trials[i].describe(case=not cases)})"
        if nth.get((i, seed), 1) > 1:
            what += f", the same instance's call {nth[(i, seed)]}" + (" (called again)" if seed else "")
        named.append((i, seed, report, got, what))
    return named


def _case_entry(per_case: dict[int, dict[str, Any]], cases: tuple[dict[str, Any], ...], case: int | None
                ) -> dict[str, Any] | None:
    """The verdict of the trial's case of a multi-case task (made at its first trial), None for a task of one."""
    from verifier.cases import case_number, describe_case

    if not cases or case is None or not 0 <= case < len(cases):
        return None
    if case not in per_case:
        per_case[case] = {"case": case, "number": case_number(cases, case), "inputs": describe_case(cases[case]),
                          "correct": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "trials": 0}
    return per_case[case]


def _check_call(ref: Reference, i: int, seed: int, report: TrialReport, got: Any, what: str, where: str,
                tolerance: Tolerance) -> Verdict | Agreement:
    """One call's outputs against the reference's (at the positions its seed draws, for a repeated call), once
    its inputs are seen unchanged."""
    trial = ref.trials[i]
    if report.inputs_changed:
        return Verdict(False, f"{where}{what}: forward modified input {report.inputs_changed[0]} in place; "
                              "inputs must be left unchanged", trial=i)
    ignore = ref.ignore[i] if i < len(ref.ignore) else None
    if seed:
        found = compare_picked(ref.outputs[i], got, seed, REPEAT_SAMPLES, ref.noise[i], tolerance,
                               what=what, ignore=ignore, undefined_ok=trial.widened)
    else:
        found = compare_outputs(ref.outputs[i], got, ref.noise[i], tolerance, what=what,
                                ignore=ignore, undefined_ok=trial.widened)
    if isinstance(found, Agreement):
        return found
    return Verdict(False, where + found.message, trial=i, max_abs_error=found.max_abs_error,
                   max_rel_error=found.max_rel_error)


def _overall(ref: Reference, verdicts: list[dict[str, Any]], first_failure: Verdict | None, repeats: int,
             said: list[str], suffix: str, max_abs: float, max_rel: float) -> Verdict:
    """The gate's verdict: a multi-case task's first failure with every failed case named, else all agree."""
    if first_failure is not None:
        bad = [c for c in verdicts if not c["correct"]]
        first_failure.message += (f"; {len(bad)} of {len(verdicts)} cases failed: "
                                  + ", ".join(f"case {c['number']} ({c['inputs']})" for c in bad[:6])
                                  + (", ..." if len(bad) > 6 else "") + suffix)
        first_failure.details = {"cases": verdicts}
        return first_failure
    details: dict[str, Any] = {"trials": len(ref.trials), "repeated_calls": repeats, "reference_notes": said}
    if verdicts:
        details["cases"] = verdicts
    again = f" (and {repeats} repeated calls)" if repeats else ""
    return Verdict(True, f"{len(ref.trials)} trials agree{again}; max abs error {max_abs:.2e}{suffix}",
                   max_abs_error=max_abs, max_rel_error=max_rel, details=details)
