"""The Ascend custom-op project form: recognised by its files at the format gate, each place checked by its own
anti-hack rules, and the generated CANN custom-op flow (msopgen, build.sh, the private vendor install, the
binding's link line) exact, against fake CANN trees."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verifier.backends import get_backend
from verifier.backends.ascend import AscendBackend
from verifier.backends.ascend_project import (
    BUILD_SCRIPT,
    OP_JSON,
    ProjectError,
    call_env,
    op_json,
    parse_op_def,
    read_project,
)
from verifier.backends.base import BuildPlanError
from verifier.gates.antihack import check_candidate
from verifier.gates.format import check_format
from verifier.runtime import KernelCallError

from fake_toolchains import HostAscendRuntime, make_cann, make_custom_op_cann, make_toolkit_python, preload_acl_stubs

TILING = """#include "register/tilingdata_base.h"
namespace optiling {
BEGIN_TILING_DATA_DEF(AddCustomTilingData)
  TILING_DATA_FIELD_DEF(uint32_t, totalLength);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(AddCustom, AddCustomTilingData)
}
"""

HOST = """#include "add_custom_tiling.h"
#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"
#define OP_LOGD(name, fmt, ...) printf(fmt, ##__VA_ARGS__)
namespace optiling {
static ge::graphStatus TilingFunc(gert::TilingContext* context)
{
    AddCustomTilingData tiling;
    tiling.set_totalLength(context->GetInputShape(0)->GetOriginShape().GetShapeSize());
    context->SetBlockDim(8);
    tiling.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
    context->GetRawTilingData()->SetDataSize(tiling.GetDataSize());
    return ge::GRAPH_SUCCESS;
}
}
namespace ops {
class AddCustom : public OpDef {
public:
    explicit AddCustom(const char* name) : OpDef(name)
    {
        this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16})
            .Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Input("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16})
            .Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Output("z").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16})
            .Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Attr("alpha").AttrType(OPTIONAL).Float(1.0);
        this->AICore().SetTiling(optiling::TilingFunc);
        this->AICore().AddConfig("ascend910b");
    }
};
OP_ADD(AddCustom);
}
"""

KERNEL = """#include "kernel_operator.h"
extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling)
{
    GET_TILING_DATA(tiling_data, tiling);
}
"""

BINDING = """#include "acl/acl.h"
#include "aclnn_add_custom.h"
extern "C" uint32_t add(aclrtStream stream, void* x, void* y, void* z, int64_t n)
{
    int64_t shape[1] = {n};
    int64_t strides[1] = {1};
    aclTensor* tx = aclCreateTensor(shape, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, 1, x);
    aclTensor* ty = aclCreateTensor(shape, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, 1, y);
    aclTensor* tz = aclCreateTensor(shape, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, 1, z);
    uint64_t size = 0;
    aclOpExecutor* executor = nullptr;
    aclnnStatus status = aclnnAddCustomGetWorkspaceSize(tx, ty, 1.0f, tz, &size, &executor);
    if (status == 0) status = aclnnAddCustom(nullptr, size, executor, stream);
    aclDestroyTensor(tx);
    aclDestroyTensor(ty);
    aclDestroyTensor(tz);
    return status;
}
"""

MODEL = """import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x, y):
        z = torch.empty_like(x)
        lib.add(x, y, z, x.numel())
        return z
