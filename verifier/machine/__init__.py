"""Facts about this machine that measurements depend on: CPU model, cache size, fingerprint."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifier.backends.base import Backend


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache (32 MiB when the system does not say)."""
    best = 0
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in root.glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            best = max(best, int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return best or (32 << 20)


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


def vector_bits(isa: list[str]) -> int:
    """Widest SIMD register the compiler may use (bits): 512 with AVX-512, 256 with AVX, 128 else."""
    if "avx512f" in isa:
        return 512
    if "avx2" in isa or "avx" in isa:
        return 256
    return 128


@functools.lru_cache(maxsize=1)
def cache_sizes() -> list[dict[str, Any]]:
    """CPU caches as the kernel sees them: ``[{"level": 1, "type": "Data", "bytes": 32768, "shared_by": 2}, ...]``."""
    out: list[dict[str, Any]] = []
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text().strip())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * mult
        except ValueError:
            continue
        shared = 1
        try:
            shared = len(_cpu_list((index / "shared_cpu_list").read_text().strip())) or 1
        except OSError:
            pass
        out.append({"level": level, "type": kind, "bytes": size, "shared_by": shared})
    return out


# The cache flush before each timed call (verifier.timing.CacheFlusher) must evict what the kernel's
# cores hold, not the whole last-level cache a VM reports: there the "L3" is the host's (480 MiB on
# the 2-vCPU VM here), and twice it was a 960 MiB fill, 140-330 ms per timed call, so only 5-15 rounds
# fitted the budget. The price, measured there (relu, 4 MiB in and out, single calls interleaved in one
# run, three runs): after a 64 MiB flush (10-16 ms) the call took 0.67-0.79x of its time after the
# 960 MiB one, about what it took with no flush at all (0.61-0.77x): that host's L3 really is large and
# keeps a 4 MiB working set through 64 MiB of other writes. Memory-bound kernels whose data fit such an
# L3 are timed L3-warm there; raise FLUSH_CAP where that matters more than the rounds.
FLUSH_SHARED_SHARE = 32 << 20   # at most this much of a shared cache counts (a real CCX / socket slice)
FLUSH_CAP = 64 << 20            # never more than this in all
FLUSH_FLOOR = 8 << 20           # nor less (a machine that reports no caches)


def flush_plan(threads: int, caches: list[dict[str, Any]] | None = None) -> tuple[int, str]:
    """(bytes, why): the size of the buffer overwritten before each timed call, and its reason in words.

    Twice what the kernel's cores can hold: the private caches (L1d, L2: ``shared_by`` 1) of each of
    the ``threads`` cores plus a bounded share (``FLUSH_SHARED_SHARE``) of the shared cache (LLC),
    capped at ``FLUSH_CAP``: tens of MB, never the hundreds a VM reports as the host's L3."""
    caches = cache_sizes() if caches is None else caches
    threads = max(1, int(threads))
    private = sum(c["bytes"] for c in caches if c["shared_by"] <= 1)
    shared = max((c["bytes"] for c in caches if c["shared_by"] > 1), default=0)
    share = min(shared, FLUSH_SHARED_SHARE)
    want = 2 * (threads * private + share)
    size = max(FLUSH_FLOOR, min(FLUSH_CAP, want))
    why = (f"2 x ({threads} thread(s) x {human_bytes(private)} private cache + "
           f"{human_bytes(share)} of the {human_bytes(shared)} shared cache) = {human_bytes(want)}")
    if want > FLUSH_CAP:
        why += f", capped at {human_bytes(FLUSH_CAP)}"
    elif want < FLUSH_FLOOR:
        why += f", raised to {human_bytes(FLUSH_FLOOR)}"
    if shared > FLUSH_SHARED_SHARE:
        why += (f" (the shared cache counts for at most {human_bytes(FLUSH_SHARED_SHARE)}: a VM reports its "
                "host's whole L3)")
    return size, why


def flush_bytes(threads: int) -> int:
    """The cache flush of one timed call, in bytes (see ``flush_plan``)."""
    return flush_plan(threads)[0]


def _cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            cpus.extend(range(int(a), int(b) + 1))
        elif part.strip():
            cpus.append(int(part))
    return cpus


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{int(n)} B"


def describe_caches(caches: list[dict[str, Any]] | None = None) -> str:
    """``L1d 32 KiB per core, L2 512 KiB per core, L3 32 MiB shared by 2 cores``."""
    parts = []
    for c in cache_sizes() if caches is None else caches:
        name = f"L{c['level']}" + ("d" if c["type"] == "Data" else "")
        share = "per core" if c["shared_by"] <= 1 else f"shared by {c['shared_by']} cpus"
        parts.append(f"{name} {human_bytes(c['bytes'])} {share}")
    return ", ".join(parts)


# What a device toolchain reports about the device itself (CUDA compute capability, Ascend SoC).
_DEVICE_LIMITS = ("arch", "soc")


def machine_facts(backend: Backend, threads: int) -> dict[str, Any]:
    """Everything a prompt or ``doctor`` says about where kernels run, from one place.

    ``backend`` is a verifier backend object. For CPU: the CPU model, thread count, what
    ``-march=native`` enables and the caches. For a device backend: the device's name and the limits
    its toolchain reports (untested without such a device here); the host facts follow."""
    facts: dict[str, Any] = {"backend": backend.name, "threads": int(threads), "cpu": cpu_model(),
                             "cpus": os.cpu_count() or 1, "caches": cache_sizes(), "caches_text": describe_caches()}
    if backend.device == "cpu":
        facts["flush_bytes"], facts["flush_text"] = flush_plan(threads)
    compiler = getattr(backend, "compiler", None)
    if backend.device == "cpu" and compiler:
        all_flags = list(getattr(sys.modules.get(type(backend).__module__), "FLAGS", ["-O3", "-march=native"]))
        target = compiler_target(compiler, tuple(f for f in all_flags if f.startswith(("-march", "-mcpu"))))
        facts.update(compiler=Path(compiler).name,
                     flags=" ".join(f for f in all_flags if f.startswith(("-O", "-m", "-fopenmp"))),
                     arch=target["arch"], isa=target["isa"], vector_bits=vector_bits(target["isa"]))
    else:
        try:
            tc = backend.toolchain()
            limits = {k: v for k, v in dict(tc.details).items() if k in _DEVICE_LIMITS and v}
            facts.update(device=tc.device or "", device_limits=limits)
        except Exception:  # a probe failed: the prompt says less, never crashes
            facts.update(device="")
    return facts
