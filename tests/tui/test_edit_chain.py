"""Hand edits as a daily path (issue 13): saves in a row form a chain, each the child of the previous
one, rewarded by the same function as the model's refinements; a save that repeats stored code (a
comment added, an earlier version saved again) is explained in the log and the tree, never a
verdict that vanishes or a best no attempt shows.

They run the workbench on the canned verifier (``canned_app``): what is decided here (parents, stages,
rewards, repeats, the log and the tree) is the engine's and the screen's, and a kernel's verdict comes
from ``judge`` below. The real gates on a hand edit are tested end to end in test_hand_edits.py."""

from __future__ import annotations

import pytest

import candidates as C
from waiting import human_attempts, save, wait_for

pytestmark = pytest.mark.slow   # a workbench per test
SIZE = (150, 44)


def judge(task_id: str, files: dict[str, str]):
    """The relu kernels below as the real gates judge them: relu passes, the identity fails correctness."""
    from core.scripted import Canned

    if "x[i] > 0.f ? x[i] : 0.f" not in files.get("kernel.cpp", ""):
        return Canned(failed_gate="correctness", message="output 0 differs from the reference (max abs error 1.9)")
    return Canned(latency_ms=8.0)


def relu(tag: int) -> dict[str, str]:
    """The real relu with a distinct unused constant: different code, same speed class."""
    files = C.elementwise(C.RELU)
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kVersion{tag} = {tag};\n"}


def gate_events(messages) -> list:
    from evotui.messages import EngineEvent

    from waiting import posted

    return [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "GateChecked"]


async def save_and_wait(pilot, messages, folder, files, count: int):
    save(folder, files)
    await wait_for(pilot, lambda: len(human_attempts(messages)) >= count, timeout=120,
                   what=f"save {count} to be verified")
    return human_attempts(messages)[count - 1]


async def test_three_saves_in_a_row_are_a_chain_rewarded_like_refinements(workspace, canned_app):
    from core import policy
    from evotui.widgets.attempt_tree import AttemptTree

    app = canned_app(workspace, judge=judge).app
    messages: list = []
    folder = workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        first = await save_and_wait(pilot, messages, folder, relu(1), 1)
        second = await save_and_wait(pilot, messages, folder, relu(2), 2)
        third = await save_and_wait(pilot, messages, folder, relu(3), 3)

        assert all(e.outcome.feasible and not e.duplicate for e in (first, second, third))
        assert first.parent_id is None and first.stage == "draft" and first.reward == 1.0
        assert second.parent_id == first.experience_id and third.parent_id == second.experience_id
        assert second.stage == third.stage == "refine"
        # the model's refinement reward: tanh(log gain) over the best so far, the gain measured in the
        # attempt's own window beside the best (0 inside the noise), under too few samples to scale by
        from core.attempts import outcome_of
        from store import Store

        with Store.open(workspace.memory_path, readonly=True) as store:
            outcomes = {e.experience_id: outcome_of(store.get(e.experience_id)) for e in (first, second, third)}
        best = outcomes[first.experience_id]
        for e in (second, third):
            gain, verdict = policy.gain_over_best(outcomes[e.experience_id], best)
            assert e.reward == pytest.approx(policy.scale(policy.refine_reward_raw(True, gain, verdict), {"count": 0}))
            if e.new_best:
                best = outcomes[e.experience_id]

        # the tree shows the chain: each a level deeper than its parent
        tree = app.main.query_one(AttemptTree)
        await wait_for(pilot, lambda: len(tree.attempt_lines) == 3, what="the tree")
        depth = {line.id: line.depth for line in tree.attempt_lines}
        assert [depth[e.experience_id] for e in (first, second, third)] == [0, 1, 2]
        assert all(line.source == "human" for line in tree.attempt_lines)
        await pilot.press("q")


async def test_a_wrong_result_is_recorded_but_the_next_save_descends_from_the_working_version(workspace, canned_app):
    """#37 finding 3: a wrong-result edit the person then reverted became the parent of the real speed-up
    and took its credit. A save's parent is the last version that passed correctness."""
    from evotui.widgets.attempt_tree import AttemptTree

    app = canned_app(workspace, judge=judge).app
    messages: list = []
    folder = workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        log = lambda: "\n".join(app.main.query_one("#log").lines_written)  # noqa: E731
        working = await save_and_wait(pilot, messages, folder, relu(1), 1)
        wrong = await save_and_wait(pilot, messages, folder, C.elementwise(C.IDENTITY), 2)
        assert wrong.outcome.failed_gate == "correctness" and wrong.parent_id == working.experience_id
        await wait_for(pilot, lambda: "the next save's parent stays #1" in log(), what="the log to say so")
        fixed = await save_and_wait(pilot, messages, folder, relu(2), 3)
        assert fixed.outcome.feasible and fixed.parent_id == working.experience_id    # not the wrong edit
        tree = app.main.query_one(AttemptTree)
        await wait_for(pilot, lambda: len(tree.attempt_lines) == 3, what="the tree")
        depth = {line.id: line.depth for line in tree.attempt_lines}
        assert depth[wrong.experience_id] == depth[fixed.experience_id] == 1   # siblings under #1
        await pilot.press("q")