"""

PROJECT = {"op_host/add_custom_tiling.h": TILING, "op_host/add_custom.cpp": HOST,
           "op_kernel/add_custom.cpp": KERNEL, "binding.cpp": BINDING, "model.py": MODEL}

ASCEND = AscendBackend(probe_torch=False)


def fmt(files: dict[str, str]) -> str | None:
    return check_format(files, ASCEND)


def test_the_backend_takes_both_forms_and_the_gate_recognises_each_by_its_files():
    assert ASCEND.forms == ("kernel-launch", "custom-op")
    assert fmt(PROJECT) is None
    # the CPU and CUDA backends declare no forms of their own: kernel-launch only; a project is recognised as one
    # (by the backend that declares the form) and refused, and other folders stay refused
    refused = check_format(PROJECT, get_backend("cpu"))
    assert refused is not None and "custom-op form" in refused and "takes: kernel-launch" in refused
    assert "no folders" in (check_format({"model.py": MODEL, "sub/k.cpp": KERNEL}, get_backend("cpu")) or "")


@pytest.mark.parametrize("drop, says", [
    ("op_host/add_custom.cpp", "no op definition"),
    ("op_host/add_custom_tiling.h", "no tiling data definition"),
    ("op_kernel/add_custom.cpp", "no device kernel"),
    ("binding.cpp", "no binding"),
])
def test_a_missing_piece_is_named(drop, says):
    files = {k: v for k, v in PROJECT.items() if k != drop}
    assert says in (fmt(files) or "")


@pytest.mark.parametrize("name, says", [
    ("src/extra.cpp", "op_host/ and op_kernel/ only"),
    ("op_kernel/a/b/deep.h", "at most 2 folders deep"),
    ("op_host/helper.py", "unexpected file type"),
    ("notes.txt", "unexpected top-level file"),
])
def test_layout_rules(name, says):
    assert says in (fmt({**PROJECT, name: "// x\n"}) or "")


def test_a_doubled_piece_is_named():
    files = {**PROJECT, "op_host/other_tiling.h": TILING}
    assert "2 tiling data definitions" in (fmt(files) or "")
    assert "not valid JSON" in (fmt({**PROJECT, "add_custom.json": "[{"}) or "")


def test_the_op_json_is_derived_from_the_op_definition():
    spec = parse_op_def(HOST)
    assert json.loads(op_json(spec)) == [{
        "op": "AddCustom", "language": "cpp",
        "input_desc": [{"name": "x", "param_type": "required", "format": ["ND", "ND"], "type": ["float", "float16"]},
                       {"name": "y", "param_type": "required", "format": ["ND", "ND"], "type": ["float", "float16"]}],
        "output_desc": [{"name": "z", "param_type": "required", "format": ["ND", "ND"],
                         "type": ["float", "float16"]}],
        "attr": [{"name": "alpha", "param_type": "optional", "type": "float", "default_value": 1.0}]}]
    with pytest.raises(ProjectError, match="OP_ADD"):
        parse_op_def("namespace ops {}\n")


def test_each_place_has_its_own_anti_hack_rules():
    assert check_candidate(PROJECT, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") is None
    # the kernel may not call ACL; the binding may, but not manage devices or streams
    bad_kernel = {**PROJECT, "op_kernel/add_custom.cpp": KERNEL.replace("GET_TILING_DATA(tiling_data, tiling);",
                                                                       "aclrtSynchronizeStream(0);")}
    assert "aclrtSynchronizeStream is not allowed" in (
        check_candidate(bad_kernel, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") or "")
    bad_binding = {**PROJECT, "binding.cpp": BINDING.replace("uint64_t size = 0;", "aclrtSetDevice(1);")}
    assert "devices, streams and synchronisation are the runtime's" in (
        check_candidate(bad_binding, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") or "")
    # host code keeps the common rules
    bad_host = {**PROJECT, "op_host/add_custom.cpp": HOST.replace("context->SetBlockDim(8);",
                                                                 'context->SetBlockDim(getenv("N") ? 8 : 1);')}
    assert "getenv is not allowed" in (
        check_candidate(bad_host, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") or "")


def test_a_project_header_includes_its_neighbours_and_parents_inside_the_project():
    files = {**PROJECT, "op_kernel/erf/tail.h": '#include "../common.h"\n', "op_kernel/common.h": "// c\n"}
    assert check_candidate(files, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") is None
    files["op_kernel/erf/tail.h"] = '#include "../../binding_secret.h"\n'
    assert "only the candidate's own files" in (
        check_candidate(files, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") or "")


def backend_for(root: Path, tmp_path: Path, soc: str = "Ascend910B2") -> AscendBackend:
    env = {"ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp"), "PATH": "/usr/bin:/bin"}
    return AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64", soc=soc,
                         probe_torch=False)


def custom_op_env(tmp_path: Path) -> dict[str, str]:
    """A shell on a workstation with the stand-in custom-op CANN (its set_env.sh not yet sourced: the backend
    sources it) and a toolkit Python with CANN's requirements."""
    root = make_custom_op_cann(tmp_path / "cann")
    python = make_toolkit_python(tmp_path / "toolkit") / "python3"
    return {"ASCEND_HOME_PATH": str(root), "PATH": "/usr/bin:/bin", "EVOKERNEL_ASCEND_PYTHON": str(python)}


