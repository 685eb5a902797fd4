"""The Ascend backend: Ascend C kernels (``.cpp``, ``extern "C" __global__ __aicore__``) built with the
CANN kernel-launch flow into one shared library, launched through ctypes on torch_npu's stream.

The candidate contract is the same whichever CANN is installed. Each kernel ``k`` gets a C entry

    uint32_t aclrtlaunch_k(uint32_t blockDim, aclrtStream stream, <k's parameters, GM_ADDR as uint8_t*>)

returning 0 on success. ``model.py`` calls it as ``lib.k(block_dim, x, y, z, n)`` (or by its full
name ``lib.aclrtlaunch_k``): the runtime fills in the stream (``torch.npu.current_stream().npu_stream``,
which first drains torch_npu's task queue) and raises if the entry returns non-zero.

* CANN <= 8: a generated CMake project calls ``ascendc_library(kernels SHARED ...)``, which generates
  the ``aclrtlaunch_*`` entries itself.
* CANN 9 (no ``ascendc_kernel_cmake`` module, an ASC package instead): ``find_package(ASC)`` with a
  generated ``_evokernel_launch.asc`` that includes the kernel sources and defines the same entries
  with ``k<<<blockDim, nullptr, stream>>>(...)``.

Nothing here has run on an NPU yet; the recipe follows the project's Ascend plan and public CANN
samples. Discovery lives in ``verifier.toolchains``; this module is the one place for the recipe.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from verifier.backends.base import BuildPlan, BuildPlanError, Toolchain
from verifier.cdecl import DeclarationError, Param, Signature, global_functions, parse_extern_c
from verifier.linkage import LinkPolicy
from verifier.toolchains import AscendFindings, CannInstall, discover_ascend, npu_arch

RECIPE = 1
TARGET = "kernels"
LIBRARY = f"lib{TARGET}.so"
BUILT_LIBRARY = f"build/lib/{LIBRARY}"      # ascendc_library's LIBRARY_OUTPUT_DIRECTORY is ${CMAKE_BINARY_DIR}/lib
LAUNCH_FILE = "_evokernel_launch.asc"       # CANN 9 ASC flow only
ENTRY_PREFIX = "aclrtlaunch_"

# The paper's tolerance, for every floating dtype.
TOLERANCE = (1e-2, 1e-2)

DEVICE_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/svm0")

# ACL runtime error codes (asynchronous: they surface at the next synchronisation) -> meaning.
ERROR_CODES = {
    507015: "AI Core exception: the kernel faulted on the device, usually an out-of-range GM access (error "
            "code 95): check offsets, lengths and blockDim against the tensor sizes",
    507035: "vector core exception: a vector instruction faulted; check UB buffer sizes, 32-byte alignment of "
            "DataCopy lengths and the counts given to vector ops",
    507014: "AI Core timeout: the kernel did not finish (an endless loop, or a queue never dequeued/freed)",
    507034: "vector core timeout: the kernel did not finish (an endless loop, or a queue never dequeued/freed)",
    507033: "no NPU available to this process (driver missing, device busy or hidden)",
}
_TEXT_ERRORS = (
    ("ai core exception", 507015),
    ("aicore exception", 507015),
    ("vector core exception", 507035),
)


@dataclass(frozen=True)
class Kernel:
    """One ``__global__ __aicore__`` entry of the candidate, as declared."""

    name: str
    params: tuple[Param, ...]
    source: str

    @property
    def workspace_tiling(self) -> tuple[bool, bool]:
        """(HAVE_WORKSPACE, HAVE_TILING): whether the last parameters are ``workspace`` and ``tiling``."""
        names = [p.name for p in self.params]
        tiling = names[-1:] == ["tiling"]
        workspace = (names[-2:-1] if tiling else names[-1:]) == ["workspace"]
        return workspace, tiling


SKELETON = ('extern "C" __global__ __aicore__ void add(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) '
            "{ KernelAdd op; op.Init(x, y, z, n); op.Process(); }")


def find_kernels(sources: dict[str, str]) -> list[Kernel]:
    """The ``extern "C" __global__ __aicore__`` kernels of the candidate's sources (name -> text)."""
    kernels: list[Kernel] = []
    for file, text in sources.items():
        device = global_functions(text)
        declared = {sig.name: sig for sig in parse_extern_c(text)}
        for name in device:
            sig = declared.get(name)
            if sig is None:
                raise DeclarationError(f'{file}: kernel {name} is not extern "C"; declare each entry as {SKELETON}')
            if sig.restype != "void":
                raise DeclarationError(f"{file}: kernel {name} must return void")
            if any(k.name == name for k in kernels):
                raise DeclarationError(f"{file}: kernel {name} is defined in two files")
            kernels.append(Kernel(name, sig.params, file))
    if not kernels:
        raise DeclarationError(f'no Ascend C kernel found: declare each entry as {SKELETON}')
    return kernels


