"""A look inside from the workbench (#51, 8): `d` reaches the selected attempt's hot loops' assembly (built as it
was verified), `c` marks one attempt and shows another beside it, line against line. The verdicts come from the
canned verifier; the assembly is read from a real build of the attempt's files."""

from __future__ import annotations

import pytest

import candidates as C
from waiting import human_attempts, save, wait_for

pytestmark = pytest.mark.slow   # a workbench and a real build
SIZE = (160, 44)


async def test_the_assembly_and_two_attempts_side_by_side(workspace, canned_app):
    from evotui.widgets.attempt_tree import AttemptTree
    from evotui.widgets.code_view import CodeView

    app = canned_app(workspace).app
    messages: list = []
    folder = workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        save(folder, C.elementwise(C.RELU))
        await wait_for(pilot, lambda: len(human_attempts(messages)) >= 1, what="the first save")
        save(folder, C.elementwise(C.RELU.replace("schedule(static)", "schedule(static, 4096)")))
        await wait_for(pilot, lambda: len(human_attempts(messages)) >= 2, what="the second save")
        tree = app.main.query_one(AttemptTree)
        view = app.main.query_one(CodeView)
        await wait_for(pilot, lambda: len(tree.attempt_lines) == 2 and app.main.shown_exp is not None
                       and app.main.shown_exp.id == human_attempts(messages)[1].experience_id, what="#2 shown")
        for _ in range(3):      # code -> diff -> answer -> assembly
            await pilot.press("d")
        await wait_for(pilot, lambda: "the hot loops of libcandidate.so" in view.text, timeout=120,
                       what="the assembly in the code pane")
        assert "relu_forward._omp_fn.0: a loop of" in view.text and "hot loops' assembly" in str(view.border_title)
        await pilot.press("c")      # mark #2
        first = human_attempts(messages)[0].experience_id
        tree.move_cursor(row=tree.get_row_index(first))
        await wait_for(pilot, lambda: app.main.shown_exp is not None and app.main.shown_exp.id == first,
                       what="#1 shown")
        await pilot.press("c")      # #2 beside #1
        await wait_for(pilot, lambda: "side by side" in str(view.border_title), what="the side by side")
        # the changed line marked "|" between #2's (cut to its column) and #1's
        changed = [line for line in view.text.splitlines() if "#pragma omp" in line and " | " in line]
        assert len(changed) == 1 and changed[0].rstrip().endswith("schedule(static)"), view.text[:600]
        await pilot.press("q")
