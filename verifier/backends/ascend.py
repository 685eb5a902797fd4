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
samples. Discovery lives in ``verifier.toolchain.discovery``; this module is the one place for the recipe.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from verifier.backends import ascend_project as project_form
from verifier.backends.base import (
    FORM_KERNEL_LAUNCH,
    Backend,
    BuildPlan,
    BuildPlanError,
    KernelRules,
    Toolchain,
    TorchDeviceRuntime,
)
from verifier.sandbox.seccomp import RuntimeNeeds
from verifier.toolchain.cann import MSOPGEN_PATHS
from verifier.toolchain.cdecl import DeclarationError, Param, Signature, global_functions, parse_extern_c
from verifier.toolchain.discovery import (
    PROJECT_TORCH,
    TORCH_NPU_PAIRING,
    AscendFindings,
    CannInstall,
    discover_ascend,
    npu_arch,
)
from verifier.toolchain.linkage import LinkPolicy

if TYPE_CHECKING:
    import torch

RECIPE = 2          # 2: the generated project links the ACL runtime libraries; ASC entries return the launch error
TARGET = "kernels"
LIBRARY = f"lib{TARGET}.so"
BUILT_LIBRARY = f"build/lib/{LIBRARY}"      # ascendc_library's LIBRARY_OUTPUT_DIRECTORY is ${CMAKE_BINARY_DIR}/lib
LAUNCH_FILE = "_evokernel_launch.asc"       # CANN 9 ASC flow only
ENTRY_PREFIX = "aclrtlaunch_"

# The paper's tolerance, for every floating dtype.
TOLERANCE = (1e-2, 1e-2)

DEVICE_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/svm0")

# ACL runtime error codes (include/external/acl/error_codes/rt_error_codes.h) -> meaning and what to do.
# Kernel faults are asynchronous: they surface at the next synchronisation, usually the stream sync
# after the launch; on Atlas A2/A3 a faulting vector kernel most often comes back as 507035.
ERROR_CODES = {
    507015: "AI Core exception: the kernel faulted on the device, usually an out-of-range GM access (error "
            "code 95): check offsets, lengths and blockDim against the tensor sizes",
    507016: "AI Core trap exception: the kernel hit a trap (an out-of-range access or an assertion); check "
            "offsets, lengths and blockDim against the tensor sizes",
    507035: "vector core exception: a vector instruction faulted (on A2/A3 the usual report of a faulting "
            "kernel at the stream sync); check UB buffer sizes, GM offsets and lengths, 32-byte alignment of "
            "DataCopy lengths and the counts given to vector ops",
    507036: "vector core trap exception: a vector core trapped, usually an out-of-range GM or UB access; "
            "check offsets, lengths and blockDim against the tensor and buffer sizes",
    507042: "AI Core trap: read overflow (a read past the end of a buffer); check read offsets and lengths",
    507043: "AI Core trap: write overflow (a write past the end of a buffer); check write offsets and lengths",
    507044: "vector core trap: read overflow (a read past the end of a GM or UB buffer); check DataCopy "
            "offsets and lengths, and the last core's tail",
    507045: "vector core trap: write overflow (a write past the end of a GM or UB buffer); check DataCopy "
            "offsets and lengths, and the last core's tail",
    507046: "stream synchronisation timed out: the kernel did not finish (an endless loop, or a queue never "
            "dequeued/freed)",
    507014: "AI Core timeout: the kernel did not finish (an endless loop, or a queue never dequeued/freed)",
    507034: "vector core timeout: the kernel did not finish (an endless loop, or a queue never dequeued/freed)",
    507033: "device setup error: the NPU could not be set up for this process (driver, device busy or hidden)",
    207004: "no NPU device visible to this process (driver not loaded, or ASCEND_RT_VISIBLE_DEVICES hides it)",
    207001: "device memory allocation failed (out of NPU memory)",
    207018: "the NPU is out of memory",
    107001: "invalid device id (ASCEND_RT_VISIBLE_DEVICES or the device index)",
}
# Whose failure a status is (``status_failure``): the kernel's own, or not the kernel's (said so in the outcome).
KERNEL = "the kernel's"
BINDING = "the binding's (its tensors or its aclnn call), not the kernel's"
HOST_CODE = "the candidate's host code (op_host: InferShape or TilingFunc), not the kernel's"
PACKAGE = ("the op's package, not the kernel's: no kernel binary for this SoC and these dtypes (the OpDef's AddConfig "
           "and DataType lists) or none installed")
