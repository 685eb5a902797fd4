"""A custom op's kernel entry is checked before a build of minutes (issue #50, finding 4). CANN calls the kernel
by position: a global-memory address for each input and output of the OpDef in its order (``nullptr`` for an
absent optional input), then workspace and tiling (asc-devkit ``ascendc_compile_gen_code.py``,
``gen_usr_origin_kernel_function_call``). A scalar parameter fails in CANN's generated wrapper after msopgen and the
host build; inputs in another order build and compute garbage. Also held: ``DTYPE_<NAME>`` only for the OpDef's
names, the tiling data registered for the op type ``OP_ADD`` registers, and the OpDef's ``AddConfig`` covering the
machine's SoC family (A3 is ``ascend910_93``). The format gate says each rule and where CANN states it; the stand-in
kernel compile (``fake_cann/tools/fake_compile_kernel.py``) refuses the same."""

from __future__ import annotations

import shutil

import pytest
from test_ascend_real_toolchain import build, faithful, project  # noqa: F401  (faithful: a fixture)

from verifier.backends.ascend import AscendBackend
from verifier.backends.ascend_project import soc_family
from verifier.gates.format import check_format

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="the stand-in build.sh compiles with g++")

ENTRY = "add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling)"


def _with(**changes: str) -> dict[str, str]:
    files = project()
    for name, (old, new) in {"op_kernel/add_custom.cpp": changes.get("kernel", ("", "")),
                             "op_host/add_custom_tiling.h": changes.get("tiling", ("", "")),
                             "op_host/add_custom.cpp": changes.get("host", ("", ""))}.items():
        if old:
            assert old in files[name], (name, old)
            files[name] = files[name].replace(old, new)
    return files


SCALAR = _with(kernel=(ENTRY, "add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n, GM_ADDR workspace, "
                              "GM_ADDR tiling)"))
REORDERED = _with(kernel=(ENTRY, "add_custom(GM_ADDR z, GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)"))
SHORT = _with(kernel=(ENTRY, "add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling)"))
UNKNOWN_DTYPE = _with(kernel=("GET_TILING_DATA(tiling_data, tiling);",
                              "GET_TILING_DATA(tiling_data, tiling);\n    DTYPE_INPUT* p = nullptr;"))
OTHER_TILING = _with(tiling=("REGISTER_TILING_DATA_CLASS(AddCustom,", "REGISTER_TILING_DATA_CLASS(AddCustomV2,"))
ONLY_310P = _with(host=('AddConfig("ascend910b")', 'AddConfig("ascend310p")'))


def _format(files: dict[str, str], target: str | None = "Ascend910B2") -> str:
    # the Ascend backend as the gate sees it: its forms and suffixes, the SoC its builds target (no toolkit probed)
    return check_format(files, AscendBackend(env={}, soc=target, probe_torch=False)) or ""


@pytest.mark.parametrize(("files", "said"), [
    (SCALAR, "parameter 'uint32_t n' of add_custom is not a global-memory address"),
    (REORDERED, "names the OpDef's inputs and outputs in another order (z, x, y)"),
    (SHORT, "add_custom takes 4 parameters, and CANN passes 5: x, y, z, workspace, tiling"),
    (UNKNOWN_DTYPE, "DTYPE_INPUT names no input or output of AddCustom"),
    (OTHER_TILING, "registered for AddCustomV2, never for AddCustom"),
    (ONLY_310P, 'none for this machine\'s Ascend910B2 (this->AICore().AddConfig("ascend910b"))'),
], ids=["scalar", "order", "count", "dtype", "tiling", "addconfig"])
def test_the_format_gate_says_the_rule_and_where_cann_states_it(files, said):
    problem = _format(files)
    assert said in problem, problem
    assert any(source in problem for source in ("asc-devkit", "Ascend C API reference", "msopgen")), problem


def test_the_kernel_in_its_contract_passes_and_a3_needs_its_own_config():
    assert _format(project()) == ""
    assert "ascend910_93" in _format(project(), "Ascend910_9382")           # A3: AddConfig("ascend910_93")
    assert _format(_with(host=('AddConfig("ascend910b")', 'AddConfig("ascend910_93")')), "Ascend910_9382") == ""
    assert _format(ONLY_310P, None) == ""                                   # no SoC known: nothing to hold it to
    assert [soc_family(s) for s in ("Ascend910B2", "Ascend910_9382", "Ascend310P3", "Ascend910ProB", "Ascend950PR")
            ] == ["ascend910b", "ascend910_93", "ascend310p", "ascend910", "ascend950"]


@pytest.mark.parametrize(("files", "said"), [
    (SCALAR, "cannot initialize a parameter of type 'uint32_t n'"),
    (REORDERED, "bound by position"),
    (UNKNOWN_DTYPE, "undeclared identifier 'DTYPE_INPUT'"),
    (OTHER_TILING, "no tiling data registered for op type AddCustom"),
    (ONLY_310P, "adds no AICore config for ascend910b"),
], ids=["scalar", "order", "dtype", "tiling", "addconfig"])
def test_the_stand_in_kernel_compile_refuses_the_same(faithful, tmp_path, files, said):  # noqa: F811
    """The build as the build gate runs it, past the format gate: the stand-in compile fails where CANN does."""
    backend, _ = faithful
    ran = build(backend, files, tmp_path)
    assert ran.returncode != 0 and said in ran.stdout + ran.stderr, ran.stdout[-2000:] + ran.stderr[-2000:]


def test_the_stand_in_compile_builds_the_kernel_in_its_contract(faithful, tmp_path):  # noqa: F811
    backend, _ = faithful
    ran = build(backend, project(), tmp_path)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "[INFO] kernel of AddCustom" in ran.stdout + ran.stderr and "for ascend910b" in ran.stdout + ran.stderr
