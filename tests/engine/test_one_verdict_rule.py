"""Issue #38: one verdict rule. For the same window, the word the performance gate stores, the word the
workbench and the run line show, the reward (its sign, the new best and the reason said with it) and the
word the prompt states agree, over a table of windows that includes the boundary cases.

The stored word comes from the real performance gate (``verifier.gates.performance.check``) given the
window's paired ratio; the reward and its reason from the real engine's commit path (a real LMDB store,
a verifier double that returns what the gate stored); the shown and prompted words from the workbench's,
the run line's and the prompt's own formatters. Seen failing on the code before the rule was one: the
1.05x [0.90, 1.18] window was stored "same" and shown "too noisy"; the too-few-calls window was shown
"too few calls" and rewarded as "the same speed as the best"."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest

from verifier import Outcome
from verifier.gates import performance
from verifier.verdict import Ratio

MIN_CHANGE = 0.03

WINDOWS = [  # (ratio, low, high, ratio of the medians, the word every surface must say)
    (1.05, 0.90, 1.18, None, "too noisy"),        # the case: ±14 % of the ratio, 18 % from equal
    (1.0, 0.85, 1.15, None, "same speed"),        # reaches exactly the noise limit (15 %)
    (1.0, 0.84, 1.15, None, "too noisy"),         # just beyond it
    (1.05, 0.95, 1.20, None, "too noisy"),
    (1.0, 0.986, 1.014, None, "same speed"),      # an undisturbed window
    (1.02, 1.01, 1.025, None, "same speed"),      # excludes 1, but a change below the 3 % minimum
    (1.03, 1.01, 1.05, None, "same speed"),       # the ratio at the minimum change, the interval not past it
    (1.06, 1.031, 1.09, None, "faster"),          # the whole interval past the minimum change
    (1 / 1.03, 0.95, 0.99, None, "same speed"),   # the other way: the interval not below 1 / 1.03
    (0.94, 0.92, 0.97, None, "slower"),           # the whole interval below 1 / 1.03
    (1.31, 1.2, 1.4, None, "faster"),
    (2.0, 1.2, 3.5, None, "faster"),              # wide, yet the whole interval is past the minimum change
    (1.10, 1.001, 1.222, None, "too noisy"),      # an A/A window of #47: above 1 but not past 1.03, 22 % out
    (0.94, 0.91, 0.98, None, "same speed"),       # reaches 9 % from equal speed, not below 1 / 1.03
    (1.74, 0.969, 2.626, None, "too noisy"),      # a disturbed window measured here
    (1.20, 1.10, 1.30, 1.05, "too noisy"),        # the medians contradict the paired interval
    (1.0, 0.0, math.inf, None, "too few calls"),  # too few rounds for an interval
]


def classify(text: str) -> str:
    """The verdict a piece of text states, in ``verifier.verdict.word``'s terms."""
    t = text.lower()
    for word, keys in (("not trusted", ("not trusted",)), ("too few calls", ("too few",)),
                       ("too noisy", ("too noisy",)), ("same speed", ("same speed",)),
                       ("faster", ("faster",)), ("slower", ("slower",))):
        if any(k in t for k in keys):
            return word
    raise AssertionError(f"no verdict in {text!r}")


def stored_word(verdict: str, ci: list[float] | None) -> str:
    """The stored verdict as the word it stands for (a "same" window without an interval is too few calls)."""
    if verdict == "same":
        ok = ci and len(ci) == 2 and math.isfinite(ci[1]) and ci[0] > 0
        return "same speed" if ok else "too few calls"
    return {"noisy": "too noisy", "implausible": "not trusted"}.get(verdict, verdict)


class NoRoofline:
    """A roofline that knows no task (no point, no ceilings): the gate judges by the window alone."""

    def point(self, task, latency_ms):
        return None

    def cached_ceilings(self):
        return None

    def ceilings(self, remeasure=False):
        return None