async def test_a_save_that_repeats_stored_code_is_explained_not_lost(workspace, canned_app):
    from evotui.widgets.attempt_tree import AttemptTree

    app = canned_app(workspace, judge=judge).app
    messages: list = []
    folder = workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        tree = app.main.query_one(AttemptTree)
        log = lambda: "\n".join(app.main.query_one("#log").lines_written)  # noqa: E731
        one = await save_and_wait(pilot, messages, folder, relu(1), 1)
        two = await save_and_wait(pilot, messages, folder, relu(2), 2)
        await wait_for(pilot, lambda: len(tree.attempt_lines) == 2, what="two attempts in the tree")
        index = {line.id: line.index for line in tree.attempt_lines}

        # a comment-only save of version 2: the same code, not stored again, and said so; verified, since a comment
        # can change what the compiler reads (#48: ``__LINE__``), so only the same bytes get a recorded verdict
        commented = relu(2)
        commented["kernel.cpp"] = "// tidied up\n" + commented["kernel.cpp"].replace("; ++i)", ";   ++i /* hot */ )")
        gates_before = len(gate_events(messages))
        again = await save_and_wait(pilot, messages, folder, commented, 3)
        assert again.duplicate and again.experience_id == two.experience_id and not again.new_best
        assert len(gate_events(messages)) > gates_before           # verified, not served version 2's verdict
        await wait_for(pilot, lambda: f"the same code as #{index[two.experience_id]}" in log(), what="the log")
        assert len(tree.attempt_lines) == 2
        await wait_for(pilot, lambda: f"last: a repeat of #{index[two.experience_id]}" in
                       str(tree.border_subtitle), what="the tree's note")

        # version 1 saved again: a repeat of #1; whatever its new timing, no best that no line shows
        back = await save_and_wait(pilot, messages, folder, relu(1), 4)
        assert back.duplicate and back.experience_id == one.experience_id and not back.new_best
        await wait_for(pilot, lambda: f"the same code as #{index[one.experience_id]}" in log(), what="the log")
        best_ms = app.main.tasks["relu"].best_ms
        assert best_ms is None or any(line.latency_ms == best_ms for line in tree.attempt_lines)

        # the next real change is the child of the version it was made from (the repeat of #1)
        three = await save_and_wait(pilot, messages, folder, relu(3), 5)
        assert not three.duplicate and three.parent_id == one.experience_id
        await wait_for(pilot, lambda: len(tree.attempt_lines) == 3, what="the third attempt")
        assert "repeat" not in str(tree.border_subtitle)
        await pilot.press("q")


async def test_repeated_answers_agree_across_status_tree_and_log(workspace, canned_app):
    """Issue 13, item 4: a model that gives the same kernel every time: the status counts iterations,
    the tree marks the repeated attempt ×2 and says so in its subtitle, and the log explains why the
    repeat's reward is not in the tree."""
    from evotui.widgets.attempt_tree import AttemptTree

    from openai_server import Reply, answer_with

    config = workspace.config_path.read_text().replace("iterations = 2", "iterations = 3")
    workspace.config_path.write_text(config)
    app = canned_app(workspace, script=lambda request, n: Reply(answer_with(C.elementwise(C.RELU))), judge=judge,
                     watch=False).app
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("s")      # relu is under the cursor
        await wait_for(pilot, lambda: app.run_status.state == "finished", timeout=300, what="the run")
        # the first answer is a draft; the second, a refinement of it, is stored (another stage); the
        # third repeats the second
        tree = app.main.query_one(AttemptTree)
        await wait_for(pilot, lambda: any(line.repeats == 1 for line in tree.attempt_lines), what="the tree")
        assert len(tree.attempt_lines) == 2
        assert "2 attempts · 1 repeat" in str(tree.border_subtitle)
        second = tree.get_row_index([line.id for line in tree.attempt_lines if line.index == 2][0])
        assert "×2" in str(tree.get_row_at(second)[0])
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert log.count("the same code as #2") == 1 and "the tree keeps #2's reward" in log
        assert app.main.query_one("#tasks").status["relu"][0].startswith("#2 ✓")   # the attempt it repeats
        await pilot.press("q")
