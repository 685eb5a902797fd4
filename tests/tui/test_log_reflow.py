"""Issue 27, item 4 (part): the event log reflows when the terminal is resized: lines written at
160x45 are wrapped again to the narrower pane at 100x30, none cut at the old width."""

from __future__ import annotations

from waiting import wait_for


async def test_the_log_rewraps_its_lines_after_a_resize(workspace):
    from evotui.app import make_app
    from evotui.widgets.event_log import EventLog

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        log = app.main.query_one(EventLog)
        log.add("relu hand edit: " + " ".join(f"word{i}" for i in range(60)), "ok")
        await wait_for(pilot, lambda: log.drawn, what="the line drawn")
        await pilot.pause(0.2)
        wide = log.scrollable_content_region.width
        await pilot.resize_terminal(100, 30)
        await wait_for(pilot, lambda: log.scrollable_content_region.width < wide, what="the narrower pane")
        await pilot.pause(0.3)
        narrow = log.scrollable_content_region.width
        assert max(strip.cell_length for strip in log.lines) <= narrow, (narrow, [s.cell_length for s in log.lines])
        await pilot.press("q")
