"""Backends are found by name in one table and imported lazily.

The table holds the built-in backends and any a package declares under the ``evokernel.backends``
entry-point group (``name = "module:Class"``): a new backend is one module (a class declaring
everything device-specific, see ``verifier.backends.base.Backend``) plus its knowledge folder, and
nothing else in EvoKernel changes.
"""

from __future__ import annotations

import functools
import importlib
import sys
from importlib.metadata import entry_points
from typing import Any

from verifier.backends.base import (
    FORM_KERNEL_LAUNCH,
    Backend,
    BuildPlan,
    BuildPlanError,
    DeviceRuntime,
    KernelRules,
    Toolchain,
)
from verifier.errors import UnknownBackend

BACKENDS: dict[str, str] = {
    "cpu": "verifier.backends.cpu:CpuBackend",
    "cuda": "verifier.backends.cuda:CudaBackend",
    "ascend": "verifier.backends.ascend:AscendBackend",
}


ENTRY_POINT_GROUP = "evokernel.backends"


def backend_table() -> dict[str, str]:
    """Every backend's name and ``module:Class``: the built-ins, then the installed plugins (a
    plugin never replaces a built-in)."""
    table = dict(BACKENDS)
    for name, target in _plugins(tuple(sys.path)):
        table.setdefault(name, target)
    return table


@functools.lru_cache(maxsize=8)
def _plugins(path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The installed plugins' entry points, scanned once per ``sys.path`` (a scan takes milliseconds,
    and prompts ask for a backend's name and suffix on every attempt)."""
    return tuple((ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP))


def backend_names() -> list[str]:
    return list(backend_table())


def backend_class(name: str) -> type[Backend]:
    """The class of the backend called ``name``, imported but not instantiated (what it declares
    without discovering its toolchain); an unknown name lists the valid ones."""
    table = backend_table()
    try:
        target = table[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; choose one of: {', '.join(table)}") from None
    module_name, _, cls_name = target.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, cls_name)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise UnknownBackend(f"backend {name!r} ({target}) does not derive from verifier.backends.base.Backend")
    return cls


def get_backend(name: str) -> Backend:
    """The backend called ``name``; an unknown name lists the valid ones."""
    return backend_class(name)()


def declared(name: str, attribute: str, default: Any = None) -> Any:
    """What the backend's class declares as ``attribute``, without discovering its toolchain;
    ``default`` for an unknown backend, one that does not import, or one that declares nothing."""
    try:
        return getattr(backend_class(name), attribute, default)
    except (UnknownBackend, ImportError):
        return default


def display_name(name: str) -> str:
    """How prompts and screens name the backend (its ``display_name``, else its name)."""
    return declared(name, "display_name") or name


def backend_device(name: str) -> str:
    """The torch device type of the backend's tensors ("cpu" for any CPU backend), "" when unknown."""
    return declared(name, "device") or ""


def source_suffix(name: str) -> str:
    """The suffix of the backend's kernel sources (the first it compiles), ".cpp" when unknown."""
    suffixes = declared(name, "source_suffixes") or (".cpp",)
    return suffixes[0]


def knowledge_folder(name: str) -> str | None:
    """The seed-knowledge folder the backend declares (``knowledge_dir``: a plugin's own); None for one that
    declares none (a built-in's is ``core/knowledge/<name>/``) or an unknown name."""
    folder = declared(name, "knowledge_dir")
    return str(folder) if folder else None


def form_prompt(name: str, form: str) -> str:
    """What a prompt adds to ask the backend called ``name`` for ``form`` (its files and layout: Ascend's custom-op
    project); "" for kernel-launch, a one-form backend or an unknown name."""
    if form == FORM_KERNEL_LAUNCH:
        return ""
    try:
        return backend_class(name).form_prompt(form)
    except (UnknownBackend, ImportError):
        return ""


def declared_suffixes(kind: str = "source_suffixes") -> tuple[str, ...]:
    """Every suffix the backends in the table declare as ``kind`` (``source_suffixes``: kernel sources;
    ``header_suffixes``: included ones), in table order, each once: what a candidate's files may be."""
    found: dict[str, None] = {}
    for name in backend_table():
        found.update(dict.fromkeys(declared(name, kind) or ()))
    return tuple(found)


def runtime_class(backend: Backend | type[Backend]) -> type[DeviceRuntime]:
    """The backend's device runtime class; the host's for a backend that declares none."""
    return backend.device_runtime


def runtime_target(backend: Backend | type[Backend]) -> str:
    """The ``module:Class`` of the backend's device runtime: what a job carries to the worker, which
    makes its own (``load_runtime``)."""
    cls = runtime_class(backend)
    return f"{cls.__module__}:{cls.__qualname__}"


def load_runtime(target: str = "") -> DeviceRuntime:
    """A device runtime from its ``module:Class`` (the host's for ""). Raises ``ImportError`` naming
    the target when it cannot be imported or is not a runtime."""
    if not target:
        return DeviceRuntime()
    module_name, _, cls_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"the device runtime {target} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, DeviceRuntime)):
        raise ImportError(f"{target} is not a device runtime (verifier.backends.base.DeviceRuntime)")
    return cls()


def backend_runtime(name: str) -> DeviceRuntime:
    """The device runtime the backend called ``name`` declares (the host's when it declares none)."""
    return runtime_class(backend_class(name))()


def candidate_form(files: dict[str, str] | list[str]) -> str:
    """The form a candidate's files (names, or name -> text) are written in: the first form of its own that a
    backend in the table recognises (``Backend.form_of``: Ascend's custom-op project), else kernel-launch, every
    backend's. Whether the backend at hand takes it is the format gate's question."""
    for name in backend_table():
        try:
            form = backend_class(name).form_of(files)
        except (UnknownBackend, ImportError):
            continue
        if form != FORM_KERNEL_LAUNCH:
            return form
    return FORM_KERNEL_LAUNCH


def backend_for(files: dict[str, str]) -> str:
    """The backend a folder's files (name -> text) are written for: the first in the table that claims
    them (``.cu`` sources: cuda; ``__aicore__`` kernels: ascend), else "cpu" (which claims nothing)."""
    for name in backend_table():
        claims = declared(name, "claims")
        if claims is not None and claims(files):
            return name
    return "cpu"


__all__ = ["BACKENDS", "FORM_KERNEL_LAUNCH", "Backend", "BuildPlan", "BuildPlanError", "DeviceRuntime", "KernelRules",
           "Toolchain", "backend_class", "backend_device", "backend_for", "backend_names", "backend_runtime",
           "backend_table", "candidate_form", "declared", "declared_suffixes", "display_name", "form_prompt",
           "get_backend", "knowledge_folder", "load_runtime", "runtime_class", "runtime_target", "source_suffix"]
