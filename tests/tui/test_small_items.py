"""Issue 27, item 10: the small things. A filter lists the exact match first; `e` opens several
files in vi-family editors side by side (vi on two files said `E173: 1 more file to edit` on :q)."""

from __future__ import annotations

import shutil

import pytest

from waiting import wait_for

SIZE = (150, 44)


def test_vi_family_editors_open_several_files_side_by_side(tmp_path):
    from evotui.run_control import editor_argv

    files = ["/k/kernel.cpp", "/k/model.py"]
    assert editor_argv(["vim"], files) == ["vim", "-O", *files]
    assert editor_argv(["/usr/bin/nvim"], files) == ["/usr/bin/nvim", "-O", *files]
    assert editor_argv(["vim", "-p"], files) == ["vim", "-p", *files]       # the person's own choice stays
    assert editor_argv(["vim"], files[:1]) == ["vim", files[0]]
    assert editor_argv(["code", "--wait"], files) == ["code", "--wait", *files]


@pytest.mark.skipif(shutil.which("vi") is None, reason="no vi on this machine")
def test_vi_itself_accepts_the_split_option(tmp_path):
    """The real vi here takes the option and exits cleanly in Ex mode (vim-tiny included)."""
    import subprocess

    from evotui.run_control import editor_argv

    a, b = tmp_path / "a.cpp", tmp_path / "b.py"
    a.write_text("int x;\n")
    b.write_text("x = 1\n")
    argv = editor_argv(["vi"], [str(a), str(b)])
    done = subprocess.run([argv[0], "-es", *argv[1:], "+qa"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


async def test_the_exact_match_comes_first_in_a_filter(workspace):
    from core.attempts import TaskRow
    from evotui.app import make_app
    from evotui.widgets.task_table import TaskTable

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        table = app.main.query_one(TaskTable)
        rows = [TaskRow(id=i, level=1, category="reduction", stage="draft", used=0, budget=2, best_speedup=None,
                        best_ms=None, feasible=False) for i in ("log_softmax", "softmax", "softmax_2d")]
        table.show_rows(rows)
        table.set_filter("softmax")
        await pilot.pause()
        assert table.shown[0] == "softmax" and set(table.shown) == {"log_softmax", "softmax", "softmax_2d"}
        await pilot.press("q")
