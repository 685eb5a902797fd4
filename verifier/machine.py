"""Facts about this machine that measurements depend on: CPU model, cache size, fingerprint."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path


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

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover
        torch_version = "none"
    text = f"{cpu_model()}|{os.cpu_count()}|{threads}|{torch_version}|{platform.machine()}|{extra}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
