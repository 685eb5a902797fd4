"""A job's candidate and its folder: loading ``ModelNew`` with the runtime set up for its library, the
device runtime and the clock the job names, a candidate's failure in one line (``CandidateFailure``,
``_describe``), and the folder's progress and outputs files."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime, load_runtime


class CandidateFailure(Exception):
    """The candidate did something wrong at a known step; carries the stage and trial."""

    def __init__(self, stage: str, message: str, trial: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.trial = trial


def _progress(job_dir: Path, text: str) -> None:
    (job_dir / "progress.txt").write_text(text)


def _timer(job: Any, device_runtime: DeviceRuntime) -> str:
    """How calls are timed: the backend's declared method, else device events where the device has them."""
    return _field(job, "timer") or ("wall" if device_runtime.events() is None else "events")


def _field(job: Any, name: str, default: Any = None) -> Any:
    """A job's field, whether the job is a dataclass (verifier.jobs) or a plain dict (the timing job)."""
    return job.get(name, default) if isinstance(job, dict) else getattr(job, name, default)


def job_runtime(job: Any) -> DeviceRuntime:
    """The device runtime the job's backend declared (``verifier.backends.runtime_target``); one per
    job, made in the worker. A target that does not import is the worker's failure, in one line."""
    return load_runtime(_field(job, "runtime", ""))


def _load_candidate(job: Any, job_dir: Path, device_runtime: DeviceRuntime, module_name: str = "candidate_model",
                    ) -> Callable[..., torch.nn.Module]:
    """The ``ModelNew`` class the job's ``model.py`` defines, with the runtime set up for its library."""
    runtime.configure(str(job_dir / _field(job, "library")), _field(job, "signatures"), device_runtime)
    path = job_dir / (_field(job, "model") or "model.py")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CandidateFailure("correctness", f"{path.name} cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise CandidateFailure("correctness", f"importing model.py failed: {_describe(exc)}") from exc
    if not hasattr(module, "ModelNew"):
        raise CandidateFailure("correctness", "model.py defines no ModelNew")
    model_new: Callable[..., torch.nn.Module] = module.ModelNew
    return model_new


def _describe(exc: BaseException) -> str:
    """One line: exception type and message, plus where in the candidate's code it happened."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "candidate_model" in f.filename or f.filename.endswith("model.py")]
    where = f" (model.py line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}{where}"[:600]


def _save(job_dir: Path, payload: dict[str, Any]) -> None:
    tmp = job_dir / "outputs.pt.tmp"
    torch.save(payload, tmp)
    os.replace(tmp, job_dir / "outputs.pt")
