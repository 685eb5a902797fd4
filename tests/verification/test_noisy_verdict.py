"""A window disturbed by other load is "noisy": no verdict, never "same speed within ±255 %"."""

from __future__ import annotations

import math

from verifier import VerifyConfig
from verifier.outcome import Outcome
from verifier.verdict import NOISE_LIMIT, Ratio, judge
from verifier.verdict import words as speed_words


def test_the_verdict_says_noisy_when_the_interval_holds_1_and_is_too_wide_to_tell():
    assert VerifyConfig().noise_limit == NOISE_LIMIT == 0.15
    assert judge(Ratio(1.74, 0.969, 2.626), 0.03) == "noisy"      # from a disturbed window here
    assert judge(Ratio(1.0, 0.986, 1.014), 0.03) == "same"        # an undisturbed one: ±1.4 %
    # ±12 % of the ratio, but reaching 20 % from equal speed: "could not tell" wherever it is said, so stored
    # as "noisy" too (issue #38: the gate said "same" here while every surface said "too noisy")
    assert judge(Ratio(1.05, 0.95, 1.20), 0.03) == "noisy"
    assert judge(Ratio(1.05, 0.95, 1.20), 0.03, noise_limit=0.20) == "same"
    assert judge(Ratio(1.05, 0.95, 1.20), 0.03, noise_limit=0.10) == "noisy"
    assert judge(Ratio(2.0, 1.2, 3.5), 0.03) == "faster"          # wide, yet the whole interval is above 1
    assert judge(Ratio(0.5, 0.3, 0.9), 0.03) == "slower"
    assert judge(Ratio(1.0, 0.0, math.inf), 0.03) == "same"       # too few rounds: not the machine's noise
    assert judge(Ratio(1.3, 1.2, 1.4), 0.03, preempted=0.6) == "noisy"
    assert judge(Ratio(1.3, 1.2, 1.4), 0.03, preempted=0.5) == "faster"


def test_noisy_words_say_could_not_tell_and_never_same_speed():
    words = speed_words("noisy", 1.74, [0.969, 2.626], "the best")
    assert words == "could not tell against the best: too noisy (speedup interval [0.97, 2.63], above 1 = faster), no verdict"
    assert "same" not in words and "±" not in words and "1.74x" not in words
    # the words follow the interval: "same speed within ±x %" only while it stays within 15 % of equal
    assert speed_words(judge(Ratio(1.05, 0.95, 1.20), 0.03), 1.05, [0.95, 1.20], "PyTorch").startswith(
        "could not tell against PyTorch")
    assert speed_words("same", 1.0, [0.986, 1.014], "PyTorch") == "same speed as PyTorch within ±1 %"
    assert speed_words("same", 1.02, [1.01, 1.025], "PyTorch") == "same speed as PyTorch within ±2 %"
    assert speed_words("same", 1.0, [0.0, math.inf], "PyTorch") == "could not tell against PyTorch: too few timed calls"


def test_a_feasible_outcome_with_a_noisy_window_says_so():
    out = Outcome.start("relu", "cpu")
    for gate in ("format", "anti_hack", "build", "correctness", "performance"):
        out.pass_gate(gate)
    out.latency_ms, out.reference_ms, out.speedup, out.speedup_ci = 2.0, 3.48, 1.74, [0.969, 2.626]
    out.vs_reference = "noisy"
    out.gain, out.gain_ci, out.vs_best = 1.1, [0.6, 2.0], "noisy"
    message = out.finish().message
    assert "could not tell against the reference (3.480 ms in the same window): too noisy (speedup interval [0.97, 2.63], above 1 = faster)" \
        in message
    assert "could not tell against the best: too noisy" in message and "same speed" not in message


def test_a_window_whose_medians_contradict_its_paired_ratio_is_noisy():
    """Seen in a run under load: "1.16x faster than the best" printed beside the best's median 11.917 ms
    and the candidate's 13.219 ms. Rounds where load hit one side's call and not the other's part the
    two statistics; such a window is measured again, never a verdict."""
    from verifier.window.stats import paired_ratio

    # 8 quiet rounds and 8 loaded ones at a steady 1.16x, and 4 rounds where the load changed inside
    # the round: the medians of each side come from different rounds
    cand = [10.0] * 8 + [20.0] * 8 + [14.0] * 4
    best = [11.6] * 8 + [23.2] * 8 + [13.5] * 4
    gain = paired_ratio(best, cand, seed=1)
    assert round(gain.value, 2) == 1.16 and gain.low > 1.1       # the paired statistic alone: "faster"
    assert gain.of_medians is not None and gain.of_medians < 1.0  # the medians: 13.5 / 14.0
    assert judge(gain, 0.03) == "noisy"
    # the same rounds, each pair shifted alike: the statistics agree and the verdict stands
    steady = paired_ratio([x * 1.16 for x in cand], cand, seed=1)
    assert abs(steady.of_medians - steady.value) < 1e-9 and judge(steady, 0.03) == "faster"
    # a small disagreement (within min_change of the interval) is not noise
    assert judge(Ratio(1.20, 1.10, 1.30, of_medians=1.08), 0.03) == "faster"
    assert judge(Ratio(1.20, 1.10, 1.30, of_medians=1.05), 0.03) == "noisy"
