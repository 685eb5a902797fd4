"""The relevant experience is retrieved (issue #36, finding 1). A matrix multiplication traces ``mm`` and a fused
GEMM ``addmm`` (category "fused"), so neither counted for the other: the GEMM's prompts got the matmul's
*failed* draft as a lesson and its working kernel as one line without code, and every prompt showed the same
items whatever the task (streaming lessons of memory-bound tasks in compute-bound GEMM prompts). Here three
public-shaped tasks run in sequence, as in the loopback runs: a SELU, a matmul with a transposed B (refused
once for token pasting, then correct), then a GEMM + GroupNorm + Hardtanh, with the task graphs traced by the
roofline meter."""

from __future__ import annotations

from pathlib import Path

import pytest
from canned_runs import canned_run, kernel

SELU = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.selu(x)

batch_size = 64
dim = 8192

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''

MATMUL_T = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B.T)

M = 256
K = 512
N = 384

def get_inputs():
    return [torch.rand(M, K), torch.rand(N, K)]

def get_init_inputs():
    return []
'''

GEMM_NORM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)

    def forward(self, x):
        return self.hardtanh(self.group_norm(self.gemm(x)))

batch_size = 128
in_features = 512
out_features = 512
num_groups = 8

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, num_groups, -2.0, 2.0]
'''


@pytest.fixture
def public_shaped(tmp_path):
    from core.prompts import PromptFacts
    from verifier.backends import get_backend
    from verifier.machine.roofline import RooflineMeter

    suite = tmp_path / "suite"
    for level, name, text in ((1, "27_SELU_", SELU), (1, "17_Matmul_with_transposed_B", MATMUL_T),
                              (2, "30_Gemm_GroupNorm_Hardtanh", GEMM_NORM)):
        (suite / f"level{level}").mkdir(parents=True, exist_ok=True)
        (suite / f"level{level}" / f"{name}.py").write_text(text)
    meter = RooflineMeter(tmp_path / "cache", get_backend("cpu"), 2)
    meter.ceilings = lambda remeasure=False: {"triad_gbps": 25.0, "fma_gflops": 170.0}   # not measured here
    meter.cached_ceilings = meter.ceilings
    return suite, PromptFacts("cpu", meter=meter, ceilings={"triad_gbps": 25.0, "fma_gflops": 170.0})


def memory_section(user: str) -> str:
    return user.split("## Memory:", 1)[1].split("\n## ")[0] if "## Memory:" in user else ""


def test_a_fused_gemm_is_shown_the_matmul_s_working_kernel_and_nothing_unrelated(tmp_path, public_shaped):
    from store import Store

    suite, facts = public_shaped
    with Store.open(tmp_path / "memory.lmdb") as store:
        canned_run(store, "evokernel", {"27_SELU_": [kernel("2.0", 1), kernel("1.8", 2)]}, suite=suite, facts=facts)
        canned_run(store, "evokernel", {"17_Matmul_with_transposed_B": [kernel("anti_hack", 3), kernel("9.0", 4),
                                                                         kernel("7.0", 5)]}, suite=suite, facts=facts)
        _record, sent = canned_run(store, "evokernel", {"30_Gemm_GroupNorm_Hardtanh": [kernel("5.0", 6)]},
                                   suite=suite, facts=facts)
    shown = memory_section(sent["30_Gemm_GroupNorm_Hardtanh"][0][1])
    assert "This task's kernel is GEMM-like" in shown and "compute-bound" in shown
    assert "task 17_Matmul_with_transposed_B (gemm, compute-bound)" in shown
    assert "kTag5 = 5" in shown                                       # the matmul's best kernel, with its code
    assert "kTag3" not in shown and "failed at anti_hack" not in shown    # its refused draft is a rule, not a lesson
    assert "27_SELU_" not in shown                                      # a memory-bound pointwise kernel: unrelated
    assert "Habits of fast, correct CPU kernels" in shown               # level-2 knowledge ("fused", "epilogue")


def test_a_pointwise_task_is_not_shown_gemm_kernels(tmp_path, public_shaped):
    from store import Store

    suite, facts = public_shaped
    with Store.open(tmp_path / "memory.lmdb") as store:
        canned_run(store, "evokernel", {"17_Matmul_with_transposed_B": [kernel("9.0", 1)]}, suite=suite, facts=facts)
        _record, sent = canned_run(store, "evokernel", {"27_SELU_": [kernel("2.0", 2)]}, suite=suite, facts=facts)
    assert "17_Matmul" not in sent["27_SELU_"][0][1]


def test_a_kernel_already_reused_is_not_shown_in_full_again():
    """The model-played run of #36: the fused GEMM's draft cited the matmul's kernel and reused it; each of its
    refine prompts then carried that kernel in full again (16 k characters) beside the start point built from
    it, and no answer cited it again. Once this task's attempts cited it, it shows its key lines."""
    from core import prompts
    from core.kinship import KernelKind
    from core.tasks import load_suite
    from store import Experience

    task = load_suite(str(Path(__file__).parents[1] / "fixtures" / "suite")).get("relu")
    kind = KernelKind("pointwise", "memory", ("float32",), ("relu",), "graph")
    loops = "\n".join(f"    out[{k}] = x[{k}] > 0.f ? x[{k}] : 0.f;  // unrolled line {k}" for k in range(120))
    closest = Experience(id="c" * 20, task_id="leaky_relu", kind="draft_trace", backend="cpu", stage="draft",
                         title="leaky_relu draft", reward=1.0, extra={"change": "unrolled"},
                         files={"model.py": "x = 1\n", "kernel.cpp": f'extern "C" void k(const float* x, float* out) {{\n'
                                                                     f"{loops}\n}}\n"},
                         outcome={"verified": True, "feasible": True, "latency_ms": 1.0},
                         signature=kind.signature())

    def prompt(cited: list[str]) -> str:
        start = Experience(id="s" * 20, task_id="relu", kind="draft_trace", backend="cpu", stage="draft",
                           title="relu draft", files={"model.py": "x = 1\n", "kernel.cpp": "// start\n"},
                           extra={"change": "first", "cited": cited},
                           outcome={"verified": True, "feasible": True, "latency_ms": 1.0})
        return prompts.refine_prompt(task, "cpu", [], [], [closest], start, [start], best=start, kind=kind)[1][1]

    assert "unrolled line 119" in prompt([])                 # not reused yet: the closest kernel in full
    shown = prompt([closest.id])
    assert "unrolled line 119" not in shown and "(key lines of" in shown and "already reused" in shown
