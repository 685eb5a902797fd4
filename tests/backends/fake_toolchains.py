"""Fake toolchain trees for the backend tests: CANN installs of each layout, CUDA toolkits, and the
``nvcc`` / ``nvidia-smi`` / ``npu-smi`` commands as small shell scripts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from verifier.backends.ascend import AscendRuntime
from verifier.toolchain.cann import CANN_PYTHON_REQUIREMENTS, soc_family

NPU_SMI_910B2 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B2               | OK            | 93.6        37                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
| 1     910B2               | OK            | 90.1        36                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""

# Where each CANN flavour keeps its Ascend C CMake support, relative to the toolkit root.
CMAKE_LAYOUTS = {
    "arch": "x86_64-linux/tikcpp/ascendc_kernel_cmake",     # where asc-devkit installs it
    "tikcpp": "tikcpp/ascendc_kernel_cmake",                # the samples' second choice
    "compiler": "compiler/tikcpp/ascendc_kernel_cmake",     # CANN 7/8 toolkit
    "tools": "tools/tikcpp/ascendc_kernel_cmake",           # newer 8.x toolkits
    "devkit": "ascendc_devkit/tikcpp/samples/cmake",        # older samples layout
}


def write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def make_cann(root: Path, layout: str = "compiler", *, arch: str = "x86_64", version: str = "8.0.RC3",
              socs: tuple[str, ...] = ("Ascend910B2", "Ascend910B3"), version_file: str = "version.cfg",
              set_env: str | None = None, msopgen: bool = True, opp_kernels: bool = True) -> Path:
    """A fake CANN toolkit root. ``layout``: one of CMAKE_LAYOUTS, or "asc" (CANN 9, ASC package only),
    or "runtime" (no kernel build support at all). ``msopgen``: with the custom-op project generator
    (a placeholder that fails: ``make_custom_op_cann`` has one that runs). ``opp_kernels``: with the binary operator
    package of each SoC's family under ``opp/built-in/op_impl/ai_core/tbe/kernel/``."""
    root.mkdir(parents=True, exist_ok=True)
    if layout in CMAKE_LAYOUTS:
        module = root / CMAKE_LAYOUTS[layout].replace("x86_64-linux", f"{arch}-linux")
        module.mkdir(parents=True)
        (module / "ascendc.cmake").write_text("# fake ascendc.cmake\n")
    elif layout == "asc":
        package = root / f"{arch}-linux/lib64/cmake/ASC"
        package.mkdir(parents=True)
        (package / "ASCConfig.cmake").write_text("# fake ASC package\n")
    if layout != "runtime":
        write_script(root / f"{arch}-linux/ccec_compiler/bin/bisheng", "echo bisheng\n")
        if msopgen:
            write_script(root / "python/site-packages/bin/msopgen", "echo fake msopgen >&2; exit 1\n")
    (root / f"{arch}-linux/lib64").mkdir(parents=True, exist_ok=True)
    if version_file == "version.cfg":
        (root / "version.cfg").write_text(f"# version\ntoolkit_running_version=[8.0.0.1.200:{version}]\n")
    elif version_file == "install.info":
        (root / f"{arch}-linux/ascend_toolkit_install.info").write_text(
            f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C19\n")
    platform = root / f"{arch}-linux/data/platform_config"
    platform.mkdir(parents=True, exist_ok=True)
    for soc in socs:
        (platform / f"{soc}.ini").write_text("[version]\n")
        if opp_kernels:   # the binary operator package of the SoC's family (Ascend-cann-kernels-*)
            kernels = root / "opp/built-in/op_impl/ai_core/tbe/kernel" / soc_family(soc)
            kernels.mkdir(parents=True, exist_ok=True)
            (kernels / "binary_info_config.json").write_text("{}\n")
    if set_env is not None:
        (root / "set_env.sh").write_text(set_env)
    return root


FAKE_NVCC = """\
case "$1" in
  --version) echo "nvcc: NVIDIA (R) Cuda compiler driver"; echo "Cuda compilation tools, release 12.4, V12.4.131" ;;
  --list-gpu-arch) printf 'compute_50\\ncompute_60\\ncompute_70\\ncompute_75\\ncompute_80\\ncompute_86\\ncompute_89\\ncompute_90\\n' ;;
  *) echo "fake nvcc: $*" ; exit 1 ;;
esac
"""


def make_cuda(root: Path, release: str = "12.4") -> Path:
    """A fake CUDA toolkit folder whose bin/nvcc prints ``release``."""
    write_script(root / "bin/nvcc", FAKE_NVCC.replace("12.4", release))
    return root


def has_real(command: str) -> bool:
    import shutil

    found = shutil.which(command)
    return found is not None and os.access(found, os.X_OK)


# A stand-in for CANN's ascendc.cmake: builds the kernels for the host with g++ and generates the
# aclrtlaunch_<kernel> entries (each runs the kernel once per block and returns aclrtGetLastError(0)),
# so the generated project, the command lines, the library copy and the runtime's calling convention
# run for real without CANN. Like the real ascendc_library it names ascendcl/runtime/profapi only as
# INTERFACE libraries and links with -z now: the generated project must link them itself.
FAKE_ASCENDC_CMAKE = r"""
find_program(EVOKERNEL_FAKE_PYTHON NAMES python3 python REQUIRED)
function(ascendc_library target kind)
  set(sources)
  foreach(s ${ARGN})
    get_filename_component(abs "${s}" ABSOLUTE)
    list(APPEND sources "${abs}")
  endforeach()
  set(gen "${CMAKE_BINARY_DIR}/auto_gen/${target}_launch.cpp")
  execute_process(COMMAND "${EVOKERNEL_FAKE_PYTHON}" "${ASCENDC_CMAKE_DIR}/gen_launch.py" "${gen}" ${sources}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gen_launch.py failed")
  endif()
  add_library(${target} ${kind} ${sources} ${gen})
  target_include_directories(${target} PRIVATE "${ASCEND_CANN_PACKAGE_PATH}/include")
  target_link_directories(${target} PUBLIC "${ASCEND_CANN_PACKAGE_PATH}/lib64")
  target_link_libraries(${target} PRIVATE -Wl,-z,now INTERFACE ascendcl runtime profapi)
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
  file(WRITE "${CMAKE_BINARY_DIR}/seen.txt" "SOC_VERSION=${SOC_VERSION}\nRUN_MODE=${RUN_MODE}\n")
endfunction()
function(ascendc_compile_definitions target scope)
  target_compile_definitions(${target} ${scope} ${ARGN})
  file(APPEND "${CMAKE_BINARY_DIR}/seen.txt" "definitions=${ARGN}\n")
endfunction()
"""

FAKE_GEN_LAUNCH = r"""
import re
import sys

out, *sources = sys.argv[1:]
lines = ["#include <cstdint>", "typedef void* aclrtStream;", 'extern "C" int aclrtGetLastError(int level);',
         'extern "C" { uint32_t evokernel_block = 0, evokernel_blocks = 1; }']
for src in sources:
    text = open(src).read()
    for m in re.finditer(r'extern "C" __global__ __aicore__ void (\w+)\(([^)]*)\)', text):
        name = m.group(1)
        params = [p.strip() for p in m.group(2).split(",") if p.strip()]
        decl = ", ".join(p.replace("GM_ADDR", "uint8_t*") for p in params)
        args = ", ".join(p.split()[-1] for p in params)
        lines.append(f'extern "C" void {name}({decl});')
        lines.append(f'extern "C" uint32_t aclrtlaunch_{name}(uint32_t blockDim, aclrtStream stream, {decl}) {{ '
                     f"evokernel_blocks = blockDim; for (uint32_t b = 0; b < blockDim; ++b) {{ evokernel_block = b; "
                     f"{name}({args}); }} return (uint32_t)aclrtGetLastError(0); }}")
import os
os.makedirs(os.path.dirname(out), exist_ok=True)
open(out, "w").write("\n".join(lines) + "\n")
"""

FAKE_KERNEL_OPERATOR_H = r"""
#pragma once
#include <cstdint>
#define __global__
#define __aicore__
#define __gm__
typedef uint8_t* GM_ADDR;
extern "C" uint32_t evokernel_block, evokernel_blocks;
namespace AscendC {
inline uint32_t GetBlockIdx() { return evokernel_block; }
inline uint32_t GetBlockNum() { return evokernel_blocks; }
}
"""

# Stand-ins for CANN's runtime libraries. aclrtGetSocName() answers $EVOKERNEL_FAKE_SOC (or nothing
# before aclInit when $EVOKERNEL_FAKE_SOC_AFTER_INIT is set); aclrtGetLastError() answers
# $EVOKERNEL_FAKE_ACL_ERROR (a launch failure), 0 by default.
FAKE_ASCENDCL = r"""
#include <cstdlib>
static bool initialised = false;
extern "C" int aclInit(const char*) { initialised = true; return 0; }
extern "C" int aclFinalize() { initialised = false; return 0; }
extern "C" const char* aclrtGetSocName() {
    if (getenv("EVOKERNEL_FAKE_SOC_AFTER_INIT") && !initialised) return nullptr;
    return getenv("EVOKERNEL_FAKE_SOC");
}
extern "C" int aclrtGetLastError(int) { const char* e = getenv("EVOKERNEL_FAKE_ACL_ERROR"); return e ? atoi(e) : 0; }
extern "C" int aclrtPeekAtLastError(int level) { return aclrtGetLastError(level); }
"""


def make_acl_stubs(lib64: Path) -> Path:
    """libascendcl.so, libruntime.so and libprofapi.so stand-ins built with g++ (each with its SONAME,
    so a process that already loaded one by path satisfies a library that names it)."""
    lib64.mkdir(parents=True, exist_ok=True)
    sources = {"ascendcl": FAKE_ASCENDCL, "runtime": 'extern "C" int rtFakeRuntime() { return 0; }\n',
               "profapi": 'extern "C" int MsprofFake() { return 0; }\n'}
    import subprocess

    for name, text in sources.items():
        src = lib64 / f"{name}.cpp"
        src.write_text(text)
        subprocess.run(["g++", "-shared", "-fPIC", "-O0", f"-Wl,-soname,lib{name}.so", str(src), "-o",
                        str(lib64 / f"lib{name}.so")], check=True, capture_output=True)
        src.unlink()
    return lib64


def make_host_cann(root: Path, layout: str = "compiler") -> Path:
    """A fake CANN whose kernel-launch module builds for the host (see FAKE_ASCENDC_CMAKE), with
    stand-in runtime libraries in lib64."""
    make_cann(root, layout)
    module = root / CMAKE_LAYOUTS[layout]
    (module / "ascendc.cmake").write_text(FAKE_ASCENDC_CMAKE)
    (module / "gen_launch.py").write_text(FAKE_GEN_LAUNCH)
    (root / "include").mkdir(exist_ok=True)
    (root / "include/kernel_operator.h").write_text(FAKE_KERNEL_OPERATOR_H)
    make_acl_stubs(root / "lib64")
    return root


def preload_acl_stubs(root: Path) -> None:
    """Load the stand-ins into this process (as set_env.sh's LD_LIBRARY_PATH would let the loader find
    them), so in-process tests can load a library that names them."""
    import ctypes

    for name in ("ascendcl", "runtime", "profapi"):
        ctypes.CDLL(str(root / "lib64" / f"lib{name}.so"), mode=ctypes.RTLD_GLOBAL)


# Stand-ins for the custom-op flow, in fake_cann/ beside this file (see fake_cann/README.md): msopgen
# (fake_cann/bin/msopgen: validates the op JSON as msopgen does and writes msopgen's project, named by the snake-cased
# op type, with template content), the project's build.sh (fake_cann/project/build.sh: compiles every top-level
# op_host source with g++ against stand-in CANN headers, links them into one library, checks the kernel file and
# the CANN Python, packs a custom_opp_*.run) and CANN's Python package (fake_cann/python/tbe: needs CANN's Python
# requirements). The package installs, under --install-path, a vendor whose op API (libcust_opapi.so, built here
# with g++) runs AddCustom (z = x + alpha * y, float) on the host.
FAKE_CANN = Path(__file__).parent / "fake_cann"

# What the stand-in CANN's set_env.sh sets, as CANN's does: its root, the OPP path, msopgen on PATH, its Python
# packages on PYTHONPATH, its libraries on LD_LIBRARY_PATH.
FAKE_SET_ENV = """export ASCEND_HOME_PATH={root}
export ASCEND_TOOLKIT_HOME={root}
export ASCEND_OPP_PATH={root}/opp
export PATH={root}/python/site-packages/bin:$PATH
export PYTHONPATH={root}/python/site-packages:$PYTHONPATH
export LD_LIBRARY_PATH={root}/lib64:$LD_LIBRARY_PATH
"""

FAKE_ACL_H = r"""
#pragma once
#include <cstdint>
typedef void* aclrtStream;
typedef int aclnnStatus;
typedef enum { ACL_FLOAT = 0, ACL_FLOAT16 = 1 } aclDataType;
typedef enum { ACL_FORMAT_ND = 2 } aclFormat;
struct aclTensor;
struct aclOpExecutor;
extern "C" aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
    const int64_t* stride, int64_t offset, aclFormat format, const int64_t* storageDims, uint64_t storageDimsNum,
    void* tensorData);
extern "C" int aclDestroyTensor(const aclTensor* tensor);
"""

FAKE_NNOPBASE = r"""
#include <cstdint>
struct aclTensor { void* data; int64_t n; };
extern "C" aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t, int, const int64_t*, int64_t, int,
                                      const int64_t*, uint64_t, void* tensorData) {
    return new aclTensor{tensorData, viewDims[0]};
}
extern "C" int aclDestroyTensor(const aclTensor* t) { delete t; return 0; }
"""

FAKE_ACLNN_ADD_CUSTOM_H = r"""
#pragma once
#include "acl/acl.h"
extern "C" aclnnStatus aclnnAddCustomGetWorkspaceSize(const aclTensor* x, const aclTensor* y, float alpha,
                                                      aclTensor* z, uint64_t* workspaceSize, aclOpExecutor** executor);
extern "C" aclnnStatus aclnnAddCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                      aclrtStream stream);
"""

# Like CANN's op API, it finds the op's implementation through ASCEND_CUSTOM_OPP_PATH (here: the vendor's
# op_impl folder must be there) and fails with a status otherwise.
FAKE_CUST_OPAPI = r"""
#include <cstdint>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
struct aclTensor { void* data; int64_t n; };
struct aclOpExecutor { const aclTensor *x, *y, *z; float alpha; };
extern "C" int aclnnAddCustomGetWorkspaceSize(const aclTensor* x, const aclTensor* y, float alpha, aclTensor* z,
                                              uint64_t* size, aclOpExecutor** executor) {
    const char* opp = getenv("ASCEND_CUSTOM_OPP_PATH");
    struct stat st;
    if (!opp || stat((std::string(opp) + "/op_impl").c_str(), &st) != 0) return 161002;
    *size = 0; *executor = new aclOpExecutor{x, y, z, alpha}; return 0;
}
extern "C" int aclnnAddCustom(void*, uint64_t, aclOpExecutor* e, void*) {
    for (int64_t i = 0; i < e->z->n; ++i)
        ((float*)e->z->data)[i] = ((float*)e->x->data)[i] + e->alpha * ((float*)e->y->data)[i];
    delete e;
    return 0;
}
"""


class HostAscendRuntime(AscendRuntime):
    """The Ascend runtime's declarations (stream type, entry names, status returns, workspace) on the host's
    tensors, for sandboxed jobs calling a library the fake CANN built for the CPU (the job imports it by name:
    this folder must be on the job's PYTHONPATH)."""

    device = "cpu"
    modules = ()

    def prepare(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def stream_synchronize(self) -> None:
        pass

    def events(self):  # type: ignore[override]
        return None

    def current_stream(self):  # type: ignore[override]
        return lambda: 0

    def flush_bytes(self, requested: int) -> int:
        return requested


def make_custom_op_cann(root: Path) -> Path:
    """A fake CANN for the custom-op form: ``make_host_cann`` plus the stand-ins of fake_cann/ (msopgen and its
    project, the stand-in host headers, CANN's Python package, the kernel-compile step), a set_env.sh, the ACL and
    aclnn base headers, a stand-in libnnopbase.so, and the op API a package of AddCustom installs."""
    import shutil
    import subprocess

    make_host_cann(root)
    site = root / "python/site-packages"
    shutil.copytree(FAKE_CANN / "include", root / "include", dirs_exist_ok=True)
    shutil.copy(FAKE_CANN / "bin/msopgen", site / "bin/msopgen")
    shutil.copytree(FAKE_CANN / "project", site / "project")
    shutil.copytree(FAKE_CANN / "python/tbe", site / "tbe")
    shutil.copytree(FAKE_CANN / "tools", root / "tools")
    for script in (site / "bin/msopgen", site / "project/build.sh"):
        script.chmod(0o755)
    (root / "set_env.sh").write_text(FAKE_SET_ENV.format(root=root))
    (root / "include/acl").mkdir(parents=True, exist_ok=True)
    (root / "include/acl/acl.h").write_text(FAKE_ACL_H)
    (root / "include/aclnn").mkdir(exist_ok=True)
    src = root / "lib64/nnopbase.cpp"
    src.write_text(FAKE_NNOPBASE)
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-Wl,-soname,libnnopbase.so", str(src), "-o",
                    str(root / "lib64/libnnopbase.so")], check=True, capture_output=True)
    src.unlink()
    opapi = site / "opapi"
    opapi.mkdir(parents=True)
    (opapi / "aclnn_add_custom.h").write_text(FAKE_ACLNN_ADD_CUSTOM_H)
    (opapi / "cust_opapi.cpp").write_text(FAKE_CUST_OPAPI)
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-Wl,-soname,libcust_opapi.so", str(opapi / "cust_opapi.cpp"),
                    "-o", str(opapi / "libcust_opapi.so")], check=True, capture_output=True)
    return root


