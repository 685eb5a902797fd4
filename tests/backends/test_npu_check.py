"""``bench/npu_check.py``, the first run on an NPU workstation (issue #34): it must not go wrong silently. Its
custom-op check uses an op no built-in CANN op shadows and a CPU reference; every verifier check runs with and
without the seccomp filter and the pair says whether the sandbox is what failed; one report file holds it all."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def npu_check():
    spec = importlib.util.spec_from_file_location("npu_check", ROOT / "bench/npu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["npu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_the_default_custom_op_is_not_a_built_in_cann_op(tmp_path):
    """The default was NPUKernelBench's Neg, which is also a built-in CANN op type: with the custom OPP path set,
    the package's Neg would stand in for the built-in one everywhere in the process, the reference included."""
    check = npu_check()
    config = tmp_path / "opp/built-in/op_impl/ai_core/tbe/config/ascend910b"
    config.mkdir(parents=True)
    (config / "aic-ascend910b-ops-info.json").write_text(json.dumps({"Neg": {"opFile": {"value": "neg"}},
                                                                     "Add": {"opFile": {"value": "add"}}}))
    env = {"ASCEND_OPP_PATH": str(tmp_path / "opp")}
    default_op = check.CUSTOM_OPS[check.DEFAULT_OP][0]
    assert check.builtin_op_file(default_op, env) == ""
    assert check.builtin_op_file("Neg", env).endswith("aic-ascend910b-ops-info.json")
    # the reference is computed on the CPU, never by an NPU op in the process whose custom OPP path is set
    script = check.CUSTOM_OP_SCRIPT
    assert script.index("x = cpu") < script.index("want = {expression}")


def test_a_check_that_fails_only_under_seccomp_reads_as_a_sandbox_failure():
    check = npu_check()
    passed = SimpleNamespace(feasible=True, failed_gate=None, message="")
    failed = SimpleNamespace(feasible=False, failed_gate="correctness", message="device setup failed")
    assert "SANDBOX FAILURE" in check.sandbox_finding("correct", {True: failed, False: passed})
    assert check.sandbox_finding("correct", {True: passed, False: passed}).startswith("as expected with and")
    assert "not the sandbox" in check.sandbox_finding("correct", {True: failed, False: failed})


def test_dry_run_shows_both_runs_and_the_report_fields(capsys):
    check = npu_check()
    assert check.main(["--dry-run", "--report", "r.json"]) == 0
    out = capsys.readouterr().out
    for task_id, kinds in check.CANDIDATES.items():
        for kind in kinds:
            line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{task_id}") and f" {kind} " in ln)
            assert "[with seccomp]" in line and "[without seccomp]" in line
    assert "custom-op level1/Math/AddCustom (op AddCustom)" in out
    for field in check.REPORT_FIELDS:
        assert f"  {field}: " in out
    assert "r.json" in out and "not established" in out


# ------------------------------------------------------------------------------------------------ issue #50


