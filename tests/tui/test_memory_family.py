"""Issue 27, item 6 (the rest): the memory browser numbers an attempt `#n` as the attempt tree does
(the hex id is only one of its facts), and shows its children as well as its parent, both opened from
the keyboard."""

from __future__ import annotations

from waiting import wait_for

SIZE = (150, 44)


def plain(renderable) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


async def test_numbers_shared_with_the_tree_and_children_opened_from_the_keyboard(filled_workspace):
    from textual.widgets import OptionList

    from evotui.app import make_app
    from evotui.screens.memory import MemoryScreen
    from evotui.widgets.experience_detail import ExperienceDetail
    from evotui.widgets.memory_list import MemoryList

    from memory_content import _id

    app = make_app(filled_workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        tree = {line.id: line.index for line in app.host.session.attempts("relu")}
        assert tree[_id(5)] == 3 and tree[_id(6)] == 4 and tree[_id(7)] == 5   # the numbers the tree draws

        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemoryScreen) and app.screen.shown_id, what="the memory")
        browser = app.screen
        listing = browser.query_one(MemoryList)
        detail = browser.query_one(ExperienceDetail)
        # the list's first column is the tree's number, for every attempt; knowledge has none
        rows = {item["id"]: listing.get_row(item["id"]) for item in listing.items}
        for exp_id, n in tree.items():
            assert str(rows[exp_id][0]) == f"#{n}"
        assert str(rows[_id(1)][0]) == ""

        # the refinement #3: its title leads with #3, its parent #2 and children #4 and #5 are listed
        ids = [item["id"] for item in listing.items]
        listing.focus()
        listing.move_cursor(row=ids.index(_id(5)))
        await wait_for(pilot, lambda: browser.shown_id == _id(5) and detail.relatives, what="#3 in the detail")
        head = plain(detail.query_one("#detail").content)
        assert head.lstrip().startswith("#3 · relu refine")
        family = detail.query_one("#family", OptionList)
        lines = [plain(family.get_option_at_index(i).prompt) for i in range(family.option_count)]
        assert [line.split()[:2] for line in lines] == [["parent", "#2"], ["child", "#4"], ["child", "#5"]]

        # from the keyboard: tab to the family, down to the second child, enter opens it
        await pilot.press("tab", "tab")
        assert family.has_focus
        await pilot.press("down", "down", "enter")
        await wait_for(pilot, lambda: browser.shown_id == _id(7), what="the child #5 opened")
        assert plain(detail.query_one("#detail").content).lstrip().startswith("#5 · ")
        assert listing.current_id == _id(7)          # the list follows: the same attempt, one cursor
        # and back up: its parent is the first line
        await pilot.press("enter")
        await wait_for(pilot, lambda: browser.shown_id == _id(5), what="the parent #3 opened")
        await pilot.press("q")


def test_the_cli_numbers_attempts_as_the_tree_does(filled_workspace, capsys):
    """`evokernel memory list` and `show` give the same `#n` beside the id, the parent's and children's too."""
    from evotui.cli import main

    from memory_content import _id

    ws = str(filled_workspace.root)
    assert main(["-w", ws, "memory", "list", "--task", "relu"]) == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("0001")}
    assert rows[_id(5)] == "#3" and rows[_id(7)] == "#5"
    assert main(["-w", ws, "memory", "show", _id(5)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"#3 · {_id(5)}")
    assert f"parent:   #2 {_id(4)}" in out
    assert f"child:    #4 {_id(6)}" in out and f"child:    #5 {_id(7)}" in out
