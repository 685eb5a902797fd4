"""Which torch_npu pairs with the project's torch and the installed CANN, and what a torch_npu import
error means (see verifier.toolchain.discovery). Never installs torch_npu: it belongs on NPU workstations only."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from verifier.toolchain.probe import run

# torch_npu releases pin torch exactly (the wheel's torch==X requirement) and each is released for exactly one
# CANN line (Ascend/pytorch COMPATIBILITY.md, "TorchNPU 版本配套表": one CANN version per TorchNPU version; e.g.
# 2.12.0 with CANN 9.1.0, 2.9.0.post2 with 9.0.0, 2.9.0 with 8.5.0); torch_npu 2.13.0 is TorchNPU 26.2.0's, for
# CANN 9.2.0 (Ascend/pytorch release notes). EvoKernel pins torch 2.13.0 (Makefile, [npu] extra).
PROJECT_TORCH = "2.13.0"
TORCH_NPU_PAIRING = {
    # torch_npu package version -> (torch it requires, the CANN release it is released for)
    "2.14.0": ("2.14.0", "9.2.0"),         # TorchNPU 26.2.0
    "2.13.0": ("2.13.0", "9.2.0"),         # TorchNPU 26.2.0: the project's
    "2.12.0.post3": ("2.12.0", "9.2.0"),   # TorchNPU 26.2.0
    "2.12.0": ("2.12.0", "9.1.0"),         # TorchNPU 26.1.0 (COMPATIBILITY.md)
    "2.11.0": ("2.11.0", "9.1.0"),         # TorchNPU 26.1.0 (COMPATIBILITY.md)
}


def _release(version: str) -> str:
    """"2.13.0+cpu" -> "2.13.0", "2.12.0.post3" -> "2.12.0"."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return ".".join(m.groups()) if m else ""


def _cann_tuple(version: str) -> tuple[int, ...] | None:
    """"8.0.RC3" -> (8, 0, -1, 3) (an RC sorts before the release); "9.2.0" -> (9, 2, 0); None if unknown."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(RC)?(\d+))?", version or "", re.I)
    if not m:
        return None
    major, minor, rc, patch = m.groups()
    return (int(major), int(minor), -1, int(patch)) if rc else (int(major), int(minor), int(patch or 0))


def version_pairing(torch_version: str, torch_npu_version: str, cann_version: str) -> list[str]:
    """What is wrong with this torch / torch_npu / CANN combination, each with what to install ([] when
    it is the pairing torch_npu was built for, or nothing can be said)."""
    problems: list[str] = []
    torch_rel, npu_rel = _release(torch_version), _release(torch_npu_version)
    want = TORCH_NPU_PAIRING[PROJECT_TORCH]
    if not npu_rel:
        return problems
    pairing = TORCH_NPU_PAIRING.get(torch_npu_version.split("+")[0])
    if torch_rel and npu_rel != torch_rel:
        problems.append(
            f"version mismatch: torch_npu {torch_npu_version} is built for torch {npu_rel} "
            f"but torch is {torch_version}; "
            f"install torch=={PROJECT_TORCH} and torch_npu=={PROJECT_TORCH} (pip install 'evokernel[npu]'), "
            f"with CANN {want[1]}")
    cann = _cann_tuple(cann_version)
    # One CANN line per torch_npu release (COMPATIBILITY.md): another line, older or newer, is refused
    paired = _cann_tuple(pairing[1]) if pairing else None
    if pairing and cann is not None and paired is not None and cann[:2] != paired[:2]:
        problems.append(
            f"version mismatch: torch_npu {torch_npu_version} is released for CANN {pairing[1]} alone (Ascend/pytorch "
            f"COMPATIBILITY.md pairs each torch_npu with one CANN release) and this machine has CANN {cann_version}: "
            f"install CANN {pairing[1]}, or the torch_npu released for CANN {cann_version}")
    return problems


def explain_torch_npu_error(error: str, torch_version: str = "") -> str:
    """One line with the fix for a failed ``import torch_npu``."""
    if "No module named 'torch_npu'" in error:
        torch_npu, _, cann = (PROJECT_TORCH, *TORCH_NPU_PAIRING[PROJECT_TORCH])
        if torch_version and _release(torch_version) != PROJECT_TORCH:
            return (f"torch_npu not importable: it is not installed, and torch is {torch_version}, not the project's "
                    f"{PROJECT_TORCH}; install torch=={PROJECT_TORCH} (on x86: torch=={PROJECT_TORCH}+cpu), then "
                    f"pip install 'evokernel[npu]' (torch_npu {torch_npu}, built for CANN {cann})")
        return ("torch_npu not importable: it is not installed; pip install 'evokernel[npu]' "
                f"(torch_npu {torch_npu} for torch {PROJECT_TORCH}, built for CANN {cann})")
    if "undefined symbol" in error:
        return f"torch_npu not importable ({error}): it does not match torch {torch_version or ''} or CANN; " \
               "install the torch_npu built for both"
    if re.search(r"lib(ascendcl|hccl|acl_op_compiler|runtime|ge_runner)[^ ]*\.so", error):
        return f"torch_npu not importable ({error}): CANN libraries not found; source <CANN>/set_env.sh first"
    return f"torch_npu not importable: {error}"


def _distribution_version(name: str, python: str | None = None) -> str:
    """An installed distribution's version for the probing Python, without importing it ("" if absent)."""
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        from importlib import metadata

        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return ""
    ran = run([python, "-c", f"from importlib import metadata; print(metadata.version({name!r}))"], timeout=60)
    return ran.out.strip() if ran.code == 0 else ""


def torch_npu_installed(python: str | None = None) -> bool:
    """Whether a torch_npu distribution is installed for the probing Python (no import)."""
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        import importlib.util

        return importlib.util.find_spec("torch_npu") is not None
    ran = run([python, "-c", "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('torch_npu') else 1)"],
              timeout=60)
    return ran.code == 0
