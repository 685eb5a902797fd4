"""The candidate's correctness trials, run in a sandboxed job (``verifier.worker`` dispatches to
``correctness_trials``): every trial's outputs are saved for the harness to compare; the job never sees the
reference's outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime
from verifier.inputs import make_inputs
from verifier.job.candidate import (
    CandidateFailure,
    _describe,
    _load_candidate,
    _progress,
    _save,
)
from verifier.job.op_trace import OpTrace
from verifier.job.signals import signal_changes, signal_dispositions
from verifier.job.tensors import _changed, _identical, _snapshot, _to_device, flatten
from verifier.jobs import REPEAT_SAMPLES, CandidateJob, CandidateResult, TrialReport, pick
from verifier.task import load_task_module


def correctness_trials(job: CandidateJob, job_dir: Path, device_runtime: DeviceRuntime) -> dict[str, Any]:
    """The correctness trials, called in the order of ``job.schedule``: each instance (``Trial.instance``)
    is built at its first call, seeded like ``Model``, and dropped after its last; every call gets its
    trial's inputs afresh in the previous call's buffers where the shapes match (results kept by pointer
    go stale). A trial's first call keeps every output position, a repeated call the positions its seed
    draws (``verifier.jobs.pick``)."""
    signals = signal_dispositions()  # before any candidate code: model.py, ModelNew() and forward may not change it
    modules: dict[tuple[tuple[str, int], ...], Any] = {}
    for t in job.trials:    # during the set-up (the task is trusted): every size the trials run at
        if t.overrides not in modules:
            modules[t.overrides] = load_task_module(job.task, dict(t.overrides))
    ModelNew = _load_candidate(job, job_dir, device_runtime)
    schedule = job.schedule or [(i, 0) for i in range(len(job.trials))]
    last = {job.trials[i].instance: n for n, (i, _) in enumerate(schedule)}
    firsts: dict[int, tuple[TrialReport, dict[str, Any]]] = {}
    repeats: list[TrialReport] = []
    repeat_outputs: list[dict[str, Any]] = []
    buffers: list[Any] | None = None
    models: dict[Any, Any] = {}
    kept_inputs: dict[int, list[Any]] = {}   # a trial's inputs, while its instance has calls left
    for n, (i, seed) in enumerate(schedule):
        trial = job.trials[i]
        repeat = i in firsts
        _progress(job_dir, f"trial {i}: {trial.describe()}" + (" (called again)" if repeat else ""))
        module = modules[trial.overrides]
        if i not in kept_inputs:
            kept_inputs[i] = _to_device(make_inputs(module.get_inputs, trial), device_runtime.device)
        inputs = buffers = _refill(buffers, kept_inputs[i])
        if trial.instance not in models:
            models[trial.instance] = _instance(ModelNew, module, trial.model_seed, job.eval_mode,
                                               device_runtime.device, i)
        report, structure, leaves = _call(models[trial.instance], inputs, i, repeat, device_runtime, signals)
        if repeat or seed:
            report.trial = i
            repeats.append(report)
            repeat_outputs.append(pick(structure, leaves, seed, REPEAT_SAMPLES))
        else:
            firsts[i] = (report, {"structure": structure, "leaves": leaves})
        if last[trial.instance] == n:   # its last call: the instance and its trials' inputs go
            del models[trial.instance]
            for k in [k for k in kept_inputs if job.trials[k].instance == trial.instance]:
                del kept_inputs[k]
    order = sorted(firsts)
    _save(job_dir, {"trials": [firsts[i][1] for i in order], "repeats": repeat_outputs})
    return CandidateResult([firsts[i][0] for i in order], repeats).to_dict()


def _refill(buffers: list[Any] | None, fresh: list[Any]) -> list[Any]:
    """A call's inputs: the previous call's buffers when the shapes match, so results keyed by pointer go stale; a
    copy either way, so the kept inputs stay what the trial drew whatever a call does to its own."""
    if buffers is not None and _same_layout(buffers, fresh):
        for buf, new in zip(buffers, fresh):
            if isinstance(buf, torch.Tensor):
                buf.copy_(new)
        return buffers
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in fresh]


def _instance(model_new: Any, module: Any, seed: int, eval_mode: bool, device: str, i: int) -> Any:
    """A ``ModelNew`` seeded like ``Model`` (in eval mode when the reference is compared in it)."""
    torch.manual_seed(seed)
    try:
        model = model_new(*module.get_init_inputs()).to(device)
        if eval_mode:
            model.eval()
    except Exception as exc:
        raise CandidateFailure("correctness", f"ModelNew(*get_init_inputs()) failed: {_describe(exc)}", i) from exc
    return model


def _call(model: Any, inputs: list[Any], i: int, repeat: bool, device_runtime: DeviceRuntime,
          signals: tuple[tuple[str, str], ...]) -> tuple[TrialReport, Any, list[torch.Tensor]]:
    """One call of trial ``i``: its report (library calls, forbidden ops, inputs changed, work that escaped the
    stream, signal handlers changed), the result's structure and its leaves."""
    before = _snapshot(inputs)
    runtime.reset_calls()
    trace = OpTrace()
    try:
        with torch.no_grad(), trace:
            out = model(*inputs)
        device_runtime.stream_synchronize()
    except Exception as exc:
        again = " (called again on the same instance)" if repeat else ""
        raise CandidateFailure("correctness", f"forward raised {_describe(exc)}{again}", i) from exc
    # Read the outputs once the current stream is done (what any caller may rely on) and, on a
    # device, again after a device-wide sync: a difference is work that escaped the stream.
    structure, leaves = flatten(out)
    escaped: list[int] = []
    if device_runtime.device != "cpu":
        try:
            device_runtime.synchronize()
        except Exception as exc:
            raise CandidateFailure("correctness", f"the device failed after forward: {_describe(exc)}", i) from exc
        _, settled = flatten(out)
        escaped = [k for k, (a, b) in enumerate(zip(leaves, settled)) if not _identical(a, b)]
    report = TrialReport(calls=runtime.call_counts(), forbidden_ops=trace.forbidden(),
                         inputs_changed=_changed(before, inputs), escaped_stream=escaped,
                         signals_changed=signal_changes(signals, signal_dispositions()))
    return report, structure, leaves


def _same_layout(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        (not isinstance(x, torch.Tensor) and x == y)
        or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        for x, y in zip(a, b)
    )
