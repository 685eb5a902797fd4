"""The value-driven policy's pieces: choice by value, rewards, credit, API selection."""

from __future__ import annotations

import math
import random

import pytest

from core import policy
from store import Experience


def exp(i: str, q1=0.0, q2=0.0, latency=None, names=()):
    return Experience(task_id="t", kind="draft_trace", backend="cpu", id=i, q1=q1, q2=q2,
                      outcome={"latency_ms": latency} if latency else None, extra={"names": list(names)})


def test_greedy_choice_takes_the_highest_value_then_the_most_similar():
    pool = [(exp("a", q1=0.1), 5.0), (exp("b", q1=0.9), 1.0), (exp("c", q1=0.1), 9.0), (exp("d", q1=-0.5), 10.0)]
    chosen = policy.choose_by_value(pool, 3, "draft", epsilon=0.0, rng=random.Random(0))
    assert [e.id for e in chosen] == ["b", "c", "a"]
    assert [e.id for e in policy.choose_by_value(pool, 2, "refine", 0.0, random.Random(0))] == ["d", "c"]  # Q2 ties


def test_exploration_happens_at_the_rate_epsilon():
    pool = [(exp(str(i), q1=i / 10), 1.0) for i in range(10)]
    rng = random.Random(1)
    firsts = [policy.choose_by_value(pool, 1, "draft", 0.3, rng)[0].id for _ in range(2000)]
    greedy = firsts.count("9") / len(firsts)
    assert 0.68 < greedy < 0.80          # 0.7 + 0.3/10


def test_rewards():
    assert policy.draft_reward(True) == 1.0 and policy.draft_reward(False) == -1.0
    assert policy.refine_reward_raw(False, 1.0, 0.5) == -1.0
    assert policy.refine_reward_raw(True, 1.0, 0.5) == pytest.approx(math.tanh(math.log(2.0)))
    assert policy.refine_reward_raw(True, 1.0, 2.0) < 0
    stats = {"count": 10, "mean": 0.1, "std": 0.05}
    assert policy.normalise(0.25, stats) == 1.0                              # clipped
    assert policy.normalise(-0.9, stats) == policy.FEASIBLE_FLOOR > -1.0   # slow but correct beats broken
    assert policy.normalise(0.3, {"count": 1}) == 0.3                        # too few to normalise


def test_adoption_aware_credit():
    assert policy.credit_weights(["a", "b"], ["a"], 1.0, 0.3) == {"a": 1.0, "b": 0.3}
    assert policy.credit_weights(["a", "b"], [], 1.0, 0.3) == {"a": 1.0, "b": 1.0}     # no citations at all
    assert policy.credit_weights(["a"], ["zzz"], 1.0, 0.3) == {"a": 1.0}               # cites nothing shown


def test_api_knowledge_is_chosen_by_name():
    items = [exp("contract", names=["contract"]), exp("omp", names=["omp", "reduction", "sum"]),
             exp("blocking", names=["matmul", "gemm"]), exp("scan", names=["cumsum"])]
    for e, title in zip(items, ["contract", "omp", "blocking", "scan"]):
        e.title = title
    chosen = policy.select_api(items, policy.words_of("gemm_bias_relu fused linear relu add matmul"))
    assert [e.id for e in chosen] == ["contract", "blocking"]
    assert [e.id for e in policy.select_api(items, {"cumsum", "sum"})] == ["contract", "omp", "scan"]


def test_pool_grows_with_iterations():
    assert policy.pool_size(4, 2.0, 0.1, 0) == 8
    assert policy.pool_size(4, 2.0, 0.1, 10) == 12
