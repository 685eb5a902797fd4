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
