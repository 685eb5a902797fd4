"""Issue 27, item 1: the verdict line can be acted on. The log says the speed against PyTorch with its
interval and the reference's time in the same window, the gain over the best with its interval, and
why the reward is what it is ("same speed as the best: no reward"). The saves are judged by the canned
verifier (``canned_app``): the line is the screen's, made from the outcome it is given."""

from __future__ import annotations

import pytest

from core import policy

import candidates as C
from waiting import human_attempts, save, wait_for

pytestmark = pytest.mark.slow
SIZE = (150, 44)

REASONS = {"same": "the same speed as the best", "noisy": "too noisy to judge against the best: measure again",
           "faster": "faster than the best", "slower": "slower than the best"}


def relu(tag: int) -> dict[str, str]:
    files = C.elementwise(C.RELU)
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kVersion{tag} = {tag};\n"}


async def test_the_log_says_what_happened_and_why(workspace, canned_app):
    from core.scripted import Canned
    from evotui.widgets import marks

    # the second version 10 % faster, timed beside the first in one window
    app = canned_app(workspace, judge=lambda task, files: Canned(latency_ms=7.2 if "kVersion2" in files["kernel.cpp"]
                                                                 else 8.0)).app
    messages: list = []
    folder = workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        log = lambda: list(app.main.query_one("#log").lines_written)  # noqa: E731
        save(folder, relu(1))
        await wait_for(pilot, lambda: len(human_attempts(messages)) >= 1, timeout=180, what="the draft")
        draft = human_attempts(messages)[0]
        await wait_for(pilot, lambda: any("reward +1: a correct draft" in line for line in log()), what="the draft's line")
        line = next(line for line in log() if "reward +1: a correct draft" in line)
        assert "than PyTorch [" in line and "ms in the same window" in line, line

        save(folder, relu(2))
        await wait_for(pilot, lambda: len(human_attempts(messages)) >= 2, timeout=180, what="the refinement")
        refine = human_attempts(messages)[1]
        assert refine.outcome.feasible and refine.stage == "refine" and refine.parent_id == draft.experience_id
        said = f"reward {marks.reward(refine.reward)}"
        await wait_for(pilot, lambda: any(said in line and "the best then" in line for line in log()),
                       what="the refinement's line")
        line = next(line for line in log() if said in line and "the best then" in line)
        out = refine.outcome
        why = policy.reward_reason("refine", True, out.vs_best, gain_ci=list(out.gain_ci) if out.gain_ci else None)
        assert why.startswith(REASONS[out.vs_best].split(":")[0]) or out.vs_best == "same"   # same: ±x % or noisy
        assert "in the same window" in line and f"{said}: {why}" in line, line
        await pilot.press("q")


def test_the_log_line_shows_the_verifiers_flags():
    """#37 finding 8: a flag showed in the CLI and the memory, never in the workbench's log line. #48: a flag is a
    verdict: the line says the attempt was not judged, and why, in the task table's cell as in the log."""
    from core.attempts import Outcome
    from evotui.widgets import marks

    out = Outcome(feasible=True, latency_ms=1.5, speedup=2.0, reference_ms=3.0,
                  flags=["1.500 ms is under half the roofline floor 4.000 ms: review before trusting"])
    for line in (marks.full_verdict(out), marks.verdict(out)):
        assert line.startswith(f"{marks.NOT_JUDGED} not judged: the harness could not fully check"), line
        assert "1.500 ms is under half the roofline floor 4.000 ms" in line, line
    assert marks.short_verdict(out) == f"{marks.NOT_JUDGED} not judged"
