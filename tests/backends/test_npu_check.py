"""``bench/npu_check.py``, the first run on an NPU workstation (issue #34): it must not go wrong silently. Its
custom-op check uses an op no built-in CANN op shadows and a CPU reference; every verifier check runs with and
without the seccomp filter and the pair says whether the sandbox is what failed; one report file holds it all."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

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