def launch_signature(kernel: Kernel) -> Signature:
    """The C entry the build exports for ``kernel``."""
    return Signature(f"{ENTRY_PREFIX}{kernel.name}", "uint32_t",
                     (Param("blockDim", "uint32_t", False), Param("stream", "aclrtStream", True), *kernel.params))


def compile_definitions(kernels: list[Kernel]) -> list[str]:
    """``HAVE_WORKSPACE`` / ``HAVE_TILING`` when the kernels' last parameters are workspace and tiling.
    The definitions apply to the whole library, so all kernels must agree."""
    kinds = {k.workspace_tiling for k in kernels}
    if len(kinds) > 1:
        listing = ", ".join(f"{k.name}({', '.join(p.name for p in k.params)})" for k in kernels)
        raise BuildPlanError("kernels in one candidate must agree on trailing workspace/tiling parameters "
                             f"(they become library-wide HAVE_WORKSPACE/HAVE_TILING): {listing}")
    workspace, tiling = kinds.pop()
    return [name for name, on in (("HAVE_WORKSPACE", workspace), ("HAVE_TILING", tiling)) if on]


def ascendc_cmake_project(install: CannInstall, soc: str, sources: list[str], definitions: list[str]) -> str:
    """CMakeLists.txt of the classic kernel-launch flow (CANN <= 8)."""
    lines = [
        "# Generated by EvoKernel for one candidate: Ascend C kernel-launch flow (ascendc_library).",
        "cmake_minimum_required(VERSION 3.16)",
        "project(evokernel_candidate LANGUAGES C CXX)",
        "",
        f'set(ASCEND_CANN_PACKAGE_PATH "{install.root}" CACHE PATH "CANN toolkit root")',
        f'set(SOC_VERSION "{soc}" CACHE STRING "SoC the kernels are built for")',
        'set(RUN_MODE "npu" CACHE STRING "npu, sim or cpu")',
        "if(NOT CMAKE_BUILD_TYPE)",
        "    set(CMAKE_BUILD_TYPE Release)",
        "endif()",
        f'set(ASCENDC_CMAKE_DIR "{install.cmake_dir}")',
        "include(${ASCENDC_CMAKE_DIR}/ascendc.cmake)",
        "",
        f"ascendc_library({TARGET} SHARED",
        *(f"    {name}" for name in sources),
        ")",
    ]
    if definitions:
        lines.append(f"ascendc_compile_definitions({TARGET} PRIVATE {' '.join(definitions)})")
    return "\n".join(lines) + "\n"


