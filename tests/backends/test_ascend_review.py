"""The fixes from the desk review of the Ascend backend against the official CANN sources (asc-devkit's
ascendc_library, the runtime's rt_error_codes.h, torch_npu's release table), one group per finding,
each on the fake CANN trees of ``fake_toolchains``:

1. libkernels.so names the ACL runtime libraries it calls, so it loads on its own;
2. the runtime allocates system + user workspace for a kernel with a ``workspace`` parameter;
3. torch / torch_npu / CANN versions are compared and the fix named;
4. runtime error codes (507035 at the stream sync, 507016, 507036, 507042-507046, 207004) and the
   ASC-flow entry's real return code;
5. the CMake module under ``<arch>-linux/tikcpp`` and ``tikcpp``;
6. the SoC from ``aclrtGetSocName()``, npu-smi only as a fallback that knows A3 names;
7. 192 KiB of UB on 910B in the seeds, the NPU's L2 per SoC or as torch_npu reports it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from verifier.backends.ascend import (
    ERROR_CODES,
    AscendBackend,
    AscendRuntime,
    explain_error,
    l2_bytes,
    npu_l2_bytes,
    system_workspace_bytes,
    workspace_index,
)
from verifier.runtime import KernelCallError, KernelLibrary
from verifier.toolchain.cdecl import Param, Signature
from verifier.toolchain.discovery import (
    PROJECT_TORCH,
    discover_ascend,
    explain_torch_npu_error,
    find_cann,
    soc_from_smi_name,
    version_pairing,
)

from fake_toolchains import (
    CMAKE_LAYOUTS,
    NPU_SMI_910B2,
    make_acl_stubs,
    make_cann,
    make_host_cann,
    preload_acl_stubs,
    write_script,
)

HAS_BUILD_TOOLS = bool(shutil.which("cmake") and shutil.which("g++"))
needs_build_tools = pytest.mark.skipif(not HAS_BUILD_TOOLS, reason="needs cmake and g++")
needs_gxx = pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")

ADD = '''#include "kernel_operator.h"

extern "C" __global__ __aicore__ void add(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n)
{
    for (uint32_t i = AscendC::GetBlockIdx(); i < n; i += AscendC::GetBlockNum())
        ((float *)z)[i] = ((float *)x)[i] + ((float *)y)[i];
}
'''


def backend_for(root: Path, tmp_path: Path, soc: str = "Ascend910B2") -> AscendBackend:
    env = {"ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp"), "PATH": "/usr/bin:/bin"}
    return AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64", soc=soc,
                         probe_torch=False)


# ----------------------------------------------------------------------------- 1. the library loads alone


def _load_in_fresh_process(library: Path, lib64: Path) -> subprocess.CompletedProcess:
    """ctypes.CDLL (RTLD_NOW) in a new interpreter whose loader finds CANN's lib64, as set_env.sh sets it up."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib64)}
    return subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('loaded')",
                           str(library)], capture_output=True, text=True, timeout=120, env=env)


def _needed(library: Path) -> set[str]:
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    return {line.split("[")[1].split("]")[0] for line in out.splitlines() if "(NEEDED)" in line}


@pytest.mark.slow
@needs_build_tools
@pytest.mark.skipif(not shutil.which("readelf"), reason="needs readelf")
def test_built_library_names_the_acl_runtime_and_loads_on_its_own(tmp_path):
    """ascendc_library names ascendcl/runtime/profapi only as INTERFACE libraries and links with -z now:
    without the generated project's own link line the library does not load (undefined symbol)."""
    from verifier.build import build_candidate

    root = make_host_cann(tmp_path / "cann")
    backend = backend_for(root, tmp_path)
    result = build_candidate(backend, {"add.cpp": ADD}, tmp_path / "cache", sandbox=False)
    assert result.ok, result.log
    assert {"libascendcl.so", "libruntime.so", "libprofapi.so"} <= _needed(result.library)
    loaded = _load_in_fresh_process(result.library, root / "lib64")
    assert loaded.returncode == 0 and "loaded" in loaded.stdout, loaded.stderr

    # the same project without the link line (what ascendc_library alone gives) does not load
    work = tmp_path / "bare"
    work.mkdir()
    (work / "add.cpp").write_text(ADD)
    plan = backend.build_plan(["add.cpp"], work)
    cmake = plan.files["CMakeLists.txt"]
    assert "target_link_libraries(kernels PRIVATE ascendcl runtime profapi)" in cmake
    (work / "CMakeLists.txt").write_text("\n".join(line for line in cmake.splitlines()
                                                   if not line.startswith("target_link_")) + "\n")
    for command in plan.commands:
        proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    bare = _load_in_fresh_process(work / "libkernels.so", root / "lib64")
    assert bare.returncode != 0 and "undefined symbol: aclrtGetLastError" in bare.stderr


