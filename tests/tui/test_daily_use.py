"""The workbench as a daily tool: what a new user hit (issue 13) and must not hit again. Quick pilot
tests on a real workspace without an LLM: no builds, no runs."""

from __future__ import annotations

import pytest

from waiting import wait_for

SIZE = (150, 44)


def notes(app) -> list[str]:
    """The notifications shown so far, as plain text."""
    return [n.message for n in app._notifications]


def plain(renderable) -> str:
    from rich.console import Console

    console = Console(record=True, width=120, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


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


# -- 11: a damaged memory ----------------------------------------------------------------------------


async def test_a_damaged_memory_is_said_once_clearly_and_no_key_claims_it_is_still_opening(workspace):
    from evotui.app import make_app
    from evotui.widgets.code_view import CodeView

    workspace.memory_path.mkdir(parents=True, exist_ok=True)
    (workspace.memory_path / "data.mdb").write_bytes(b"not an lmdb file at all " * 4096)
    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.run_status.state not in ("opening",), what="the workspace to fail")
        assert app.run_status.state == "unavailable"
        assert "cannot open the workspace" in log_text(app) and "damaged" in log_text(app)
        assert "could not be opened" in app.main.query_one(CodeView).text
        header = str(app.main.query_one("RunHeader").render())
        assert "workspace not open" in header
        app._notifications.clear()
        for key in ("r", "s", "v", "e", "m"):
            await pilot.press(key)
            await wait_for(pilot, lambda: notes(app), what=f"the answer to {key}")
            [said] = notes(app)
            assert "could not be opened" in said and "still opening" not in said and "damaged" in said, key
            app._notifications.clear()
        await pilot.press("q")


# -- 6: starting everything, and a model that will not answer with code ------------------------------


@pytest.mark.slow
async def test_r_over_the_whole_suite_asks_first_and_a_refusing_model_ends_a_task_early(workspace, canned_app):
    from evotui.messages import EngineEvent
    from evotui.screens.confirm_run import ConfirmRunScreen

    from openai_server import Reply
    from waiting import posted

    config = workspace.config_path.read_text().replace("iterations = 2", "iterations = 6")
    workspace.config_path.write_text(config + "\n")
    bench = canned_app(workspace, script=lambda request, n: Reply("I'm sorry, I can't help with writing that kernel."),
                       watch=False)
    app, model = bench.app, bench.model
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        tasks = len(app.main.tasks)

        # r with nothing marked: a question with the task count and the budget; n declines
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRunScreen), what="the question")
        text = str(app.screen.query_one("#confirm-text").render())
        assert f"all {tasks} tasks" in text and f"{tasks} tasks × 6 iterations" in text and "Budget:" in text
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmRunScreen), what="the answer")
        assert app.run_status.state == "idle" and not model.requests

        # y starts it; every answer is a refusal: each task ends after 3, not 6
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRunScreen), what="the question")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.run_status.state == "finished", timeout=240, what="the end of the run")
        assert len(model.requests) == tasks * 3 and not bench.verifier.calls
        ended = [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "EngineProblem"]
        assert len(ended) == tasks and all("ended early: 3 answers in a row without usable code" in e.message
                                           for e in ended)
        assert "ended early" in log_text(app)
        await pilot.press("q")


# -- 8: navigation -----------------------------------------------------------------------------------


async def palette_titles(pilot, query: str) -> list[str]:
    """What the command palette lists for ``query`` (typed into the real palette)."""
    from textual.command import CommandList, CommandPalette

    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CommandPalette), what="the palette")
    await pilot.press(*query)
    palette = pilot.app.screen
    found = lambda: [str(o.prompt) for o in palette.query_one(CommandList).options]  # noqa: E731
    await wait_for(pilot, lambda: found() and all(query.lower()[0] in t.lower() for t in found()[:1]),
                   what=f"palette results for {query}")
    titles = found()
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, CommandPalette), what="the palette to close")
    return titles


async def test_navigation_home_end_help_filter_escape_and_the_palette(workspace):
    from evotui.app import make_app
    from evotui.screens.help import HelpScreen

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        table = app.main.query_one("#tasks")
        ids = list(table.rows_by_id)
        assert app.main.current_task == ids[0]

        # Home / End: first and last task, not a sideways scroll
        await pilot.press("end")
        assert app.main.current_task == ids[-1] and table.scroll_x == 0
        await pilot.press("home")
        assert app.main.current_task == ids[0]

        # ? and F1: the help screen, escape closes it
        for key in ("question_mark", "f1"):
            await pilot.press(key)
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
            text = plain(app.screen.query_one("#help-text").content)
            for key in ("space", "/", "home / end", "? / f1", "escape"):
                assert key in text
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help to close")

        # / filters the tasks; enter goes back to the table; escape clears the filter
        await pilot.press("slash", *"soft")
        await wait_for(pilot, lambda: table.shown == ["softmax"], what="the filter")
        assert "1 of 4 tasks" in str(table.border_subtitle)
        await pilot.press("enter")
        assert app.focused is table and app.main.current_task == "softmax"
        await pilot.press("escape")
        assert table.shown == ids and "of" not in str(table.border_subtitle)

        # Escape closes the keys panel
        app.action_show_help_panel()
        await wait_for(pilot, lambda: app.screen.query("HelpPanel"), what="the keys panel")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not app.screen.query("HelpPanel"), what="the keys panel to close")

        # the palette finds mark, diff and code, and lists one theme entry
        assert any("Mark" in t for t in await palette_titles(pilot, "mark"))
        assert any("Diff" in t for t in await palette_titles(pilot, "diff"))
        assert any("code" in t.lower() for t in await palette_titles(pilot, "code"))
        assert len([t for t in await palette_titles(pilot, "theme") if "theme" in t.lower()]) == 1
        await pilot.press("q")