SETUP = ("the setup's, not the candidate's: CANN could not read the op package where ASCEND_CUSTOM_OPP_PATH and "
         "ASCEND_OPP_PATH point")
RUNTIME = "the NPU runtime's or the device's; not established as the kernel's"
# aclnn statuses (CANN's aclnn return codes: hicann/ops-nn docs/zh/context/aclnn_return_code.md) -> name, meaning,
# whose. What aclnn<Op>GetWorkspaceSize and aclnn<Op> return, and so what a custom op's binding returns.
ACLNN_STATUS: dict[int, tuple[str, str, str]] = {
    161001: ("ACLNN_ERR_PARAM_NULLPTR", "a parameter is an illegal nullptr", BINDING),
    161002: ("ACLNN_ERR_PARAM_INVALID", "a parameter failed validation (dtypes, shapes, formats)", BINDING),
    361001: ("ACLNN_ERR_RUNTIME_ERROR", "a call into the NPU runtime failed inside the API", RUNTIME),
    561000: ("ACLNN_ERR_INNER", "an internal error of the API", RUNTIME),
    561001: ("ACLNN_ERR_INNER_INFERSHAPE_ERROR", "the output shape inference failed", HOST_CODE),
    561002: ("ACLNN_ERR_INNER_TILING_ERROR", "the kernel's tiling failed (TilingFunc)", HOST_CODE),
    561003: ("ACLNN_ERR_INNER_FIND_KERNEL_ERROR", "no NPU kernel found for the call", PACKAGE),
    561101: ("ACLNN_ERR_INNER_CREATE_EXECUTOR", "the executor could not be created", RUNTIME),
    561103: ("ACLNN_ERR_INNER_NULLPTR", "a nullptr inside the API", RUNTIME),
    561104: ("ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE", "the op's attribute count is wrong", HOST_CODE),
    561107: ("ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND", "ASCEND_OPP_PATH is not set", SETUP),
    561108: ("ACLNN_ERR_INNER_LOAD_JSON_FAILED", "the op's information JSON in the kernel package did not load",
             SETUP),
    561109: ("ACLNN_ERR_INNER_JSON_VALUE_NOT_FOUND", "a field of the op's information JSON is missing", PACKAGE),
    561110: ("ACLNN_ERR_INNER_JSON_FORMAT_INVALID", "a format in the op's information JSON is invalid", PACKAGE),
    561111: ("ACLNN_ERR_INNER_JSON_DTYPE_INVALID", "a dtype in the op's information JSON is invalid", PACKAGE),
    561112: ("ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND", "the op's binary kernel package did not load", SETUP),
    561114: ("ACLNN_ERR_INNER_ATTR_NUM_OUT_OF_BOUND", "more attributes than the op's information JSON names",
             HOST_CODE),
    561115: ("ACLNN_ERR_INNER_ATTR_LEN_NOT_ENOUGH", "fewer attributes than the op's information JSON names",
             HOST_CODE),
}
# ACL runtime codes whose failure is not the kernel's (the rest of ERROR_CODES are its faults, traps and timeouts).
RUNTIME_SETUP_CODES = {507033: RUNTIME, 207004: RUNTIME, 207001: RUNTIME, 207018: RUNTIME, 107001: SETUP}
# Runtime codes are 1xxxxx (parameter), 2xxxxx (resource) and 5xxxxx (internal/device) with module 07.
_CODE = re.compile(r"\b([125]07\d{3})\b")
_TEXT_ERRORS = (
    ("ai core exception", 507015),
    ("aicore exception", 507015),
    ("vector core exception", 507035),
    ("vector core trap", 507036),
)

# The system workspace the Ascend C framework takes from the front of the kernel's workspace buffer
# (HAVE_WORKSPACE): 16 MiB on dav-2201 (Atlas A2/A3: 910B, 910_93). Other SoCs use the largest known
# size: allocating more than the framework takes only wastes memory, allocating less corrupts it.
SYSTEM_WORKSPACE_BYTES = {"dav-2201": 16 << 20}
DEFAULT_SYSTEM_WORKSPACE_BYTES = 16 << 20

