"""What can run here: each backend's toolchain and device, and the sandbox's layers, as plain data
(``evokernel doctor`` prints it). Device runtimes are probed in subprocesses, never imported here."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from verifier import backend_names

__all__ = ["backend_names", "backend_report", "diagnose", "machine_report"]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def backend_report(name: str) -> dict[str, Any]:
    """One backend's findings; never raises."""
    from verifier import get_backend

    try:
        backend = get_backend(name)
        tc = backend.toolchain()
    except Exception as exc:  # a probe of ours broke: report it, do not crash
        problem = f"probing the {name} backend failed: {type(exc).__name__}: {exc}"
        return {"available": False, "toolchain": {"present": False}, "device": {"present": False},
                "reason": problem, "problems": [problem], "warnings": [], "details": {}}
    problems = list(tc.problems)
    confined = device_op_report(backend) if tc.available and backend.device != "cpu" else None
    if confined is not None and not confined["ok"]:
        problems.append(confined["detail"])
    return {
        "available": tc.available and (confined is None or confined["ok"]),
        "toolchain": {"present": bool(tc.toolchain_ok), "compiler": tc.compiler, "version": tc.version},
        "device": {"present": bool(tc.device_ok), "name": tc.device},
        "reason": tc.reason,
        "problems": problems,
        "warnings": list(getattr(tc, "warnings", [])),
        "notes": list(getattr(tc, "notes", [])),
        "details": dict(tc.details),
        "confined_device_op": confined,
    }


def device_op_report(backend: Any) -> dict[str, Any]:
    """One device op in a candidate's confined job (``verifier.harness.device_check``): {"ok", "detail"}. A device
    the reference can use and candidates cannot (root's jobs hold no capability) fails here, not at every
    candidate's set_device."""
    from verifier import confined_device_op

    try:
        ok, detail = confined_device_op(backend)
    except Exception as exc:  # a probe of ours broke: report it, do not crash
        ok, detail = False, f"the confined device check failed: {type(exc).__name__}: {exc}"
    return {"ok": ok, "detail": detail}


def machine_report(threads: int | None = None, remeasure: bool = False) -> dict[str, Any]:
    """The CPU as prompts describe it (ISA, caches, threads) and its roofline ceilings: STREAM triad
    bandwidth and FMA peak, built with the CPU backend's flags, measured once per machine and cached
    where every verifier reads them (``verifier.machine.roofline.RooflineMeter``). Never raises: a failed
    measurement says why."""
    from verifier import RooflineMeter, default_threads, get_backend, machine_facts

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
    from verifier import bwrap_status, landlock_status, link_check_status, seccomp_status

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
