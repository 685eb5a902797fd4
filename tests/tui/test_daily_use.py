"""The workbench as a daily tool: what a new user hit (issue 13) and must not hit again. Quick pilot
tests on a real workspace without an LLM: no builds, no runs."""

from __future__ import annotations

import pytest

from waiting import wait_for

SIZE = (150, 44)


def notes(app) -> list[str]:
    """The notifications shown so far, as plain text."""
    return [n.message for n in app._notifications]


def log_text(app) -> str:
    return "\n".join(app.main.query_one("#log").lines_written)


# -- 1: an editor that does not exist ----------------------------------------------------------------


@pytest.mark.parametrize("variable,value", [("VISUAL", "/nonexistent/editor"), ("EDITOR", "nosuch-editor"),
                                            ("EDITOR", "'unclosed")])
async def test_a_missing_editor_is_one_line_and_the_workbench_keeps_answering(workspace, monkeypatch, variable,
                                                                                value):
    from evotui.app import make_app

    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv(variable, value)
    app = make_app(workspace.root, watch=False)
    suspended: list = []
    app.suspend = lambda: suspended.append(True) or (_ for _ in ()).throw(AssertionError("suspended"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("e")
        await wait_for(pilot, lambda: notes(app), what="the notice")
        [notice] = notes(app)
        assert "\n" not in notice and ("not found" in notice or "cannot be read" in notice)
        assert f"${variable}" in notice and "set VISUAL or EDITOR" in notice
        assert not suspended          # the terminal was never handed over
        # it still answers keys: the cursor moves
        before = app.main.current_task
        await pilot.press("down")
        await wait_for(pilot, lambda: app.main.current_task != before, what="the cursor to move")
        await pilot.press("q")


def test_the_editor_command_is_resolved_before_the_terminal_is_handed_over(tmp_path):
    from evotui.run_control import editor_command

    assert editor_command({"VISUAL": "true --wait", "EDITOR": "nosuch"})[1:] == ["--wait"]
    assert editor_command({"VISUAL": "  ", "EDITOR": "true"})[0].endswith("true")
    assert "not found" in editor_command({"EDITOR": "nosuch-editor"})
    assert "$VISUAL (/nonexistent/editor) was not found" in editor_command({"VISUAL": "/nonexistent/editor"})