# L2 cache per SoC, for flushing it before timed calls (twice its size is overwritten); newer torch_npu
# reports it (get_device_properties().L2_cache_size), which wins. Longest prefix first.
L2_BYTES = (("Ascend910B4", 96 << 20), ("Ascend910B", 192 << 20), ("Ascend910_93", 192 << 20))
DEFAULT_L2_BYTES = 192 << 20


ASCENDCL = "libascendcl.so"     # CANN's ACL library, as torch_npu loads it (its soname)


def recent_error_message() -> str:
    """CANN's last error message in this thread (``aclGetRecentErrMsg()`` of libascendcl, which torch_npu has loaded;
    never loaded here: the candidate's phase opens no file), or "" where there is none."""
    try:
        acl = ctypes.CDLL(ASCENDCL, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        recent = acl.aclGetRecentErrMsg
    except (OSError, AttributeError):
        return ""
    recent.restype = ctypes.c_char_p
    recent.argtypes = []
    text = recent()
    return " ".join(text.decode(errors="replace").split())[:1500] if text else ""


def status_failure(name: str, status: int, recent: str = "") -> str:
    """What launcher ``name`` returning ``status`` means: the aclnn or runtime code's name and meaning, whose failure
    it is (the kernel's only when it is), and CANN's own message (``recent``)."""
    if status in ACLNN_STATUS:
        code, meaning, whose = ACLNN_STATUS[status]
        text = f"{name}() returned {status} ({code}: {meaning}): {whose}"
    elif status in ERROR_CODES:
        whose = RUNTIME_SETUP_CODES.get(status, KERNEL)
        text = f"{name}() returned {status} (NPU error {status}: {ERROR_CODES[status]}): {whose}"
    elif 561000 <= status < 562000:
        text = f"{name}() returned {status} (an internal aclnn error): {RUNTIME}"
    else:
        text = f"{name}() returned {status}: the call failed (a status neither aclnn nor the runtime documents)"
    return text + (f"; CANN: {recent}" if recent else "; CANN gave no message (aclGetRecentErrMsg)")


# Where a job's CANN log goes: its stdout (ASCEND_SLOG_PRINT_TO_STDOUT=1, set for jobs by worker_env) or, where that
# is not honoured, the default folder under the job's $HOME (its folder): ascend/log/.
LOG_VARIABLES = {"ASCEND_SLOG_PRINT_TO_STDOUT": "1", "ASCEND_GLOBAL_LOG_LEVEL": "3"}   # errors only: under the job's
#                                                                                        file-size limit
_LOG_ERROR = re.compile(r"^\[ERROR\]")


def cann_log_tail(job_dir: Path, lines: int = 6, limit: int = 1500) -> str:
    """The last error lines CANN logged for a job (its stdout, then the newest files under ``ascend/log``), joined;
    "" when there are none. What a device failure's outcome carries besides the error itself."""
    found: list[str] = []
    root = os.path.realpath(job_dir)
    sources = [Path(root) / "stdout.txt"]
    logs = Path(root) / "ascend" / "log"
    if logs.is_dir():
        sources += sorted((p for p in logs.rglob("*.log") if p.is_file()), key=lambda p: p.stat().st_mtime)[-4:]
    for path in sources:
        if not os.path.realpath(path).startswith(root + os.sep):   # the job's own files only, never a link out
            continue
        try:
            with path.open("rb") as handle:
                handle.seek(max(0, path.stat().st_size - 65536))
                text = handle.read().decode(errors="replace")
        except OSError:
            continue
        found += [line.strip() for line in text.splitlines() if _LOG_ERROR.match(line.strip())]
    return " | ".join(found[-lines:])[-limit:]


def system_workspace_bytes(soc: str | None) -> int:
    """Bytes of system workspace the framework reserves in front of a kernel's user workspace."""
    arch = npu_arch(soc or "")
    return SYSTEM_WORKSPACE_BYTES.get(arch or "", DEFAULT_SYSTEM_WORKSPACE_BYTES)


def l2_bytes(soc: str | None, reported: int = 0) -> int:
    """The NPU's L2 size: what torch_npu reports when it does, else the SoC's, else the largest known."""
    if reported > 0:
        return int(reported)
    for prefix, size in L2_BYTES:
        if (soc or "").startswith(prefix):
            return size
    return DEFAULT_L2_BYTES


# How a job learns its SoC: the backend's worker environment carries what discovery found (aclrtGetSocName(),
# npu-smi, EVOKERNEL_ASCEND_SOC); the job never calls torch.npu.get_device_name (MultiKernelBench's Ascend backend
# avoids it: it crashes on some installs).
SOC_VARIABLE = "EVOKERNEL_ASCEND_SOC"


def job_soc() -> str | None:
    """The SoC of the NPU a job runs on, as discovery found it (``SOC_VARIABLE``); None outside a job."""
    return os.environ.get(SOC_VARIABLE) or None


class NpuModule(Protocol):
    """What :func:`npu_l2_bytes` reads of torch_npu's device module (``torch.npu``)."""

    def current_device(self) -> int: ...
    def get_device_properties(self, device: int) -> Any: ...


def npu_l2_bytes(npu: NpuModule | None = None) -> int:
    """The current NPU's L2 size, read in the worker (where torch_npu is imported): the device
    properties' ``L2_cache_size`` when this torch_npu has it, else by the job's SoC (``job_soc``)."""
    if npu is None:
        import torch

        npu = getattr(torch, "npu", None)
        if npu is None:
            return DEFAULT_L2_BYTES
    try:
        reported = int(getattr(npu.get_device_properties(npu.current_device()), "L2_cache_size", 0) or 0)
    except Exception:  # an older torch_npu: fall back to the SoC table
        reported = 0
    return l2_bytes(job_soc(), reported)


class WorkspaceArgument:
    """Converts the ``workspace`` argument of an Ascend entry: ``model.py`` passes the bytes of user
    workspace its kernel needs (0 for none); the runtime allocates system + user workspace on the
    device (the framework hands the kernel the part after the system workspace) and keeps the buffer
    alive until the next call (the launch is asynchronous, on the same stream)."""

    def __init__(self, where: str, device: str, soc: str | None = None):
        self._where = where
        self._device = device
        self._soc = soc
        self.buffer: torch.Tensor | None = None   # the workspace tensor (torch is imported lazily)

    def system_bytes(self) -> int:
        return system_workspace_bytes(self._soc or job_soc())

    def __call__(self, value: object) -> int:
        import torch

        from verifier.backends.base import KernelCallError

        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise KernelCallError(f"{self._where}: pass the bytes of user workspace the kernel needs (an int, 0 for "
                            f"none), not {type(value).__name__}: the runtime allocates the system workspace "
                            f"({self.system_bytes() >> 20} MiB here) in front of it and passes the whole buffer")
        self.buffer = torch.empty(self.system_bytes() + value, dtype=torch.uint8, device=self._device)
        return self.buffer.data_ptr()


@dataclass(frozen=True)
class Kernel:
    """One ``__global__ __aicore__`` entry of the candidate, as declared."""

    name: str
    params: tuple[Param, ...]
    source: str

    @property
    def workspace_tiling(self) -> tuple[bool, bool]:
        """(HAVE_WORKSPACE, HAVE_TILING): whether the last parameters are the workspace and the tiling
        (``trailing_workspace_tiling``)."""
        return trailing_workspace_tiling([p.name for p in self.params])


def trailing_workspace_tiling(names: list[str]) -> tuple[bool, bool]:
    """(workspace, tiling) at the end of a kernel's parameter list, by position as CANN's framework takes them: with
    HAVE_WORKSPACE the last parameter is the workspace, or the one before the last with HAVE_TILING (asc-devkit
    docs, 编程指南/附录/基于样例工程完成Kernel直调.md). Which of the last two a kernel means as such is read from their
    names, whatever their spelling: ``tiling``, ``tilingGm`` (the official matmul samples), ``workspace``,
    ``usrWorkspace``."""
    def named(name: str, word: str) -> bool:
        return word in name.lower()

    tiling = bool(names) and named(names[-1], "tiling")
    rest = names[:-1] if tiling else names
    workspace = bool(rest) and named(rest[-1], "workspace")
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


# ascendc_library links ascendcl, runtime and profapi only as INTERFACE libraries of the target, and
# the static libascendc_runtime.a (which calls into them) with -Wl,-z,now: libkernels.so would then
# need whoever loads it to have loaded those first. ctypes loads it with RTLD_NOW, so it must name
# them itself (DT_NEEDED); --no-as-needed keeps the entries even where a linker drops unused ones.
RUNTIME_LIBRARIES = ("ascendcl", "runtime", "profapi")


def workspace_index(sig: Signature) -> int | None:
    """Where the ``workspace`` parameter of an ``aclrtlaunch_`` entry is, when the build defines
    HAVE_WORKSPACE for it (it is the last parameter, or the last before ``tiling``)."""
    if not sig.name.startswith(ENTRY_PREFIX):
        return None
    names = [p.name for p in sig.params]
    workspace, tiling = trailing_workspace_tiling(names[2:])      # after blockDim and the stream
    at = len(names) - (2 if tiling else 1)
    return at if workspace and at >= 2 and sig.params[at].pointer else None


class AscendRuntime(TorchDeviceRuntime):
    """An NPU through torch_npu (``torch.npu``), imported and the device selected before each job. The
    ``aclrtStream`` is the current stream's ``npu_stream`` (reading it drains torch_npu's task queue,
    so queued fills and events are issued before the kernel); a kernel ``k`` is also callable by the
    name of its entry ``aclrtlaunch_k``, whose non-zero return is a failed launch; the workspace
    argument is the user bytes, allocated with the system workspace in front; the flush is twice the
    NPU's L2."""

    device = "npu"
    module_name = "npu"
    stream_handle = "npu_stream"
    stream_type = "aclrtStream"
    entry_prefix = ENTRY_PREFIX
    modules = ("torch_npu",)
    status_returns = True   # a custom op's binding returns what aclnn<Op>GetWorkspaceSize or aclnn<Op> returned

    def prepare(self) -> None:
        import torch_npu  # noqa: F401  (registers torch.npu)

        self.module().set_device(0)

    def flush_bytes(self, requested: int) -> int:
        return 2 * npu_l2_bytes()

    def status_failure(self, name: str, status: int) -> str:
        return status_failure(name, status, recent_error_message())

    def argument(self, sig: Signature, index: int, where: str) -> tuple[Any, Callable[[Any], Any]] | None:
        if workspace_index(sig) != index:
            return None
        return ctypes.c_void_p, WorkspaceArgument(where, self.device)


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
    lines += [
        "# The library loads on its own: it names the ACL runtime libraries it calls (see RUNTIME_LIBRARIES).",
        f"target_link_options({TARGET} PRIVATE -Wl,--no-as-needed)",
        f"target_link_libraries({TARGET} PRIVATE {' '.join(RUNTIME_LIBRARIES)})",
    ]
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
        f"set_target_properties({TARGET} PROPERTIES LINKER_LANGUAGE ASC "
        f"LIBRARY_OUTPUT_DIRECTORY ${{CMAKE_BINARY_DIR}}/lib)",
        f'target_include_directories({TARGET} PRIVATE ${{CMAKE_CURRENT_SOURCE_DIR}} "{install.root}/include")',
        f"target_compile_options({TARGET} PRIVATE $<$<COMPILE_LANGUAGE:ASC>:--npu-arch={arch}>)",
        f'target_link_directories({TARGET} PRIVATE "{install.root}/lib64")',
        f"target_link_options({TARGET} PRIVATE -Wl,--no-as-needed)",
        f"target_link_libraries({TARGET} PRIVATE {' '.join(RUNTIME_LIBRARIES)})",
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
                "{", f"    {k.name}<<<blockDim, nullptr, stream>>>({args});",
                "    // the launch's own error (0 when it was queued), as ascendc_library's entries return it",
                "    return static_cast<uint32_t>(aclrtGetLastError(ACL_RT_THREAD_LEVEL));", "}"]
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
    for m in _CODE.finditer(text):
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


