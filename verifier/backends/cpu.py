"""The CPU backend: C++ sources built by g++ with OpenMP into one shared library."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from verifier.backends.base import BuildPlan, DeviceRuntime, Toolchain
from verifier.machine.facts import cpu_model
from verifier.sandbox.seccomp import CPU_NEEDS
from verifier.toolchain.cdecl import Signature, parse_extern_c
from verifier.toolchain.linkage import LinkPolicy

FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c++17",
         "-fdiagnostics-color=never", "-fmax-errors=10"]

# Default tolerances by output dtype (atol, rtol).
TOLERANCES = {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}


class CpuBackend:
    name = "cpu"
    display_name = "CPU (C++ with OpenMP, built by g++)"
    device = "cpu"
    source_suffixes = (".cpp", ".cc", ".cxx")
    header_suffixes = (".h", ".hpp")
    process_model = "fork"   # torch is imported once in the fork server; each job is a forked child
    timer = "wall"
    kernel_rules = None      # the common kernel-source rules are the CPU's
    device_runtime = DeviceRuntime   # the host: nothing to synchronise, the wall clock, no stream
    runtime_needs = CPU_NEEDS        # Python, PyTorch and libgomp: threads, nothing else beyond the filter's base

    @classmethod
    def claims(cls, files: dict[str, str]) -> bool:
        return False         # the CPU builds what no other backend claims

    @functools.cached_property
    def compiler(self) -> str | None:
        return shutil.which("g++") or shutil.which("c++")

    def toolchain(self) -> Toolchain:
        if not self.compiler:
            return Toolchain(False, "g++ not found: install a C++ compiler (Debian/Ubuntu: apt install g++)",
                             device=cpu_model(), toolchain_ok=False, device_ok=True)
        return Toolchain(True, compiler=self.compiler, version=self._version(), device=cpu_model())

    def _version(self) -> str:
        return self._version_line

    @functools.cached_property
    def _version_line(self) -> str:
        from verifier.processes import run_process

        ran = run_process([self.compiler or "g++", "--version"], timeout=10, background=False, stderr=False)
        return ran.output.splitlines()[0] if ran.started and not ran.timed_out and ran.output else ""

    def build_key(self) -> str:
        # -march=native ties the library to this CPU model.
        return f"cpu|{self.compiler}|{self._version()}|{' '.join(FLAGS)}|{cpu_model()}"

    def launchers(self, sources: dict[str, str]) -> list[Signature]:
        return [sig for text in sources.values() for sig in parse_extern_c(text)]

    def build_plan(self, sources: list[str], workdir: Path) -> BuildPlan:
        return BuildPlan(commands=[[self.compiler or "g++", *FLAGS, "-o", "libcandidate.so", *sources]],
                         library="libcandidate.so")

    def tolerance(self, dtype: str) -> tuple[float, float]:
        return TOLERANCES.get(dtype, (1e-4, 1e-4))

    def link_policy(self) -> LinkPolicy:
        return LinkPolicy()  # the system runtimes only, and no loader lookups

    def sandbox_devices(self) -> list[str]:
        return []

    def worker_env(self) -> dict[str, str]:
        return {}

    def memory_limit(self) -> bool:
        return True

    def explain(self, text: str) -> str:
        return ""
