"""The value-driven policy's pieces: choice by value, rewards, credit, API selection."""

from __future__ import annotations

import math
import random

import pytest

from core import policy
from store import Experience
from verifier.outcome import Outcome


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
    assert policy.refine_reward_raw(False, 2.0, "faster") == -1.0
    assert policy.refine_reward_raw(True, 2.0, "faster") == pytest.approx(math.tanh(math.log(2.0)))
    assert policy.refine_reward_raw(True, 0.5, "slower") < 0
    assert policy.refine_reward_raw(True, 1.02, "same") == 0.0       # inside the noise: no change
    assert policy.refine_reward_raw(True, None, "") == 0.0           # nothing to compare with
    stats = {"count": 10, "mean": 0.1, "std": 0.05, "var": 0.0025}
    assert policy.scale(0.9, stats) == 1.0                                   # clipped
    assert policy.scale(-0.99, stats) == policy.FEASIBLE_FLOOR > -1.0      # slow but correct beats broken
    assert policy.scale(0.3, {"count": 1}) == 0.3                            # too few to scale


def _run_rewards(gains: list[tuple[float, str]], stats_seed: list[float] = ()) -> list[float]:
    """The engine's reward sequence for feasible refinements with these (gain, verdict) pairs, the
    running statistics kept the way the store keeps them (Welford: count, mean, var)."""
    values = list(stats_seed)
    out = []
    for gain, verdict in gains:
        raw = policy.refine_reward_raw(True, gain, verdict)
        if raw == 0.0:
            out.append(0.0)
            continue
        n = len(values)
        mean = sum(values) / n if n else 0.0
        var = sum((v - mean) ** 2 for v in values) / n if n else 0.0
        out.append(policy.scale(raw, {"count": n, "mean": mean, "var": var, "std": math.sqrt(var)}))
        values.append(raw)
    return out


@pytest.mark.parametrize("history", [[], [0.8] * 10, [0.05] * 10, [-0.5] * 10, [0.9, -0.9] * 5, [0.01, 0.6, -0.3] * 4])
def test_refine_rewards_keep_the_sign_of_the_gain_whatever_came_before(history):
    """The paper's mean shift turned a modest gain after a large one negative: here an improvement
    always scores above zero, a regression below, noise zero, and a failure lowest."""
    sequence = [(3.0, "faster"), (1.1, "faster"), (1.04, "faster"), (1.01, "same"), (0.97, "same"),
                (0.9, "slower"), (0.3, "slower"), (1.5, "faster"), (1.05, "faster"), (1.0, "same")]
    rewards = _run_rewards(sequence, history)
    for (gain, verdict), r in zip(sequence, rewards):
        if verdict == "faster":
            assert r > 0, (gain, r)
        elif verdict == "slower":
            assert policy.FEASIBLE_FLOOR <= r < 0, (gain, r)
        else:
            assert r == 0.0
        assert r > policy.refine_reward_raw(False, gain, verdict) == -1.0   # a failure is lowest
    # under the same statistics, a larger gain never scores below a smaller one
    n = len(history)
    mean = sum(history) / n if n else 0.0
    stats = {"count": n, "mean": mean, "var": sum((v - mean) ** 2 for v in history) / n if n else 0.0}
    gains = [0.2, 0.5, 0.9, 1.05, 1.2, 2.0, 5.0]
    scaled = [policy.scale(policy.refine_reward_raw(True, g, "faster" if g > 1 else "slower"), stats) for g in gains]
    assert scaled == sorted(scaled)


def test_gain_over_best_prefers_the_paired_window_and_falls_back_with_a_wide_band():
    def o(**fields):
        return Outcome(feasible=True, **fields)

    paired = o(gain=1.3, vs_best="faster", speedup=0.5)
    assert policy.gain_over_best(paired, o(speedup=2.0)) == (1.3, "faster")
    assert policy.gain_over_best(o(speedup=2.2), o(speedup=2.0))[1] == "same"        # 10 %: within the band
    assert policy.gain_over_best(o(speedup=3.0), o(speedup=2.0)) == (1.5, "faster")
    assert policy.gain_over_best(o(speedup=1.0), o(speedup=2.0)) == (0.5, "slower")
    assert policy.gain_over_best(o(speedup=1.0), None) == (None, "")
    assert policy.is_new_best(True, False, "")                # the first feasible kernel
    assert not policy.is_new_best(True, True, "same") and not policy.is_new_best(False, False, "")
    assert policy.is_new_best(True, True, "faster")


def _point(i, q2, n2, latency):
    e = exp(i, q2=q2, latency=latency)
    e.n2 = n2
    return e


def test_a_variant_measured_once_never_outranks_the_best_on_q2_alone():
    best = _point("best", q2=-0.4, n2=3, latency=1.0)            # its children were slower: Q2 went down
    slower_once = _point("slow", q2=-0.2, n2=1, latency=1.5)     # one sample (its own reward)
    fresh = _point("fresh", q2=0.0, n2=0, latency=1.2)
    proven = _point("proven", q2=0.3, n2=2, latency=1.1)         # two samples: its children did well
    rng = random.Random(0)
    assert policy.choose_start_point([slower_once, fresh], 0.0, rng, best).id == "best"   # best always in P(x)
    assert policy.choose_start_point([best, slower_once, fresh], 0.0, rng, best).id == "best"
    assert policy.choose_start_point([best, slower_once, proven], 0.0, rng, best).id == "proven"
    # without the cap (no best known), plain Q2
    assert policy.choose_start_point([slower_once, fresh], 0.0, rng).id == "fresh"
    # exploration still reaches every point, the best included
    picks = {policy.choose_start_point([slower_once, fresh], 1.0, random.Random(k), best).id for k in range(50)}
    assert picks == {"best", "slow", "fresh"}


def test_adoption_aware_credit():
    assert policy.credit_weights(["a", "b"], ["a"], 1.0, 0.3) == {"a": 1.0, "b": 0.3}
    # no citations at all: every item is uncited (issue #36: full credit let a failed draft earn value by
    # sitting in prompts that succeeded)
    assert policy.credit_weights(["a", "b"], [], 1.0, 0.0) == {"a": 0.0, "b": 0.0}
    assert policy.credit_weights(["a"], ["zzz"], 1.0, 0.0) == {"a": 0.0}               # cites nothing shown


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


def test_a_noisy_window_is_no_verdict_reward_zero_and_never_a_new_best():
    def o(**fields):
        return Outcome(feasible=True, **fields)

    paired = o(gain=1.7, gain_ci=[0.97, 2.63], vs_best="noisy", speedup=3.0)
    assert policy.gain_over_best(paired, o(speedup=2.0)) == (1.7, "noisy")
    # without a paired window, a speedup from a noisy window (the attempt's or the best's) judges nothing
    assert policy.gain_over_best(o(speedup=4.0, vs_reference="noisy"), o(speedup=2.0)) == (2.0, "noisy")
    assert policy.gain_over_best(o(speedup=4.0), o(speedup=2.0, vs_reference="noisy")) == (2.0, "noisy")
    assert policy.refine_reward_raw(True, 1.7, "noisy") == 0.0
    assert not policy.is_new_best(True, True, "noisy")
