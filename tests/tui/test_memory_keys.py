"""Issue 27, item 6 (part): the memory browser from the keyboard: `?` opens the help as on the main
screen, `/` opens the task filter's drop-down, and a filter chosen with the arrows and enter narrows
the list."""

from __future__ import annotations

from waiting import posted, wait_for

SIZE = (150, 44)


async def test_help_and_filters_from_the_keyboard(filled_workspace):
    from textual.widgets import Select

    from evotui.app import make_app
    from evotui.messages import MemoryLoaded
    from evotui.screens.help import HelpScreen
    from evotui.screens.memory import MemoryScreen

    app = make_app(filled_workspace.root, watch=False)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemoryScreen) and app.screen.shown_id, what="the memory")
        browser = app.screen

        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is browser, what="back in the browser")

        await pilot.press("slash")
        task = browser.query_one("#task", Select)
        await wait_for(pilot, lambda: task.has_focus_within and task.expanded, what="the task filter open", timeout=10)
        await pilot.press("down", "down", "enter")      # past "task: any", the first task of the list
        await wait_for(pilot, lambda: browser.filters["task"] is not None, what="a task chosen", timeout=10)
        chosen = browser.filters["task"]
        await wait_for(pilot, lambda: posted(messages, MemoryLoaded)
                       and posted(messages, MemoryLoaded)[-1].filters.get("task") == chosen, what="the list")
        assert all(i["task"] == chosen for i in posted(messages, MemoryLoaded)[-1].items)
        await pilot.press("q")
