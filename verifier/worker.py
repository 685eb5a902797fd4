"""The entry point of every job process (``run_job``, named by ``verifier.harness.verify.JOB_ENTRY``): it reads
the job folder's ``job.json`` (a ``verifier.jobs`` record; a window side's is still a plain dict), sets the
process up (threads, the device runtime) and runs the job's kind:

* ``reference``: the reference's outputs at every trial (``verifier.job.worker_reference``), then its own
  timing figure (``verifier.window.in_process``), in the trusted reference server;
* ``candidate``: the candidate's correctness trials (``verifier.job.correctness``), in the sandbox; it never
  sees reference outputs, the harness compares what each job wrote;
* ``side``: one side of a timing window (``verifier.window.side``).

It always writes ``result.json`` (a ``JobStatus`` envelope and the job's result fields) unless the process
itself dies; ``outputs.pt`` (tensors, loaded by the harness with ``weights_only=True``) and ``progress.txt``
(the step in flight, so a crash can be located) are the jobs' own.

Run a job by hand: ``python -m verifier.worker JOB_DIR``.
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

from verifier.backends import DeviceRuntime
from verifier.job.allocator import warm_allocator
from verifier.job.candidate import CandidateFailure, _describe, _field, job_runtime, open_job_files
from verifier.job.correctness import correctness_trials
from verifier.job.worker_reference import TaskProblem, reference_outputs
from verifier.jobs import JobStatus, ReferenceJob, load_job
from verifier.window.in_process import time_reference_alone
from verifier.window.side import _side


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


def _reference(job: ReferenceJob, job_dir: Path, device_runtime: DeviceRuntime) -> dict[str, Any]:
    """The reference job: its outputs, then its timing alone and the machine's bandwidth when asked."""
    result, module = reference_outputs(job, job_dir, device_runtime)
    time_reference_alone(job, job_dir, module, result, device_runtime)
    return result.to_dict()


HANDLERS: dict[str, Callable[[Any, Path, DeviceRuntime], dict[str, Any]]] = {
    "reference": _reference, "candidate": correctness_trials, "side": _side}


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
        print("usage: python -m verifier.worker JOB_DIR", file=sys.stderr)
        return 2
    return run_job(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
