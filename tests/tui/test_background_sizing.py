"""Auto sizing in the background (#51, 7): `--size-scale auto` never blocks the workbench at "opening"; the tasks
show at once (as written until sized), the sizing goes on behind with its progress in the header and the log, and
a save of a task not sized yet is sized first, then verified."""

from __future__ import annotations

import pytest

import candidates as C
from waiting import human_attempts, posted, save, wait_for

pytestmark = pytest.mark.slow   # a workbench, real sizing probes
SIZE = (150, 44)


def sizing_events(messages) -> list:
    from evotui.messages import EngineEvent

    return [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "SizingProgress"]


async def test_the_workbench_opens_before_auto_sizing_and_shows_its_progress(workspace, canned_app):
    """The finding: `--size-scale auto` on the 376-task suite blocked the workbench at "... opening" with no
    progress (7 tasks sized in 2.5 min: about 2 h for all), and only `q` worked."""
    from core.tasks import recorded_sizes
    from evotui.messages import WorkspaceOpened

    app = canned_app(workspace, size_scale="auto").app
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, timeout=600, what="the workspace to open")
        from core.tasks import load_suite

        unsized = [t for t in load_suite(str(workspace.config().suite)).tasks
                   if recorded_sizes(t, workspace.cache_dir) is None]
        assert len(unsized) >= 3, "the tasks showed before they were sized (main sized all four first)"
        opened = messages.index(posted(messages, WorkspaceOpened)[0])
        assert not any(type(getattr(m, "event", None)).__name__ == "SizingProgress" for m in messages[:opened]), \
            "nothing was sized before the tasks showed"
        assert len(app.main.tasks) == 4       # every task of the suite, as written until sized
        await wait_for(pilot, lambda: sizing_events(messages), timeout=300, what="the first task to be sized")
        first = sizing_events(messages)[0]
        assert first.total == 4 and first.done == 1
        await wait_for(pilot, lambda: app.run_status.sizing.startswith("sizing ") or
                       sizing_events(messages)[-1].done == 4, what="the header to say it")
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert "sizing 4 tasks in the background" in log and f"sized 1/4: {first.task}" in log
        # a save of a task meanwhile: sized first (its recorded sizes), then verified
        save(workspace.kernels_dir / "relu", C.elementwise(C.RELU))
        await wait_for(pilot, lambda: human_attempts(messages), timeout=300, what="the save to be verified")
        await wait_for(pilot, lambda: sizing_events(messages)[-1].done == 4, timeout=600, what="every task sized")
        await pilot.press("q")
    from core.session import Session

    with Session(workspace) as session:
        cache = workspace.cache_dir
        assert all(recorded_sizes(t, cache) is not None for t in session.suite().tasks)