def custom_op_backend(tmp_path: Path) -> tuple[AscendBackend, Path]:
    env = custom_op_env(tmp_path)
    backend = AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64", soc="Ascend910B2",
                            probe_torch=False)
    return backend, Path(env["ASCEND_HOME_PATH"])


def write(work: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)


def test_the_generated_custom_op_flow(tmp_path):
    root = make_cann(tmp_path / "cann", "compiler")
    work = tmp_path / "work"
    cmake = "add_ops_compile_options(\n    OP_NAME AddCustom\n    OPTIONS --cce-auto-sync=on -Werror\n)\n"
    write(work, {**PROJECT, "CMakeLists.txt": cmake})
    backend = backend_for(root, tmp_path)
    sources = sorted(n for n in PROJECT if n.endswith(".cpp"))
    plan = backend.build_plan(sources, work)
    assert plan.commands == [["bash", BUILD_SCRIPT]]
    assert plan.library == "libkernels.so" and plan.keep == ["vendor"] and plan.min_timeout_s == 900
    assert json.loads(plan.files[OP_JSON]) == json.loads(op_json(parse_op_def(HOST)))
    assert plan.files[BUILD_SCRIPT] == f"""#!/bin/bash
# Generated by EvoKernel for one candidate: CANN custom-op flow (op AddCustom).
set -euo pipefail
here="$(pwd)"
# a set ASCEND_CUSTOM_OPP_PATH changes what build.sh packages
unset ASCEND_CUSTOM_OPP_PATH
# msopgen and build.sh run the first python3 on PATH: the toolkit's (CANN's Python requirements)
export PATH=/usr/bin:"$PATH"
rm -rf _evokernel_project vendor
{root}/python/site-packages/bin/msopgen gen -i _evokernel_op.json -c ai_core-Ascend910B2 -lan cpp \
-out _evokernel_project
# msopgen's template sources go: op_host/CMakeLists.txt compiles every top-level source of op_host/
# (aux_source_directory), and the candidate's own sources are the op, whatever their names
find _evokernel_project/op_host _evokernel_project/op_kernel -maxdepth 1 -type f ! -name CMakeLists.txt -delete
mkdir -p _evokernel_project/op_host && cp op_host/add_custom.cpp _evokernel_project/op_host/add_custom.cpp
mkdir -p _evokernel_project/op_host && cp op_host/add_custom_tiling.h _evokernel_project/op_host/add_custom_tiling.h
mkdir -p _evokernel_project/op_kernel && cp op_kernel/add_custom.cpp _evokernel_project/op_kernel/add_custom.cpp
# the options of the candidate's CMakeLists.txt, before the kernels are compiled
sed -i 's|^add_kernels_compile()|add_ops_compile_options(ALL OPTIONS --cce-auto-sync=on -Werror)\\nadd_kernels_compile()|' \
_evokernel_project/op_kernel/CMakeLists.txt
(cd _evokernel_project && bash build.sh)
installer=""
for f in _evokernel_project/build_out/custom_opp_*.run; do if [ -e "$f" ]; then installer="$f"; break; fi; done
if [ -z "$installer" ]; then echo "error: build.sh produced no build_out/custom_opp_*.run" >&2; exit 1; fi
bash "$installer" --quiet --install-path="$here/vendor"
if [ ! -d vendor/vendors/customize/op_api/lib ]; then echo "error: the package installed no \
vendor/vendors/customize/op_api/lib" >&2; exit 1; fi
g++ -shared -fPIC -O2 -std=c++17 binding.cpp -o libkernels.so -Ivendor/vendors/customize/op_api/include \
-I{root}/include -I{root}/include/aclnn -Lvendor/vendors/customize/op_api/lib -L{root}/lib64 \
-Wl,--no-as-needed -lcust_opapi -lascendcl -lnnopbase '-Wl,-rpath,$ORIGIN/vendor/vendors/customize/op_api/lib'
""".replace("\\\n", "")