# -- 13: small things --------------------------------------------------------------------------------


async def test_small_things_d_without_attempts_says_so_and_counts_are_singular(workspace):
    from evotui.app import make_app
    from evotui.screens.first_run import first_run_text

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("d")
        await wait_for(pilot, lambda: notes(app), what="the answer to d")
        assert "no attempts yet" in notes(app)[0]
        header = str(app.main.query_one("RunHeader").render())
        assert "· ·" not in header and "no LLM endpoint" in header
        await wait_for(pilot, lambda: app.main.drawn, what="the log")
        assert all(line[:2].isdigit() and line[2] == ":" for line in app.main.query_one("#log").lines_written)
        await pilot.press("q")
    text = first_run_text("/w", ["evokernel.toml", "kernels/", ".evokernel/"], False).plain
    assert "one folder per task" not in text
    assert all(len(line) <= 90 for line in text.splitlines())     # the dialog's width: no entry wraps


def test_counts_read_as_words():
    from evotui.widgets.marks import plural

    assert plural(1, "attempt") == "1 attempt" and plural(3, "task") == "3 tasks" and plural(0, "repeat") == "0 repeats"


# -- 7: what a failure shows --------------------------------------------------------------------------


async def test_a_failed_attempt_shows_its_whole_message_and_d_reaches_the_models_answer(filled_workspace):
    from evotui.app import make_app
    from evotui.widgets.code_view import CodeView
    from store import Store

    from memory_content import RUN_ID, _id

    # the response cache holds the answer that gave attempt #1 of relu (iteration 0 of the run)
    with Store.open(filled_workspace.memory_path) as store:
        store.cache_put("request-key-1", {"text": "Here is my kernel:\n```cpp file=kernel.cpp\n...\n```"})
        store.cache_put(f"sample:{RUN_ID}:relu:0", {"key": "request-key-1"})
    app = make_app(filled_workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.shown_exp is not None, what="the best attempt")
        tree = app.main.query_one("#attempts")
        tree.move_cursor(row=tree.get_row_index(_id(3)))        # #1: failed at build
        await wait_for(pilot, lambda: app.main.shown_exp.id == _id(3), what="attempt #1")
        code = app.main.query_one(CodeView)
        assert code.border_title == "#1 draft · llm" and code.border_subtitle == "✗ build"
        assert "✗ failed at build:" in code.text and "expected ';' before '}' token" in code.text
        await pilot.press("d")      # a root: its code, said so
        assert "no parent" in code.border_title
        await pilot.press("d")      # the model's answer, as it came
        await wait_for(pilot, lambda: "Here is my kernel:" in code.text, what="the answer")
        assert "the model's answer" in code.border_title
        await pilot.press("d")      # its hot loops' assembly (#51): this one failed to build, and says so
        await wait_for(pilot, lambda: "it does not build, so there is no assembly" in code.text, what="the assembly")
        assert "hot loops' assembly" in code.border_title
        await pilot.press("d")
        assert code.border_title == "#1 draft · llm"
        await pilot.press("q")


def test_compiler_output_keeps_its_lines():
    from core.attempts import Outcome
    from evotui.widgets.marks import failure_text

    message = "build: kernel.cpp:5:50: error: expected ';'\n    5 |     out[i] = x\n      |        ^"
    text = failure_text(Outcome(feasible=False, failed_gate="build", message=message))
    assert text.splitlines()[1:] == message.splitlines()


# -- 10: the memory browser ----------------------------------------------------------------------------


