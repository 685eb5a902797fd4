"""The Ascend backend as a real CANN toolchain would take it (issue #34): one regression test per finding of the
desk review, each run against stand-ins that fail where the real tools fail (``tests/backends/fake_cann``: msopgen
validating the op JSON and writing its own template sources named by the snake-cased op type; build.sh compiling
every top-level op_host source with g++ against stand-in CANN headers and linking them into one library; CANN's
Python package needing CANN's Python requirements)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.backends.ascend import AscendBackend
from verifier.backends.ascend_project import BUILD_SCRIPT, OP_JSON, op_json, parse_op_def
from verifier.gates.format import check_format

from fake_toolchains import make_cann, make_custom_op_cann, make_toolkit_python, write_script

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="the stand-in build.sh compiles with g++")

TILING = """#include "register/tilingdata_base.h"
namespace optiling {
BEGIN_TILING_DATA_DEF(AddCustomTilingData)
  TILING_DATA_FIELD_DEF(uint32_t, totalLength);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(AddCustom, AddCustomTilingData)
}
"""

HOST = """#include "{tiling}"
#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"
namespace optiling {{
static ge::graphStatus TilingFunc(gert::TilingContext* context)
{{
    AddCustomTilingData tiling;
    tiling.set_totalLength(context->GetInputShape(0)->GetOriginShape().GetShapeSize());
    auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
    context->SetBlockDim(platform.GetCoreNumAiv());
    tiling.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
    context->GetRawTilingData()->SetDataSize(tiling.GetDataSize());
    return ge::GRAPH_SUCCESS;
}}
}}
namespace ops {{
class AddCustom : public OpDef {{
public:
    explicit AddCustom(const char* name) : OpDef(name)
    {{
        this->Input("x").ParamType(REQUIRED).DataType({{{types}}}).Format({{ge::FORMAT_ND, ge::FORMAT_ND}});
        this->Input("y").ParamType(REQUIRED).DataType({{{types}}}).Format({{ge::FORMAT_ND, ge::FORMAT_ND}});
        this->Output("z").ParamType(REQUIRED).DataType({{{types}}}).Format({{ge::FORMAT_ND, ge::FORMAT_ND}});
        this->Attr("alpha").AttrType(OPTIONAL).Float({alpha});
        this->AICore().SetTiling(optiling::TilingFunc);
        this->AICore().AddConfig("ascend910b");
    }}
}};
OP_ADD(AddCustom);
}}
"""
TYPES = "ge::DT_FLOAT, ge::DT_FLOAT16"

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

MODEL = "import torch.nn as nn\nfrom verifier.runtime import load\n\nlib = load()\n\n\nclass ModelNew(nn.Module):\n    pass\n"


def project(host_name: str = "op_host/add_custom.cpp", tiling_name: str = "op_host/add_custom_tiling.h", *,
            types: str = TYPES, alpha: str = "1.0", extra: str = "") -> dict[str, str]:
    host = HOST.format(tiling=Path(tiling_name).name, types=types, alpha=alpha).replace("namespace ops {", extra + "namespace ops {")
    return {host_name: host, tiling_name: TILING, "op_kernel/add_custom.cpp": KERNEL, "binding.cpp": BINDING,
            "model.py": MODEL}


def ascend(root: Path, tmp_path: Path, path: str, **extra: str) -> AscendBackend:
    env = {"ASCEND_HOME_PATH": str(root), "PATH": path, **extra}
    return AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64", soc="Ascend910B2",
                         probe_torch=False)


@pytest.fixture
def faithful(tmp_path):
    """(backend, CANN root) over the stand-in CANN, with a Python that has CANN's requirements first on PATH (the
    case of a workstation whose shell finds the toolkit's Python)."""
    root = make_custom_op_cann(tmp_path / "cann")
    toolkit = make_toolkit_python(tmp_path / "toolkit")
    return ascend(root, tmp_path, f"{toolkit}:/usr/bin:/bin"), root


