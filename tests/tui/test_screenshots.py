"""SVG snapshots of the main screen and the memory browser, in the dark and the light theme, on a
workspace whose memory is fixed (ids, times, values): every run draws the same screens."""

from __future__ import annotations

import json

import pytest

from waiting import wait_for

SIZE = (150, 44)


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
