"""Issue 27, item 4: at 100x30 the task table keeps the status (the README's promise) even with the
long ids of a public suite: the ids are cut (with …) before the status narrows below its minimum."""

from __future__ import annotations

from waiting import wait_for

SMALL = (100, 30)
LONG_IDS = ("47_Sum_reduction_over_a_dimension", "12_Gemm_Multiply_LeakyReLU", "23_Softmax")


async def test_long_ids_at_100x30_leave_the_status_its_width(workspace):
    from core.attempts import TaskRow
    from evotui.app import make_app
    from evotui.widgets.task_table import MIN_STATUS, TaskTable

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        table = app.main.query_one(TaskTable)
        table.show_rows([TaskRow(id=i, level=1, category="reduction", stage="draft", used=0, budget=30,
                                 best_speedup=None, best_ms=None, feasible=False) for i in LONG_IDS])
        table.set_status("23_Softmax", "edit ✗ build", "fail")
        await pilot.pause()
        plan = dict(table.column_plan)
        assert "status" in plan and plan["status"] >= MIN_STATUS, table.column_plan
        padding = 2 * table.cell_padding
        assert sum(w + padding for w in plan.values()) <= table.scrollable_content_region.width, table.column_plan
        assert plan["id"] < len(LONG_IDS[0])      # the long id is what gave way
        await pilot.press("q")


async def test_at_120_columns_the_whole_status_and_failure_are_readable(workspace):
    """#37 item 9: at 120 columns a task's status ("#2 edit ✗ b…") and the failure line in the code pane were
    cut. The highlighted task's whole status shows under the table when its cell cuts it, and a failure's
    message wraps to the code pane's width above the code (which still scrolls sideways)."""
    from core.session import Session
    from evotui.app import make_app
    from evotui.widgets.code_view import CodeView
    from store import Experience
    from verifier.outcome import Outcome

    tail = "note: the last words of a long compiler message"
    message = ("kernel.cpp:4:59: error: expected ';' before 'out' in the loop that writes every element of the "
               "output, which the compiler reached after reading the whole launcher; " + tail)
    with Session(workspace) as session:
        [relu] = session.tasks(["relu"])
        out = Outcome.start(relu.name, "cpu").fail("build", message).finish()
        session.store.add_experience(Experience(task_id=relu.id, kind="human_edit", backend="cpu", stage="draft",
                                                title="relu hand edit: failed at build", source="human",
                                                files={"kernel.cpp": "int x\n", "model.py": "x = 1\n"},
                                                outcome=out.to_dict(), reward=0.0, extra={"slip": True}))
    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        line = app.main.query_one("#status-line")
        await wait_for(pilot, lambda: line.has_class("shown"), what="the status line")
        assert tail in str(line.render()), str(line.render())
        view = app.main.query_one(CodeView)
        await wait_for(pilot, lambda: tail in view.text, what="the failed attempt's code")
        width = view.scrollable_content_region.width
        shown = " ".join(strip.crop(0, width).text.strip() for strip in view._strips)
        assert tail in " ".join(shown.split()), shown[:600]
        await pilot.press("q")
