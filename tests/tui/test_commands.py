"""The workbench's keys on a real workspace: without an LLM endpoint, edit, promote, re-verify, diff."""

from __future__ import annotations

import pytest

from waiting import posted, wait_for

SIZE = (150, 44)


async def test_starting_a_run_without_an_endpoint_says_what_to_configure(workspace):
    from evotui.app import make_app
    from evotui.messages import RunRefused, RunStateChanged

    app = make_app(workspace.root, watch=False)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        assert not app.run_status.llm_ok
        await pilot.press("r")
        await wait_for(pilot, lambda: posted(messages, RunRefused), what="the refusal")
        await pilot.press("s")
        await wait_for(pilot, lambda: len(posted(messages, RunRefused)) == 2, what="the second refusal")
        reason = posted(messages, RunRefused)[0].reason
        assert "OPENAI_BASE_URL" in reason
        assert [m.state for m in posted(messages, RunStateChanged)] == ["starting", "idle"] * 2
        assert app.run_status.state == "idle"
        assert any("OPENAI_BASE_URL" in n.message for n in app._notifications)
        assert "cannot start a run" in "\n".join(app.main.query_one("#log").lines_written)
        # every key is in the command palette too
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for key in "rsvepmt":
            assert any(t.endswith(f"({key})") for t in titles), key
        # still useful: browse memory, switch theme, quit
        await pilot.press("m", "escape", "q")
    assert app.return_code == 0


async def test_edit_seeds_the_task_folder_and_hands_the_terminal_over(workspace):
    from evotui.app import make_app

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("down", "e")   # scale_bias
        folder = workspace.kernels_dir / "scale_bias"
        await wait_for(pilot, lambda: (folder / "kernel.cpp").exists() and any(
            "saving re-verifies" in n.message for n in app._notifications), what="the starter candidate")
        assert "extern \"C\"" in (folder / "kernel.cpp").read_text()
        assert (folder / "model.py").exists()


async def test_diff_and_promote_an_attempt(filled_workspace):
    from evotui.app import make_app
    from evotui.messages import Promoted
    from evotui.widgets.code_view import CodeView

    app = make_app(filled_workspace.root, watch=False)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.shown_exp is not None, what="the best attempt's code")
        line = app.main.current_attempt
        assert line.best and line.index == 3 and line.parent_index == 2
        code = app.main.query_one(CodeView)
        assert code.border_title.startswith("#3 refine")
        await pilot.press("d")
        assert code.border_title == "#3 refine · diff vs #2"
        assert "+++ #3/kernel.cpp" in code.text
        await pilot.press("p")
        await wait_for(pilot, lambda: posted(messages, Promoted), what="the promotion")
        folder = filled_workspace.kernels_dir / "relu"
        assert (folder / "kernel.cpp").read_text() == app.main.shown_exp.files["kernel.cpp"]
        assert "attempt #3 promoted" in "\n".join(app.main.query_one("#log").lines_written)


@pytest.mark.slow
async def test_reverify_runs_the_real_gates_and_records_nothing(filled_workspace):
    from evotui.app import make_app
    from evotui.messages import VerifyFinished

    app = make_app(filled_workspace.root, watch=False)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.shown_exp is not None, what="the best attempt's code")
        count = len(app.main.query_one("#attempts").attempt_lines)
        await pilot.press("v")
        await wait_for(pilot, lambda: posted(messages, VerifyFinished), timeout=300, what="the verification")
        done = posted(messages, VerifyFinished)[0]
        assert done.task_id == "relu" and done.label == "#3"
        assert done.outcome.feasible, done.outcome.message
        assert [g.status for g in done.outcome.gates] == ["passed"] * 5
        assert app.main.query_one("#tasks").status["relu"][0].startswith("#3 ✓")
        await pilot.pause()
        assert len(app.main.query_one("#attempts").attempt_lines) == count   # nothing recorded


async def test_an_interrupted_run_is_offered_for_resuming(filled_workspace):
    from evotui.app import make_app
    from evotui.messages import RunRefused

    from memory_content import RUN_ID

    app = make_app(filled_workspace.root, watch=False)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        assert app.run_status.state == "paused" and app.run_status.run_id == RUN_ID
        assert any(line.endswith(f"run {RUN_ID} (4 tasks) did not finish (stopped): r resumes it")   # after its time
                   for line in app.main.query_one("#log").lines_written)
        await pilot.press("r")     # resuming needs an endpoint like starting does
        await wait_for(pilot, lambda: posted(messages, RunRefused), what="the refusal")
        assert app.run_status.state == "paused" and app.run_status.run_id == RUN_ID
