"""`evokernel run`'s lines and table: what each attempt's own timing window says, never two latencies
from two windows compared."""

from __future__ import annotations


def _recorded(iteration, latency, speedup, *, stage="refine", new_best=False, gain=None, vs_best="",
              vs_reference="same", speedup_ci=None, gain_ci=None):
    from core import events as ev
    from core import policy
    from core.attempts import Outcome

    out = Outcome(feasible=True, latency_ms=latency, speedup=speedup, vs_reference=vs_reference, gain=gain,
                  vs_best=vs_best, speedup_ci=speedup_ci, gain_ci=gain_ci)
    # the reason the engine says with the reward (core.engine._reward), carried by the event
    reason = policy.reward_reason(stage, True, vs_best, has_gain=gain is not None, gain_ci=gain_ci)
    return ev.AttemptRecorded("softmax", iteration, f"e{iteration}", None, stage, "llm", out, 0.0, new_best,
                              reason=reason)


def test_a_refinement_timed_slower_beside_the_best_says_so_whatever_its_latency():
    """The draft was timed at 63 ms on a busy machine, the refinement at 24 ms on a quiet one, but
    timed beside each other the refinement is 0.87x: the line says slower and the best stays."""
    from evotui.cmd_run import Reporter

    reporter = Reporter(quiet=False)
    reporter.on_event(_recorded(0, 63.159, 1.02, stage="draft", new_best=True, speedup_ci=[0.97, 1.06]))
    reporter.on_event(_recorded(1, 24.148, 0.92, gain=0.87, vs_best="slower", vs_reference="slower",
                                speedup_ci=[0.9, 0.94], gain_ci=[0.85, 0.89]))
    draft, refine = reporter.lines[-2:]
    assert "✓ 63.159 ms, same speed as PyTorch within ±6 %, new best" in draft
    assert "✓ 24.148 ms, 1.09x slower than PyTorch [1.06, 1.11]; 1.15x slower than the best [1.12, 1.18] reward" \
        in refine
    assert reporter.rows["softmax"]["best"] == 63.159 and reporter.rows["softmax"]["speedup"] == 1.02
    reporter.on_event(_recorded(2, 30.0, 1.4, gain=1.3, vs_best="faster", new_best=True, gain_ci=[1.2, 1.4]))
    assert reporter.rows["softmax"]["best"] == 30.0
    assert "1.30x faster than the best [1.20, 1.40], new best" in reporter.lines[-1]


def test_a_noisy_window_reads_too_noisy_to_judge_in_every_line():
    from core.attempts import Outcome
    from evotui.cmd_run import Reporter
    from evotui.widgets import marks

    reporter = Reporter(quiet=False)
    reporter.on_event(_recorded(1, 2.0, 1.74, gain=1.1, vs_best="noisy", vs_reference="noisy",
                                speedup_ci=[0.969, 2.626], gain_ci=[0.6, 2.0]))
    assert ("could not tell against PyTorch: too noisy (speedup interval [0.97, 2.63], above 1 = faster), no verdict; could not tell against "
            "the best: too noisy (speedup interval [0.60, 2.00], above 1 = faster), no verdict") in reporter.lines[-1]
    line = marks.verdict(Outcome(feasible=True, latency_ms=2.0, speedup=1.74, vs_best="noisy"))
    assert line == "✓ 2.000 ms, 1.74×, timing too noisy to judge"
    line = marks.verdict(Outcome(feasible=True, latency_ms=2.0, speedup=1.74, speedup_ci=[0.969, 2.626],
                                        vs_reference="noisy"))
    assert line == "✓ 2.000 ms, too noisy"                       # never the ratio beside it
    line = marks.verdict(Outcome(feasible=True, latency_ms=2.0, speedup=1.02, speedup_ci=[0.98, 1.06],
                                        vs_reference="same"))
    assert line == "✓ 2.000 ms, same speed"


