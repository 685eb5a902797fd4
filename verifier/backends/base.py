"""The verifier backend seam: what each backend declares. A new backend is one module here plus one
seed-knowledge folder under ``core/knowledge/<name>/``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class Toolchain:
    """Whether the backend can build and run here, and if not, the one-line reason and its fix."""

    available: bool
    reason: str = ""
    compiler: str = ""
    version: str = ""
    device: str = ""
    details: dict[str, str] = field(default_factory=dict)


@dataclass
class BuildPlan:
    """How to turn a candidate's sources into one shared library, as commands run in ``workdir``."""

    commands: list[list[str]]
    library: str                      # path of the resulting library, relative to workdir
    files: dict[str, str] = field(default_factory=dict)  # extra generated files (e.g. CMakeLists.txt)


class Backend(Protocol):
    """A place kernels run: CPU, CUDA GPU or Ascend NPU."""

    name: str
    device: str                        # torch device type tensors must be on ("cpu", "cuda", "npu")
    source_suffixes: tuple[str, ...]   # kernel sources the build compiles (".cpp", ".cu", ...)
    header_suffixes: tuple[str, ...]   # sources included by others, not compiled alone

    def toolchain(self) -> Toolchain:
        """Discover the compiler/SDK and device; never raises."""

    def build_key(self) -> str:
        """Everything besides the sources that changes the built library (compiler version, flags, target)."""

    def build_plan(self, sources: list[str], workdir: Path) -> BuildPlan:
        """The commands that build ``sources`` (names in ``workdir``) into one shared library."""

    def tolerance(self, dtype: str) -> tuple[float, float]:
        """Default (atol, rtol) for outputs of ``dtype`` ("float32", "float16", ...)."""

    def sandbox_devices(self) -> list[str]:
        """Device nodes the sandboxed worker needs to see (``/dev/nvidia*``...)."""

    def worker_env(self) -> dict[str, str]:
        """Environment variables the worker needs from the host (library paths, visible devices)."""

    def memory_limit(self) -> bool:
        """Whether an address-space limit (RLIMIT_AS) is safe; device drivers map huge ranges."""