def gate_outcome(ratio: Ratio, monkeypatch, *, best: bool) -> Outcome:
    """What the real performance gate (``verifier.gates.performance.check``: its second window included)
    stores for windows whose paired ratios (against the reference and, with ``best``, against the best) are
    ``ratio``."""
    from verifier import VerifyConfig
    from verifier.reference import Reference

    monkeypatch.setattr(performance, "paired_ratio", lambda numerator, denominator: ratio)
    out = Outcome.start("relu", "cpu")
    for gate in ("format", "anti_hack", "build", "correctness"):
        out.pass_gate(gate)
    sides = ["reference", "candidate", *(["best"] if best else [])]
    samples = {side: [1.0] * 8 for side in sides}
    result = {"window": {"sides": sides, "samples": samples, "wall": samples, "order": [sides] * 8,
                         "clock": "wall", "preempted": [False] * 8}}
    performance.check(SimpleNamespace(cases=()), Reference([], [], []), out,
                      measure=lambda ref, case, budget_s: (dict(result), {"checks": []}), roofline=NoRoofline(),
                      tolerance=lambda dtype: (1e-4, 1e-4), config=VerifyConfig(min_speed_change=MIN_CHANGE),
                      best_hash="b" * 16 if best else "", with_best=best)
    return out.finish()


class GateVerifier:
    """The verifier protocol, answering with what the real performance gate stores: a draft (no best)
    at 2x [1.9, 2.1] over the reference, a refinement at the table's window against the reference and
    the best alike."""

    backend = SimpleNamespace(name="cpu")

    def __init__(self, monkeypatch, window: Ratio):
        self.monkeypatch, self.window = monkeypatch, window

    def verify(self, spec, files, on_gate=None, *, fresh=False, best=None):
        if best is None:
            return gate_outcome(Ratio(2.0, 1.9, 2.1), self.monkeypatch, best=False)
        return gate_outcome(self.window, self.monkeypatch, best=True)

    def tolerance_for(self, spec):
        from verifier import VerifyConfig
        from verifier.backends import get_backend
        from verifier.tolerance import tolerance_for

        return tolerance_for(spec, VerifyConfig(), get_backend("cpu"))

    def close(self):
        return None


def refine_event(tmp_path, suite, monkeypatch, window: Ratio):
    """The AttemptRecorded event of a hand edit refining a draft, committed by the real engine."""
    from core import events as ev
    from core.config import Config
    from core.engine import Engine
    from store import Store

    store = Store.open(tmp_path / "memory.lmdb")
    engine = Engine(Config(), store, GateVerifier(monkeypatch, window), llm=None)
    events: list = []
    engine.bus.subscribe(lambda e: events.append(e) if isinstance(e, ev.AttemptRecorded) else None)
    task = suite.get("relu")

    async def go():
        first, _ = await engine.record_human(task, {"model.py": "A = 1\n", "kernel.cpp": "int a;\n"}, None)
        await engine.record_human(task, {"model.py": "A = 2\n", "kernel.cpp": "int b;\n"}, first.id)

    try:
        asyncio.run(go())
    finally:
        store.close()
    draft, refine = events
    assert draft.stage == "draft" and refine.stage == "refine" and refine.outcome.vs_best
    return refine


def said_against_best(text: str) -> str:
    """The part of a line that compares with the best ("...; 1.31x faster than the best then [...]")."""
    return next(part for part in text.split("; ") if "the best" in part)


@pytest.mark.parametrize("window", WINDOWS, ids=[f"{w[0]:.3g}[{w[1]:g},{w[2]:g}]" + (f"m{w[3]:g}" if w[3] else "")
                                                 for w in WINDOWS])
