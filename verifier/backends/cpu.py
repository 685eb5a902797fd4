"""The CPU backend: C++ sources built by g++ with OpenMP into one shared library. Everything it does not declare
here is the host's default of ``verifier.backends.base.Backend`` (fork server, wall clock, no device nodes, the
system runtimes only, an address-space limit)."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from verifier.backends.base import Backend, BuildPlan, Toolchain
from verifier.machine.facts import cpu_model
from verifier.toolchain.float16 import Float16Support, float16_support

# Default tolerances by output dtype (atol, rtol).
TOLERANCES = {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}


class CpuBackend(Backend):
    name = "cpu"
    display_name = "CPU (C++ with OpenMP, built by g++)"
    source_suffixes = (".cpp", ".cc", ".cxx")
    flags = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c++17",
             "-fdiagnostics-color=never", "-fmax-errors=10")
    # the fork server imports torch once and each job is a forked child; the wall clock; the common kernel rules;
    # the host's device runtime (nothing to synchronise, no stream); CPU_NEEDS (Python, PyTorch and libgomp:
    # threads, nothing else beyond the filter's base): the base class's defaults

    @functools.cached_property
    def compiler(self) -> str | None:
        return shutil.which("g++") or shutil.which("c++")

    def toolchain(self) -> Toolchain:
        if not self.compiler:
            return Toolchain(False, "g++ not found: install a C++ compiler (Debian/Ubuntu: apt install g++)",
                             device=cpu_model(), toolchain_ok=False, device_ok=True)
        half = self._float16
        return Toolchain(True, compiler=self.compiler, version=self._version(), device=cpu_model(),
                         details={"float16": half.said},
                         notes=[half.said] if half.ok else [], warnings=[] if half.ok else [half.said])

    @functools.cached_property
    def _float16(self) -> Float16Support:
        """Whether ``_Float16`` builds and runs with the flags here, and what every build adds so it does
        (``verifier.toolchain.float16``: GCC 12 on an AVX512-FP16 CPU emits a masked ``vmovsh`` binutils 2.40
        rejects), probed once per compiler, flags and CPU and kept in the user's cache."""
        from verifier.locations import cache_dir

        if not self.compiler:
            return Float16Support(False, (), "no compiler")
        return float16_support(self.compiler, self.flags, cache=cache_dir() / "float16.json")

    def build_flags(self) -> tuple[str, ...]:
        """``flags`` and what the ``_Float16`` probe found every build needs here (``-mno-avx512fp16`` where the
        assembler rejects GCC's AVX512-FP16 stores)."""
        return (*self.flags, *self._float16.extra)

    def _version(self) -> str:
        return self._version_line

    @functools.cached_property
    def _version_line(self) -> str:
        from verifier.processes import run_process

        ran = run_process([self.compiler or "g++", "--version"], timeout=10, background=False, stderr=False)
        return ran.output.splitlines()[0] if ran.started and not ran.timed_out and ran.output else ""

    def preprocess_argv(self, source: str) -> list[str] | None:
        flags = [f for f in self.build_flags() if f not in ("-shared", "-fPIC") and not f.startswith("-fmax-errors")]
        return [self.compiler or "g++", *flags, "-E", source]

    def build_key(self) -> str:
        # -march=native ties the library to this CPU model.
        return f"cpu|{self.compiler}|{self._version()}|{' '.join(self.build_flags())}|{cpu_model()}"

    def build_plan(self, sources: list[str], workdir: Path) -> BuildPlan:
        return BuildPlan(commands=[[self.compiler or "g++", *self.build_flags(), "-o", "libcandidate.so", *sources]],
                         library="libcandidate.so")

    def tolerance(self, dtype: str) -> tuple[float, float]:
        return TOLERANCES.get(dtype, (1e-4, 1e-4))
