"""Kernels that are right on their first call and cheat on the later ones: the performance gate's
spot checks and re-checks catch them (real builds, real sandboxed runs). What every timed call sees is
tested in test_window.py."""

from __future__ import annotations

import pytest

import candidates as C

pytestmark = pytest.mark.slow

# Computes once per instance, then returns the saved result: every timed call of an instance sees the
# same trial's inputs, so only a call on new inputs to an instance already used can tell.
MEMO_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = None

    def forward(self, x):
        if self.memo is None:
            out = torch.empty_like(x)
            lib.relu_forward(x, out, x.numel())
            self.memo = out
        return self.memo
'''

# Right for the first four calls of an instance (the correctness job calls one at most four times), then
# only half the work: only the timing window's calls can tell.
STALE_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel() if self.n <= 4 else x.numel() // 2)
        return out
'''

# The kernel on the first call of an instance, PyTorch from then on (static rules off to reach it).
TORCH_LATER_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        if self.n == 1:
            out = torch.empty_like(x)
            lib.relu_forward(x, out, x.numel())
            return out
        return torch.relu(x)
'''


def verify(verifier, suite, task_id, files, make_candidate):
    return verifier.verify(suite.get(task_id).spec(), make_candidate(files))


def test_a_result_computed_once_and_replayed_fails(verifier, suite, make_candidate):
    """Caught by the correctness job since it calls every instance more than once (issue #35): a repeated
    call never calls the library; with an empty call to keep up appearances, the outputs show it."""
    out = verify(verifier, suite, "relu", {"model.py": MEMO_MODEL, "kernel.cpp": C.RELU}, make_candidate)
    assert not out.feasible
    assert out.failed_gate == "anti_hack", out.message
    assert "never called the kernel library" in out.message
    # the same, keeping up appearances with an empty kernel call: the outputs show it
    model = MEMO_MODEL.replace("        return self.memo", "        lib.relu_forward(x, self.memo, 0)\n        return self.memo")
    out = verify(verifier, suite, "relu", {"model.py": model, "kernel.cpp": C.RELU}, make_candidate)
    assert out.failed_gate == "correctness", out.message
    assert "the same instance's call" in out.message, out.message     # trials 1 and 3 share an instance


def test_a_parametrised_model_timed_and_rechecked_on_new_inputs_passes(verifier, suite, make_candidate):
    """The re-check's trial has the first trial's parameters: an honest model with weights passes."""
    out = verify(verifier, suite, "scale_bias", {"model.py": C.SCALE_BIAS_MODEL, "kernel.cpp": C.SCALE_BIAS},
                 make_candidate)
    assert out.feasible, out.message


def test_a_kernel_that_stops_working_after_a_few_calls_fails(verifier, suite, make_candidate):
    out = verify(verifier, suite, "relu", {"model.py": STALE_MODEL, "kernel.cpp": C.RELU}, make_candidate)
    assert not out.feasible
    assert out.failed_gate == "correctness", out.message
    assert "were not the reference's" in out.message
    assert "timed call" in out.message or "a call after timing" in out.message


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("unguarded-repeat-cache"))
    yield v
    v.close()


def test_pytorch_compute_after_the_first_call_is_caught(unguarded, suite, make_candidate):
    """By the correctness job's repeated calls of every instance (issue #35), before any timing."""
    out = verify(unguarded, suite, "relu", {"model.py": TORCH_LATER_MODEL, "kernel.cpp": C.RELU}, make_candidate)
    assert not out.feasible
    assert out.failed_gate == "anti_hack", out.message
    assert "PyTorch compute" in out.message and "aten.relu" in out.message
