"""SVG snapshots of the main screen and the memory browser, in the dark and the light theme, on a
workspace whose memory is fixed (ids, times, values): every run draws the same screens."""

from __future__ import annotations

import json

import pytest

from waiting import wait_for

SIZE = (150, 44)
SMALL = (100, 30)


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch):
    """Log lines without a time of their own get this one (every run draws the same screen)."""
    import time

    from evotui.widgets import event_log

    monkeypatch.setenv("TZ", "UTC")   # lines restored from the memory carry their own times (issue 27)
    time.tzset()
    at = time.mktime((2026, 1, 1, 12, 30, 0, 0, 0, -1))
    monkeypatch.setattr(event_log, "now", lambda: at)
    yield
    monkeypatch.undo()
    time.tzset()


def workbench(workspace, theme: str):
    from evotui.app import make_app

    (workspace.state_dir / "ui.json").write_text(json.dumps({"theme": theme}))
    return make_app(workspace.root, watch=False)


async def settle_main(pilot) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.main.shown_exp is not None and app.main.current_attempt is not None
                   and app.main.shown_exp.id == app.main.current_attempt.id and app.main.drawn,
                   what="the best attempt's code and the log")


async def open_memory(pilot) -> None:
    from memory_content import _id

    await settle_main(pilot)
    await pilot.press("m")
    browser = pilot.app.screen
    await wait_for(pilot, lambda: browser.shown_id is not None, what="the memory")
    browser.query_one("#sort").value = "adoptions"
    await wait_for(pilot, lambda: browser.shown_id == _id(1), what="the most adopted item")


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_main_screen(snap_compare, filled_workspace, theme):
    async def run_before(pilot):
        await settle_main(pilot)
        if theme == "light":
            await pilot.press("d")    # the light shot shows the diff against the parent

    assert snap_compare(workbench(filled_workspace, theme), terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_memory_browser(snap_compare, filled_workspace, theme):
    assert snap_compare(workbench(filled_workspace, theme), terminal_size=SIZE, run_before=open_memory)


def test_main_screen_at_100x30(snap_compare, filled_workspace):
    """A 100x30 terminal: the columns that fit (a gates column, no level or category), the header
    keeps the run's state, tokens and cost, the footer its daily keys, and the selection in view."""
    async def run_before(pilot):
        await settle_main(pilot)
        app = pilot.app
        table = app.main.query_one("#tasks")
        assert [k for k, _ in table.column_plan] == ["mark", "id", "iter", "best", "status"]
        tree = app.main.query_one("#attempts")
        assert "gates" in tree.column_plan and {"ms", "reward", "source"} <= set(tree.column_plan)
        header = str(app.main.query_one("RunHeader").render())
        assert "tok" in header and "$0.00" in header and "paused" in header

    assert snap_compare(workbench(filled_workspace, "dark"), terminal_size=SMALL, run_before=run_before)


def test_memory_browser_at_100x30(snap_compare, filled_workspace):
    """An attempt in the detail: its #n as in the tree, its parent and children to open."""
    async def run_before(pilot):
        from memory_content import _id

        await open_memory(pilot)
        browser = pilot.app.screen
        listing = browser.query_one("#memory")
        listing.move_cursor(row=listing.get_row_index(_id(5)))
        await wait_for(pilot, lambda: browser.shown_id == _id(5), what="the refinement #3")

    assert snap_compare(workbench(filled_workspace, "dark"), terminal_size=SMALL, run_before=run_before)
