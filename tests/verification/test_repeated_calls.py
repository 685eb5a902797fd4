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
    assert "timed call" in out.message or "a call after timing" in out.message


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

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


def test_timed_calls_never_see_the_same_input_values_twice_and_are_all_alike(suite):
    """In-process, with recording models: every round's inputs are values of their own (no exact trial
    inputs anywhere, so no call can be recognised as the checked one), the reference and the
    candidate see the same values within a round, and every timed round is checked."""
    import hashlib

    import torch

    from verifier.backends import DeviceRuntime
    from verifier.inputs import make_inputs, trial_plan
    from verifier.job.worker import _time_sides
    from verifier.task import load_task_module

    seen: list[tuple[str, int, str]] = []

    class Recorder(torch.nn.Module):
        def __init__(self, side, k):
            super().__init__()
            self.side, self.k = side, k

        def forward(self, x):
            seen.append((self.side, self.k, hashlib.sha1(x.numpy().tobytes()).hexdigest()))
            return x.clone()

    module = load_task_module(suite.get("relu").spec())
    trials = trial_plan(3)
    exact = {hashlib.sha1(make_inputs(module.get_inputs, t)[0].numpy().tobytes()).hexdigest() for t in trials}
    job = {"timing": {"warmup": 2, "max_calls": 8, "budget_s": 0.0, "flush_bytes": 0}}
    sides = {s: [Recorder(s, 0), Recorder(s, 1)] for s in ("reference", "candidate")}
    window, captured, recheck, _ = _time_sides(sides, module, trials, job, DeviceRuntime(), samples=64)
    n = window.rounds
    assert n >= 5 and len(seen) == 2 * 2 + 2 * n + 4
    assert not exact & {h for _, _, h in seen}                   # never a trial's exact inputs
    rounds = [seen[4 + 2 * i: 6 + 2 * i] for i in range(n)]
    for a, b in rounds:                                            # same values for both sides of a round
        assert {a[0], b[0]} == {"reference", "candidate"} and a[1:] == b[1:]
    values = [h for (_, _, h), _ in rounds] + [h for _, _, h in seen[:4:2]]
    assert len(set(values)) == len(values)                        # no two rounds alike
    assert [meta["round"] for meta, _, _ in captured] == list(range(n)) + [n, n + 1]
    assert all(len(e["leaves"][0]) == 64 for _, e, _ in captured[:n])      # timed rounds: sampled positions
    # the re-checks: instance 1 on fresh values, then instance 0 on the third trial, each unseen before
    assert seen[-4][1:] == seen[-3][1:] and seen[-3][:2] == ("candidate", 1)
    assert seen[-1][:2] == ("candidate", 0) and seen[-1][2] not in {h for _, _, h in seen[:-2]}
    assert recheck["forbidden_ops"] == {}