def test_on_a_machine_without_an_npu_the_report_is_written_and_says_what_would_run(tmp_path, monkeypatch):
    """npu_check exited before writing its report when doctor failed: the report goes out in every case."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for name in ("ASCEND_HOME_PATH", "ASCEND_INSTALL_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(name, raising=False)
    check = npu_check()
    report = tmp_path / "report.json"
    assert check.main(["--report", str(report)]) == 2
    said = json.loads(report.read_text())
    assert said["npu_found"] is False and said["summary"].startswith("no NPU found")
    assert [r["adds"] for r in said["ladder"]["would_run"]] == [
        "a plain process", "+ rlimits", "+ user and PID namespace", "+ capability drop", "+ Landlock", "+ bubblewrap",
        "+ seccomp"]
    assert said["ladder"]["would_run"][0]["checks"][1] == "set_device and torch.ones(1) + 1"
    assert said["euid"] == __import__("os").geteuid() and "device_nodes" in said and "versions" in said
    assert "doctor" in said and said["lines"]


def test_the_custom_op_s_shape_is_one_its_tiling_takes_whole():
    """AddCustom's tiling splits the length over BLOCK_DIM = 48 cores, 8 tiles of each, double-buffered, with no tail
    and DataCopy lengths of 32 bytes (16 halves): 64 x 65536 left 256 outputs never written on a healthy machine."""
    check = npu_check()

    def tile(n: int) -> int:          # the answer's Init: totalLength / GetBlockNum() / tileNum / BUFFER_NUM
        return n // 48 // 8 // 2

    def unwritten(n: int) -> int:     # Process: tileNum * BUFFER_NUM copies of one tile per core, no tail
        return n - 48 * 8 * 2 * tile(n)

    assert unwritten(64 * 65536) == 256
    op, _, _, _, n = check.CUSTOM_OPS["level1/Math/AddCustom"]
    assert op == "AddCustom" and unwritten(n) == 0 and n == 48 * 128 * 512
    assert tile(n) * 2 % 32 == 0      # DataCopy of float16: a multiple of 32 bytes
    assert "n = {n}" in check.CUSTOM_OP_SCRIPT and "N = {n}" in check.CUSTOM_OP_TASK


@pytest.fixture
def node():
    """A stand-in device node of another uid and group, mode 0660 (see test_device_nodes)."""
    import os
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("the stand-in node belongs to another uid: only root can make it")
    folder = Path(tempfile.mkdtemp(prefix="i50-ladder-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    path = folder / "davinci0"
    path.write_text("")
    os.chown(path, 1000, 1000)
    os.chmod(path, 0o660)
    yield str(path)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_the_ladder_adds_each_layer_in_turn_and_names_the_first_that_fails(tmp_path, node):
    """The ladder on this machine's CPU (the host's device runtime stands in for the NPU's; a file of another uid,
    0660, for a device node): with the device nodes' group, as the sandbox gives it, every rung passes; without it,
    the first rung that fails is the one that adds a user namespace (root's capabilities do not reach a file of an
    unmapped uid there), and its check says so."""
    from verifier.backends import get_backend
    from verifier.build import build_candidate
    from verifier.processes import scrubbed_env
    from verifier.sandbox.seccomp import CPU_NEEDS

    check = npu_check()
    # the example kernel's stand-in: the same launcher, built for the host (loaded from the rung's own folder)
    add = ('#include <cstdint>\nextern "C" void add(uint32_t block, const float* x, const float* y, float* z, '
           "uint32_t n) { for (uint32_t i = 0; i < n; ++i) z[i] = x[i] + y[i]; }\n")
    built = build_candidate(get_backend("cpu"), {"add.cpp": add}, tmp_path / "cache")
    assert built.ok, built.log
    common = {"runtime": "verifier.backends.base:DeviceRuntime", "devices": [node],
              "env": scrubbed_env({}), "needs": CPU_NEEDS.to_dict()}
    climbed = check.ladder(tmp_path / "with", library=str(built.library),
                           signatures=[s.to_dict() for s in built.signatures], **common)
    rungs = climbed["rungs"]
    assert [r["layers"][-1] if r["layers"] else "plain" for r in rungs] == ["plain", *check.npu_ladder.LAYERS]
    assert climbed["first_failure"] is None, climbed["said"]
    assert all(r["ok"] or r.get("skipped") for r in rungs), rungs
    assert all(r["checks"][2]["ok"] for r in rungs if not r.get("skipped")), rungs    # the kernel, on every rung
    last = rungs[-1]
    if not last.get("skipped"):
        assert last["applied"] == ["rlimits", "user and PID namespace", "capability drop", "Landlock", "seccomp"]
        assert int(last["cap_eff"], 16) == 0 and last["seccomp"] == "2"
    failed = check.ladder(tmp_path / "without", give_group=False, **common)
    assert failed["first_failure"] == "user and PID namespace", failed["said"]
    first = next(r for r in failed["rungs"] if r["ok"] is False)
    assert first["checks"][0]["check"] == "device nodes opened" and "Permission denied" in first["checks"][0]["detail"]
    assert failed["rungs"][0]["ok"] and failed["rungs"][1]["ok"]           # plain, then rlimits: fine