def test_a_given_op_json_is_used_as_written(tmp_path):
    root = make_cann(tmp_path / "cann", "compiler")
    work = tmp_path / "work"
    given = json.dumps([{"op": "AddCustom", "language": "cpp", "input_desc": [], "output_desc": []}])
    write(work, {**PROJECT, "add_custom.json": given})
    plan = backend_for(root, tmp_path).build_plan(["binding.cpp", "op_host/add_custom.cpp"], work)
    assert plan.files[OP_JSON] == given


def test_without_cann_or_with_a_piece_missing_the_plan_says_why(tmp_path):
    work = tmp_path / "work"
    write(work, PROJECT)
    with pytest.raises(BuildPlanError, match="CANN not found"):
        backend_for(tmp_path / "nowhere", tmp_path).build_plan(["op_host/add_custom.cpp"], work)
    root = make_cann(tmp_path / "cann", "compiler")
    (work / "op_kernel/add_custom.cpp").unlink()
    with pytest.raises(BuildPlanError, match="no device kernel"):
        backend_for(root, tmp_path).build_plan(["op_host/add_custom.cpp"], work)


def test_the_call_loads_the_private_vendor(tmp_path):
    build = tmp_path / "builds/abc"
    assert ASCEND.call_env(build / "libkernels.so") == {}   # a kernel-launch library: nothing to add
    (build / "vendor/vendors/customize/op_api/lib").mkdir(parents=True)
    assert call_env(str(build), {"LD_LIBRARY_PATH": "/cann/lib64"}) == {
        "ASCEND_CUSTOM_OPP_PATH": f"{build}/vendor/vendors/customize",
        "LD_LIBRARY_PATH": f"{build}/vendor/vendors/customize/op_api/lib:/cann/lib64"}


def test_pieces_are_found_by_what_they_hold_not_by_name():
    files = {"op_host/defs.cpp": HOST, "op_host/data.h": TILING, "op_kernel/add_custom.cpp": KERNEL, "b.cpp": BINDING}
    project = read_project(files)
    assert (project.op, project.definition, project.tiling, project.kernels, project.binding) == (
        "AddCustom", "op_host/defs.cpp", "op_host/data.h", ("op_kernel/add_custom.cpp",), "b.cpp")
    assert project.snake == "add_custom"
    # extern"C" without a space is the same to the compiler
    assert read_project({**files, "op_kernel/add_custom.cpp": KERNEL.replace('extern "C"', 'extern"C"')}).kernels


def test_the_kernel_file_and_entry_carry_the_op_s_name():
    moved = {**{k: v for k, v in PROJECT.items() if k != "op_kernel/add_custom.cpp"}, "op_kernel/k.cpp": KERNEL}
    assert "op_kernel/add_custom.cpp must define the kernel entry of op AddCustom" in (fmt(moved) or "")
    renamed = {**PROJECT, "op_kernel/add_custom.cpp": KERNEL.replace("void add_custom(", "void add_kernel(")}
    said = fmt(renamed) or ""
    assert "void add_custom(GM_ADDR" in said and "found: op_kernel/add_custom.cpp" in said


def test_the_prompt_asks_for_the_project_only_when_the_workspace_says_so():
    from core.config import Config
    from verifier.backends.ascend_project import form_prompt

    assert Config().form == "kernel-launch"
    assert form_prompt("ascend", "kernel-launch") == "" and form_prompt("cuda", "custom-op") == ""
    text = form_prompt("ascend", Config(form="custom-op").form)
    for piece in ("file=op_host/<op>_tiling.h", "file=op_host/<op>.cpp", "file=op_kernel/<op>.cpp", "file=binding.cpp"):
        assert piece in text


