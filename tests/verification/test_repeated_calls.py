"""Kernels that are right on their first call and cheat on the later ones: the performance gate's
spot checks and re-checks catch them (real builds, real sandboxed runs), and the timed calls never
see the same input values twice."""

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

# Right for the first three calls of an instance, then only half the work. (With the tests' settings,
# one warm-up call and five timed ones, each instance makes three calls while timed: only the calls
# after timing can tell. With the default twenty timed calls, the same holds for a larger count.)
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
        lib.relu_forward(x, out, x.numel() if self.n <= 3 else x.numel() // 2)
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
    out = verify(verifier, suite, "relu", {"model.py": MEMO_MODEL, "kernel.cpp": C.RELU}, make_candidate)
    assert not out.feasible
    assert out.gate("correctness").status == "passed"       # right on each instance's first call
    assert out.failed_gate == "anti_hack", out.message
    assert "no longer called the kernel library" in out.message
    # the same, keeping up appearances with an empty kernel call: the outputs show it
    model = MEMO_MODEL.replace("        return self.memo", "        lib.relu_forward(x, self.memo, 0)\n        return self.memo")
    out = verify(verifier, suite, "relu", {"model.py": model, "kernel.cpp": C.RELU}, make_candidate)
    assert out.failed_gate == "correctness", out.message
    assert "results changed under repeated calls" in out.message


def test_a_parametrised_model_timed_and_rechecked_on_new_inputs_passes(verifier, suite, make_candidate):
    """The re-check's trial has the first trial's parameters: an honest model with weights passes."""
    out = verify(verifier, suite, "scale_bias", {"model.py": C.SCALE_BIAS_MODEL, "kernel.cpp": C.SCALE_BIAS},
                 make_candidate)
    assert out.feasible, out.message


def test_a_kernel_that_stops_working_after_a_few_calls_fails(verifier, suite, make_candidate):
    out = verify(verifier, suite, "relu", {"model.py": STALE_MODEL, "kernel.cpp": C.RELU}, make_candidate)
    assert not out.feasible
    assert out.failed_gate == "correctness", out.message
    assert "results changed under repeated calls" in out.message
    assert "a call after timing" in out.message


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    from verifier.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("unguarded-repeat-cache"))
    yield v
    v.close()


def test_pytorch_compute_after_the_first_call_is_caught_by_the_recheck(unguarded, suite, make_candidate):
    out = verify(unguarded, suite, "relu", {"model.py": TORCH_LATER_MODEL, "kernel.cpp": C.RELU}, make_candidate)
    assert not out.feasible
    assert out.failed_gate == "anti_hack", out.message
    assert "after repeated calls" in out.message and "aten.relu" in out.message
    assert out.gate("correctness").status == "passed"


def test_timed_calls_never_see_the_same_input_values_twice(suite):
    """In-process, with a recording model: every warm-up and timed call gets values of its own, except
    the spot-checked calls, which get their trial's exact inputs (so they can be compared)."""
    import hashlib

    import torch

    from verifier.inputs import trial_plan
    from verifier.task import load_task_module
    from verifier.worker import _time_model

    seen: list[tuple[int, str]] = []

    class Recorder(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def forward(self, x):
            seen.append((self.k, hashlib.sha1(x.numpy().tobytes()).hexdigest()))
            return x.clone()

    module = load_task_module(suite.get("relu").spec())
    trials = trial_plan(3)
    job = {"timing": {"warmup": 2, "max_calls": 8, "budget_s": 0.0, "flush_bytes": 0}}
    timing, captured, recheck = _time_model([Recorder(0), Recorder(1)], module, trials, job, "cpu", checks={1, 4})
    n = timing["calls"]
    assert n >= 5 and len(seen) == 2 + n + 2
    timed = seen[2:2 + n]
    checked = {timed[1][1], timed[4][1]}
    unchecked = [h for i, (_, h) in enumerate(seen[:2 + n]) if i - 2 not in (1, 4)]
    assert len(set(unchecked)) == len(unchecked)           # no two perturbed calls alike
    assert not checked & set(unchecked)
    # the re-checks: instance 1 on its own exact inputs (as at spot check 1), instance 0 on unseen ones
    assert seen[-2] == (1, timed[1][1])
    assert seen[-1][0] == 0 and seen[-1][1] not in {h for _, h in seen[:-1]}
    assert [c for (c, _t), _s, _l in captured] == [1, 4, n, n + 1]
    assert recheck["forbidden_ops"] == {}
