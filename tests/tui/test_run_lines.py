"""`evokernel run`'s lines and table: what each attempt's own timing window says, never two latencies
from two windows compared."""

from __future__ import annotations


def _recorded(iteration, latency, speedup, *, stage="refine", new_best=False, gain=None, vs_best="",
              vs_reference="same"):
    from core import events as ev

    return ev.AttemptRecorded("softmax", iteration, f"e{iteration}", None, stage, "llm", True, None, "", latency,
                              speedup, 0.0, new_best, vs_reference=vs_reference, gain=gain, vs_best=vs_best)


def test_a_refinement_timed_slower_beside_the_best_says_so_whatever_its_latency():
    """The draft was timed at 63 ms on a busy machine, the refinement at 24 ms on a quiet one, but
    timed beside each other the refinement is 0.87x: the line says slower and the best stays."""
    from evotui.cmd_run import Reporter

    reporter = Reporter(quiet=False)
    reporter.on_event(_recorded(0, 63.159, 1.12, stage="draft", new_best=True))
    reporter.on_event(_recorded(1, 24.148, 0.92, gain=0.87, vs_best="slower", vs_reference="slower"))
    draft, refine = reporter.lines[-2:]
    assert "✓ 63.159 ms, 1.12x vs PyTorch (same), new best" in draft
    assert "✓ 24.148 ms, 0.92x vs PyTorch (slower); 0.87x vs the best (slower) reward" in refine
    assert reporter.rows["softmax"]["best"] == 63.159 and reporter.rows["softmax"]["speedup"] == 1.12
    reporter.on_event(_recorded(2, 30.0, 1.4, gain=1.3, vs_best="faster", new_best=True))
    assert reporter.rows["softmax"]["best"] == 30.0 and "1.30x vs the best (faster), new best" in reporter.lines[-1]


def test_a_noisy_window_reads_too_noisy_to_judge_in_every_line():
    from core.attempts import OutcomeSummary
    from evotui.cmd_run import Reporter
    from evotui.widgets import marks

    reporter = Reporter(quiet=False)
    reporter.on_event(_recorded(1, 2.0, 1.74, gain=1.1, vs_best="noisy", vs_reference="noisy"))
    assert "1.74x vs PyTorch (too noisy to judge); 1.10x vs the best (too noisy to judge)" in reporter.lines[-1]
    line = marks.verdict(OutcomeSummary(feasible=True, latency_ms=2.0, speedup=1.74, vs_best="noisy"))
    assert line == "✓ 2.000 ms, 1.74×, timing too noisy to judge"


def test_each_line_says_why_the_reward_is_what_it_is():
    """Issue 27, item 1: a doubled speedup with reward 0 says why (the same speed as the best)."""
    from evotui.cmd_run import Reporter

    reporter = Reporter(quiet=False)
    reporter.on_event(_recorded(0, 124.4, 0.98, stage="draft", new_best=True))
    assert reporter.lines[-1].endswith("reward +0.00: a correct draft")
    reporter.on_event(_recorded(1, 60.0, 1.96, gain=1.01, vs_best="same"))
    assert reporter.lines[-1].endswith("reward +0.00: the same speed as the best")
    reporter.on_event(_recorded(2, 60.0, 1.96, gain=1.4, vs_best="noisy"))
    assert reporter.lines[-1].endswith("too noisy to judge against the best: measure again")
