"""The runtime contract between a candidate's ``model.py`` and its compiled kernels.

In ``model.py``::

    from verifier.runtime import load
    lib = load()                       # the candidate's shared library
    ...
    lib.relu_forward(x, out, x.numel())

``load()`` returns the library built from the candidate's sources. Its ``extern "C"`` functions are
called with torch tensors (passed as data pointers) and Python numbers (converted to the C types the
source declares). A tensor that is non-contiguous, on the wrong device or of a dtype that does not
match the pointer type is refused with a message naming the parameter. On device backends the stream
parameter (``cudaStream_t`` / ``aclrtStream``, wherever it is in the list) may be left out: the
current stream is passed.

What a device adds is declared by its backend's device runtime (``verifier.backends.base.DeviceRuntime``,
handed over by the worker): on CUDA the library's own ``cudaGetLastError()`` (a bad
launch configuration raises with CUDA's words); on Ascend a non-zero 32-bit integer return of any launcher
(an ``aclrtlaunch_<kernel>`` entry, or a custom op's binding returning what ``aclnn<Op>`` returned) raises,
with what the status means, whose failure it is and ``aclGetRecentErrMsg()``. An Ascend kernel ``k`` is
callable as ``lib.k(block_dim, ...)`` as well as by its entry name ``lib.aclrtlaunch_k``; its ``workspace``
argument (HAVE_WORKSPACE) is the number of bytes of user workspace, and the Ascend backend allocates system
+ user workspace.

Inside the verifier the library path comes from the worker; outside it (a person running their
``model.py`` by hand) ``load()`` builds the sources beside the calling file: ``.cu`` files with the
CUDA recipe, ``.cpp`` files holding ``__aicore__`` kernels with the Ascend recipe, else the CPU one.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import numbers
import operator
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifier.backends.base import DeviceRuntime, KernelCallError
from verifier.toolchain.cdecl import POINTER_DTYPES, SCALARS, Param, Signature

_active: dict[str, Any] = {"library": None, "signatures": None, "runtime": None, "dll": None}
# RTLD_LOCAL: the library's symbols never join the process's global namespace. (Its own undefined symbols
# still resolve against everything global, the interpreter included, in any mode: what it may bind to is
# decided by the build's link check, verifier.toolchain.linkage.)
_MODE = os.RTLD_LOCAL | os.RTLD_NOW
_calls: dict[str, int] = {}
# What a status is declared as where every launcher's integer return is one (``DeviceRuntime.status_returns``):
# aclnnStatus and aclError are 32-bit (int32_t, uint32_t as the bindings return them); a wider integer is a value.
STATUS_TYPES = frozenset({"int", "int32_t", "unsigned", "unsigned int", "uint32_t"})


def configure(library: str, signatures: list[dict[str, Any]], device_runtime: DeviceRuntime | None = None) -> None:
    """Called by the verifier's worker before it imports ``model.py``, with the backend's device runtime. The
    library is loaded now, during the job's set-up (the phase in which the candidate's code runs opens no
    file: ``verifier.sandbox.seccomp.enter_candidate_phase``); ``load()`` hands out this handle."""
    _active.update(library=library, signatures=signatures, runtime=device_runtime,
                   dll=ctypes.CDLL(library, mode=_MODE))


def call_counts() -> dict[str, int]:
    """How many times each launcher was called since the last ``reset_calls()``."""
    return dict(_calls)


def reset_calls() -> None:
    _calls.clear()


def load(path: str | None = None) -> KernelLibrary:
    """The candidate's compiled library (see the module docstring)."""
    if path is None and _active["library"] is not None:
        return KernelLibrary(_active["library"], _active["signatures"], _active["runtime"])
    if path is not None and Path(path).suffix in (".so", ".dylib"):
        # A library from the build cache: its signatures are recorded beside it.
        meta = Path(path).with_name("build.json")
        sigs = json.loads(meta.read_text()).get("signatures", []) if meta.exists() else []
        return KernelLibrary(path, sigs)
    # Outside the verifier: build the sources beside the caller (or in ``path``).
    folder = Path(path) if path else Path(inspect.stack()[1].filename).resolve().parent
    from verifier.backends import backend_for, get_backend, runtime_class
    from verifier.build import build_candidate
    from verifier.candidate_files import read_candidate

    files = read_candidate(folder)   # a custom-op project's op_host/ and op_kernel/ with their paths
    backend = get_backend(backend_for(files))
    result = build_candidate(backend, files, cache_dir=None)
    if not result.ok:
        raise KernelCallError(f"building {folder} failed:\n{result.log}")
    return KernelLibrary(str(result.library), [s.to_dict() for s in result.signatures],
                         runtime_class(backend)())


class KernelLibrary:
    """The loaded shared library; attribute access returns a checked launcher. ``device_runtime`` is the
    backend's (``verifier.backends.base.DeviceRuntime``): the device tensors must be on, the stream it
    fills in, its launch entries and checks; the host's when None."""

    def __init__(self, path: str, signatures: list[dict[str, Any]], device_runtime: DeviceRuntime | None = None):
        self._path = path
        loaded = _active["dll"] if path == _active["library"] else None
        self._dll = loaded if loaded is not None else ctypes.CDLL(path, mode=_MODE)
        self._sigs = {s["name"]: Signature.from_dict(s) for s in signatures}
        self._runtime = device_runtime or DeviceRuntime()
        self._funcs: dict[str, KernelFunction] = {}

    def __getattr__(self, name: str) -> KernelFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._funcs.get(name)
        if fn is None:
            prefix = self._runtime.entry_prefix
            sig = self._sigs.get(name) or (self._sigs.get(f"{prefix}{name}") if prefix else None)
            if sig is None:
                known = ", ".join(sorted(self._sigs)) or "none"
                raise AttributeError(f'the kernel library has no extern "C" function {name!r} (it has: {known})')
            fn = self._funcs[name] = KernelFunction(getattr(self._dll, sig.name), sig, self._runtime,
                                                    self._runtime.launch_check(self._dll))
        return fn

    def __dir__(self) -> list[str]:
        return sorted(self._sigs)


