"""Key bindings are data in one place (``evotui.keys``): the classes bind their keys from it, the help
screen lists them and the command palette is generated from it. Driven through the real app with
Textual's pilot: the palette lists every key of the main screen, and keys work pressed or picked."""

from __future__ import annotations

from waiting import wait_for

SIZE = (150, 44)


def plain(renderable) -> str:
    from rich.console import Console

    console = Console(record=True, width=300, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


async def palette_pick(pilot, title: str, choose: bool) -> list[str]:
    """Type ``title`` into the real command palette; what it lists. With ``choose``, run the entry
    titled exactly ``title`` (else close the palette)."""
    from textual.command import CommandList, CommandPalette

    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CommandPalette), what="the palette")
    palette = pilot.app.screen
    palette.query_one("#--input").value = title   # typing ~40 characters one by one is slow and adds nothing
    listed = lambda: [str(o.prompt).split("\n")[0] for o in palette.query_one(CommandList).options]  # noqa: E731
    await wait_for(pilot, lambda: title in listed(), timeout=30, what=f"the palette to list {title!r}")
    titles = listed()
    if choose:
        option_list = palette.query_one(CommandList)
        option_list.highlighted = titles.index(title)
        await pilot.press("enter")
    else:
        await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, CommandPalette), what="the palette to close")
    return titles


async def test_the_palette_lists_every_key_of_the_main_screen(workspace):
    from evotui import keys
    from evotui.app import EvoKernelApp, make_app
    from evotui.screens.main import MainScreen
    from evotui.widgets.task_table import TaskTable

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        # what the main screen binds (our classes, not Textual's own ctrl+q, ctrl+p ...)
        bound = [(b.key, b.action) for cls in (EvoKernelApp, MainScreen, TaskTable) for b in cls.BINDINGS]
        assert ("r", "app.run_toggle") in bound and ("space", "toggle_mark") in bound
        table = {(k.keys, k.action): k for k in keys.KEYS}
        for key, action in bound:
            assert (key, action) in table, f"{key} is bound outside evotui.keys"
            if action in ("escape", "quit"):   # escape closes things; Textual's palette has its own Quit
                continue
            entry = table[(key, action)]
            title = keys.command_title(entry)
            assert title.endswith(f"({entry.display})")
            assert title in await palette_pick(pilot, title, choose=False), key
        assert "Quit" in await palette_pick(pilot, "Quit", choose=False)
        await pilot.press("q")


async def test_keys_work_pressed_and_picked_from_the_palette(workspace):
    from evotui import keys
    from evotui.app import make_app
    from evotui.screens.help import HelpScreen
    from evotui.screens.memory import MemoryScreen

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        tasks = app.main.query_one("#tasks")
        first = app.main.current_task

        # pressed
        await pilot.press("space")
        assert tasks.marked == {first}
        theme = app.theme
        await pilot.press("t")
        assert app.theme != theme
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemoryScreen), what="the memory browser")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, what="back on the main screen")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        text = " ".join(plain(app.screen.query_one("#help-text").content).split())
        for key, what in keys.help_lines():
            assert key in text and what in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, what="help to close")

        # picked from the palette: the same actions, on the same owners
        by_action = {k.action: k for k in keys.commands()}
        await palette_pick(pilot, keys.command_title(by_action["toggle_mark"]), choose=True)
        await wait_for(pilot, lambda: tasks.marked == set(), what="the mark to go")
        await palette_pick(pilot, keys.command_title(by_action["next_theme"]), choose=True)
        await wait_for(pilot, lambda: app.theme == theme, what="the theme to switch back")
        await palette_pick(pilot, keys.command_title(by_action["filter"]), choose=True)
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "filter", what="the filter box")
        await pilot.press("escape")
        await palette_pick(pilot, keys.command_title(by_action["memory"]), choose=True)
        await wait_for(pilot, lambda: isinstance(app.screen, MemoryScreen), what="the memory browser")
        await pilot.press("escape", "q")
    assert app.return_code == 0
