"""Issue 27, item 7: the code pane follows a new verdict of the task shown (the attempt just recorded,
unless the cursor was moved by hand), and a failed build's compiler message appears once, whole."""

from __future__ import annotations

import pytest

import candidates as C
from waiting import human_attempts, save, wait_for

pytestmark = pytest.mark.slow
SIZE = (150, 44)


async def test_the_pane_follows_a_new_verdict_and_says_a_build_error_once(filled_workspace):
    from evotui.app import make_app
    from evotui.widgets.code_view import CodeView

    app = make_app(filled_workspace.root)
    messages: list = []
    folder = filled_workspace.kernels_dir / "relu"
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.shown_exp is not None, what="the pane on relu's best")
        assert app.main.current_task == "relu"
        before = app.main.shown_exp.id

        good = C.elementwise(C.RELU)   # a typo needs no timing window: quick, whatever else the machine does
        save(folder, {**good, "kernel.cpp": good["kernel.cpp"].replace("out[i] = x[i]", "out[i] = x[i] +* ")})
        await wait_for(pilot, lambda: human_attempts(messages), timeout=240, what="the broken edit")
        broken = human_attempts(messages)[0]
        assert broken.experience_id != before
        await wait_for(pilot, lambda: app.main.shown_exp is not None and app.main.shown_exp.id == broken.experience_id,
                       what="the pane to follow the new verdict")
        view = app.main.query_one(CodeView)
        await wait_for(pilot, lambda: "failed at build" in view.text, what="the failure above the code")
        assert view.text.count("error: expected primary-expression") == 1, view.text[:800]
        assert view.text.count("+*  > 0.f") == 2, view.text[:800]   # the compiler's source line, and the code
        await pilot.press("q")