class KernelFunction:
    """One ``extern "C"`` launcher: converts and checks arguments, counts calls."""

    def __init__(self, cfunc: Any, sig: Signature, device_runtime: DeviceRuntime,
                 check: Callable[[str], None] | None = None):
        self._cfunc = cfunc
        self.signature = sig
        self._stream = device_runtime.current_stream()
        self._check = check
        self._converters = [_converter(p, sig, i, device_runtime) for i, p in enumerate(sig.params)]
        cfunc.argtypes = [c for c, _ in self._converters]
        self._convert = [conv for _, conv in self._converters]
        self._arity, self._name = len(sig.params), sig.name
        cfunc.restype = None if sig.restype == "void" else (
            ctypes.c_void_p if sig.restype == "void*" else getattr(ctypes, SCALARS[sig.restype])
        )
        streams = [i for i, p in enumerate(sig.params) if p.ctype == device_runtime.stream_type]
        self._stream_at = streams[0] if len(streams) == 1 else None
        prefix = device_runtime.entry_prefix
        entry = bool(prefix) and sig.name.startswith(prefix) and sig.restype != "void"
        self._status_entry = entry or (device_runtime.status_returns and sig.restype in STATUS_TYPES)
        self._describe_status = device_runtime.status_failure

    def __call__(self, *args: Any) -> Any:
        sig = self.signature
        if self._stream_at is not None and len(args) == self._arity - 1:
            # the stream is read at each call: after any torch-side work queued before it
            stream = self._stream() if self._stream else None
            args = (*args[: self._stream_at], stream, *args[self._stream_at:])
        if len(args) != self._arity:
            raise KernelCallError(
                f"{sig.name}() takes {len(sig.params)} arguments ({sig.describe()}), got {len(args)}"
                + (" (the stream may be left out)" if self._stream_at is not None else "")
            )
        _calls[self._name] = _calls.get(self._name, 0) + 1
        result = self._cfunc(*map(operator.call, self._convert, args))   # each argument through its converter
        if self._status_entry and result:
            raise KernelCallError(self._describe_status(sig.name, int(result)))
        if self._check is not None:
            self._check(sig.name)
        return result


def _converter(
    param: Param, sig: Signature, index: int, device_runtime: DeviceRuntime
) -> tuple[Any, Callable[[Any], Any]]:
    where = f"{sig.name}() argument {index + 1} ({param.describe()})"
    special = device_runtime.argument(sig, index, where)   # Ascend's workspace
    if special is not None:
        return special
    device, stream_type = device_runtime.device, device_runtime.stream_type
    import torch  # a dependency; imported once here, not at every call (the launcher's cost is inside every timed call)

    tensor = torch.Tensor
    if param.pointer:
        allowed = POINTER_DTYPES.get(param.ctype, ("*",))
        dtypes = None if "*" in allowed else frozenset(getattr(torch, d) for d in allowed if hasattr(torch, d))
        on_host = device == "cpu"

        def refuse(value: Any) -> KernelCallError:
            if not isinstance(value, tensor):
                return KernelCallError(f"{where}: expected a tensor, got {type(value).__name__}")
            if value.device.type != device:
                return KernelCallError(f"{where}: tensor is on {value.device}, the kernel needs {device}; "
                                       "move it first")
            if not value.is_contiguous():
                return KernelCallError(f"{where}: tensor is not contiguous; call .contiguous() before the launch")
            dtype = str(value.dtype).replace("torch.", "")
            return KernelCallError(f"{where}: tensor has dtype {dtype}, the pointer type needs {'/'.join(allowed)}")

        def to_pointer(value: Any) -> int | None:
            # the checks of ``refuse``, each a cheap test on the way through (about 1 us a tensor in all)
            if isinstance(value, tensor):
                if ((value.is_cpu if on_host else value.device.type == device) and value.is_contiguous()
                        and (dtypes is None or value.dtype in dtypes)):
                    return value.data_ptr()
                raise refuse(value)
            if value is None:
                return None
            if isinstance(value, int) and not isinstance(value, bool) and param.ctype == stream_type:
                return value
            raise refuse(value)

        return ctypes.c_void_p, to_pointer

    ctype = getattr(ctypes, SCALARS[param.ctype])
    is_float = param.ctype in ("float", "double")
    exact = float if is_float else int

    def to_scalar(value: Any) -> Any:
        if type(value) is exact:    # the common case, without the number tower's checks
            return value
        if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
            value = value.item()
        if is_float and isinstance(value, numbers.Real):
            return float(value)
        if not is_float and isinstance(value, numbers.Integral):
            return int(value)
        if param.ctype == "bool" and isinstance(value, bool):
            return value
        kind = "a number" if is_float else "an integer"
        raise KernelCallError(f"{where}: expected {kind}, got {type(value).__name__}")

    return ctype, to_scalar


__all__ = ["KernelCallError", "KernelFunction", "KernelLibrary", "call_counts", "configure", "load", "reset_calls"]