def test_stored_shown_rewarded_and_prompted_words_agree(window, tmp_path, suite, monkeypatch):
    from core import prompts
    from evotui.cmd_run import attempt_words
    from evotui.widgets import marks

    value, low, high, medians, expected = window
    e = refine_event(tmp_path, suite, monkeypatch, Ratio(value, low, high, medians))
    out = e.outcome
    # stored, against the reference and against the best
    assert stored_word(out.vs_reference, out.speedup_ci) == expected
    assert stored_word(out.vs_best, out.gain_ci) == expected
    # shown: the workbench's status column (against the reference) and its log line (against the best),
    # the run line, and the gate's own message
    column = marks.verdict(out).split(", ")[1]
    assert (("faster" if out.speedup > 1 else "slower") if column.endswith("×") else column) == expected
    assert classify(said_against_best(marks.full_verdict(out))) == expected
    assert classify(said_against_best(attempt_words(e))) == expected
    assert classify(said_against_best(out.gate("performance").message)) == expected
    # rewarded: the reason said with the reward, its sign, and the new best
    assert classify(e.reason) == expected
    assert (e.reward > 0) == (expected == "faster") and (e.reward < 0) == (expected == "slower")
    assert e.new_best == (expected == "faster")
    # prompted: how the next prompt states this kernel
    assert classify(said_against_best(prompts.in_window(out, "the best then"))) == expected
    assert classify(prompts.in_window(out).split("; ")[0]) == expected


def test_an_implausible_kernel_is_not_trusted_on_every_surface():
    """A kernel above this machine's ceiling even when measured again: whatever its window said, stored,
    shown, rewarded and prompted as not trusted."""
    from core import policy, prompts
    from evotui.widgets import marks
    from verifier.verdict import judge

    ratio = Ratio(3.0, 2.8, 3.2)
    out = Outcome(feasible=True, latency_ms=1.0, reference_ms=3.0, speedup=3.0, speedup_ci=[2.8, 3.2],
                  gain=3.0, gain_ci=[2.8, 3.2], verified=True)
    out.vs_reference = out.vs_best = judge(ratio, MIN_CHANGE, plausible=False)
    assert stored_word(out.vs_best, out.gain_ci) == "not trusted"
    assert marks.verdict(out).split(", ")[1] == "not trusted"
    assert "speed not trusted" in marks.verdict(out)
    gain, verdict = policy.gain_over_best(out, None)
    assert policy.refine_reward_raw(True, gain, verdict) == 0.0 and not policy.is_new_best(True, True, verdict)
    assert classify(policy.reward_reason("refine", True, verdict, gain_ci=out.gain_ci)) == "not trusted"
    assert classify(said_against_best(prompts.in_window(out, "the best then"))) == "not trusted"


def test_a_gain_judged_from_two_windows_says_so_in_its_reason():
    """The best could not be timed beside the attempt: two speedups from two windows are compared with the
    unpaired band (verifier.verdict.UNPAIRED_BAND), and the reason names what was compared."""
    from core import policy
    from verifier.verdict import UNPAIRED_BAND

    mine = Outcome(feasible=True, latency_ms=1.0, speedup=3.0, speedup_ci=[2.9, 3.1], vs_reference="faster")
    best = Outcome(feasible=True, latency_ms=2.0, speedup=2.0, speedup_ci=[1.9, 2.1], vs_reference="faster")
    gain, verdict = policy.gain_over_best(mine, best)
    assert gain == pytest.approx(1.5) and verdict == "faster" and not policy.paired(mine)
    reason = policy.reward_reason("refine", True, verdict, paired=False)
    assert classify(reason) == "faster" and "two windows" in reason
    within = Outcome(feasible=True, latency_ms=1.0, speedup=2.0 * (1 + UNPAIRED_BAND) * 0.99, vs_reference="faster")
    assert policy.gain_over_best(within, best)[1] == "same"


def test_a_noisy_window_on_one_side_of_1_says_why_it_judged_nothing():
    # seen in the #37 walk-through: "too noisy (speedup interval [1.43, 2.05], above 1 = faster), no verdict"
    # read as a contradiction; such a window is noisy because the medians' ratio disagrees with its interval
    from verifier.verdict import NOISY, judge, words

    ratio = Ratio(value=1.74, low=1.43, high=2.05, of_medians=0.90)
    assert judge(ratio, 0.03) == NOISY
    said = words(NOISY, 1.74, [1.43, 2.05], "PyTorch")
    assert "medians disagree" in said and "above 1 = faster" not in said and "no verdict" in said
    wide = words(NOISY, 1.05, [0.90, 1.18], "the best")
    assert "above 1 = faster" in wide and "medians" not in wide
