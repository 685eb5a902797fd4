"""What every worker job shares (see verifier.job.worker): the candidate's op trace and failures, how
results are flattened and inputs moved, the device runtime a job names (its clock and
synchronisation are the backend's: ``verifier.backends.base.DeviceRuntime``), loading a
candidate's model, and the job folder's progress and outputs files."""

from __future__ import annotations

import copy
import ctypes
import importlib.abc
import importlib.util
import io
import os
import signal
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from verifier import runtime
from verifier.backends import DeviceRuntime, load_runtime
from verifier.sandbox.seccomp import enter_candidate_phase

if TYPE_CHECKING:
    from torch._ops import OpOverload

# aten ops a candidate's forward may run: allocation, views, copies and fills. Anything else is
# PyTorch doing the computation the kernel should do.
ALLOWED_OPS = frozenset(
    """empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
    new_ones full full_like new_full zero_ fill_ view _unsafe_view reshape _reshape_alias as_strided t
    transpose permute expand expand_as squeeze unsqueeze flatten unflatten select slice narrow split
    split_with_sizes chunk unbind detach alias clone contiguous copy_ _to_copy to lift_fresh
    lift_fresh_copy view_as resize_ diagonal unfold movedim _local_scalar_dense item sym_size sym_stride
    sym_numel sym_storage_offset is_contiguous set_ _has_compatible_shallow_copy_type""".split()
)