# Anti-hack rules on kernel sources (verifier.gates.antihack): kernels are device code, launched by the
# runtime on torch_npu's stream; the CANN kernel headers may be included with quotes.
KERNEL_RULES = KernelRules(
    words={},
    includes=((r"^acl/|^aclnn|^hccl", "kernels are device code; the runtime launches them on torch_npu's stream"),),
    sdk_headers=frozenset({"kernel_operator.h", "lib/matmul_intf.h", "kernel_tiling/kernel_tiling.h",
                           "lib/matrix/matmul/matmul.h"}),
    prefixes=((r"acl(?:rt|nn|op)?[A-Z]\w*\s*\(", "kernels may not call the ACL runtime (streams, memory, "
               "devices): the runtime launches them on torch_npu's stream"),),
)


# The custom-op project form (verifier.backends.ascend_project) checks each place by what runs there. Kernel
# sources (op_kernel/) follow KERNEL_RULES. The host sources (op_host/: TilingFunc, the op definition, shape
# inference) run inside the CANN op framework in the calling process: the common rules, and the CANN host
# headers may be included with quotes. The binding calls the generated aclnn<Op> and creates its aclTensors,
# so ACL and aclnn headers and calls are what it is for (aclrtMalloc too: aclnn<Op>GetWorkspaceSize may ask
# for a workspace, which the binding allocates and keeps); devices, streams and synchronisation stay the runtime's.
CANN_HOST_HEADERS = (r"^(register|tiling|graph|exe_graph|platform|opdev|aclnn|aclnnop|aclnn_kernels|level2|op_common|"
                     r"log|error|experiment)/")
