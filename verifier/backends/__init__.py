"""Backends are found by name in one table and imported lazily."""

from __future__ import annotations

import importlib

from verifier.backends.base import Backend, BuildPlan, BuildPlanError, KernelRules, Toolchain
from verifier.errors import UnknownBackend

BACKENDS: dict[str, str] = {
    "cpu": "verifier.backends.cpu:CpuBackend",
    "cuda": "verifier.backends.cuda:CudaBackend",
    "ascend": "verifier.backends.ascend:AscendBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The class of the backend called ``name``, imported but not instantiated (what it declares
    without discovering its toolchain); an unknown name lists the valid ones."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}") from None
    module_name, _, cls_name = target.partition(":")
    module = importlib.import_module(module_name)
    cls: type[Backend] = getattr(module, cls_name)
    return cls


def get_backend(name: str) -> Backend:
    """The backend called ``name``; an unknown name lists the valid ones."""
    return backend_class(name)()


__all__ = ["BACKENDS", "Backend", "BuildPlan", "BuildPlanError", "KernelRules", "Toolchain", "backend_class",
           "get_backend"]