def test_a_refusal_says_its_reason_in_its_one_line():
    from core import events as ev
    from core.attempts import Outcome
    from evotui.cmd_run import Reporter

    reporter = Reporter(quiet=False)
    message = ("anti_hack: private attribute _version is not allowed: model.py may use only public names (its own\n"
               "self._name attributes aside)")
    refused = Outcome(feasible=False, failed_gate="anti_hack", message=message)
    reporter.on_event(ev.AttemptRecorded("gemm", 4, "e4", None, "refine", "llm", refused, -1.0, number=7))
    line = reporter.lines[-1]
    # #7: the attempt as the workbench's tree and `memory list` number it (the run's iteration was 5)
    assert "gemm #7 refine: ✗ anti_hack: private attribute _version is not allowed" in line and "\n" not in line
    assert "reward -1.00: " in line


def test_each_line_says_why_the_reward_is_what_it_is():
    """Issue 27, item 1: a doubled speedup with reward 0 says why (the same speed as the best)."""
    from evotui.cmd_run import Reporter

    reporter = Reporter(quiet=False)
    reporter.on_event(_recorded(0, 124.4, 0.98, stage="draft", new_best=True))
    assert reporter.lines[-1].endswith("reward +0.00: a correct draft")
    reporter.on_event(_recorded(1, 60.0, 1.96, gain=1.01, vs_best="same", gain_ci=[0.99, 1.03]))
    assert reporter.lines[-1].endswith("reward +0.00: the same speed as the best")
    reporter.on_event(_recorded(2, 60.0, 1.96, gain=1.4, vs_best="noisy"))
    assert reporter.lines[-1].endswith("too noisy to judge against the best: measure again")


def test_quiet_lines_written_to_a_file_are_one_line_each(capsys):
    """#37 item 9: `run --quiet > log` hard-wrapped each attempt's line at 80 columns, so a log could not be
    grepped by line."""
    from evotui.cmd_run import Reporter

    reporter = Reporter(quiet=True)                  # capsys: stdout is not a terminal
    reporter.on_event(_recorded(1, 24.148, 0.92, gain=0.87, vs_best="slower", vs_reference="slower",
                                speedup_ci=[0.9, 0.94], gain_ci=[0.85, 0.89]))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 120, lines
    assert "1.15x slower than the best [1.12, 1.18] reward" in lines[0]


def test_a_call_in_flight_says_its_wait_and_tokens_and_its_retries():
    """#52: piped output was silent for minutes while a model answered, and retries were never said. The live table's
    `now` column says the wait; piped, a line every 30 s, each retry, the model's limits and each answer's time."""
    from core import events as ev
    from evotui.cmd_run import Reporter

    live = Reporter(quiet=False)
    live.on_event(ev.RunStarted("r1", "evokernel", ("relu",), 2, "smollm2", "cpu",
                                limits="context 2,048 tokens (llama.cpp's /props (n_ctx of a slot))"))
    live.on_event(ev.PromptSent("relu", 0, "draft", ()))
    live.on_event(ev.AnswerProgress("relu", 0, 4.0, 0, sent=False))
    assert live.rows["relu"]["now"] == "queued 4 s"
    live.on_event(ev.AnswerProgress("relu", 0, 42.0, 310))
    assert live.rows["relu"]["now"] == "answering 42 s · 310 tok"
    assert live.lines[0] == "model: context 2,048 tokens (llama.cpp's /props (n_ctx of a slot))"

    piped = Reporter(quiet=True)
    piped.console.file = __import__("io").StringIO()
    for seconds in (1.0, 12.0, 31.0, 45.0, 61.5):
        piped.on_event(ev.AnswerProgress("relu", 0, seconds, int(10 * seconds)))
    piped.on_event(ev.CallRetried("relu", 0, "no answer for 300 s ([llm] timeout_s: ...)", 2, 5, 3.2))
    piped.on_event(ev.ResponseReceived("relu", 0, 900, 650, 0.0, 95.3, False))
    lines = piped.console.file.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in lines[:2]] == ["relu answering 31 s · 310 tok",
                                                               "relu answering 62 s · 615 tok"]
    assert "relu retry: no answer for 300 s ([llm] timeout_s: ...); try 2 of 5 in 3 s" in lines[2]
    assert lines[3].endswith("relu answered in 95 s: 650 tokens (900 in the prompt)")