CANN_KERNEL_HEADERS = r"^(kernel_operator\.h|kernel_tiling/|lib/|impl/|kernel_log\.h|kernel_utils\.h)"
PROJECT_KERNEL_RULES = KernelRules(words=KERNEL_RULES.words, includes=KERNEL_RULES.includes,
                                   sdk_headers=KERNEL_RULES.sdk_headers, prefixes=KERNEL_RULES.prefixes,
                                   sdk_patterns=(CANN_KERNEL_HEADERS,))
# Timer headers stay refused in host code too: TilingFunc runs inside every timed call.
HOST_RULES = KernelRules(words={}, sdk_patterns=(CANN_HOST_HEADERS,))
BINDING_RULES = KernelRules(
    words={},
    sdk_patterns=(r"^(acl/|aclnn/|aclnn_|aclnnop/)",),
    prefixes=((r"aclrtMemcpy\w*\s*\(", "the binding may not copy data (to the host or elsewhere): it calls "
               "aclnn<Op> on the tensors model.py passes"),
              (r"aclrt(?:SetDevice|ResetDevice|CreateStream|DestroyStream|SetCurrentContext|CreateContext"
               r"|Synchronize\w*)\s*\(", "the binding calls aclnn<Op> on the stream the runtime passes; "
               "devices, streams and synchronisation are the runtime's (allocate outputs in model.py; "
               "aclrtMalloc is for the aclnn workspace only)"),),
)