# ----------------------------------------------------------------------------- 2. workspace

WORKSPACE_SOURCE = r'''
#include <cstdint>
#include <cstring>
typedef void* aclrtStream;
// Writes the user workspace (after the system part, as the framework hands it to the kernel) in full.
extern "C" uint32_t aclrtlaunch_mm(uint32_t blockDim, aclrtStream stream, uint8_t* a, uint32_t system,
                                   uint32_t user, uint8_t* workspace, uint8_t* tiling) {
    memset(workspace + system, 7, user);
    workspace[system + user - 1] = 42;
    return 0;
}
'''


@pytest.fixture(scope="module")
def workspace_library(tmp_path_factory):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    result = build_candidate(get_backend("cpu"), {"k.cpp": WORKSPACE_SOURCE}, tmp_path_factory.mktemp("ws"))
    assert result.ok, result.log
    return str(result.library), [s.to_dict() for s in result.signatures]


def test_workspace_parameter_is_found_where_have_workspace_applies():
    def sig(*names):
        return Signature("aclrtlaunch_k", "uint32_t", (Param("blockDim", "uint32_t", False),
                                                       Param("stream", "aclrtStream", True),
                                                       *(Param(n, "uint8_t", True) for n in names)))
    assert workspace_index(sig("a", "workspace", "tiling")) == 3
    assert workspace_index(sig("a", "workspace")) == 3
    assert workspace_index(sig("workspace", "a")) is None          # not where the build defines HAVE_WORKSPACE
    assert workspace_index(Signature("k", "void", (Param("workspace", "uint8_t", True),))) is None


def test_runtime_allocates_system_and_user_workspace(workspace_library, on_host):
    lib = KernelLibrary(*workspace_library, on_host(AscendRuntime))
    a = torch.zeros(8, dtype=torch.uint8)
    tiling = torch.zeros(8, dtype=torch.int32)
    system = system_workspace_bytes("Ascend910B2")
    assert system == 16 << 20
    user = 4096
    assert lib.mm(1, a, system, user, user, tiling) == 0        # model.py passes the user bytes
    buffer = lib.mm._converters[5][1].buffer
    assert buffer.numel() == system + user and buffer.dtype == torch.uint8
    assert int(buffer[-1]) == 42 and int(buffer[system]) == 7
    with pytest.raises(KernelCallError, match="pass the bytes of user workspace"):
        lib.mm(1, a, system, user, torch.empty(16, dtype=torch.uint8), tiling)


def test_contract_and_seeds_spell_out_the_workspace():
    contract = " ".join((Path(__file__).resolve().parents[2] / "core/knowledge/ascend/contract.md").read_text().split())
    assert "system workspace" in contract and "16 MiB" in contract and "bytes of user workspace" in contract


# ----------------------------------------------------------------------------- 3. version pairing


def test_version_pairing_names_what_to_install():
    assert version_pairing("2.13.0+cpu", "2.13.0", "9.2.0") == []
    assert version_pairing("2.13.0", "", "9.2.0") == []        # nothing installed: said elsewhere
    (torch_problem,) = version_pairing("2.13.0+cpu", "2.12.0.post3", "9.2.0")
    assert torch_problem.startswith("version mismatch: torch_npu 2.12.0.post3 is built for torch 2.12.0 but torch "
                                    "is 2.13.0+cpu")
    assert "torch_npu==2.13.0" in torch_problem and "CANN 9.2.0" in torch_problem
    (old_cann,) = version_pairing("2.13.0", "2.13.0", "8.0.RC3")
    assert "torch_npu 2.13.0 is released for CANN 9.2.0 alone" in old_cann and "install CANN 9.2.0" in old_cann
    # one CANN line per torch_npu release (Ascend/pytorch COMPATIBILITY.md, #50): no range either way
    assert version_pairing("2.13.0", "2.13.0", "8.5.0") != []
    assert version_pairing("2.13.0", "2.13.0", "9.3.0") != []
    assert version_pairing("2.13.0", "2.13.0", "9.2.1") == []   # the same line
    assert version_pairing("2.12.0", "2.12.0", "9.1.0") == []
    assert version_pairing("2.13.0", "2.13.0", "unknown") == []


