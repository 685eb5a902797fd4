"""What can run here: each backend's toolchain and device, and the sandbox's layers, as plain data
(``evokernel doctor`` prints it). Device runtimes are probed in subprocesses, never imported here."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from verifier.backends import backend_names

__all__ = ["backend_names", "backend_report", "diagnose", "machine_report"]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def backend_report(name: str) -> dict[str, Any]:
    """One backend's findings; never raises."""
    from verifier.backends import get_backend

    try:
        tc = get_backend(name).toolchain()
    except Exception as exc:  # a probe of ours broke: report it, do not crash
        problem = f"probing the {name} backend failed: {type(exc).__name__}: {exc}"
        return {"available": False, "toolchain": {"present": False}, "device": {"present": False},
                "reason": problem, "problems": [problem], "warnings": [], "details": {}}
    return {
        "available": tc.available,
        "toolchain": {"present": bool(tc.toolchain_ok), "compiler": tc.compiler, "version": tc.version},
        "device": {"present": bool(tc.device_ok), "name": tc.device},
        "reason": tc.reason,
        "problems": list(tc.problems),
        "warnings": list(getattr(tc, "warnings", [])),
        "notes": list(getattr(tc, "notes", [])),
        "details": dict(tc.details),
    }


def machine_report(threads: int | None = None, remeasure: bool = False) -> dict[str, Any]:
    """The CPU as prompts describe it (ISA, caches, threads) and its roofline ceilings: STREAM triad
    bandwidth and FMA peak, built with the CPU backend's flags, measured once per machine and cached
    where every verifier reads them (``verifier.machine.roofline.RooflineMeter``). Never raises: a failed
    measurement says why."""
    from verifier.backends import get_backend
    from verifier.config import default_threads
    from verifier.machine.facts import machine_facts
    from verifier.machine.roofline import RooflineMeter

    threads = threads or default_threads()
    try:
        backend = get_backend("cpu")
        facts = machine_facts(backend, threads)
        meter = RooflineMeter(None, backend, threads)
        cached = meter.cached_ceilings() is not None
        ceilings = meter.ceilings(remeasure=remeasure)
    except Exception as exc:  # a probe of ours broke: report it, do not crash
        return {"threads": threads, "ceilings": None, "problem": f"{type(exc).__name__}: {exc}"}
    return {**facts, "ceilings": ceilings, "ceilings_cached": cached,
            "problem": "; ".join(meter.problems) if ceilings is None else ""}


def diagnose(names: list[str] | None = None, *, remeasure: bool = False) -> dict[str, Any]:
    """Everything ``doctor`` reports, as plain data."""
    from verifier.sandbox import bwrap_status, landlock_status, seccomp_status
    from verifier.toolchain.linkage import link_check_status

    bwrap_ok, bwrap_detail = bwrap_status()
    seccomp_ok, seccomp_detail = seccomp_status()
    landlock_ok, landlock_detail = landlock_status()
    link_ok, link_detail = link_check_status()
    backends = {name: backend_report(name) for name in (names or backend_names())}
    cpu_ready = backends.get("cpu", {}).get("available")
    machine = machine_report(remeasure=remeasure) if cpu_ready else None
    return {
        "backends": backends,
        "machine": machine,
        "sandbox": {"bubblewrap": {"available": bwrap_ok, "detail": bwrap_detail},
                    "seccomp": {"available": seccomp_ok, "detail": seccomp_detail},
                    "landlock": {"available": landlock_ok, "detail": landlock_detail},
                    "link_check": {"available": link_ok, "detail": link_detail}},
        "python": platform.python_version(),
        "torch": _version("torch"),
        "torch_npu": _version("torch_npu"),
        "evokernel": _version("evokernel"),
    }