# What the CANN runtime needs from a job's seccomp filter and limits (verifier.sandbox.seccomp.RuntimeNeeds), from
# what is documented; nothing has measured it on an NPU (MultiKernelBench and NPUKernelBench run unsandboxed), and
# bench/npu_check.py runs every check with and without the filter so that the first run tells a sandbox failure
# from a kernel failure.
RUNTIME_NEEDS = RuntimeNeeds(
    threads=True, signal_timers=False, socket_families=(socket.AF_UNIX,), open_files=1024,
    opens_files_after_setup=True, device_ioctls=True,
    sources=(
        "threads: torch_npu queues device work on a second thread (TASK_QUEUE_ENABLE=1, torch_npu's documented "
        "default) and the ACL runtime reports completions from its own threads (aclrtSubscribeReport / "
        "aclrtProcessReport in the AscendCL API reference)",
        "files opened after set-up: a custom op's kernels and tiling library are found at the first aclnn call "
        "through ASCEND_CUSTOM_OPP_PATH (msopgen user guide, 'Building and Deploying an Operator': the binary "
        "package installs the op's *.o and *.json, loaded at run time); kernel-launch libraries register their "
        "binary on the first launch",
        "device ioctls: the driver is reached through /dev/davinci*, /dev/davinci_manager, /dev/devmm_svm and "
        "/dev/hisi_hdc (CANN's container guides bind exactly these nodes), driven by ioctl",
        "open files 1024: not established (a guess above the CPU's 256 for the device nodes and libraries the "
        "runtime holds open)",
        "signal timers and sockets other than Unix: not established either way; if the runtime arms timer_create "
        "or opens another socket family, the filter answers EPERM and npu_check's pair of runs shows it",
        "the CPU-time limit (run_timeout_s x threads + 10 s) counts the runtime's own threads too: not measured",
    ))