def test_without_msopgen_the_custom_op_form_says_so(tmp_path):
    root = make_cann(tmp_path / "cann", "compiler", msopgen=False)
    work = tmp_path / "work"
    write(work, PROJECT)
    with pytest.raises(BuildPlanError, match="no msopgen .*kernel-launch form"):
        backend_for(root, tmp_path).build_plan(["op_host/add_custom.cpp"], work)


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("g++") or not shutil.which("readelf"), reason="needs g++ and binutils")
def test_the_generated_flow_runs_on_stand_ins_and_the_call_finds_the_private_vendor(tmp_path, on_host, monkeypatch):
    """The generated script through the real build gate with stand-ins for msopgen, build.sh and the package:
    the pieces land in the project, the candidate's kernel options reach its CMakeLists.txt, build.sh runs
    without ASCEND_CUSTOM_OPP_PATH, the package installs into the build's own vendor/, the binding links
    against that vendor's op API (link policy passing), the cache keeps vendor/ beside the library, and the
    library, loaded from the cache, finds libcust_opapi.so through its $ORIGIN RUNPATH and runs."""
    import ctypes

    import torch

    from verifier.backends.ascend import AscendRuntime
    from verifier.build import build_candidate
    from verifier.runtime import KernelLibrary

    backend, root = custom_op_backend(tmp_path)
    cmake = "add_ops_compile_options(\n    OP_NAME AddCustom\n    OPTIONS --cce-auto-sync=on\n)\n"
    files = {**PROJECT, "CMakeLists.txt": cmake, "op_kernel/erf/tail.h": "// a kernel header in a sub-folder\n"}
    # a build timeout far shorter than the flow: the plan's floor (minutes for a real custom op) wins
    result = build_candidate(backend, files, tmp_path / "cache", sandbox=False, timeout=0.001)
    assert result.ok, result.log
    assert [s.name for s in result.signatures] == ["add"]
    vendor = result.library.parent / "vendor"
    assert (vendor / "vendors/customize/op_api/lib/libcust_opapi.so").is_file()
    quiet, install_path = (vendor / "installer_args.txt").read_text().split()   # the build's own folder, since moved
    assert quiet == "--quiet" and install_path.startswith("--install-path=/") and install_path.endswith("/vendor")
    assert backend.call_env(result.library)["ASCEND_CUSTOM_OPP_PATH"] == f"{vendor}/vendors/customize"

    # what the stand-in build.sh recorded, kept by building once more without the cache
    work = tmp_path / "again"
    write(work, files)
    plan = backend.build_plan(sorted(n for n in files if n.endswith(".cpp")), work)
    for name, text in plan.files.items():
        (work / name).write_text(text)
    import subprocess

    from verifier.sandbox import scrubbed_env

    env = {**scrubbed_env(backend.worker_env(), home=str(work)), "ASCEND_CUSTOM_OPP_PATH": "/elsewhere"}
    ran = subprocess.run(plan.commands[0], cwd=work, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    out = work / "_evokernel_project/build_out"
    assert (out / "env.txt").read_text().strip() == "ASCEND_CUSTOM_OPP_PATH=unset"
    assert (out / "op_host.txt").read_text().split() == ["CMakeLists.txt", "add_custom.cpp", "add_custom_tiling.h"]
    assert (out / "op_kernel.txt").read_text().split() == ["./CMakeLists.txt", "./add_custom.cpp", "./erf/tail.h"]
    assert (out / "kernel_cmake.txt").read_text().splitlines()[-2:] == [
        "add_ops_compile_options(ALL OPTIONS --cce-auto-sync=on)", "add_kernels_compile()"]
    assert (work / "_evokernel_project/msopgen_args.txt").read_text().split() == [
        "json=_evokernel_op.json", "soc=ai_core-Ascend910B2"]

    preload_acl_stubs(root)
    ctypes.CDLL(str(root / "lib64/libnnopbase.so"), mode=ctypes.RTLD_GLOBAL)   # as set_env.sh's path would find it
    lib = KernelLibrary(str(result.library), [s.to_dict() for s in result.signatures], on_host(AscendRuntime))
    x, y = torch.randn(1001), torch.randn(1001)
    z = torch.empty_like(x)
    monkeypatch.delenv("ASCEND_CUSTOM_OPP_PATH", raising=False)
    with pytest.raises(KernelCallError, match=r"add\(\) returned \d+"):   # a status, read as one (#50)
        lib.add(x, y, z, x.numel())                  # the op API finds the op through the custom OPP path only
    for name, value in backend.call_env(result.library).items():
        monkeypatch.setenv(name, value)
    assert lib.add(x, y, z, x.numel()) == 0          # the stream filled in
    assert torch.equal(z, x + y)


def test_the_binding_calls_only_its_own_op_and_copies_nothing():
    def gate(binding: str) -> str:
        files = {**PROJECT, "binding.cpp": binding}
        return check_candidate(files, ASCEND.source_suffixes, ASCEND.header_suffixes, "ascend") or ""

    builtin = BINDING.replace("aclnnAddCustomGetWorkspaceSize(tx, ty, 1.0f, tz, &size, &executor)",
                              "aclnnAddGetWorkspaceSize(tx, ty, nullptr, tz, &size, &executor)")
    assert "aclnnAddGetWorkspaceSize is not this candidate's op" in gate(builtin)
    copy = BINDING.replace("uint64_t size = 0;", "uint64_t size = 0; aclrtMemcpy(z, 4, x, 4, 0);")
    assert "may not copy data" in gate(copy)
    assert gate(BINDING) == ""


def test_the_binding_is_a_cpp_file_the_build_compiles():
    files = {**{k: v for k, v in PROJECT.items() if k != "binding.cpp"}, "binding.cc": BINDING}
    assert "no binding" in (fmt(files) or "")


def test_the_verifier_s_format_gate_takes_the_forms_its_backend_declares(tmp_path):
    """The harness passes the backend's forms to the format gate: a custom-op project gets past it on
    the Ascend backend (here without CANN it then stops at a later gate, or at the missing toolchain)
    and is refused in one sentence on the CPU backend, which takes kernel-launch sources only."""
    from core.tasks import load_suite
    from verifier.errors import VerifierError
    from verifier.harness.verify import Verifier

    spec = load_suite("builtin").get("relu").spec()
    with Verifier("cpu", cache_dir=tmp_path) as verifier:
        refused = verifier.verify(spec, dict(PROJECT))
        assert refused.failed_gate == "format" and "custom-op" in refused.message
        verifier.backend = ASCEND
        try:
            out = verifier.verify(spec, dict(PROJECT))
        except VerifierError:       # the Ascend toolchain is missing here: past the format gate
            return
        assert out.failed_gate != "format", out.message


ADD_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


N = 4096


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
"""


class HostAscend(AscendBackend):
    """The Ascend backend over a fake CANN whose custom-op flow builds for the host: its toolchain taken as
    present, its jobs on the host's tensors (``HostAscendRuntime``, imported by the job from this folder)."""

    device = "cpu"
    timer = "wall"
    device_runtime = HostAscendRuntime

    def toolchain(self):
        from verifier.backends.base import Toolchain

        return Toolchain(True, compiler="fake bisheng", device="host")

    def sandbox_devices(self) -> list[str]:
        return []


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("g++") or not shutil.which("readelf"), reason="needs g++ and binutils")
def test_a_sandboxed_job_calls_a_custom_op_with_its_private_vendor(tmp_path, monkeypatch, fast_config):
    """Through the verifier: the custom-op candidate is built by the (stand-in) CANN flow, and its correctness
    and timing jobs, in the sandbox, find the op through ASCEND_CUSTOM_OPP_PATH pointed at the vendor the build
    installed (the stand-in op API fails without it, as CANN's does)."""
    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))      # the job imports HostAscendRuntime
    monkeypatch.delenv("ASCEND_CUSTOM_OPP_PATH", raising=False)
    env = {**custom_op_env(tmp_path), "PYTHONPATH": str(Path(__file__).parent)}   # set_env.sh prepends its own
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite/add.py").write_text(ADD_TASK)
    spec = load_suite(tmp_path / "suite").get("add").spec()
    backend = HostAscend(env, home=str(tmp_path),
                         system_root=str(tmp_path), machine="x86_64", soc="Ascend910B2", probe_torch=False)
    # without bubblewrap: the fake CANN lives in /tmp, which bubblewrap replaces with a private one
    config = fast_config.model_copy(update={"use_bwrap": False})
    with Verifier(backend, config, cache_dir=tmp_path / "cache") as verifier:
        out = verifier.verify(spec, dict(PROJECT))
    assert out.feasible, out.message


