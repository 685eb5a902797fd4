"""`evokernel` with no command in an empty directory: it creates a workspace and opens the workbench
on it, starting with a screen that says what it created and how to connect an LLM."""

from __future__ import annotations

from waiting import wait_for


def test_evokernel_without_a_command_creates_a_workspace_and_opens(tmp_path, monkeypatch):
    from evotui import cli
    from evotui.app import EvoKernelApp
    from evotui.screens.first_run import FirstRunScreen
    from evotui.screens.main import MainScreen

    monkeypatch.chdir(tmp_path)
    seen: dict = {}
    original_run = EvoKernelApp.run

    async def drive(pilot):
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), what="the first-run screen")
        seen["text"] = str(app.screen.query_one("#first-run-text").render())
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen) and app.main.tasks, what="the workbench")
        seen["tasks"] = list(app.main.tasks)
        seen["header"] = app.run_status
        await pilot.press("q")

    def headless_run(self, **kwargs):
        return original_run(self, headless=True, size=(120, 40), auto_pilot=drive)

    monkeypatch.setattr(EvoKernelApp, "run", headless_run)
    assert cli.main([]) == 0

    assert (tmp_path / "evokernel.toml").is_file()
    assert (tmp_path / "kernels").is_dir() and (tmp_path / ".evokernel").is_dir()
    text = seen["text"]
    for created in ("evokernel.toml", "kernels/", ".evokernel/"):
        assert created in text
    for how in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL", "[llm]"):
        assert how in text
    assert len(seen["tasks"]) > 50 and "relu" in seen["tasks"]          # the built-in suite
    assert seen["header"].backend == "cpu" and not seen["header"].llm_ok


def test_a_second_start_shows_no_first_run_screen(tmp_path, monkeypatch):
    from evotui import cli
    from evotui.app import EvoKernelApp
    from evotui.screens.first_run import FirstRunScreen

    (tmp_path / "evokernel.toml").write_text('backend = "cpu"\n')
    (tmp_path / "kernels").mkdir()
    (tmp_path / ".evokernel").mkdir()
    monkeypatch.chdir(tmp_path)
    screens: list = []
    original_run = EvoKernelApp.run

    async def drive(pilot):
        await wait_for(pilot, lambda: pilot.app.main.tasks, what="the workbench")
        screens.append(type(pilot.app.screen))
        await pilot.press("q")

    monkeypatch.setattr(EvoKernelApp, "run", lambda self, **kw: original_run(self, headless=True, auto_pilot=drive))
    assert cli.main(["ui"]) == 0
    assert screens and screens[0] is not FirstRunScreen


def test_a_broken_config_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from evotui import cli

    (tmp_path / "evokernel.toml").write_text("backend = \n")
    monkeypatch.chdir(tmp_path)
    assert cli.main([]) == 2
    assert "evokernel.toml" in capsys.readouterr().err


async def test_q_on_the_welcome_screen_quits(tmp_path):
    """Issue 27's walk-through: `make run` on a fresh clone opens on this screen, and q (quit, as the
    footer says everywhere else) did nothing there."""
    from core.workspace import Workspace
    from evotui.app import make_app
    from evotui.screens.first_run import FirstRunScreen

    ws = Workspace(tmp_path / "ws")
    app = make_app(ws.root, created=ws.init(), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), what="the first-run screen")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, what="the workbench to quit", timeout=10)
