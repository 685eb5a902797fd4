"""Issue 27, item 4 (part): after a restart the task statuses and the recent attempts come back from
the memory: each task's status is its latest attempt's verdict, and the log lists the latest attempts
with the time they were made."""

from __future__ import annotations

from waiting import wait_for

SIZE = (150, 44)


async def test_statuses_and_recent_attempts_come_back_after_a_restart(filled_workspace):
    from evotui.app import make_app

    from memory_content import _id

    app = make_app(filled_workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        status = app.main.query_one("#tasks").status
        # relu's latest attempt is its 5th, a feasible refinement (the run's 4th answer, after a hand edit: the
        # number is the tree's, #5, not the run's iteration); softmax's its failed draft (memory_content)
        assert status.get("relu", ("", ""))[0].startswith("#5 ✓ 0.210 ms") and status["relu"][1] == "ok", status
        assert status["softmax"][0].startswith("#1 ✗ anti_hack") and status["softmax"][1] == "fail"
        assert [line.index for line in app.host.session.attempts("relu") if line.id == _id(7)] == [5]
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert "earlier: relu #4 hand edit: ✗ correctness" in log and "earlier: relu #5 refine: ✓" in log, log
        await pilot.press("q")
