"""Facts about this machine that measurements depend on and prompts state: the CPU model, what the
compiler targets here, the fingerprint that says which measurements are comparable, and
``machine_facts`` (what a prompt or ``doctor`` says about where kernels run)."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path
from typing import Any, Protocol

from verifier.machine.caches import cache_sizes, describe_caches, flush_plan


class Target(Protocol):
    """What this machine's facts and its roofline read of the backend kernels are built for (a
    ``verifier.backends.base.Backend``, which sits above this package): its name, its torch device type, what
    besides the sources changes a built library, its compiler and flags (the CPU's g++), and its toolchain's report
    (``device``, ``details``)."""

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def flags(self) -> tuple[str, ...]: ...

    def build_flags(self) -> tuple[str, ...]: ...

    @property
    def compiler(self) -> str | None: ...

    def build_key(self) -> str: ...

    def toolchain(self) -> Any: ...


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(threads: int, extra: str = "") -> str:
    """Identifies measurements that are comparable: same CPU, core count, threads, torch."""
    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:  # pragma: no cover
        torch_version = "none"
    text = f"{cpu_model()}|{os.cpu_count()}|{threads}|{torch_version}|{platform.machine()}|{extra}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- what a kernel author needs to know about this machine (prompts, doctor) --------------------------

# ISA extensions worth naming to a kernel author, in the order they are listed (widest first).
_ISA_OF_INTEREST = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni", "avx512bf16", "avx512fp16",
                    "amx-tile", "amx-bf16", "avx2", "fma", "f16c", "avx", "sse4.2", "neon", "sve", "sve2",
                    "dotprod", "fp16", "bf16", "i8mm")


@functools.lru_cache(maxsize=8)
def compiler_target(compiler: str, flags: tuple[str, ...] = ("-march=native",)) -> dict[str, Any]:
    """What ``flags`` make ``compiler`` target here: ``{"arch": "znver3", "isa": ["avx512f", ...]}``.

    Read from ``g++ <flags> -Q --help=target`` (x86: ``-mavx2 [enabled]``); on targets that do not
    list extensions that way (AArch64), from the predefined macros of ``-E -dM``. Empty on failure."""
    from verifier.processes import run_process

    found: list[str] = []
    arch = ""
    ran = run_process([compiler, *flags, "-Q", "--help=target"], timeout=20, background=False, stderr=False)
    out = ran.output if ran.started and not ran.timed_out else ""
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("-march=", "-mcpu=") and not arch:
            arch = parts[1]
        if len(parts) >= 2 and parts[-1] == "[enabled]" and parts[0].startswith("-m"):
            found.append(parts[0][2:])
    if not found:
        ran = run_process([compiler, *flags, "-E", "-dM", "-x", "c++", "/dev/null"], timeout=20, background=False,
                          stderr=False)
        macros = ran.output if ran.started and not ran.timed_out else ""
        names = {"__ARM_NEON": "neon", "__ARM_FEATURE_SVE": "sve", "__ARM_FEATURE_SVE2": "sve2",
                 "__ARM_FEATURE_DOTPROD": "dotprod", "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC": "fp16",
                 "__ARM_FEATURE_BF16": "bf16", "__ARM_FEATURE_MATMUL_INT8": "i8mm", "__AVX2__": "avx2",
                 "__AVX512F__": "avx512f", "__FMA__": "fma", "__AVX__": "avx"}
        defined = {line.split()[1] for line in macros.splitlines() if line.startswith("#define ")}
        found = [v for k, v in names.items() if k in defined]
    isa = [name for name in _ISA_OF_INTEREST if name in found]
    return {"arch": arch, "isa": isa, "all": sorted(set(found))}


def usable_target(compiler: str, flags: tuple[str, ...] = ("-march=native",)) -> dict[str, Any]:
    """``compiler_target`` with only the extensions that run here (``verifier.machine.features``: those a probe
    runs once, AMX and AVX-512 FP16), and ``refused``: the others, with why, which the compiler enables but
    a kernel must not use ("amx-tile: why")."""
    from verifier.machine.features import runnable

    target = dict(compiler_target(compiler, flags))
    runs, failed = runnable(compiler, tuple(target["isa"]))
    target["isa"] = runs
    target["refused"] = [f"{p.feature}: {p.why}" for p in failed]
    return target


def vector_bits(isa: list[str]) -> int:
    """Widest SIMD register the compiler may use (bits): 512 with AVX-512, 256 with AVX, 128 else."""
    if "avx512f" in isa:
        return 512
    if "avx2" in isa or "avx" in isa:
        return 256
    return 128


# What a device toolchain reports about the device itself (CUDA compute capability, Ascend SoC).
_DEVICE_LIMITS = ("arch", "soc")


def machine_facts(backend: Target, threads: int) -> dict[str, Any]:
    """Everything a prompt or ``doctor`` says about where kernels run, from one place.

    ``backend`` is a verifier backend object. For CPU: the CPU model, thread count, what
    ``-march=native`` enables and the caches. For a device backend: the device's name and the limits
    its toolchain reports (untested without such a device here); the host facts follow."""
    facts: dict[str, Any] = {"backend": backend.name, "threads": int(threads), "cpu": cpu_model(),
                             "cpus": os.cpu_count() or 1, "caches": cache_sizes(), "caches_text": describe_caches()}
    if backend.device == "cpu":
        facts["flush_bytes"], facts["flush_text"] = flush_plan(threads)
    compiler = backend.compiler
    if backend.device == "cpu" and compiler:
        all_flags = backend.build_flags()
        target = usable_target(compiler, tuple(f for f in all_flags if f.startswith(("-march", "-mcpu"))))
        facts.update(compiler=Path(compiler).name,
                     flags=" ".join(f for f in all_flags if f.startswith(("-O", "-m", "-fopenmp"))),
                     arch=target["arch"], isa=target["isa"], vector_bits=vector_bits(target["isa"]),
                     isa_refused=target["refused"])
    else:
        try:
            tc = backend.toolchain()
            limits = {k: v for k, v in dict(tc.details).items() if k in _DEVICE_LIMITS and v}
            facts.update(device=tc.device or "", device_limits=limits)
        except Exception:  # a probe failed: the prompt says less, never crashes
            facts.update(device="")
    return facts
