"""Gate 4, correctness: the trial plan of one verification and the verdict on what the candidate's
sandboxed job returned, against the reference's outputs (which the candidate never sees).

The plan (fresh seeds from the operating system every time, see verifier.inputs): ``trials`` at the
task's own shape over its own range (the task's draw, uniform, heavy-tailed, a spike), two widened
ones (sign-symmetric, at the task's magnitude and at 8x it) unless the task sets
``WIDEN_INPUTS = False``, then a smaller and a larger second shape when the reference accepts them; a multi-case task
(verifier.cases) runs that plan on each of its cases instead of second shapes.

The verdict, trial by trial: the run-time anti-hack checks first (signal handling changed, PyTorch
compute in forward, a library never called, work escaping the stream: these fail ``anti_hack``), then
inputs unchanged, then the outputs (verifier.harness.compare). Every failure names its trial
(distribution, seed, shape).
What the reference itself could not decide is said in the verdict: widened trials dropped (the
task's precondition), places where two runs of the reference differ (not compared), eval mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifier.harness.compare import Agreement, compare_outputs
from verifier.harness.reference import Reference
from verifier.inputs import Trial, case_trials, shape_trial, trial_plan
from verifier.jobs import CandidateResult, ShapeSearch
from verifier.task import TaskSpec, alt_shape_candidates, larger_shape_candidates, widen_inputs
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
    """This verification's trials and the second shapes for the reference to look for."""
    base = trial_plan(trials, widen=widen_inputs(task.source))
    if task.cases:  # a multi-case task's own cases replace the second shapes
        return case_trials(base, len(task.cases)), []
    shapes: list[ShapeSearch] = []
    if second_shape:
        for kind, candidates in (("smaller", alt_shape_candidates(task.source, task.size_overrides)),
                                 ("larger", larger_shape_candidates(task.source, task.size_overrides))):
            if candidates:
                shapes.append(ShapeSearch(kind, candidates, shape_trial(kind, {})))
    return base, shapes


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
    elif "larger" not in kinds:
        lines.append("no larger second shape: the reference accepts none within the limits")
    return lines


def judge(ref: Reference, result: CandidateResult, outputs: dict[str, Any],
          tolerance: Tolerance, cases: tuple[dict[str, Any], ...] = ()) -> Verdict:
    """The verdict on the candidate's trials (``result``, ``outputs`` from its job) against ``ref``.
    A multi-case task (``cases``, the spec's) is judged case by case: every case's trials are compared,
    the verdict's ``details["cases"]`` holds each case's own verdict (its inputs, correct or not, its largest
    error, the first failure's words), and a failure names its case with its shapes and dtypes."""
    from verifier.cases import describe_case

    max_abs = max_rel = 0.0
    said = notes(ref)
    suffix = ("; " + "; ".join(said)) if said else ""
    per_case: dict[int, dict[str, Any]] = {}
    first_failure: Verdict | None = None
    for i, (trial, report) in enumerate(zip(ref.trials, result.trials)):
        what = f"trial {i + 1} ({trial.describe()})"
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
        k = trial.case if cases and trial.case is not None and 0 <= trial.case < len(cases) else None
        if k is not None and k not in per_case:
            per_case[k] = {"case": k, "inputs": describe_case(cases[k]), "correct": True, "max_abs_error": 0.0,
                           "max_rel_error": 0.0, "trials": 0}
        entry = per_case.get(k) if k is not None else None
        if entry is not None and not entry["correct"]:
            continue   # this case has failed already: its first failure is what it says
        where = f"case {k + 1} ({per_case[k]['inputs']}), " if k is not None else ""
        failure: Verdict | None = None
        if report.inputs_changed:
            failure = Verdict(False, f"{where}{what}: forward modified input {report.inputs_changed[0]} in place; "
                                     "inputs must be left unchanged", trial=i)
        else:
            ignore = ref.ignore[i] if i < len(ref.ignore) else None
            verdict = compare_outputs(ref.outputs[i], outputs["trials"][i], ref.noise[i], tolerance, what=what,
                                      ignore=ignore, undefined_ok=trial.widened)
            if isinstance(verdict, Agreement):
                max_abs, max_rel = max(max_abs, verdict.max_abs_error), max(max_rel, verdict.max_rel_error)
                if entry is not None:
                    entry["trials"] += 1
                    entry["max_abs_error"] = max(entry["max_abs_error"], verdict.max_abs_error)
                    entry["max_rel_error"] = max(entry["max_rel_error"], verdict.max_rel_error)
            else:
                failure = Verdict(False, where + verdict.message, trial=i, max_abs_error=verdict.max_abs_error,
                                  max_rel_error=verdict.max_rel_error)
        if failure is None:
            continue
        if entry is None:
            failure.message += suffix
            return failure
        entry.update(correct=False, message=failure.message, max_abs_error=failure.max_abs_error,
                     max_rel_error=failure.max_rel_error, trial=i)
        first_failure = first_failure or failure
    verdicts = [per_case[k] for k in sorted(per_case)]
    if first_failure is not None:
        bad = [c for c in verdicts if not c["correct"]]
        first_failure.message += (f"; {len(bad)} of {len(verdicts)} cases failed: "
                                  + ", ".join(f"case {c['case'] + 1} ({c['inputs']})" for c in bad[:6])
                                  + (", ..." if len(bad) > 6 else "") + suffix)
        first_failure.details = {"cases": verdicts}
        return first_failure
    if len(result.trials) < len(ref.trials):
        return Verdict(False, f"the candidate's job reported {len(result.trials)} of {len(ref.trials)} trials")
    details: dict[str, Any] = {"trials": len(ref.trials), "reference_notes": said}
    if verdicts:
        details["cases"] = verdicts
    return Verdict(True, f"{len(ref.trials)} trials agree; max abs error {max_abs:.2e}{suffix}",
                   max_abs_error=max_abs, max_rel_error=max_rel, details=details)