class AscendBackend(Backend):
    name = "ascend"
    display_name = "Huawei Ascend NPU (Ascend C, built with the CANN toolkit)"
    device = "npu"
    source_suffixes = (".cpp",)
    header_suffixes = (".h", ".hpp")
    # Each job runs in a fresh interpreter: forking after torch_npu touched the device is unsafe, and an
    # asynchronous device error (507015...) leaves the process unusable for NPU work.
    process_model = "spawn"
    timer = "events"
    kernel_rules = KERNEL_RULES
    # per place of a custom-op project (its first folder; "" for the top level: the binding)
    project_rules = MappingProxyType({project_form.KERNEL_DIR: PROJECT_KERNEL_RULES, project_form.HOST_DIR: HOST_RULES,
                                      "": BINDING_RULES})
    device_runtime = AscendRuntime
    runtime_needs = RUNTIME_NEEDS
    # kernel-launch: flat kernel sources built into one library; custom-op: a CANN custom-operator project
    forms = (FORM_KERNEL_LAUNCH, project_form.FORM_CUSTOM_OP)
    extra_files = project_form.PROJECT_EXTRAS      # a project's op JSON and CMakeLists.txt, beside its sources
    candidate_folders = project_form.PROJECT_DIRS  # where a project keeps its sources (op_host/, op_kernel/)

    @classmethod
    def claims(cls, files: dict[str, str]) -> bool:
        return any(name.endswith(cls.source_suffixes) and "__aicore__" in text for name, text in files.items())

    @classmethod
    def form_of(cls, files: dict[str, str] | list[str]) -> str:
        """"custom-op" for a CANN custom-operator project (sources under op_host/ or op_kernel/), else
        "kernel-launch"."""
        return project_form.FORM_CUSTOM_OP if project_form.is_project(files) else FORM_KERNEL_LAUNCH

    @classmethod
    def form_prompt(cls, form: str) -> str:
        """What a prompt adds to ask for ``form`` (the custom-op project's files and layout; "" for kernel-launch)."""
        return project_form.form_prompt("ascend", form)

    def layout_problem(self, form: str, files: dict[str, str]) -> str | None:
        """A custom-op project's layout: its pieces, each once, in its places (``check_project_layout``)."""
        return project_form.check_project_layout(files, self.target) if form == project_form.FORM_CUSTOM_OP else None

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

    @property
    def target(self) -> str | None:
        """The SoC builds target (discovery's), which the format gate holds a custom op's AddConfig to."""
        return self.findings.soc

    def toolchain(self) -> Toolchain:
        f = self.findings
        inst = f.install
        details = {"cann_root": str(inst.root) if inst else "", "found_by": inst.found_by if inst else "",
                   "tried": ", ".join(f.tried), "flow": (inst.flow or "") if inst else "",
                   "cmake_module": str(inst.cmake_dir or "") if inst else "",
                   "set_env": str(inst.set_env or "") if inst else "",
                   "cmake": f.cmake or "", "soc": f.soc or "", "soc_source": f.soc_source,
                   "torch": f.torch.get("torch", ""), "torch_npu": f.torch.get("torch_npu", ""),
                   "npu_smi": f.smi_note or " ".join(f.smi_names), "acl_soc": f.acl_note or f.soc or "",
                   "versions": ", ".join(f"{k.replace('cann', 'CANN')} {v or 'not found'}"
                                         for k, v in f.versions.items()),
                   "versions_wanted": f"torch {PROJECT_TORCH}, torch_npu {PROJECT_TORCH}, "
                                      f"CANN {TORCH_NPU_PAIRING[PROJECT_TORCH][1]}",
                   "toolkit_python": f.python or "", "toolkit_python_found_by": f.python_note}
        problems = [*f.toolchain_problems, *f.device_problems]
        # the kernel-launch flow's CMake scripts need only the standard library; the custom-op form's build
        # (msopgen's project, the kernel compile) imports CANN's Python packages
        warnings = [f"custom-op form: {f.python_problem}"] if inst and f.python_problem else []
        return Toolchain(not problems, compiler=str(inst.bisheng or "") if inst else "",
                         version=f"CANN {inst.version}" if inst else "", device=f.device, details=details,
                         toolchain_ok=not f.toolchain_problems, device_ok=not f.device_problems, problems=problems,
                         warnings=warnings)

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
        if project_form.is_project(sources):
            binding = [n for n in sources if "/" not in n]
            found = [sig for n in binding for sig in parse_extern_c(sources[n])]
            if not found:
                raise DeclarationError('the custom-op binding has no extern "C" launcher: declare each as '
                                       'extern "C" uint32_t <name>(aclrtStream stream, ...) calling aclnn<Op>')
            return found
        return [launch_signature(k) for k in find_kernels(sources)]

    def project_plan(self, workdir: Path) -> BuildPlan:
        """The custom-op flow for the project in ``workdir`` (see ``verifier.backends.ascend_project``)."""
        install, soc = self._ready()
        if install.msopgen is None:
            raise BuildPlanError(f"CANN at {install.root} has no msopgen (looked in "
                                 f"{', '.join(r.format(arch=install.arch) for r in MSOPGEN_PATHS)}): the custom-op "
                                 "form needs it; install the CANN toolkit package, or answer in the kernel-launch form")
        if self.findings.python is None:
            raise BuildPlanError(self.findings.python_problem)
        root = Path(workdir)
        files = {str(p.relative_to(root)): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}
        try:
            project = project_form.read_project(files)
        except project_form.ProjectError as exc:
            raise BuildPlanError(str(exc)) from None
        generated = {project_form.BUILD_SCRIPT: project_form.build_script(
            install, soc, project, list(files), files.get("CMakeLists.txt"), self.findings.python)}
        generated[project_form.OP_JSON] = (files[project.json] if project.json else project_form.op_json(project.spec))
        # msopgen and build.sh run the toolkit's Python: its prefix and user site (pip install --user) stay visible,
        # and its user site is found where the user's HOME put it (the build's HOME is its own folder)
        paths = self.findings.python_paths
        return BuildPlan(commands=[["bash", project_form.BUILD_SCRIPT]], library=project_form.BINDING_LIBRARY,
                         files=generated, keep=[project_form.VENDOR],
                         min_timeout_s=project_form.BUILD_MIN_TIMEOUT_S,
                         readable=[str(Path(self.findings.python).parent), *paths.readable()], env=paths.env())

    @classmethod
    def project_problem(cls, files: dict[str, str]) -> str | None:
        """The anti-hack rule a custom-op project adds beyond its places' rules: the binding calls only its own
        op's aclnn API (``verifier.backends.ascend_project.binding_problem``)."""
        return project_form.binding_problem(files)

    # what call_env sets: the job gets these and nothing else from it
    call_variables = project_form.CALL_VARIABLES

    def call_env(self, library: Path) -> dict[str, str]:
        """What the calling process needs for a custom-op candidate's library (its private vendor); nothing
        for a kernel-launch library."""
        folder = Path(library).parent
        if not (folder / project_form.OPP_PATH).is_dir():
            return {}
        return project_form.call_env(str(folder), self.worker_env())

    def build_plan(self, sources: list[str], workdir: Path) -> BuildPlan:
        if project_form.is_project(sources):
            return self.project_plan(workdir)
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
        # A custom op's binding links the op API its own package installed (found through its $ORIGIN RUNPATH).
        # Load-time code is not compared here: a custom op registers itself with static initializers (``OP_ADD``'s
        # ``g_X_added``, docs/ascend.md), and how many the CANN flows add per kernel has not been measured (no CANN
        # on the machines this was written on), so an empty-sources baseline could refuse every honest kernel.
        install = self.findings.install
        return LinkPolicy(runtime_sonames=(r"libcust_opapi\.so",),
                          runtime_dirs=(str(install.root),) if install else (), loader_lookups=True,
                          runtime_names="the CANN toolkit's libraries and the custom op's own op API",
                          load_time_unchecked="a custom op registers itself at load (OP_ADD), and the CANN flows' "
                                              "own load-time code per kernel is not measured")

    def sandbox_devices(self) -> list[str]:
        return sorted(set(glob.glob("/dev/davinci[0-9]*")) | {p for p in DEVICE_NODES if os.path.exists(p)})

    def worker_env(self) -> dict[str, str]:
        """CANN's environment, and the SoC discovery found (the job reads it rather than asking torch_npu's
        get_device_name, which MultiKernelBench's Ascend backend avoids: "causes crash"), and CANN's log printed to
        the job's stdout at the error level (``LOG_VARIABLES``), where the harness reads it (``log_tail``)."""
        env = {**dict(self.findings.env), **LOG_VARIABLES}
        if self.findings.soc:
            env[SOC_VARIABLE] = self.findings.soc
        return env

    @staticmethod
    def log_tail(job_dir: Path) -> str:
        """The job's CANN log tail (``cann_log_tail``), labelled, attached to any failure of its job; "" without one."""
        tail = cann_log_tail(job_dir)
        return f"CANN log: {tail}" if tail else ""

    def memory_limit(self) -> bool:
        return False

    def explain(self, text: str) -> str:
        return explain_error(text)