def asc_cmake_project(install: CannInstall, arch: str) -> str:
    """CMakeLists.txt of the CANN 9 ASC flow: one ``.asc`` translation unit (the generated launch file)."""
    return "\n".join([
        "# Generated by EvoKernel for one candidate: CANN 9 ASC flow (launch entries in "
        f"{LAUNCH_FILE}).",
        "cmake_minimum_required(VERSION 3.16)",
        f'find_package(ASC REQUIRED HINTS "{install.cmake_dir}")',
        "project(evokernel_candidate LANGUAGES ASC CXX)",
        "",
        "if(NOT CMAKE_BUILD_TYPE)",
        "    set(CMAKE_BUILD_TYPE Release)",
        "endif()",
        f"add_library({TARGET} SHARED {LAUNCH_FILE})",
        f"set_target_properties({TARGET} PROPERTIES LINKER_LANGUAGE ASC LIBRARY_OUTPUT_DIRECTORY ${{CMAKE_BINARY_DIR}}/lib)",
        f'target_include_directories({TARGET} PRIVATE ${{CMAKE_CURRENT_SOURCE_DIR}} "{install.root}/include")',
        f"target_compile_options({TARGET} PRIVATE $<$<COMPILE_LANGUAGE:ASC>:--npu-arch={arch}>)",
    ]) + "\n"


def asc_launch_source(kernels: list[Kernel], sources: list[str]) -> str:
    """The CANN 9 launch file: includes the kernel sources, defines ``aclrtlaunch_<kernel>`` entries."""
    out = ["// Generated by EvoKernel (CANN 9 ASC flow): one host entry per kernel, the same",
           "// uint32_t aclrtlaunch_<kernel>(blockDim, stream, args...) contract as ascendc_library.",
           '#include "acl/acl.h"']
    out += [f'#include "{name}"' for name in sources]
    for k in kernels:
        params = ", ".join(f"{p.ctype}{'*' if p.pointer else ''} {p.name}" for p in k.params)
        args = ", ".join(p.name for p in k.params)
        out += ["", f'extern "C" uint32_t {ENTRY_PREFIX}{k.name}(uint32_t blockDim, aclrtStream stream'
                    f"{', ' + params if params else ''})",
                "{", f"    {k.name}<<<blockDim, nullptr, stream>>>({args});", "    return 0;", "}"]
    return "\n".join(out) + "\n"


def build_commands(install: CannInstall, soc: str) -> list[list[str]]:
    """Configure, build, and copy the library to the top of the work folder."""
    if install.flow == "asc":
        configure = ["cmake", "-S", ".", "-B", "build", f"-DCMAKE_ASC_ARCHITECTURES={npu_arch(soc)}",
                     "-DCMAKE_BUILD_TYPE=Release"]
    else:
        configure = ["cmake", "-S", ".", "-B", "build", "-DRUN_MODE=npu", f"-DSOC_VERSION={soc}",
                     f"-DASCEND_CANN_PACKAGE_PATH={install.root}", "-DCMAKE_BUILD_TYPE=Release"]
    return [configure, ["cmake", "--build", "build", "-j"], ["cmake", "-E", "copy", BUILT_LIBRARY, LIBRARY]]


def explain_error(text: str) -> str:
    """The meaning of an ACL error code (or its usual wording) found in ``text``; "" when none."""
    for m in re.finditer(r"\b(50\d{4})\b", text):
        meaning = ERROR_CODES.get(int(m.group(1)))
        if meaning:
            return f"NPU error {m.group(1)}: {meaning}"
    low = text.lower()
    for needle, code in _TEXT_ERRORS:
        if needle in low:
            return f"NPU error {code}: {ERROR_CODES[code]}"
    if "undefined symbol" in low:
        return "NPU: a library does not match (undefined symbol): torch, torch_npu and CANN versions must agree"
    return ""


