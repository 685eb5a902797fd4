"""Issue 27, item 5: a save that fails to build (or fails the format gate) is a typo, not an
experiment. It is shown (status, tree, log) but moves no value and is not the parent of the next
save: the next save's parent is the last edit that built."""

from __future__ import annotations

import pytest

import candidates as C
from waiting import human_attempts, save, wait_for

pytestmark = pytest.mark.slow
SIZE = (150, 44)


def relu(tag: int) -> dict[str, str]:
    files = C.elementwise(C.RELU)
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kVersion{tag} = {tag};\n"}


async def save_and_wait(pilot, messages, folder, files, count: int):
    save(folder, files)
    await wait_for(pilot, lambda: len(human_attempts(messages)) >= count, timeout=180,
                   what=f"save {count} to be verified")
    return human_attempts(messages)[count - 1]


async def test_a_save_that_fails_to_build_moves_no_value_and_parents_nothing(workspace):
    from evotui.app import make_app
    from evotui.widgets.attempt_tree import AttemptTree
    from store import Store

    app = make_app(workspace.root)
    messages: list = []
    folder = workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        good = await save_and_wait(pilot, messages, folder, relu(1), 1)
        assert good.outcome.feasible
        with Store.open(workspace.memory_path, readonly=True) as store:
            q2_before = store.get(good.experience_id).q2

        typo = relu(2)
        typo["kernel.cpp"] = typo["kernel.cpp"].replace("out[i] = x[i]", "out[i] = x[i] +* ")
        slip = await save_and_wait(pilot, messages, folder, typo, 2)
        assert slip.outcome.failed_gate == "build" and slip.parent_id == good.experience_id
        assert slip.reward == 0.0 and not slip.new_best
        with Store.open(workspace.memory_path, readonly=True) as store:
            assert store.get(good.experience_id).q2 == q2_before   # the good draft's Q2 is untouched
        log = lambda: "\n".join(app.main.query_one("#log").lines_written)  # noqa: E731
        await wait_for(pilot, lambda: "not an experiment" in log(), what="the log to say why")

        # a second typo in a row: a sibling of the first, not its child
        again = await save_and_wait(pilot, messages, folder, {**typo, "kernel.cpp": typo["kernel.cpp"] + "}"}, 3)
        assert again.outcome.failed_gate == "build" and again.parent_id == good.experience_id

        fixed = await save_and_wait(pilot, messages, folder, relu(3), 4)
        assert fixed.outcome.feasible and fixed.parent_id == good.experience_id

        tree = app.main.query_one(AttemptTree)
        await wait_for(pilot, lambda: len(tree.attempt_lines) == 4, what="the tree")
        depth = {line.id: line.depth for line in tree.attempt_lines}
        assert [depth[e.experience_id] for e in (good, slip, again, fixed)] == [0, 1, 1, 1]
        await pilot.press("q")