def test_a_job_gets_only_the_variables_its_backend_declares():
    from verifier.sandbox import declared_env

    env = {"ASCEND_CUSTOM_OPP_PATH": "/job/vendor/vendors/customize", "LD_LIBRARY_PATH": "/job/lib",
           "OPENAI_API_KEY": "sk-secret", "PATH": "/elsewhere"}
    assert declared_env(env, ASCEND.call_variables) == {"ASCEND_CUSTOM_OPP_PATH": "/job/vendor/vendors/customize",
                                                        "LD_LIBRARY_PATH": "/job/lib"}
    # a backend that declares a credential-looking name still never passes it on
    assert declared_env({"ASCEND_AUTH_TOKEN": "t"}, ("ASCEND_AUTH_TOKEN",)) == {}


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_a_project_answer_travels_from_the_model_to_the_build(tmp_path, llm_env, monkeypatch):
    """A run in an Ascend workspace with form = "custom-op": the prompt asks for the project, the loopback
    model answers one, and the attempt keeps its layout through parsing, the format and anti-hack gates, and
    fails at the build, on this fake CANN's msopgen (a stand-in that fails), with that error as its outcome."""
    import asyncio

    from core import events as ev
    from core.session import Session
    from core.workspace import Workspace
    from verifier.harness.verify import Verifier

    from openai_server import Reply, answer_with

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))      # the jobs import HostAscendRuntime
    root = make_cann(tmp_path / "cann", "compiler")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite/add.py").write_text(ADD_TASK)
    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    ws.config_path.write_text(f'backend = "ascend"\nform = "custom-op"\nsuite = "{tmp_path / "suite"}"\n'
                              '[llm]\nmodel = "scripted-coder"\n[engine]\nfinal_window = false\n'
                              "[verifier]\nuse_bwrap = false\nthreads = 2\ntrials = 5\nrun_timeout_s = 20\n")
    server = llm_env(lambda req, n: Reply("Change: a custom op.\n" + answer_with(PROJECT)))
    seen: list[ev.Event] = []
    session = Session(ws)
    session.bus.subscribe(seen.append)
    backend = HostAscend({"ASCEND_HOME_PATH": str(root), "PATH": "/usr/bin:/bin"}, home=str(tmp_path),
                         system_root=str(tmp_path), machine="x86_64", soc="Ascend910B2", probe_torch=False)
    # the workspace's own verifier, but on the fake CANN's backend (this machine has no CANN)
    session._verifier = Verifier(backend, session.config.verifier, cache_dir=ws.cache_dir,
                                 hidden_paths=ws.private_paths())

    async def go() -> None:
        try:
            await session.run(session.tasks(["add"]), method="evokernel", iterations=1, suite=None, scale=None)
        finally:
            await session.close_async()

    asyncio.run(go())
    assert server.requests, [e for e in seen if not isinstance(e, ev.GateChecked)]
    system = server.requests[0]["messages"][0]["content"]
    assert "file=op_host/<op>_tiling.h" in system and "file=op_kernel/<op>.cpp" in system
    # (a wait for the machine's timing lock, held by a test beside this one, is said too: not a gate's result)
    gates = [(e.gate, e.status, e.message) for e in seen if isinstance(e, ev.GateChecked) and e.status != "waiting"]
    assert [(g, s) for g, s, _ in gates] == [("format", "passed"), ("anti_hack", "passed"), ("build", "failed")], gates
    assert "fake msopgen" in gates[-1][2]
    received = [e for e in seen if isinstance(e, ev.ResponseReceived)]
    assert sorted(received[0].files) == sorted(PROJECT)


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_the_project_build_limit_is_a_setting_that_only_slow_flows_take(tmp_path):
    """``project_build_timeout_s`` replaces the custom-op flow's 900 s floor; a kernel-launch build never gets it."""
    from verifier.backends.cpu import CpuBackend
    from verifier.build import build_candidate
    from verifier.config import VerifyConfig

    assert VerifyConfig().project_build_timeout_s is None          # the backend's own floor
    backend, _ = custom_op_backend(tmp_path)
    slow = build_candidate(backend, dict(PROJECT), tmp_path / "cache", sandbox=False, timeout=600, slow_timeout=0.001)
    assert not slow.ok and "did not finish within 0 s" in slow.log
    flat = {"kernel.cpp": 'extern "C" void f(float* x) { x[0] = 1; }\n', "model.py": "# unused\n"}
    assert build_candidate(CpuBackend(), flat, tmp_path / "cache", sandbox=False, slow_timeout=0.001).ok
