"""The memory browser from the keyboard (issue 27 item 6; #37 item 9): its own `?` (its keys and what its
values mean), `/` searches the titles and the code, `f` opens the task filter's drop-down (a filter chosen
with the arrows and enter narrows the list), tab reaches the experience's parent and children before the
six filters, and the focused pane says so by more than a colour."""

from __future__ import annotations

from waiting import posted, wait_for

SIZE = (150, 44)


def plain(renderable) -> str:
    from rich.console import Console

    console = Console(record=True, width=160, file=open("/dev/null", "w"))
    console.print(renderable)
    return " ".join(console.export_text().split())


async def test_help_search_and_filters_from_the_keyboard(filled_workspace):
    from textual.widgets import OptionList, Select

    from evotui import keys
    from evotui.app import make_app
    from evotui.messages import MemoryLoaded
    from evotui.screens.help import HelpScreen
    from evotui.screens.memory import MemoryScreen
    from evotui.widgets.memory_list import MemoryList

    app = make_app(filled_workspace.root, watch=False)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemoryScreen) and app.screen.shown_id, what="the memory")
        browser = app.screen
        listing = browser.query_one(MemoryList)
        assert str(listing.border_title).startswith("▶ ")          # the focused pane, said in its title

        # its own help: its keys and what Q1, Q2 and the reward value, not the main screen's keys
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        text = plain(app.screen.query_one("#help-text").content)
        for key, what in keys.help_lines("memory"):
            assert key in text and " ".join(what.split()) in text
        assert "a start point to refine from" in text and "start a run" not in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is browser, what="back in the browser")

        # tab: the experience, then its parent and children, and only then the filters (on an attempt that has
        # some: the list's first attempt with a parent)
        items = posted(messages, MemoryLoaded)[-1].items
        row = next(i for i, item in enumerate(items) if item.get("parent_id"))
        listing.move_cursor(row=row)
        await wait_for(pilot, lambda: browser.shown_id == items[row]["id"], what="an attempt with a parent")
        await pilot.press("tab")
        assert browser.query_one("#detail").has_focus_within and str(browser.query_one("#detail").border_title) \
            .startswith("▶ ") and not str(listing.border_title).startswith("▶ ")
        family = browser.query_one("#family", OptionList)
        await pilot.press("tab")
        assert family.has_focus and not family.has_class("-empty")
        await pilot.press("tab")
        assert browser.query_one("#task", Select).has_focus
        await pilot.press("escape")                                # back to the workbench
        await wait_for(pilot, lambda: app.screen is app.main, what="the workbench")
        await pilot.press("m")
        await wait_for(pilot, lambda: app.screen is browser, what="the browser again")

        # / searches the titles and the code
        total = posted(messages, MemoryLoaded)[-1].total
        await pilot.press("slash")
        await wait_for(pilot, lambda: browser.focused is not None and browser.focused.id == "search", what="the box")
        await pilot.press(*"pragma omp")
        await wait_for(pilot, lambda: posted(messages, MemoryLoaded)[-1].search == "pragma omp", what="the search")
        found = posted(messages, MemoryLoaded)[-1]
        assert 0 < found.total < total and "/pragma omp" in str(listing.border_subtitle)
        await pilot.press("escape")                                # clears the search, stays in the browser
        await wait_for(pilot, lambda: posted(messages, MemoryLoaded)[-1].search == "", what="the search cleared")
        assert app.screen is browser and posted(messages, MemoryLoaded)[-1].total == total

        # f opens the task filter's drop-down
        await pilot.press("f")
        task = browser.query_one("#task", Select)
        await wait_for(pilot, lambda: task.has_focus_within and task.expanded, what="the task filter open", timeout=10)
        await pilot.press("down", "down", "enter")      # past "task: any", the first task of the list
        await wait_for(pilot, lambda: browser.filters["task"] is not None, what="a task chosen", timeout=10)
        chosen = browser.filters["task"]
        await wait_for(pilot, lambda: posted(messages, MemoryLoaded)
                       and posted(messages, MemoryLoaded)[-1].filters.get("task") == chosen, what="the list")
        assert all(i["task"] == chosen for i in posted(messages, MemoryLoaded)[-1].items)
        await pilot.press("q")


def test_search_looks_in_titles_and_code(filled_workspace):
    from core.session import Session

    with Session(filled_workspace) as session:
        everything, total = session.browse_memory({}, limit=None)
        hits, count = session.browse_memory({}, search="PRAGMA omp", limit=None)
        assert 0 < count < total and len(hits) == count
        for item in hits:
            exp = session.store.get(item["id"])
            text = (exp.title + "\n".join(exp.files.values())).lower()
            assert "pragma" in text and "omp" in text
        none, zero = session.browse_memory({}, search="no-such-word-anywhere", limit=None)
        assert none == [] and zero == 0
