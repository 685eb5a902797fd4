"""Issue #35: the harness never takes a job's word. Six classes of candidates, written by an attacker who
read the verifier's source, got verdicts they did not earn; each is a regression test here, seen passing
the verifier before its fix:

1. the candidate stops the clock itself (a thread answers ``done`` on the channel, the work runs after);
2. work done outside the clock (a thread of its own computes while the side waits for its call);
3. timed calls told apart from checked ones (an instance computes in place from its second call on);
4. one side slows another (pins the threads of every process it can name to one CPU);
5. one candidate breaks every later verdict (``prlimit`` on the fork server);
6. a wrong kernel passes correctness (a vector loop whose tail is an ``if``, right only when n % 16 is 0 or 1).
"""

from __future__ import annotations

import random

import pytest

import candidates as C

# ----------------------------------------------------------------------------- 6. tails


def test_second_shapes_put_every_size_on_a_drawn_remainder_that_varies():
    """The smaller and larger shapes' sizes are never 0 or 1 modulo 8 and differ modulo 8 from each other;
    over verifications their remainders modulo 16, 32 and 64 vary; the tiny shape's sizes are odd, below one
    vector width, and their product is neither 0 nor 1 modulo 16."""
    from verifier.task import VECTOR_WIDTH, second_shape_candidates

    source = "batch_size = 64\ndim = 4096\n"
    residues: dict[int, set[int]] = {16: set(), 32: set(), 64: set()}
    for seed in range(200):
        found = second_shape_candidates(source, {}, random.Random(seed))
        smaller, larger, tiny = found["smaller"][0], found["larger"][0], found["tiny"][0]
        for name in ("batch_size", "dim"):
            assert smaller[name] % 8 > 1 and larger[name] % 8 > 1, (seed, smaller, larger)
            assert smaller[name] % 8 != larger[name] % 8, (seed, smaller, larger)
            assert tiny[name] % 2 == 1 and 1 < tiny[name] < VECTOR_WIDTH, tiny
        assert tiny["batch_size"] * tiny["dim"] % 16 not in (0, 1), tiny
        assert 48 - 16 < smaller["batch_size"] <= 48 and 4096 < larger["dim"] <= 5120 + 64
        for m in residues:
            residues[m].add(larger["dim"] % m)
    assert all(len(r) >= m // 2 for m, r in residues.items()), residues    # not one fixed offset
    assert second_shape_candidates(source, {}) != second_shape_candidates(source, {})   # drawn afresh


def test_every_instance_is_called_more_than_once_in_an_unpredictable_order():
    from verifier.gates.correctness import LIVE_INSTANCES, call_schedule
    from verifier.inputs import shape_trial, trial_plan

    trials = [*trial_plan(5), shape_trial("smaller", {"n": 9}), shape_trial("tiny", {"n": 5})]
    trials[-2] = type(trials[-2])(**{**trials[-2].__dict__, "overrides": (("n", 9),)})
    trials[-1] = type(trials[-1])(**{**trials[-1].__dict__, "overrides": (("n", 5),)})
    orders = set()
    for seed in range(50):
        schedule = call_schedule(trials, random.Random(seed))
        orders.add(tuple(i for i, _ in schedule))
        assert sorted({i for i, _ in schedule}) == list(range(len(trials)))
        firsts = [i for n, (i, s) in enumerate(schedule) if s == 0]
        assert sorted(firsts) == list(range(len(trials)))                 # every trial once in full
        for n, (i, s) in enumerate(schedule):                             # its full call comes first
            assert (s == 0) == (i not in [j for j, _ in schedule[:n]])
        per_instance: dict = {}
        for n, (i, _) in enumerate(schedule):
            per_instance.setdefault(trials[i].instance, []).append(n)
        assert all(len(calls) >= 2 for calls in per_instance.values()), per_instance
        spans = [(calls[0], calls[-1]) for calls in per_instance.values()]
        assert max(sum(a <= n <= b for a, b in spans) for n in range(len(schedule))) <= LIVE_INSTANCES
    assert len(orders) > 40


# A 16-wide vector loop whose remainder is handled by an `if` (one element) instead of a loop: wrong whenever
# n % 16 is neither 0 nor 1. Both second shapes of the test suite's relu (64 x 4096) used to be 1 mod 16.
IF_TAIL = r'''
#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        #pragma omp simd
        for (int k = 0; k < 16; ++k) out[i + k] = x[i + k] > 0.f ? x[i + k] : 0.f;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_vector_loop_with_an_if_for_its_tail_fails_correctness(verifier, suite, make_candidate):
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(IF_TAIL)), fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "second shape" in out.message, out.message


# ----------------------------------------------------------------------------- 3. repeated calls

# An instance's first call computes into a fresh output; every later call computes in place into its input
# and returns it (no output to allocate). Correctness called each instance once; the window never looked.
IN_PLACE_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            out = torch.empty_like(x)
            lib.relu_forward(x, out, x.numel())
            return out
        lib.relu_forward(x, x, x.numel())
        return x
'''


@pytest.mark.slow
def test_an_instance_that_computes_in_place_from_its_second_call_fails_correctness(verifier, suite,
                                                                                    make_candidate):
    out = verifier.verify(suite.get("relu").spec(), make_candidate({"model.py": IN_PLACE_MODEL, "kernel.cpp": C.RELU}),
                          fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "the same instance's call" in out.message and "in place" in out.message, out.message