def test_missing_torch_npu_says_which_release_and_cann():
    line = explain_torch_npu_error("No module named 'torch_npu'", "2.13.0+cpu")
    assert "pip install 'evokernel[npu]'" in line and "torch_npu 2.13.0" in line and "CANN 9.2.0" in line
    other = explain_torch_npu_error("No module named 'torch_npu'", "2.9.0")
    assert f"install torch=={PROJECT_TORCH}" in other and "2.9.0" in other


def _fake_torch_python(tmp_path: Path, torch_version: str, torch_npu: str, name: str = "Ascend910B2") -> str:
    probe = (f'{{"torch": "{torch_version}", "torch_npu": "{torch_npu}", "torch_npu_dist": "{torch_npu}", '
             f'"count": 1, "name": "{name}"}}')
    return str(write_script(tmp_path / "python", 'case "$2" in *find_spec*) exit 0 ;; esac\n'
                            f"echo 'EVOKERNEL-PROBE {probe}'\n"))


def test_doctor_reports_a_torch_npu_built_for_another_torch(tmp_path, bare_env, tool_bin):
    root = make_cann(tmp_path / "cann", version="9.2.0")
    write_script(tool_bin / "cmake", "true\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp")}
    python = _fake_torch_python(tmp_path, "2.13.0+cpu", "2.12.0")
    backend = AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64", python=python)
    tc = backend.toolchain()
    assert backend.findings.soc == "Ascend910B2"
    assert not tc.device_ok and any(p.startswith("version mismatch: torch_npu 2.12.0 is built for torch 2.12.0")
                                    for p in tc.problems)
    assert tc.details["versions"] == "torch 2.13.0+cpu, torch_npu 2.12.0, CANN 9.2.0"
    assert tc.details["versions_wanted"] == "torch 2.13.0, torch_npu 2.13.0, CANN 9.2.0"
    matched = AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64",
                            python=_fake_torch_python(tmp_path, "2.13.0+cpu", "2.13.0")).toolchain()
    assert matched.available, matched.problems


# ----------------------------------------------------------------------------- 4. errors


@pytest.mark.parametrize("code", [507016, 507035, 507036, 507042, 507043, 507044, 507045, 507046, 207004])
def test_runtime_error_codes_have_a_meaning(code):
    assert code in ERROR_CODES
    line = explain_error(f"RuntimeError: ACL stream synchronize failed, error code:{code}")
    assert line == f"NPU error {code}: {ERROR_CODES[code]}"


def test_stream_sync_and_no_device_wordings():
    assert "vector core exception" in explain_error(
        "RuntimeError: call aclrtSynchronizeStreamWithTimeout failed, error code is 507035")
    assert "no NPU device" in explain_error("aclrtSetDevice failed: 207004")
    assert explain_error("shape (507035,) is fine") != ""  # a bare code is still read as one
    assert explain_error("error 145000 from GE") == ""       # not a runtime code


@pytest.mark.slow
@needs_build_tools
def test_an_entry_returns_the_launch_error_and_the_runtime_raises_it(tmp_path, monkeypatch, on_host):
    from verifier.build import build_candidate

    root = make_host_cann(tmp_path / "cann")
    result = build_candidate(backend_for(root, tmp_path), {"add.cpp": ADD}, tmp_path / "cache", sandbox=False)
    assert result.ok, result.log
    preload_acl_stubs(root)
    lib = KernelLibrary(str(result.library), [s.to_dict() for s in result.signatures], on_host(AscendRuntime))
    x = torch.randn(64)
    z = torch.empty_like(x)
    assert lib.add(4, x, x, z, x.numel()) == 0
    monkeypatch.setenv("EVOKERNEL_FAKE_ACL_ERROR", "507035")   # the stand-in's aclrtGetLastError()
    with pytest.raises(KernelCallError, match=r"aclrtlaunch_add\(\) returned 507035") as caught:
        lib.add(4, x, x, z, x.numel())
    assert "vector core exception" in explain_error(str(caught.value))


# ----------------------------------------------------------------------------- 5. CMake module search