def build(backend: AscendBackend, files: dict[str, str], work: Path) -> subprocess.CompletedProcess[str]:
    """The generated custom-op flow, run as the build gate runs it (in the candidate's folder, the backend's
    worker environment), up to and including the stand-in package install and the binding's link."""
    from verifier.sandbox import scrubbed_env

    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    plan = backend.build_plan(sorted(n for n in files if n.endswith(".cpp")), work)
    for name, text in plan.files.items():
        (work / name).write_text(text)
    # the user's shell as the backend saw it (its CANN variables), then what the backend adds for its builds
    shell = {k: v for k, v in backend._env.items() if k.startswith("ASCEND_")}
    env = scrubbed_env({**shell, **backend.worker_env()}, home=str(work))
    return subprocess.run(plan.commands[0], cwd=work, env=env, capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------------------------- finding 1


def test_msopgen_s_template_sources_do_not_stay_beside_the_candidate_s(faithful, tmp_path):
    """Real msopgen writes op_host/<snake>.cpp, op_host/<snake>_tiling.h and op_kernel/<snake>.cpp, and
    op_host/CMakeLists.txt compiles every top-level source of op_host/. A candidate whose host source is named
    otherwise (NPUKernelBench's CrossEntropyLoss: cross_entropy_loss_def.cpp beside cross_entropy_loss_tiling.h)
    got msopgen's template TilingFunc compiled against its own tiling header (no `size` field there)."""
    backend, _ = faithful
    (tmp_path / "a").mkdir()
    ran = build(backend, project("op_host/add_custom_def.cpp"), tmp_path / "a")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    compiled = (tmp_path / "a/_evokernel_project/build_out/opbuild_sources.txt").read_text().split()
    assert compiled == ["op_host/add_custom_def.cpp"]
    # named otherwise altogether: msopgen's op_host/add_custom.cpp (a second AddCustom OpDef and OP_ADD) is gone too
    (tmp_path / "b").mkdir()
    ran = build(backend, project("op_host/defs.cpp", "op_host/data.h"), tmp_path / "b")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert (tmp_path / "b/_evokernel_project/build_out/opbuild_sources.txt").read_text().split() == ["op_host/defs.cpp"]
    assert sorted(p.name for p in (tmp_path / "b/_evokernel_project/op_host").iterdir()) == [
        "CMakeLists.txt", "data.h", "defs.cpp"]


def test_a_host_source_in_a_subfolder_is_refused_because_cann_never_compiles_it():
    """op_host/CMakeLists.txt's aux_source_directory takes the top level of op_host/ only."""
    files = {**project(), "op_host/sub/helper.cpp": "int helper() { return 1; }\n"}
    said = check_format(files, AscendBackend(probe_torch=False)) or ""
    assert "op_host/sub/helper.cpp" in said and "top level of op_host/" in said
    # a header there is fine: it is included, not compiled
    files = {**project(), "op_host/sub/helper.h": "inline int helper() { return 1; }\n"}
    assert check_format(files, AscendBackend(probe_torch=False)) is None


def test_the_stand_in_build_fails_where_cann_s_opbuild_fails(faithful, tmp_path):
    """op_host is compiled and linked into one library against the CANN host headers: a malformed tiling
    definition, a header CANN does not ship (cann-ops' tiling/tiling_base.h) and a function defined in a header
    that two op_host sources include each fail the build, with the compiler's words."""
    backend, _ = faithful
    cases = {
        "macro": ({"op_host/add_custom_tiling.h": TILING.replace("uint32_t, totalLength", "uint32_t totalLength")},
                  "error"),
        "header": ({"op_host/add_custom_tiling.h": '#include "tiling/tiling_base.h"\n' + TILING},
                   "tiling/tiling_base.h: No such file or directory"),
        "twice": ({"op_host/util.h": "int Twice(int v) { return 2 * v; }\n",
                   "op_host/other.cpp": '#include "util.h"\nint Other() { return Twice(1); }\n',
                   "op_host/add_custom.cpp": '#include "util.h"\n' + project()["op_host/add_custom.cpp"]},
                  "multiple definition of `Twice(int)'"),
    }
    for name, (change, says) in cases.items():
        (tmp_path / name).mkdir()
        ran = build(backend, {**project(), **change}, tmp_path / name)
        assert ran.returncode != 0 and "opbuild run failed" in ran.stdout, name
        assert says in ran.stdout + ran.stderr, (name, ran.stdout[-2000:] + ran.stderr[-2000:])


# ---------------------------------------------------------------------------------------------- finding 2


def run_msopgen(root: Path, spec_json: str, work: Path) -> subprocess.CompletedProcess[str]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "op.json").write_text(spec_json)
    env = {"PATH": "/usr/bin:/bin", "ASCEND_HOME_PATH": str(root)}
    return subprocess.run([sys.executable, str(root / "python/site-packages/bin/msopgen"), "gen", "-i", "op.json",
                           "-c", "ai_core-Ascend910B2", "-lan", "cpp", "-out", "project"], cwd=work, env=env,
                          capture_output=True, text=True)


