"""Task suites: loading, malformed files, categories, size scaling, second-shape sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import TaskError
from core.tasks import CATEGORIES, load_suite, scale_task
from verifier.task import TaskSpec, apply_overrides, input_numel, second_shape_candidates, size_constants

KERNELBENCH_RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Simple model that performs a ReLU activation."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []
'''


def write_suite(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_builtin_suite_covers_the_categories_and_required_ids():
    suite = load_suite("builtin")
    assert suite.errors == []
    level1 = [t for t in suite.tasks if t.level == 1]
    level2 = [t for t in suite.tasks if t.level == 2]
    assert len(level1) >= 40 and len(level2) >= 20
    assert {t.category for t in level1} >= set(CATEGORIES) - {"fused"}
    assert all(t.category == "fused" for t in level2)
    ids = {t.id for t in suite.tasks}
    for required in ("relu", "gelu", "softmax", "layer_norm", "rms_norm", "sum_dim", "max_pool2d", "matmul",
                     "conv2d", "cumsum", "mse_loss", "cross_entropy", "gemm_bias_relu", "conv2d_relu_bias"):
        assert required in ids


def test_kernelbench_folder_with_malformed_files(tmp_path):
    root = write_suite(tmp_path / "KernelBench", {
        "level1/19_ReLU.py": KERNELBENCH_RELU,
        "level1/broken_syntax.py": "def (:\n",
        "level1/no_inputs.py": "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n",
        "level2/1_Conv2D_ReLU_BiasAdd.py": KERNELBENCH_RELU.replace("torch.relu(x)", "torch.relu(x) + 1"),
        "level1/__init__.py": "",
    })
    suite = load_suite(root)
    assert [t.id for t in suite.tasks] == ["19_ReLU", "1_Conv2D_ReLU_BiasAdd"]
    assert [t.level for t in suite.tasks] == [1, 2]
    assert suite.tasks[0].category == "activation" and suite.tasks[1].category == "fused"
    assert len(suite.errors) == 2
    assert any("broken_syntax.py" in e and "syntax error" in e for e in suite.errors)
    assert any("no_inputs.py" in e and "get_inputs" in e for e in suite.errors)
    assert all("\n" not in e for e in suite.errors)


def test_npu_benchmark_levels_come_from_their_folders(tmp_path):
    """#37 item 9: every npukernelbench_levelN folder counted as level 1."""
    root = write_suite(tmp_path / "npu", {
        "npukernelbench_level1/4_abs.py": KERNELBENCH_RELU,
        "npukernelbench_level2/12_gelu_mul.py": KERNELBENCH_RELU,
        "npukernelbench_level3/30_rms.py": KERNELBENCH_RELU,
    })
    assert {t.id: t.level for t in load_suite(root).tasks} == {"4_abs": 1, "12_gelu_mul": 2, "30_rms": 3}
    assert load_suite(root / "npukernelbench_level2").tasks[0].level == 2


def test_unknown_task_and_missing_suite_are_one_line_errors(tmp_path):
    with pytest.raises(TaskError, match="no task 'relux'.*relu"):
        load_suite("builtin").get("relux")
    with pytest.raises(TaskError, match="does not exist"):
        load_suite(tmp_path / "nowhere")


def test_size_constants_and_overrides():
    src = "batch_size = 16\ndim = 16384\nkernel_size = 3\nreduce_dim = 1\nhidden = dim * 4\nEPS = 1e-5\n"
    assert size_constants(src) == {"batch_size": 16, "dim": 16384}
    rewritten = apply_overrides(src, {"dim": 100})
    ns: dict = {}
    exec(rewritten, ns)
    assert ns["dim"] == 100 and ns["hidden"] == 400 and ns["kernel_size"] == 3
    smaller = second_shape_candidates(src, {})["smaller"]
    assert smaller[1] == {"batch_size": 8, "dim": 8192}               # halved, the fallback
    # three quarters, moved down to a drawn remainder (modulo 8 below 32: 12 lands on 5..12, never 8 or 9)
    assert 5 <= smaller[0]["batch_size"] <= 12 and smaller[0]["batch_size"] % 8 > 1
    assert 12289 - 64 <= smaller[0]["dim"] <= 12288


@pytest.mark.slow   # probes the reference at several sizes (seconds)
def test_size_scaling_of_a_gpu_sized_task(tmp_path):
    root = write_suite(tmp_path / "kb", {"level1/19_ReLU.py": KERNELBENCH_RELU})
    task = load_suite(root).get("19_ReLU")
    assert input_numel(task.spec()) == 4096 * 393216  # computed on the meta device, no memory used
    scaled = scale_task(task, "auto", window=(1e-3, 1e4), bytes_cap=64 << 20)  # sized in a probe subprocess
    assert scaled.size_overrides and input_numel(scaled.spec()) * 4 <= 64 << 20
    assert "sizes scaled by" in scaled.scale_note() and "batch_size 4096->" in scaled.scale_note()
    half = scale_task(task, 0.5)
    assert half.size_overrides == {"batch_size": 2048, "dim": 196608}
    with pytest.raises(TaskError, match=r"must be in \(0, 1\]"):
        scale_task(task, 2)
    assert scale_task(task, None) is task


def test_task_spec_reads_tolerances_from_the_task(tmp_path):
    root = write_suite(tmp_path / "s", {"t.py": KERNELBENCH_RELU + "\nATOL = 1e-3\nRTOL = 2e-3\n"})
    spec = load_suite(root).get("t").spec()
    assert isinstance(spec, TaskSpec) and (spec.atol, spec.rtol) == (1e-3, 2e-3)