# The Python packages CANN's installation guide requires (module names), for a stand-in "toolkit Python".
CANN_PYTHON_MODULES = tuple(module for _, module in CANN_PYTHON_REQUIREMENTS)


def make_toolkit_python(folder: Path, *, numpy_version: str = "1.26.4", missing: tuple[str, ...] = (),
                        user_home: Path | None = None) -> Path:
    """A Python as a CANN workstation's toolkit Python would be (CANN's requirements importable, numpy < 2): this
    machine's interpreter (outside any virtual environment, without its site-packages: -S) with stand-in modules of
    those names on its path.
    ``missing``: requirements left out. ``user_home``: the requirements installed with ``pip install --user`` under
    that home instead: the stand-in finds its user site as Python does (``$PYTHONUSERBASE``, else ``$HOME/.local``;
    ``lib/pythonX.Y/site-packages`` beneath). Returns the folder holding its ``python3``."""
    import os
    import sys

    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    site = folder / "site" if user_home is None else user_home / f".local/lib/python{py}/site-packages"
    for module in CANN_PYTHON_MODULES:
        if module in missing:
            continue
        package = site / module.replace(".", "/")
        package.mkdir(parents=True, exist_ok=True)
        for parent in list(package.relative_to(site).parents)[:-1]:
            (site / parent / "__init__.py").touch()
        version = numpy_version if module == "numpy" else "1.0"
        (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    interpreter = os.path.realpath(sys.executable)       # the interpreter itself, not the venv's launcher
    if user_home is not None:
        user = f'"${{PYTHONUSERBASE:-$HOME/.local}}/lib/python{py}/site-packages"'
        return write_script(folder / "bin/python3", f'PYTHONPATH={user}${{PYTHONPATH:+:$PYTHONPATH}} '
                            f'exec "{interpreter}" -S "$@"\n').parent
    return write_script(folder / "bin/python3", f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{interpreter}" -S "$@"\n').parent