def test_the_derived_op_json_passes_msopgen_when_datatypes_are_named_through_a_variable(tmp_path):
    """53 of NPUKernelBench's answers give DataType a variable; the derived type list was empty, which msopgen
    refuses ("The input or output type in the json file is not supported")."""
    root = make_custom_op_cann(tmp_path / "cann")
    extra = "static const std::vector<ge::DataType> TYPES = {ge::DT_FLOAT, ge::DT_FLOAT16};\n"
    spec = parse_op_def(project(types="TYPES", extra=extra)["op_host/add_custom.cpp"])
    ran = run_msopgen(root, op_json(spec), tmp_path / "w")
    assert ran.returncode == 0, ran.stderr
    derived = json.loads(op_json(spec))[0]
    assert [io["type"] for io in derived["input_desc"]] == [["float", "float16"]] * 2
    # a list it cannot resolve becomes the same placeholder type and format for every input and output
    spec = parse_op_def(project(types="SomeHelper()")["op_host/add_custom.cpp"])
    assert run_msopgen(root, op_json(spec), tmp_path / "v").returncode == 0
    assert {tuple(io["type"]) for io in json.loads(op_json(spec))[0]["input_desc"]} == {("float",)}


def test_the_derived_op_json_gives_optional_attributes_their_default(tmp_path):
    """msopgen writes an optional attribute's default_value verbatim into the OpDef it generates
    (`.Float(<default>)`): without one the generated source does not compile."""
    root = make_custom_op_cann(tmp_path / "cann")
    for alpha, want in (("1.5", 1.5), ("", 0.0)):
        spec = parse_op_def(project(alpha=alpha)["op_host/add_custom.cpp"])
        attrs = json.loads(op_json(spec))[0]["attr"]
        assert attrs == [{"name": "alpha", "param_type": "optional", "type": "float", "default_value": want}]
        work = tmp_path / f"w{alpha}"
        assert run_msopgen(root, op_json(spec), work).returncode == 0
        generated = work / "project/op_host"
        ran = subprocess.run(["g++", "-std=c++14", "-fsyntax-only", f"-I{root}/include", str(generated / "add_custom.cpp")],
                             capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr


# ---------------------------------------------------------------------------------------------- finding 4


def test_a_build_sh_that_packs_nothing_says_so(tmp_path):
    """Under `set -euo pipefail`, `installer=$(ls ... | head -n 1)` exited before the message was printed."""
    root = make_cann(tmp_path / "cann", "compiler", set_env=None)
    write_script(root / "python/site-packages/bin/msopgen",
                 'while [ $# -gt 0 ]; do case "$1" in -out) out="$2"; shift ;; esac; shift; done\n'
                 'mkdir -p "$out/op_host" "$out/op_kernel"; printf "#!/bin/bash\\nexit 0\\n" > "$out/build.sh"\n')
    backend = ascend(root, tmp_path, "/usr/bin:/bin")
    work = tmp_path / "work"
    work.mkdir()
    ran = build(backend, project(), work)
    assert ran.returncode != 0
    assert "build.sh produced no build_out/custom_opp_*.run" in ran.stderr


def test_cann9_s_asc_package_under_ascendc_kernel_cmake_is_found(tmp_path):
    """CANN 9's samples write find_package(ASC ... HINTS ${ASCEND_CANN_PACKAGE_PATH}/compiler/tikcpp/ascendc_kernel_cmake)."""
    from verifier.toolchain.discovery import inspect_cann

    root = make_cann(tmp_path / "cann", "runtime")
    module = root / "compiler/tikcpp/ascendc_kernel_cmake"
    module.mkdir(parents=True)
    (module / "ASCConfig.cmake").write_text("# fake ASC package\n")
    write_script(root / "x86_64-linux/ccec_compiler/bin/bisheng", "echo bisheng\n")
    install = inspect_cann(root, "test", machine="x86_64")
    assert (install.flow, install.cmake_dir, install.problem) == ("asc", module, "")


def test_the_worker_takes_the_soc_from_discovery_not_from_get_device_name(monkeypatch):
    """MultiKernelBench's Ascend backend avoids torch.npu.get_device_name ("causes crash"); the SoC is known from
    discovery (aclrtGetSocName / npu-smi) and reaches the job through the worker environment."""
    from verifier.backends.ascend import SOC_VARIABLE, npu_l2_bytes

    class Npu:
        def current_device(self) -> int:
            return 0

        def get_device_properties(self, device: int) -> object:
            return object()          # an older torch_npu: no L2_cache_size

        def get_device_name(self, device: int) -> str:
            raise RuntimeError("crash")

    monkeypatch.setenv(SOC_VARIABLE, "Ascend910B4")
    assert npu_l2_bytes(Npu()) == 96 << 20
    backend = AscendBackend({"PATH": "/usr/bin:/bin"}, soc="Ascend910B2", probe_torch=False)
    assert backend.worker_env()[SOC_VARIABLE] == "Ascend910B2"


# ---------------------------------------------------------------------------------------------- finding 5


def test_the_build_runs_under_the_toolkit_python_not_the_venv_s(tmp_path):
    """msopgen and build.sh run the first python3 on PATH; with this project's venv first that is numpy 2 without
    decorator, and CANN's Python packages fail to import. The build puts the toolkit's Python first: the first
    python3 on PATH outside a virtual environment, or $EVOKERNEL_ASCEND_PYTHON."""
    venv_bin = Path(sys.executable).parent
    if not (venv_bin.parent / "pyvenv.cfg").is_file():
        pytest.skip("the tests run outside a virtual environment")
    root = make_custom_op_cann(tmp_path / "cann")
    toolkit = make_toolkit_python(tmp_path / "toolkit")
    (tmp_path / "a").mkdir()
    ran = build(ascend(root, tmp_path, f"{venv_bin}:{toolkit}:/usr/bin:/bin"), project(), tmp_path / "a")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    # named explicitly, whatever PATH says
    (tmp_path / "b").mkdir()
    backend = ascend(root, tmp_path, f"{venv_bin}:/usr/bin:/bin", EVOKERNEL_ASCEND_PYTHON=str(toolkit / "python3"))
    ran = build(backend, project(), tmp_path / "b")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]