class AscendBackend:
    name = "ascend"
    device = "npu"
    source_suffixes = (".cpp",)
    header_suffixes = (".h", ".hpp")
    # Each job runs in a fresh interpreter: forking after torch_npu touched the device is unsafe, and an
    # asynchronous device error (507015...) leaves the process unusable for NPU work.
    process_model = "spawn"
    timer = "events"

    def __init__(self, env: Mapping[str, str] | None = None, *, home: str | None = None, system_root: str = "/",
                 machine: str | None = None, python: str | None = None, soc: str | None = None,
                 probe_torch: bool = True):
        self._env = dict(os.environ if env is None else env)
        self._home = home
        self._system_root = system_root
        self._machine = machine
        self._python = python
        self._soc = soc
        self._probe_torch = probe_torch

    @functools.cached_property
    def findings(self) -> AscendFindings:
        return discover_ascend(self._env, home=self._home, system_root=self._system_root, machine=self._machine,
                               python=self._python, soc=self._soc, probe_torch=self._probe_torch)

    def toolchain(self) -> Toolchain:
        f = self.findings
        inst = f.install
        details = {"cann_root": str(inst.root) if inst else "", "found_by": inst.found_by if inst else "",
                   "tried": ", ".join(f.tried), "flow": (inst.flow or "") if inst else "",
                   "cmake_module": str(inst.cmake_dir or "") if inst else "", "set_env": str(inst.set_env or "") if inst else "",
                   "cmake": f.cmake or "", "soc": f.soc or "", "soc_source": f.soc_source,
                   "torch": f.torch.get("torch", ""), "torch_npu": f.torch.get("torch_npu", ""),
                   "npu_smi": f.smi_note or " ".join(f.smi_names)}
        problems = [*f.toolchain_problems, *f.device_problems]
        return Toolchain(not problems, compiler=str(inst.bisheng or "") if inst else "",
                         version=f"CANN {inst.version}" if inst else "", device=f.device, details=details,
                         toolchain_ok=not f.toolchain_problems, device_ok=not f.device_problems, problems=problems)

    def _ready(self) -> tuple[CannInstall, str]:
        f = self.findings
        if f.install is None or f.install.problem:
            raise BuildPlanError(f.toolchain_problems[0] if f.toolchain_problems else "CANN not found")
        if not f.soc:
            raise BuildPlanError("no SoC to build for: no NPU detected; set EVOKERNEL_ASCEND_SOC (e.g. Ascend910B2)")
        if f.install.flow == "asc" and npu_arch(f.soc) is None:
            raise BuildPlanError(f"no --npu-arch known for SoC {f.soc}")
        return f.install, f.soc

    def build_key(self) -> str:
        f = self.findings
        inst = f.install
        where = f"{inst.root}|{inst.version}|{inst.flow}" if inst else "no-cann"
        return f"ascend|{RECIPE}|{where}|{f.soc}"

    def launchers(self, sources: dict[str, str]) -> list[Signature]:
        return [launch_signature(k) for k in find_kernels(sources)]

    def build_plan(self, sources: list[str], workdir: Path) -> BuildPlan:
        install, soc = self._ready()
        texts = {name: (Path(workdir) / name).read_text() for name in sources}
        try:
            kernels = find_kernels(texts)
        except DeclarationError as exc:
            raise BuildPlanError(str(exc)) from None
        if install.flow == "asc":
            files = {"CMakeLists.txt": asc_cmake_project(install, npu_arch(soc) or ""),
                     LAUNCH_FILE: asc_launch_source(kernels, sources)}
        else:
            files = {"CMakeLists.txt": ascendc_cmake_project(install, soc, sources, compile_definitions(kernels))}
        return BuildPlan(commands=build_commands(install, soc), library=LIBRARY, files=files)

    def tolerance(self, dtype: str) -> tuple[float, float]:
        return TOLERANCE

    def link_policy(self) -> LinkPolicy:
        # The CANN build links its runtime (ascendcl, the launch support) from the toolkit: any library
        # inside the toolkit is allowed; the launch support may load the kernel binary itself.
        install = self.findings.install
        return LinkPolicy(runtime_dirs=(str(install.root),) if install else (), loader_lookups=True,
                          runtime_names="the CANN toolkit's libraries")

    def sandbox_devices(self) -> list[str]:
        return sorted(set(glob.glob("/dev/davinci[0-9]*")) | {p for p in DEVICE_NODES if os.path.exists(p)})

    def worker_env(self) -> dict[str, str]:
        return dict(self.findings.env)

    def memory_limit(self) -> bool:
        return False

    def explain(self, text: str) -> str:
        return explain_error(text)