class CandidateFailure(Exception):
    """The candidate did something wrong at a known step; carries the stage and trial."""

    def __init__(self, stage: str, message: str, trial: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.trial = trial


# torch's TorchDispatchMode has no annotations (its __init_subclass__ and __init__ are untyped calls)
class OpTrace(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the aten ops run while active."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def forbidden(self) -> dict[str, int]:
        return {name: n for name, n in self.ops.items() if name not in ALLOWED_OPS}

    def start(self) -> OpTrace:
        """Enter the trace outside a ``with`` (a side arms it before the harness's clock starts)."""
        self.__enter__()  # type: ignore[no-untyped-call]
        return self

    def stop(self) -> None:
        self.__exit__(None, None, None)  # type: ignore[no-untyped-call]


# ----------------------------------------------------------------------------- signal handling

_ITIMERS = ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
_sigaction = None


def _handler_of(sig: int) -> int | None:
    """The address of ``sig``'s handler (0 default, 1 ignored), queried from libc; None where libc does
    not answer (glibc's own real-time signals)."""
    global _sigaction
    if _sigaction is None:
        _sigaction = ctypes.CDLL(None, use_errno=True).sigaction
        _sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    old = ctypes.create_string_buffer(512)      # a struct sigaction, whatever its size: the handler is first
    if _sigaction(sig, None, old) != 0:
        return None
    return ctypes.c_void_p.from_buffer(old).value or 0


def _proc_dispositions() -> dict[int, int] | None:
    """{signal: 1 ignored, 2 caught} from /proc/self/status (SigIgn, SigCgt), or None."""
    try:
        fields = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        ignored, caught = int(fields["SigIgn"], 16), int(fields["SigCgt"], 16)
    except (OSError, KeyError, ValueError):
        return None
    return {n: 2 if caught >> (n - 1) & 1 else 1 if ignored >> (n - 1) & 1 else 0 for n in range(1, signal.NSIG)}


def signal_dispositions() -> tuple[tuple[str, str], ...]:
    """How this process handles signals now, for comparing before and after candidate code runs: a
    tuple of (what, state) pairs, in signal order: ``("SIGALRM", "default" | "ignored" | "caught 0x...")``
    (the handler's address, so a replaced handler shows too), ``("SIGUSR2", "blocked")`` for each signal
    the calling thread blocks, ``("ITIMER_REAL", "armed")`` for each armed interval timer. Two results
    are equal unless a handler, the mask or a timer changed in between; ``signal_changes`` says how.
    Handlers are queried from libc (about 64 sigaction calls, tens of microseconds); without it from
    /proc/self/status (caught or not, no address), else from ``signal.getsignal`` (Python's own view)."""
    names = {s.value: s.name for s in signal.Signals}
    state: list[tuple[str, str]] = []
    proc = None
    for sig in range(1, signal.NSIG):
        name = names.get(sig, f"signal {sig}")
        try:
            handler = _handler_of(sig)
        except (OSError, AttributeError):
            proc = proc if proc is not None else _proc_dispositions() or {}
            handler = proc.get(sig)
            if handler is None and sig in names:
                python = signal.getsignal(sig)
                handler = 0 if python in (signal.SIG_DFL, None) else 1 if python == signal.SIG_IGN else id(python)
        if handler is not None:
            state.append((name, "default" if handler == 0 else "ignored" if handler == 1 else f"caught {handler:#x}"))
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    state += [(names.get(int(s), f"signal {int(s)}"), "blocked") for s in sorted(blocked)]
    state += [(t, "armed") for t in _ITIMERS if signal.getitimer(getattr(signal, t)) != (0.0, 0.0)]
    return tuple(state)


def signal_changes(before: tuple[tuple[str, str], ...], after: tuple[tuple[str, str], ...]) -> list[str]:
    """What changed between two ``signal_dispositions()``, in words: ``SIGALRM now caught``, ``SIGINT's
    handler replaced``, ``SIGTERM now ignored``, ``SIGUSR2 now blocked``, ``ITIMER_REAL now armed`` (and
    ``... no longer ...``); empty when nothing did."""
    def split(state: tuple[tuple[str, str], ...]) -> tuple[dict[str, str], list[str], list[str]]:
        handlers = {k: v for k, v in state if v not in ("blocked", "armed")}
        return handlers, [k for k, v in state if v == "blocked"], [k for k, v in state if v == "armed"]

    (h0, b0, t0), (h1, b1, t1) = split(before), split(after)
    changes = []
    for name, now in h1.items():
        was = h0.get(name, "default")
        if now != was:
            kind, old_kind = now.split()[0], was.split()[0]
            changes.append(f"{name}'s handler replaced" if kind == old_kind == "caught" else f"{name} now {kind}")
    changes += [f"{name} now blocked" for name in b1 if name not in b0]
    changes += [f"{name} no longer blocked" for name in b0 if name not in b1]
    changes += [f"{name} now armed" for name in t1 if name not in t0]
    changes += [f"{name} no longer armed" for name in t0 if name not in t1]
    return changes


# ----------------------------------------------------------------------------- helpers


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


def flatten(value: Any, copy: bool = True, cpu: bool = True) -> tuple[Any, list[torch.Tensor]]:
    """(structure, tensor leaves) of a forward's result; numbers become 0-d tensors. Leaves are copies
    unless ``copy`` is False (results nothing else writes to: the reference's own; a timed call's,
    read before the next call), moved to the CPU unless ``cpu`` is False as well."""
    leaves: list[torch.Tensor] = []
    return _walk(value, leaves, copy, cpu), leaves


def _walk(v: Any, leaves: list[torch.Tensor], copy: bool, cpu: bool) -> Any:
    # A module-level function, not a closure that calls itself: such a closure is a reference cycle
    # (function -> cell -> function) that holds ``leaves`` until the garbage collector runs. In the
    # timing window that kept every timed call's output alive for many rounds, so each call's
    # ``torch.empty_like`` got fresh heap pages and paid their page faults inside the timed call
    # (1,024 faults and ~1.2 ms per call for a 4 MiB output; the same for the reference and the
    # candidate, which pulled every speedup towards 1).
    if isinstance(v, torch.Tensor):
        if not copy and not cpu:
            leaves.append(v.detach())
            return {"t": "tensor", "device": v.device.type}
        leaf = v.detach().to("cpu").contiguous()
        leaves.append(leaf.clone() if copy and leaf.data_ptr() == v.data_ptr() else leaf)
        return {"t": "tensor", "device": v.device.type}
    if isinstance(v, (tuple, list)):
        return {"t": type(v).__name__, "items": [_walk(x, leaves, copy, cpu) for x in v]}
    if isinstance(v, bool):
        leaves.append(torch.tensor(v))
        return {"t": "bool"}
    if isinstance(v, int):
        leaves.append(torch.tensor(v))
        return {"t": "int"}
    if isinstance(v, float):
        leaves.append(torch.tensor(v, dtype=torch.float64))
        return {"t": "float"}
    if v is None:
        return {"t": "None"}
    return {"t": type(v).__name__, "unsupported": True}


def _snapshot(inputs: list[Any]) -> list[Any]:
    return [x.detach().clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if a.is_floating_point():  # NaN != NaN: compare NaN positions, then the rest
        return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    return torch.equal(a, b)


def _changed(before: list[Any], after: list[Any]) -> list[int]:
    """Indices of tensor inputs whose values differ after the call."""
    return [i for i, (a, b) in enumerate(zip(before, after)) if isinstance(a, torch.Tensor) and not _identical(a, b)]


def _to_device(inputs: list[Any], device: str) -> list[Any]:
    if device == "cpu":
        return inputs
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


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
    """The ``ModelNew`` class the job's ``model.py`` defines, with the runtime set up for its library. The
    last step of a job's set-up: the library is loaded and ``model.py`` read, then the sandbox's filter is
    narrowed for the candidate's phase (``verifier.sandbox.seccomp.enter_candidate_phase``: no file opened
    from here on), then ``model.py`` runs."""
    try:
        runtime.configure(str(job_dir / _field(job, "library")), _field(job, "signatures"), device_runtime)
    except OSError as exc:
        raise CandidateFailure("correctness", f"loading the kernel library failed: {_describe(exc)}") from exc
    path = job_dir / (_field(job, "model") or "model.py")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise CandidateFailure("correctness", f"{path.name} cannot be read: {exc}") from exc
    problem = enter_candidate_phase()
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


# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def warm_allocator() -> bool:
    """Make glibc's allocator reuse what a call freed: never hand out a large block by mmap and never give
    freed memory back to the system. Otherwise every output of 32 MiB or more (the most glibc lets its
    mmap threshold rise to) is fresh memory on every call, and a timed call pays its page faults on
    top of the kernel: torch.relu on 8M floats took 14.9-23.0 ms with 8,193 faults per call, 4.6-5.4 ms
    with none (a plain process, 30 calls each way, alternately). Set in the job's own process (mallopt),
    for the reference, the candidate and the best alike; a job is short-lived and its address space is
    capped. False where the C library has no mallopt (not glibc)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def warm_heap_top(nbytes: int) -> None:
    """Touch ``nbytes`` at the top of the heap, where the next call's outputs will be carved, so they do
    not fault in fresh pages while timed. The allocator alone is not enough: a tensor is allocated
    aligned (posix_memalign), and a freed block with anything small allocated after it is too short
    for the next aligned request of the same size, so glibc 2.36 extends the heap and the next call
    faults in every page again (1 run in 15 of a 40 MiB output here, the first time an OpenMP thread
    starts between calls). Touching twice the outputs at the top after every call hands the next call
    memory that is already mapped, whichever block it is carved from; with ``warm_allocator`` that
    memory is never given back. Not timed."""
    warm = torch.empty(nbytes, dtype=torch.uint8)
    warm.fill_(0)
    del warm
