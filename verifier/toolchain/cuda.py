"""CUDA toolchain and GPU discovery: nvcc, its architectures, the GPU's compute capability and the
torch build it pairs with (see verifier.toolchain.discovery)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.toolchain.probe import PROBE_MARK, _executable, _first_line, probe_env, probe_python, run

# ----------------------------------------------------------------------------- CUDA


def find_nvcc(env: Mapping[str, str], system_root: str | Path = "/") -> tuple[Path | None, list[str]]:
    """``nvcc``: ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, then ``PATH``, then ``/usr/local/cuda/bin``.
    Returns the path (or None) and where it looked, for the message."""
    looked: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        base = env.get(var)
        if not base:
            looked.append(f"${var} (unset)")
            continue
        candidate = Path(base) / "bin" / "nvcc"
        looked.append(str(candidate))
        if _executable(candidate):
            return candidate, looked
    on_path = shutil.which("nvcc", path=env.get("PATH", ""))
    looked.append("PATH")
    if on_path:
        return Path(on_path), looked
    fallback = Path(system_root) / "usr/local/cuda/bin/nvcc"
    looked.append(str(fallback))
    if _executable(fallback):
        return fallback, looked
    return None, looked


def nvcc_version(nvcc: Path, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(short version such as "12.4", the full ``release`` line) from ``nvcc --version``."""
    ran = run([str(nvcc), "--version"], env=env, timeout=30)
    m = re.search(r"release\s+(\d+\.\d+)", ran.out)
    line = next((ln.strip() for ln in ran.out.splitlines() if "release" in ln), _first_line(ran.out))
    return (m.group(1) if m else ""), line


def nvcc_arches(nvcc: Path, env: Mapping[str, str] | None = None) -> list[int]:
    """Compute capabilities this nvcc can target (``--list-gpu-arch``), e.g. [75, 80, 86, 89, 90]."""
    ran = run([str(nvcc), "--list-gpu-arch"], env=env, timeout=30)
    if ran.code != 0:
        return []
    return sorted({int(m) for m in re.findall(r"compute_(\d+)", ran.out)})


def parse_compute_caps(text: str) -> list[int]:
    """``nvidia-smi --query-gpu=compute_cap --format=csv,noheader`` lines ("9.0") -> [90]."""
    caps = []
    for line in text.splitlines():
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", line)
        if m:
            caps.append(int(m.group(1)) * 10 + int(m.group(2)))
    return caps


def query_nvidia_smi(env: Mapping[str, str]) -> tuple[list[int], str]:
    """Compute capabilities of the GPUs ``nvidia-smi`` sees, or ([], why not)."""
    exe = shutil.which("nvidia-smi", path=env.get("PATH", ""))
    if not exe:
        return [], "nvidia-smi not found (no NVIDIA driver?)"
    ran = run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"], env=env, timeout=30)
    if ran.code != 0:
        return [], f"nvidia-smi failed: {_first_line(ran.out)}"
    caps = parse_compute_caps(ran.out)
    return caps, "" if caps else "nvidia-smi lists no GPU"


def choose_cuda_arch(capability: int | None, supported: list[int],
                     override: str | None = None) -> tuple[str | None, str]:
    """The ``-arch`` for nvcc: the device's own ``sm_XY``. Returns (arch or None, problem or "")."""
    if override:
        digits = re.sub(r"\D", "", override)
        if not digits:
            return None, f"EVOKERNEL_CUDA_ARCH={override!r} is not an architecture (use e.g. sm_90)"
        return f"sm_{digits}", ""
    if capability is None:
        return None, "no CUDA device to take -arch from (set EVOKERNEL_CUDA_ARCH=sm_XY to build without one)"
    if supported and capability not in supported:
        newest = max(supported)
        why = "newer than this nvcc knows" if capability > newest else "no longer supported by this nvcc"
        return None, (f"the GPU is sm_{capability}, {why} (it targets sm_{min(supported)}..sm_{newest}): "
                      "install a CUDA toolkit that supports the device")
    return f"sm_{capability}", ""


PROBE_TORCH_CUDA = f"""
import json
out = {{}}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["available"] = bool(torch.cuda.is_available())
    if out["available"]:
        out["count"] = torch.cuda.device_count()
        out["name"] = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        out["capability"] = major * 10 + minor
except Exception as exc:
    text = str(exc).strip().splitlines()
    out["error"] = type(exc).__name__ + ": " + (text[0] if text else "")
print({PROBE_MARK!r} + json.dumps(out))
"""


@dataclass
class CudaFindings:
    """What CUDA discovery found; ``problems`` are one-line reasons with their fix."""

    nvcc: Path | None = None
    nvcc_looked: list[str] = field(default_factory=list)
    version: str = ""
    version_line: str = ""
    supported: list[int] = field(default_factory=list)
    torch: dict[str, Any] = field(default_factory=dict)
    smi_caps: list[int] = field(default_factory=list)
    smi_note: str = ""
    arch: str | None = None
    device: str = ""
    toolchain_problems: list[str] = field(default_factory=list)
    device_problems: list[str] = field(default_factory=list)


def discover_cuda(env: Mapping[str, str] | None = None, *, system_root: str | Path = "/",
                  python: str | None = None, probe_torch: bool = True) -> CudaFindings:
    """nvcc, its version and targets; the device (torch probe in a subprocess, then nvidia-smi) and
    the ``-arch`` to build for."""
    env = dict(os.environ if env is None else env)
    f = CudaFindings()
    f.nvcc, f.nvcc_looked = find_nvcc(env, system_root)
    if f.nvcc is None:
        f.toolchain_problems.append(
            f"nvcc missing: not found in {', '.join(f.nvcc_looked)}; install the CUDA toolkit or set CUDA_HOME")
    else:
        f.version, f.version_line = nvcc_version(f.nvcc, env)
        f.supported = nvcc_arches(f.nvcc, env)
        if not f.version:
            f.toolchain_problems.append(f"{f.nvcc} --version did not name a CUDA release")
    capability: int | None = None
    if probe_torch:
        f.torch = probe_python(PROBE_TORCH_CUDA, python=python, env=probe_env(env))
        if f.torch.get("error") and "torch" not in f.torch:
            f.device_problems.append(f"PyTorch could not be imported: {f.torch['error']}")
        elif not f.torch.get("cuda"):
            f.device_problems.append(f"no CUDA device usable: PyTorch {f.torch.get('torch', '?')} is a CPU-only build; "
                                     "install a CUDA build of torch")
        elif not f.torch.get("available"):
            why = f.torch.get("error") or "torch.cuda.is_available() is False"
            f.device_problems.append(f"no CUDA device: {why} (driver not loaded, or CUDA_VISIBLE_DEVICES hides it)")
        else:
            capability = f.torch.get("capability")
            f.device = f"{f.torch.get('name', 'GPU')} (sm_{capability})"
    if capability is None:
        f.smi_caps, f.smi_note = query_nvidia_smi(env)
        if f.smi_caps and not f.device_problems:
            capability = f.smi_caps[0]
        elif not f.smi_caps:
            f.device_problems.append(f"no CUDA device: {f.smi_note}")
    f.arch, problem = choose_cuda_arch(capability, f.supported, env.get("EVOKERNEL_CUDA_ARCH"))
    if problem and f.nvcc is not None and not f.device_problems:
        f.device_problems.append(problem)
    return f