@pytest.mark.parametrize("layout", ["arch", "tikcpp"])
def test_cmake_module_under_tikcpp_folders(tmp_path, layout):
    root = make_cann(tmp_path / "root", layout, arch="aarch64")
    install, _ = find_cann({"ASCEND_HOME_PATH": str(root)}, tmp_path, tmp_path, machine="aarch64")
    assert install.flow == "ascendc_library"
    assert install.cmake_dir == root / CMAKE_LAYOUTS[layout].replace("x86_64", "aarch64")


def test_arch_tikcpp_comes_first(tmp_path):
    root = make_cann(tmp_path / "root", "compiler")
    arch = root / CMAKE_LAYOUTS["arch"]
    arch.mkdir(parents=True)
    (arch / "ascendc.cmake").write_text("")
    install, _ = find_cann({"ASCEND_HOME_PATH": str(root)}, tmp_path, tmp_path, machine="x86_64")
    assert install.cmake_dir == arch


# ----------------------------------------------------------------------------- 6. SoC


NPU_SMI_A3 = NPU_SMI_910B2.replace("910B2     ", "Ascend910 ")


@needs_gxx
def test_soc_comes_from_aclrtgetsocname_before_npu_smi(tmp_path, bare_env, tool_bin):
    root = make_cann(tmp_path / "root", socs=("Ascend910_9392",))
    make_acl_stubs(root / "lib64")
    write_script(tool_bin / "npu-smi", f"/bin/cat <<'EOF'\n{NPU_SMI_A3}EOF\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp"),
           "EVOKERNEL_FAKE_SOC": "Ascend910_9392"}
    found = discover_ascend(env, home=tmp_path, system_root=tmp_path, machine="x86_64", probe_torch=False)
    assert (found.soc, found.soc_source) == ("Ascend910_9392", "aclrtGetSocName()")
    assert found.device_problems == []
    # a runtime that answers only after aclInit (the official sample initialises first)
    late = discover_ascend({**env, "EVOKERNEL_FAKE_SOC_AFTER_INIT": "1"}, home=tmp_path, system_root=tmp_path,
                           machine="x86_64", probe_torch=False)
    assert late.soc == "Ascend910_9392"


@needs_gxx
def test_npu_smi_is_the_fallback_and_knows_its_limits(tmp_path, bare_env, tool_bin):
    root = make_cann(tmp_path / "root")
    make_acl_stubs(root / "lib64")                  # aclrtGetSocName() answers nothing here
    write_script(tool_bin / "npu-smi", f"/bin/cat <<'EOF'\n{NPU_SMI_A3}EOF\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp")}
    found = discover_ascend(env, home=tmp_path, system_root=tmp_path, machine="x86_64", probe_torch=False)
    assert found.soc is None and found.acl_note == "aclrtGetSocName() returned nothing"
    assert any("does not say the SoC" in p and "EVOKERNEL_ASCEND_SOC" in p for p in found.device_problems)
    named = discover_ascend({**env, "EVOKERNEL_ASCEND_SOC": "Ascend910B2"}, home=tmp_path, system_root=tmp_path,
                            machine="x86_64", probe_torch=False)
    assert named.soc == "Ascend910B2" and named.device_problems == []
    assert soc_from_smi_name("910_9392") == ("Ascend910_9392", "")
    assert soc_from_smi_name("Ascend910_9382")[0] == "Ascend910_9382"
    assert soc_from_smi_name("910B4")[0] == "Ascend910B4"
    assert soc_from_smi_name("Ascend910")[0] is None


# ----------------------------------------------------------------------------- 7. UB and L2


def test_softmax_example_gives_910b_ub_as_192_kib():
    knowledge = Path(__file__).resolve().parents[2] / "core/knowledge/ascend"
    softmax = (knowledge / "example_softmax.md").read_text()
    assert "192 KiB" in softmax and "256 KiB" not in softmax
    assert "256 KiB" not in (knowledge / "memory.md").read_text()


def test_l2_size_per_soc_or_as_reported(monkeypatch):
    assert l2_bytes("Ascend910B4") == 96 << 20
    assert l2_bytes("Ascend910B3") == 192 << 20
    assert l2_bytes("Ascend910B4", reported=123456) == 123456

    def npu(props):
        return SimpleNamespace(current_device=lambda: 0, get_device_properties=lambda i: props)

    monkeypatch.setenv("EVOKERNEL_ASCEND_SOC", "Ascend910B4")      # the SoC discovery found, in the job
    assert npu_l2_bytes(npu(SimpleNamespace(total_memory=1))) == 96 << 20
    assert npu_l2_bytes(npu(SimpleNamespace(L2_cache_size=64 << 20))) == 64 << 20
