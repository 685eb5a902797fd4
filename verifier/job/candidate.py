"""A job's candidate and its folder: loading ``ModelNew`` with the runtime set up for its library, the
device runtime and the clock the job names, a candidate's failure in one line (``CandidateFailure``,
``_describe``), and the folder's progress and outputs files (``JobFiles``: opened in the job's set-up, since
the candidate's phase opens no file)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import io
import linecache
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime, load_runtime
from verifier.sandbox.seccomp import enter_candidate_phase


class CandidateFailure(Exception):
    """The candidate did something wrong at a known step; carries the stage and trial."""

    def __init__(self, stage: str, message: str, trial: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.trial = trial


class JobFiles:
    """The files a job writes (its step in flight, its outputs, its result), opened during its set-up: the
    phase in which a candidate's code runs opens no file (``verifier.sandbox.seccomp``). Each is rewritten
    whole through its descriptor."""

    NAMES = ("progress.txt", "outputs.pt", "result.json")

    def __init__(self, job_dir: Path):
        self.fds = {name: os.open(job_dir / name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) for name in self.NAMES}

    def write(self, name: str, data: bytes) -> None:
        fd = self.fds[name]
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def save(self, name: str, payload: Any) -> None:
        fd = self.fds[name]
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        with io.FileIO(fd, "wb", closefd=False) as f:
            torch.save(payload, f)


_files: dict[str, JobFiles] = {}    # the running job's (``open_job_files``), keyed by its folder


def open_job_files(job_dir: Path) -> JobFiles:
    """Open the job's files now, in its set-up; ``_progress`` and ``_save`` then write through them."""
    files = _files[str(job_dir)] = JobFiles(job_dir)
    torch.save({"picks": [torch.zeros(1)]}, io.BytesIO())   # what torch.save imports on first use, imported now
    return files


def _progress(job_dir: Path, text: str) -> None:
    files = _files.get(str(job_dir))
    if files is not None:
        files.write("progress.txt", text.encode())
    else:
        (job_dir / "progress.txt").write_text(text)


def _field(job: Any, name: str, default: Any = None) -> Any:
    """A job's field, whether the job is a dataclass (verifier.jobs) or a plain dict (the timing job)."""
    return job.get(name, default) if isinstance(job, dict) else getattr(job, name, default)


def job_runtime(job: Any) -> DeviceRuntime:
    """The device runtime the job's backend declared (``verifier.backends.runtime_target``); one per
    job, made in the worker. A target that does not import is the worker's failure, in one line."""
    return load_runtime(_field(job, "runtime", ""))


def _load_candidate(job: Any, job_dir: Path, device_runtime: DeviceRuntime, module_name: str = "candidate_model",
                    ) -> Callable[..., torch.nn.Module]:
    """The ``ModelNew`` class the job's ``model.py`` defines, with the runtime set up for its library. The
    last step of a job's set-up: the library is loaded and ``model.py`` read, then the sandbox's filter is
    narrowed for the candidate's phase (``verifier.sandbox.seccomp.enter_candidate_phase``: no file opened
    from here on) and the job stops for the harness to count its filters from outside, then ``model.py`` runs.
    Loading the library runs none of its code (the build's link check refuses load-time code), and the phase is
    entered through a name bound before it is loaded: nothing of the candidate's runs before the phase, and
    whether it was entered is the harness's reading, not this process's word."""
    enter_phase = enter_candidate_phase
    try:
        runtime.configure(str(job_dir / _field(job, "library")), _field(job, "signatures"), device_runtime)
    except OSError as exc:
        raise CandidateFailure("correctness", f"loading the kernel library failed: {_describe(exc)}") from exc
    path = job_dir / (_field(job, "model") or "model.py")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise CandidateFailure("correctness", f"{path.name} cannot be read: {exc}") from exc
    problem = enter_phase()
    if problem:   # the sandbox asked for the candidate's phase and it could not be had: nothing of it runs
        raise CandidateFailure("correctness", f"the sandbox could not narrow the job's filter for the candidate's "
                                              f"code ({problem}): a thread of the library's load-time code may "
                                              "have a filter of its own")
    spec = importlib.util.spec_from_loader(module_name, _SourceLoader(source, str(path)), origin=str(path))
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


class _SourceLoader(importlib.abc.Loader):
    """Runs a module from source read before (its file is not opened again: the candidate's phase opens none)."""

    def __init__(self, source: bytes, path: str):
        self._source, self._path = source, path

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        module.__file__ = self._path
        # its lines known to tracebacks: the file is never read again (#51: "(model.py line 8: )", no excerpt)
        text = self._source.decode(errors="replace")
        linecache.cache[self._path] = (len(text), None, text.splitlines(keepends=True), self._path)
        exec(compile(self._source, self._path, "exec"), module.__dict__)  # noqa: S102 - the sandboxed candidate


def _describe(exc: BaseException) -> str:
    """One line: exception type and message, plus where in the candidate's code it happened."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "candidate_model" in f.filename or f.filename.endswith("model.py")]
    where = f" (model.py line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}{where}"[:600]


def _save(job_dir: Path, payload: dict[str, Any]) -> None:
    files = _files.get(str(job_dir))
    if files is not None:
        files.save("outputs.pt", payload)
        return
    tmp = job_dir / "outputs.pt.tmp"
    torch.save(payload, tmp)
    os.replace(tmp, job_dir / "outputs.pt")
