"""Paired timing: the reference, the candidate and the task's best timed interleaved in one window;
speedup and gain are paired ratios with an interval; every timed call is checked."""

from __future__ import annotations

import random

import pytest

from verifier.verdict import judge

import candidates as C


def test_paired_ratio_and_its_interval():
    from verifier.window.stats import paired_ratio

    rng = random.Random(7)
    fast = [1.0 * rng.uniform(0.9, 1.3) for _ in range(15)]
    slow = [2.0 * rng.uniform(0.9, 1.3) for _ in range(15)]
    half = paired_ratio(fast, slow, seed=1)          # best / candidate: a 2x slower candidate
    assert 0.4 < half.value < 0.6 and half.high < 1.0 and judge(half, 0.03) == "slower"
    same = paired_ratio(fast, rng.sample(fast, len(fast)), seed=1)
    assert same.low <= 1.0 <= same.high and judge(same, 0.03) == "same"
    assert judge(paired_ratio(slow, fast, seed=1), 0.03) == "faster"
    tiny = paired_ratio([1.0, 1.0], [2.0, 2.0])      # too few rounds: never significant
    assert judge(tiny, 0.0) == "same"


def test_a_window_settles_on_its_intervals_width_never_on_its_side_of_one():
    """The window stops early (verifier.window.harness.settled) once every ratio it reports is within
    the precision: a steady 2x faster or 2x slower candidate settles alike; a scattered one, or one
    whose best is scattered against it, does not; two rounds never do (no interval)."""
    from verifier.window.harness import settled

    rng = random.Random(3)
    ref = [1.0 * rng.uniform(0.99, 1.01) for _ in range(10)]
    fast = [0.5 * rng.uniform(0.99, 1.01) for _ in range(10)]
    slow = [2.0 * rng.uniform(0.99, 1.01) for _ in range(10)]
    wild = [1.0 * rng.uniform(0.5, 2.0) for _ in range(10)]
    assert settled({"reference": ref, "candidate": fast}, 0.04)
    assert settled({"reference": ref, "candidate": slow}, 0.04)
    assert not settled({"reference": ref, "candidate": wild}, 0.04)
    assert not settled({"reference": ref, "candidate": fast, "best": wild}, 0.04)
    assert settled({"reference": ref, "candidate": fast, "best": ref}, 0.04)
    assert not settled({"reference": ref[:2], "candidate": fast[:2]}, 0.5)


def test_geomean_ratio_over_cases():
    """A multi-case task's speed: the geometric mean of each case's paired ratio, with an interval that
    resamples every case's rounds; one case is the plain paired ratio."""
    from verifier.window.stats import geomean_ratio, paired_ratio

    rng = random.Random(11)
    base = [rng.uniform(0.9, 1.3) for _ in range(15)]
    twice = [2.0 * b * rng.uniform(0.98, 1.02) for b in base]   # case 1: 2x faster
    half = [0.5 * b * rng.uniform(0.98, 1.02) for b in base]    # case 2: 2x slower
    one = geomean_ratio([(twice, base)], seed=3)
    assert one.value == pytest.approx(paired_ratio(twice, base, seed=3).value)
    both = geomean_ratio([(twice, base), (half, base)], seed=3)
    assert both.value == pytest.approx(1.0, rel=0.05) and both.low <= both.value <= both.high
    assert judge(both, 0.03) == "same"
    faster = geomean_ratio([(twice, base), (twice, base)], seed=3)
    assert faster.value == pytest.approx(2.0, rel=0.05) and faster.low > 1.0 and judge(faster, 0.03) == "faster"
    assert judge(geomean_ratio([(twice, base), ([1.0, 1.0], [2.0, 2.0])]), 0.0) == "same"  # too few rounds
    with pytest.raises(ValueError):
        geomean_ratio([])
    with pytest.raises(ValueError):
        geomean_ratio([([1.0, 2.0], [1.0])])


def test_rounds_interleave_every_side_in_a_random_order():
    from verifier.window.in_process import time_interleaved

    calls = []
    window = time_interleaved({s: (lambda s=s: calls.append(s)) for s in ("reference", "candidate", "best")},
                              lambda i, s: None, warmup=1, max_rounds=12, budget_s=0.0, min_rounds=12,
                              rng=random.Random(3))
    assert window.rounds == 12 and all(len(v) == 12 for v in window.samples.values())
    assert all(sorted(r) == ["best", "candidate", "reference"] for r in window.order)
    assert len({tuple(r) for r in window.order}) > 1          # the order changes from round to round
    assert len(calls) == 3 + 36


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    """More rounds than the shared verifier: the interval has to exclude 1 on a loaded machine."""
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    # every round timed (no early stop at the precision): the mid-timing cheat acts from call 26 on
    cfg = VerifyConfig(trials=5, timing_calls=30, timing_budget_s=3.0, warmup_calls=1, run_timeout_s=60,
                       memory_limit_mb=4096, threads=2, timing_precision=0)
    v = Verifier("cpu", cfg, cache_dir=tmp_path_factory.mktemp("paired-cache"))
    yield v
    v.close()


def test_a_2x_slower_candidate_measures_about_half_the_best_in_one_window(paired, suite):
    task = suite.get("relu").spec()
    out = paired.verify(task, C.repeated_relu(64), best=C.repeated_relu(32), fresh=True)
    assert out.feasible, out.message
    assert out.best_ms is not None and out.timing_rounds >= 5
    assert 0.3 < out.gain < 0.75, out.gate("performance").message
    assert out.gain_ci[1] < 1.0 and out.vs_best == "slower", out.gate("performance").message
    assert out.best_hash and "slower than the best" in out.message
    # the speedup is over the reference timed in the same window, with its interval
    assert out.speedup_ci[0] <= out.speedup <= out.speedup_ci[1] and out.reference_ms > 0


def test_a_kernel_that_cheats_in_the_middle_of_the_timing_is_caught(paired, suite):
    """Spot checks on the first five timed calls and the calls after timing all miss calls 26-29 (and
    the correctness job's calls are over by then); with every timed call compared with the
    reference on the same inputs, they do not."""
    out = paired.verify(suite.get("relu").spec(), C.elementwise(C.CHEATS_MID_TIMING), fresh=True)
    assert not out.feasible
    assert out.failed_gate == "correctness" and "timed call" in out.message, out.message
    assert out.gate("performance").status == "failed"


def test_an_honest_candidate_with_its_own_best_is_the_same_speed(paired, suite):
    out = paired.verify(suite.get("relu").spec(), C.repeated_relu(4, "a"), best=C.repeated_relu(4, "b"), fresh=True)
    assert out.feasible, out.message
    assert out.vs_best in ("same", "faster", "slower", "noisy") and out.gain_ci[0] <= out.gain <= out.gain_ci[1]
    assert 0.4 < out.gain < 2.5          # identical code: only the machine's noise between them


def test_speed_words_keep_the_interval_in_the_units_of_the_ratio_they_follow():
    from verifier.verdict import words as speed_words

    assert speed_words("faster", 1.31, [1.2, 1.4], "the best") == "1.31x faster than the best [1.20, 1.40]"
    # a speedup of 0.94 [0.91, 0.98] is "1.06x slower", so its interval is [1/0.98, 1/0.91]
    assert speed_words("slower", 1 / 1.06, [0.91, 0.98], "PyTorch") == "1.06x slower than PyTorch [1.02, 1.10]"
    assert speed_words("same", 1.0, [0.96, 1.04], "PyTorch") == "same speed as PyTorch within ±4 %"