async def test_memory_browser_titles_use_the_width_and_files_start_on_their_own_line(filled_workspace):
    from evotui.app import make_app
    from evotui.widgets.experience_detail import ExperienceDetail
    from evotui.widgets.memory_list import MemoryList

    from memory_content import _id

    app = make_app(filled_workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("m")
        browser = app.screen
        await wait_for(pilot, lambda: browser.shown_id is not None, what="the memory")
        listing = browser.query_one(MemoryList)
        title_width = dict(listing.column_plan)["title"]
        used = sum(w + 2 for _, w in listing.column_plan)
        room = listing.scrollable_content_region.width
        assert title_width >= 24 and room - 2 <= used <= room    # the title takes what the others leave
        # an attempt with two files: the second file's rule is on its own line
        listing.move_cursor(row=listing.get_row_index(_id(5)))
        await wait_for(pilot, lambda: browser.shown_id == _id(5), what="the attempt")
        text = plain(browser.query_one(ExperienceDetail).query_one("#body").content)   # the outcome and code
        rules = [line for line in text.splitlines() if "model.py" in line and "─" in line]
        assert rules and all(line.strip().startswith("model.py") for line in rules)
        await pilot.press("q")


def test_seed_texts_are_reflowed_not_rewrapped_raggedly():
    from evotui.widgets.experience_detail import unwrap

    text = "Use OpenMP for the outer loop and\nkeep the inner one simple.\n\n- a list item\n```cpp\nint a;\nint b;\n```"
    assert unwrap(text).splitlines() == ["Use OpenMP for the outer loop and keep the inner one simple.", "",
                                         "- a list item", "```cpp", "int a;", "int b;", "```"]


# -- 9: the selection stays in view ------------------------------------------------------------------


async def test_at_100x30_the_selected_task_stays_in_view_when_the_rows_are_reloaded(tmp_path):
    from core.workspace import Workspace
    from evotui.app import make_app

    ws = Workspace(tmp_path / "ws")
    ws.init()                                    # the built-in suite: more tasks than the pane shows
    app = make_app(ws.root, watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        table = app.main.query_one("#tasks")
        assert len(table.shown) > table.scrollable_content_region.height

        def in_view() -> bool:
            top = table.scroll_y
            return top <= table.cursor_row + 1 < top + table.scrollable_content_region.height   # +1: the header

        await pilot.press("end")
        await wait_for(pilot, in_view, what="the last task in view")
        last = app.main.current_task
        await pilot.press("slash", *last, "enter")     # filtered to it, then the filter cleared:
        await wait_for(pilot, lambda: table.shown == [last] or len(table.shown) < 5, what="the filter")
        await pilot.press("escape")                     # every row back, the cursor on the same task
        await wait_for(pilot, lambda: len(table.shown) == len(app.main.tasks), what="the rows back")
        assert app.main.current_task == last
        await wait_for(pilot, in_view, what="the selection still in view")
        await pilot.press("q")


# -- #37 item 9: an editor from `e` does not hide the verdicts ---------------------------------------------


async def test_inside_tmux_the_editor_opens_in_a_split_and_the_workbench_stays(workspace, monkeypatch, tmp_path):
    from evotui.app import make_app

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "tmux-args"
    (bin_dir / "tmux").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {called}\n')
    (bin_dir / "tmux").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("TMUX", "/tmp/tmux-1000/default,1,0")
    app = make_app(workspace.root, watch=False)
    suspended: list = []
    app.suspend = lambda: suspended.append(True) or (_ for _ in ()).throw(AssertionError("suspended"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("e")
        await wait_for(pilot, lambda: "tmux pane beside the workbench" in log_text(app), what="the split")
        args = called.read_text().splitlines()
        assert args[:2] == ["split-window", "-h"] and args[3].endswith("/kernels/relu")
        assert args[4].startswith("true ") and "kernel.cpp" in args[4] and "model.py" in args[4]
        assert not suspended
        await pilot.press("q")


@pytest.mark.slow
async def test_the_verdicts_that_came_in_while_the_editor_held_the_terminal_are_summed_up(workspace, monkeypatch,
                                                                                           tmp_path, canned_app):
    """Outside tmux the editor takes the terminal; saves are verified meanwhile, unseen: when it returns,
    the log and a notification say what came in (the canned verifier judges the save)."""
    import contextlib
    import os
    import sys

    from core.scripted import Canned

    import candidates as C

    def judge(task_id, files):
        judged.write_text(task_id)     # the editor below returns once the verdict is recorded
        return Canned(latency_ms=8.0)

    relu = C.elementwise(C.RELU)
    judged = tmp_path / "judged"
    editor = tmp_path / "editor.py"
    editor.write_text(f'''import os, sys, time
folder = os.path.dirname(sys.argv[1])
files = {relu!r}
for name, text in files.items():
    open(os.path.join(folder, name), "w").write(text)
pending, judged = os.path.join(folder, ".evokernel-pending"), {str(judged)!r}
deadline = time.time() + 240
while not os.path.exists(judged) and time.time() < deadline:   # the save is being judged
    time.sleep(0.05)
while os.path.exists(pending) and time.time() < deadline:      # and its verdict recorded
    time.sleep(0.05)
''')
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    monkeypatch.delenv("TMUX", raising=False)
    app = canned_app(workspace, judge=judge).app
    app.suspend = contextlib.nullcontext      # a terminal to hand over (the pilot has none)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        await pilot.press("e")
        await wait_for(pilot, lambda: "while the editor was open: relu #1 edit: ✓" in log_text(app), timeout=300,
                       what="the summary")
        assert any("relu #1 edit: ✓" in n for n in notes(app))
        assert os.path.exists(workspace.kernels_dir / "relu" / "kernel.cpp")
        await pilot.press("q")
