"""Jobs that run in a worker process: the reference (outputs at every trial, run twice where that
can show nondeterminism, the second shapes, timing: verifier.job.worker_reference), the candidate's
correctness trials (here) and one side of a timing window (verifier.job.side).
The candidate's jobs run in the sandbox and never see reference outputs; the harness compares
what each job wrote.

A job is a folder holding ``job.json`` (a ``verifier.jobs`` record; the timing job is still a plain
dict); the worker writes ``result.json`` (a ``JobStatus`` envelope and the job's result fields),
``outputs.pt`` (tensors, loaded by the harness with ``weights_only=True``) and ``progress.txt``
(the step in flight, so a crash can be located).

Run a job by hand: ``python -m verifier.job.worker JOB_DIR``.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime
from verifier.inputs import make_inputs
from verifier.job.allocator import warm_allocator
from verifier.job.candidate import (
    CandidateFailure,
    _describe,
    _field,
    _load_candidate,
    _progress,
    _save,
    job_runtime,
    open_job_files,
)
from verifier.job.op_trace import OpTrace
from verifier.job.side import _side
from verifier.job.signals import signal_changes, signal_dispositions
from verifier.job.tensors import _changed, _identical, _snapshot, _to_device, flatten
from verifier.job.worker_reference import TaskProblem, WriteOrder, _reference
from verifier.jobs import REPEAT_SAMPLES, CandidateJob, CandidateResult, JobStatus, TrialReport, load_job, pick
from verifier.task import load_task_module

# Callers and tests reach the shared helpers and the jobs' pieces through this module.
__all__ = ["CandidateFailure", "TaskProblem", "WriteOrder", "flatten", "main", "run_job"]

def _setup(job: Any) -> DeviceRuntime:
    """Threads, then the job's device runtime, prepared (the device selected)."""
    threads = int(_field(job, "threads", 1))
    warm_allocator()
    torch.backends.cpu.get_cpu_capability()   # reads /proc/cpuinfo on first use: in the set-up, not in a call
    # a module's first call imports torch._dynamo: in the set-up, since the candidate's phase opens no file (the
    # fork server preloads it; a spawned job's fresh interpreter imports it here)
    importlib.import_module("torch._dynamo")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    device_runtime = job_runtime(job)
    device_runtime.prepare()
    return device_runtime


# ----------------------------------------------------------------------------- reference


# A widened trial is dropped when the reference is NaN or infinite at more than this share of an
# output's places: the operator is not defined on much of the widened range (log, sqrt: about half).
def _candidate(job: CandidateJob, job_dir: Path, device_runtime: DeviceRuntime) -> dict[str, Any]:
    """The correctness trials, called in the order of ``job.schedule``: each instance (``Trial.instance``)
    is built at its first call, seeded like ``Model``, and dropped after its last; every call gets its
    trial's inputs afresh in the previous call's buffers where the shapes match (results kept by pointer
    go stale). A trial's first call keeps every output position, a repeated call the positions its seed
    draws (``verifier.jobs.pick``)."""
    spec, device = job.task, device_runtime.device
    signals = signal_dispositions()  # before any candidate code: model.py, ModelNew() and forward may not change it
    modules: dict[tuple[tuple[str, int], ...], Any] = {}
    for trial in job.trials:    # during the set-up (the task is trusted): every size the trials run at
        if trial.overrides not in modules:
            modules[trial.overrides] = load_task_module(spec, dict(trial.overrides))
    ModelNew = _load_candidate(job, job_dir, device_runtime)
    sync, stream_sync = device_runtime.synchronize, device_runtime.stream_synchronize
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
            kept_inputs[i] = _to_device(make_inputs(module.get_inputs, trial), device)
        fresh = kept_inputs[i]
        # Reuse the previous call's buffers when shapes match, so results keyed by pointer go stale; a copy
        # either way, so the kept inputs stay what the trial drew whatever a call does to its own.
        if buffers is not None and _same_layout(buffers, fresh):
            for buf, new in zip(buffers, fresh):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(new)
            inputs = buffers
        else:
            inputs = buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in fresh]
        if trial.instance not in models:
            torch.manual_seed(trial.model_seed)
            try:
                model = ModelNew(*module.get_init_inputs()).to(device)
                if job.eval_mode:
                    model.eval()
            except Exception as exc:
                raise CandidateFailure("correctness", f"ModelNew(*get_init_inputs()) failed: {_describe(exc)}",
                                       i) from exc
            models[trial.instance] = model
        model = models[trial.instance]
        before = _snapshot(inputs)
        runtime.reset_calls()
        trace = OpTrace()
        try:
            with torch.no_grad(), trace:
                out = model(*inputs)
            stream_sync()
        except Exception as exc:
            again = " (called again on the same instance)" if repeat else ""
            raise CandidateFailure("correctness", f"forward raised {_describe(exc)}{again}", i) from exc
        # Read the outputs once the current stream is done (what any caller may rely on) and, on a
        # device, again after a device-wide sync: a difference is work that escaped the stream.
        structure, leaves = flatten(out)
        escaped: list[int] = []
        if device != "cpu":
            try:
                sync()
            except Exception as exc:
                raise CandidateFailure("correctness", f"the device failed after forward: {_describe(exc)}", i) from exc
            _, settled = flatten(out)
            escaped = [k for k, (a, b) in enumerate(zip(leaves, settled)) if not _identical(a, b)]
        report = TrialReport(calls=runtime.call_counts(), forbidden_ops=trace.forbidden(),
                             inputs_changed=_changed(before, inputs), escaped_stream=escaped,
                             signals_changed=signal_changes(signals, signal_dispositions()))
        del out
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


def _same_layout(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        (not isinstance(x, torch.Tensor) and x == y)
        or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        for x, y in zip(a, b)
    )


HANDLERS: dict[str, Callable[[Any, Path, DeviceRuntime], dict[str, Any]]] = {
    "reference": _reference, "candidate": _candidate, "side": _side}


def run_job(job_dir: Path) -> int:
    """Run the job in ``job_dir``; always writes result.json unless the process itself dies."""
    job = load_job(job_dir)
    random.seed(0)
    status = JobStatus()
    fields: dict[str, Any] = {}
    files = open_job_files(job_dir)
    try:
        device_runtime = _setup(job)
        handler = HANDLERS[_field(job, "kind")]
        fields = handler(job, job_dir, device_runtime)
        status.ok = True
    except CandidateFailure as exc:
        status.stage, status.error, status.trial = exc.stage, str(exc), exc.trial
    except TaskProblem as exc:
        status.stage, status.error = "task", str(exc)
    except Exception as exc:  # the task or the candidate raised somewhere we did not expect
        status.stage, status.error, status.traceback = "worker", _describe(exc), traceback.format_exc()[-4000:]
    files.write("result.json", json.dumps({**fields, **asdict(status)}).encode())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m verifier.job.worker JOB_DIR", file=sys.stderr)
        return 2
    return run_job(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
