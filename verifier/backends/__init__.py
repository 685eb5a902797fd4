"""Backends are found by name in one table and imported lazily.

The table holds the built-in backends and any a package declares under the ``evokernel.backends``
entry-point group (``name = "module:Class"``): a new backend is one module (a class declaring
everything device-specific, see ``verifier.backends.base.Backend``) plus its knowledge folder, and
nothing else in EvoKernel changes.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from verifier.backends.base import Backend, BuildPlan, BuildPlanError, KernelRules, Toolchain
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
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        table.setdefault(ep.name, ep.value)
    return table


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
    cls: type[Backend] = getattr(module, cls_name)
    return cls


def get_backend(name: str) -> Backend:
    """The backend called ``name``; an unknown name lists the valid ones."""
    return backend_class(name)()


def display_name(name: str) -> str:
    """How prompts and screens name the backend (its ``display_name``, else its name)."""
    try:
        return getattr(backend_class(name), "display_name", "") or name
    except (UnknownBackend, ImportError, AttributeError):
        return name


def backend_device(name: str) -> str:
    """The torch device type of the backend's tensors ("cpu" for any CPU backend), "" when unknown."""
    try:
        return backend_class(name).device
    except (UnknownBackend, ImportError, AttributeError):
        return ""


def source_suffix(name: str) -> str:
    """The suffix of the backend's kernel sources (the first it compiles), ".cpp" when unknown."""
    try:
        return backend_class(name).source_suffixes[0]
    except (UnknownBackend, ImportError, AttributeError, IndexError):
        return ".cpp"


__all__ = ["BACKENDS", "Backend", "BuildPlan", "BuildPlanError", "KernelRules", "Toolchain", "backend_class",
           "backend_device", "backend_names", "backend_table", "display_name", "get_backend", "source_suffix"]
