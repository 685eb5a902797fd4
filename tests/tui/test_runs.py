"""The workbench driving real runs: a real workspace, the loopback OpenAI-compatible server, real
builds in the sandbox, real LMDB. Assertions go to the typed messages the app posted, in order, then
to what the widgets show."""

from __future__ import annotations

import json

import pytest

import candidates as C
from openai_server import Reply, answer_with, task_of
from waiting import posted, wait_for

pytestmark = pytest.mark.slow

GOOD = {
    "relu": C.elementwise(C.RELU),
    "sum_dim": {"model.py": C.ROWSUM_MODEL, "kernel.cpp": C.ROWSUM_REASSOCIATED},
}
SIZE = (150, 44)


def variant(files: dict[str, str], tag: int) -> dict[str, str]:
    """The same kernel with a distinct unused constant (the store drops exact repeats)."""
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kVariant{tag} = {tag};\n"}


def correct_kernels():
    counter = iter(range(10_000))

    def script(request, n):
        return Reply(answer_with(variant(GOOD[task_of(request)], next(counter))))

    return script


def event_names(messages) -> list[str]:
    from evotui.messages import EngineEvent, RunStateChanged

    out = []
    for m in posted(messages, EngineEvent, RunStateChanged):
        out.append(type(m.event).__name__ if isinstance(m, EngineEvent) else f"state:{m.state}")
    return out


async def test_a_run_paused_and_resumed_shows_attempts_then_memory_and_theme(workspace, llm_env):
    from evotui.app import make_app
    from evotui.messages import EngineEvent, MemoryLoaded, RunStateChanged, ThemeChanged
    from evotui.screens.memory import MemoryScreen
    from evotui.widgets.attempt_tree import AttemptTree

    llm_env(correct_kernels())
    app = make_app(workspace.root)
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        assert app.run_status.state == "idle" and app.run_status.llm_ok

        # mark relu and sum_dim (space), start the run over them (r)
        table = app.main.query_one("#tasks")
        table.move_cursor(row=table.get_row_index("relu"))
        await pilot.press("space")
        table.move_cursor(row=table.get_row_index("sum_dim"))
        await pilot.press("space")
        assert app.main.run_selection() == ["relu", "sum_dim"]
        await pilot.press("r")

        # pause once the first attempt is in, then resume: the run goes on where it stopped
        recorded = lambda: [m.event for m in posted(messages, EngineEvent)  # noqa: E731
                            if type(m.event).__name__ == "AttemptRecorded"]
        await wait_for(pilot, lambda: recorded(), timeout=240, what="the first attempt")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.run_status.state == "paused", timeout=240, what="the pause")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.run_status.state == "finished", timeout=300, what="the end of the run")

        states = [m.state for m in posted(messages, RunStateChanged)]
        assert states == ["starting", "running", "pausing", "paused", "starting", "running", "finished"]
        names = event_names(messages)
        assert [n for n in names if n in ("RunStarted", "RunFinished")] == ["RunStarted", "RunFinished"] * 2
        assert names.index("RunFinished") < names.index("state:paused")
        started = [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "RunStarted"]
        assert [s.resumed for s in started] == [False, True] and started[0].run_id == started[1].run_id
        finished = [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "RunFinished"]
        assert [f.status for f in finished] == ["stopped", "finished"]
        for task in ("relu", "sum_dim"):
            attempts = [e for e in recorded() if e.task == task]
            assert len(attempts) == 2 and all(e.outcome.feasible for e in attempts), attempts
            gates = [m.event.gate for m in posted(messages, EngineEvent)
                     if type(m.event).__name__ == "GateChecked" and m.event.task == task]
            assert "performance" in gates   # live gate progress reached the app (some may be coalesced)

        # the attempt tree of the task under the cursor (sum_dim) shows both attempts, every gate passed
        tree = app.main.query_one(AttemptTree)
        await wait_for(pilot, lambda: tree.task_id == "sum_dim" and len(tree.attempt_lines) == 2,
                       what="the attempt tree")
        assert [line.stage for line in tree.attempt_lines] == ["draft", "refine"]
        assert tree.attempt_lines[1].parent_id == tree.attempt_lines[0].id      # refine hangs under the draft
        for row in range(2):
            cells = [str(c) for c in tree.get_row_at(row)]
            assert cells[2:7] == ["✓"] * 5 and cells[-1] == "llm"
        assert app.main.query_one("#tasks").rows_by_id["relu"].used == 2
        assert "run " in "\n".join(app.main.query_one("#log").lines_written)

        # the memory browser, filtered to one task's refinements, sorted by Q2
        await pilot.press("m")
        assert isinstance(app.screen, MemoryScreen)
        browser = app.screen
        await wait_for(pilot, lambda: posted(messages, MemoryLoaded), what="the memory")
        everything = posted(messages, MemoryLoaded)[-1]
        assert everything.total >= 4 and {i["source"] for i in everything.items} >= {"llm", "seed"}
        browser.set_filter("task", "relu")
        browser.set_filter("stage", "refine")
        await pilot.press("o")   # next sort: q1
        await wait_for(pilot, lambda: posted(messages, MemoryLoaded)[-1].filters.get("stage") == "refine"
                       and posted(messages, MemoryLoaded)[-1].sort == "q1", what="the filtered memory")
        filtered = posted(messages, MemoryLoaded)[-1]
        assert filtered.total == 1 and filtered.items[0]["task"] == "relu" and filtered.items[0]["stage"] == "refine"
        await wait_for(pilot, lambda: browser.shown_id == filtered.items[0]["id"], what="the detail pane")

        # theme: switched at run time and remembered for this workspace
        await pilot.press("t")
        await wait_for(pilot, lambda: posted(messages, ThemeChanged), what="the theme change")
        assert posted(messages, ThemeChanged)[-1].name == "light" and app.theme == "evokernel-light"
        assert json.loads((workspace.state_dir / "ui.json").read_text())["theme"] == "light"

        await pilot.press("escape")
        assert app.screen is app.main
        await pilot.press("q")
    assert app.return_code == 0
    assert [m.state for m in posted(messages, RunStateChanged)][-1] == "finished"

    # a new workbench on the same workspace starts in the remembered theme
    again = make_app(workspace.root, watch=False)
    async with again.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: again.main.tasks)
        assert again.theme == "evokernel-light"
