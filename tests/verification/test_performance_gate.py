"""The performance gate decides its own second window and its verdict (``verifier.gates.performance.check``):
a window too noisy to judge, or a kernel above the machine's FMA ceiling, is measured once more, and the
verdict is decided once, at the end, with the gate passed once. Windows here are given (the real
windows, sides and roofline are tested in test_window.py and test_roofline.py); milliseconds."""

from __future__ import annotations

from types import SimpleNamespace

from verifier import VerifyConfig
from verifier.gates import performance
from verifier.outcome import Outcome
from verifier.reference import Reference
from verifier.verdict import Ratio


class Roofline:
    """A roofline double: ``point`` gives ``fraction`` of a compute-bound ceiling; counts re-measures."""

    def __init__(self, fraction: float | None):
        self.fraction, self.remeasured = fraction, 0

    def point(self, task, latency_ms):
        if self.fraction is None:
            return None
        return {"bound": "compute", "fraction": self.fraction, "summary": f"compute-bound: {self.fraction:.0%}"}

    def cached_ceilings(self):
        return {"measurements": 1}

    def ceilings(self, remeasure=False):
        self.remeasured += remeasure
        return {}


def run_gate(monkeypatch, ratios: list[Ratio], roofline: Roofline) -> tuple[Outcome, list[str], int]:
    """The gate over windows whose paired ratios (against the reference and the best alike) are ``ratios``,
    one per window in turn: (the outcome, the performance results its listener heard, windows run)."""
    queue = list(ratios)
    current: list[Ratio] = []
    heard: list[str] = []
    windows = [0]

    def measure(ref, case, budget_s):
        windows[0] += 1
        current[:] = [queue.pop(0)]
        sides = ["reference", "candidate", "best"]
        samples = {side: [1.0] * 8 for side in sides}
        return ({"window": {"sides": sides, "samples": samples, "wall": samples, "order": [sides] * 8,
                            "clock": "wall", "preempted": [False] * 8}}, {"checks": []})

    monkeypatch.setattr(performance, "paired_ratio", lambda numerator, denominator: current[0])
    out = Outcome.start("t", "cpu")
    for gate in ("format", "anti_hack", "build", "correctness"):
        out.pass_gate(gate)
    out.listener = lambda g: heard.append(g.status) if g.name == "performance" else None
    performance.check(SimpleNamespace(cases=()), Reference([], [], []), out, measure=measure, roofline=roofline,
                      tolerance=lambda dtype: (1e-4, 1e-4), config=VerifyConfig(), best_hash="b" * 16, with_best=True)
    out.listener = None
    return out.finish(), heard, windows[0]


def test_a_noisy_window_is_measured_again_and_the_second_decides(monkeypatch):
    out, heard, windows = run_gate(monkeypatch, [Ratio(1.3, 0.8, 2.1), Ratio(1.3, 1.2, 1.4)], Roofline(None))
    assert windows == 2 and out.vs_reference == out.vs_best == "faster"
    assert heard == ["passed"]                              # one verdict, said once
    perf = out.gate("performance")
    assert "measured twice (the first window was too noisy to judge)" in perf.message
    assert "1.30x faster than the best [1.20, 1.40]" in perf.message


def test_a_window_noisy_twice_stays_noisy(monkeypatch):
    out, heard, windows = run_gate(monkeypatch, [Ratio(1.3, 0.8, 2.1), Ratio(1.1, 0.7, 1.9)], Roofline(None))
    assert windows == 2 and out.vs_reference == out.vs_best == "noisy" and heard == ["passed"]
    assert "could not tell against the best: too noisy" in out.gate("performance").message


def test_a_kernel_above_the_ceiling_twice_is_implausible_and_flagged(monkeypatch):
    roofline = Roofline(3.18)
    out, heard, windows = run_gate(monkeypatch, [Ratio(5.0, 4.8, 5.2), Ratio(5.0, 4.8, 5.2)], roofline)
    assert windows == 2 and roofline.remeasured == 1          # the ceilings were measured again, once
    assert out.vs_reference == out.vs_best == "implausible" and heard == ["passed"]
    perf = out.gate("performance")
    assert "measured twice (the first window put it at 318 % of this machine's FMA ceiling)" in perf.message
    assert "not trusted" in perf.message and "5.00x faster" not in perf.message
    assert any("318 % of this machine's FMA ceiling after measuring" in f for f in out.flags)


def test_a_clean_window_is_measured_once(monkeypatch):
    out, heard, windows = run_gate(monkeypatch, [Ratio(0.94, 0.92, 0.96)], Roofline(0.4))
    assert windows == 1 and out.vs_reference == out.vs_best == "slower" and heard == ["passed"]
    assert out.gate("performance").message.endswith("compute-bound: 40%")


def test_each_case_of_a_multi_case_task_has_its_verdicts_by_the_same_rule(monkeypatch):
    """#37 put each case's verdicts beside its times (the prompt names a slower case); here they are decided
    by the one rule, with the task's, once the gate has measured every case."""
    from verifier.inputs import Trial

    by_case = {0: Ratio(1.3, 1.2, 1.4), 1: Ratio(0.8, 0.75, 0.85), 2: Ratio(1.02, 0.7, 1.5)}

    def measure(ref, case, budget_s):
        sides = ["reference", "candidate", "best"]
        samples = {side: [1.0 + case] * 8 for side in sides}      # the case, read back by the ratio below
        return ({"window": {"sides": sides, "samples": samples, "wall": samples, "order": [sides] * 8,
                            "clock": "wall", "preempted": [False] * 8}}, {"checks": []})

    monkeypatch.setattr(performance, "paired_ratio", lambda numerator, denominator: by_case[int(denominator[0]) - 1])
    trials = [Trial(seed=k, distribution="normal", case=k) for k in by_case]
    ref = Reference(trials, [{"leaves": []} for _ in trials], [[] for _ in trials])
    out = Outcome.start("t", "cpu")
    for gate in ("format", "anti_hack", "build", "correctness"):
        out.pass_gate(gate)
    out.cases = [{"case": k, "passed": True} for k in by_case]
    performance.check(SimpleNamespace(cases=()), ref, out, measure=measure, roofline=Roofline(None),
                      tolerance=lambda dtype: (1e-4, 1e-4), config=VerifyConfig(), best_hash="b" * 16, with_best=True)
    out.finish()
    assert [(c["vs_reference"], c["vs_best"]) for c in out.cases] == [
        ("faster", "faster"), ("slower", "slower"), ("noisy", "noisy")]
    assert out.gate("performance").passed and out.vs_reference == "same"    # the task's: equal windows' geomean