def test_doctor_says_what_the_toolkit_python_lacks(tmp_path):
    root = make_custom_op_cann(tmp_path / "cann")
    toolkit = make_toolkit_python(tmp_path / "toolkit", numpy_version="2.1.0", missing=("decorator", "scipy"))
    backend = ascend(root, tmp_path, "/usr/bin:/bin", EVOKERNEL_ASCEND_PYTHON=str(toolkit / "python3"))
    tc = backend.toolchain()
    problem = next((p for p in tc.warnings if "toolkit Python" in p), "")
    assert str(toolkit / "python3") in problem
    assert "decorator" in problem and "scipy" in problem and "numpy 2.1.0" in problem and "numpy<2" in problem
    assert tc.details["toolkit_python"] == str(toolkit / "python3")
    good = make_toolkit_python(tmp_path / "good")
    tc = ascend(root, tmp_path, "/usr/bin:/bin", EVOKERNEL_ASCEND_PYTHON=str(good / "python3")).toolchain()
    assert not [p for p in tc.warnings if "toolkit Python" in p]


def test_the_generated_script_puts_the_toolkit_python_first(faithful, tmp_path):
    backend, root = faithful
    work = tmp_path / "w"
    work.mkdir()
    for name, text in project().items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    sources = sorted(n for n in project() if n.endswith(".cpp"))
    script = backend.build_plan(sources, work).files[BUILD_SCRIPT]
    toolkit = tmp_path / "toolkit/bin"
    assert f"export PATH={toolkit}:\"$PATH\"" in script
    assert json.loads(backend.build_plan(sources, work).files[OP_JSON])[0]["op"] == "AddCustom"
