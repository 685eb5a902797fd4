"""The starter candidate a person gets in an empty kernels/<task>/ (#37, finding 6): it builds for any task id
(a C identifier made from it, never ``4_abs_forward``) with a launcher for every dtype the task's cases use,
and runs for each (it copies its input: correct for no task, a numerical verdict for every case)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NPU_LIKE = Path(__file__).parents[1] / "fixtures" / "npu_like"


@pytest.mark.parametrize("name, ident", [("relu", "relu"), ("4_abs", "op_4_abs"), ("19_ReLU", "op_19_ReLU"),
                                         ("conv2d-3x3", "conv2d_3x3"), ("softmax@x", "softmax_x")])
def test_a_c_identifier_for_any_task_id(name, ident):
    from core.workspace_files import c_identifier

    assert c_identifier(name) == ident


def test_every_starter_ctype_is_one_the_runtime_accepts_for_its_dtype():
    from core.workspace_files import STARTER_CTYPES
    from verifier.toolchain.cdecl import POINTER_DTYPES

    for dtype, ctype in STARTER_CTYPES.items():
        assert dtype in POINTER_DTYPES[ctype], (dtype, ctype)


@pytest.mark.slow
def test_the_starter_builds_and_runs_for_every_dtype_of_a_multi_case_task(verifier, tmp_path):
    from core.tasks import load_suite
    from core.workspace_files import starter_candidate

    suite_dir = tmp_path / "npu"
    shutil.copytree(NPU_LIKE, suite_dir)
    task = load_suite(suite_dir).get("4_abs")
    assert task.input_dtypes == ("float32", "float16", "bfloat16")
    files = starter_candidate(task.name, task.input_dtypes)
    assert "op_4_abs_float16(const uint16_t* x" in files["kernel.cpp"] and "torch.bfloat16:" in files["model.py"]
    out = verifier.verify(task.spec(), files, fresh=True)
    assert [g.status for g in out.gates[:3]] == ["passed", "passed", "passed"], out.message   # format, hack, build
    assert out.failed_gate == "correctness" and "3 of 3 cases failed" in out.message and "differ" in out.message, \
        out.message


@pytest.mark.slow
def test_the_starter_of_a_kernelbench_style_id_builds(verifier, suite, tmp_path):
    from core.workspace_files import starter_candidate

    relu = suite.get("relu")
    out = verifier.verify(relu.spec(), starter_candidate("19_ReLU"), fresh=True)
    assert out.gate("build").passed and out.failed_gate == "correctness" and "differ" in out.message, out.message
