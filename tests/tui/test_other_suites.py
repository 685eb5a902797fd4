"""One workspace, several suites (#51, 1): a save in any task folder of the workspace is verified and recorded,
whichever suite the workbench shows; where that cannot be done here the log says where the save belongs and how
to open it, and the save waits, noted, for an opening that can. A folder of no task says so.

The workbench runs on the canned verifier (``canned_app``): what is decided here (which task a save is, what
is recorded and said) is the watcher's, the session's and the screen's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import candidates as C
from waiting import human_attempts, posted, save, wait_for

pytestmark = pytest.mark.slow   # a workbench per test
SIZE = (150, 44)
RELU = Path(__file__).parents[1] / "fixtures" / "suite" / "level1" / "relu.py"


def log_lines(app) -> str:
    return "\n".join(app.main.query_one("#log").lines_written)


async def test_a_save_in_another_suites_folder_is_verified_and_recorded_as_that_suites_task(workspace, tmp_path,
                                                                                           canned_app):
    """The finding: `evokernel ui --suite <MKB>/reference`, then a save of kernels/relu/kernel.cpp (the workspace's
    own suite's relu): nothing was logged in 60 s, and after a plain `evokernel` the folder counted as seen, the
    edit never verified or recorded."""
    from core.session import Session
    from core.workspace_files import pending_in, write_candidate
    from evotui.messages import EngineEvent

    with Session(workspace) as session:   # the workspace's own suite was opened before: its relu has a folder
        session.tasks()
    write_candidate(workspace.kernels_dir / "relu", C.elementwise(C.IDENTITY))
    other = tmp_path / "mkb" / "reference" / "npukernelbench_level0"
    other.mkdir(parents=True)
    shutil.copy(RELU, other / "10_relu.py")
    with Session(workspace) as session:   # a suite that was known here once, whose folder is gone since
        session.store.claim_task("gone", {"suite": "oldsuite", "name": "gone", "suite_spec": str(tmp_path / "gone")})
    write_candidate(workspace.kernels_dir / "gone", C.elementwise(C.IDENTITY))

    app = canned_app(workspace, suite=str(other.parent)).app
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        assert "relu" not in app.main.tasks and "10_relu" in app.main.tasks
        save(workspace.kernels_dir / "relu", C.elementwise(C.RELU))
        await wait_for(pilot, lambda: any(e.task == "relu" for e in human_attempts(messages)), timeout=60,
                       what="the save in relu's folder to be verified")
        [edit] = [e for e in human_attempts(messages) if e.task == "relu"]
        assert edit.outcome.feasible and not edit.duplicate
        assert "relu (a task of suite suite, not of the one shown): hand edit saved (kernel.cpp" in log_lines(app)

        # a folder whose suite is not found here: said where it belongs and how to open it, the save kept noted
        save(workspace.kernels_dir / "gone", C.elementwise(C.RELU))
        await wait_for(pilot, lambda: "kernels/gone/ holds task gone of suite oldsuite" in log_lines(app), timeout=60,
                       what="the save in gone's folder to be said")
        assert "open it with `evokernel ui --suite" in log_lines(app)
        assert pending_in(workspace.kernels_dir / "gone")

        # a folder of no task: said once, with the close names
        save(workspace.kernels_dir / "10_rleu", C.elementwise(C.RELU))
        await wait_for(pilot, lambda: "kernels/10_rleu/: no task" in log_lines(app), timeout=60,
                       what="the stray folder to be said")
        assert "did you mean 10_relu" in log_lines(app)
        notices = [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "Notice"]
        assert sum("10_rleu" in n.message for n in notices) == 1
        await pilot.press("q")

    with Session(workspace) as session:   # recorded as the relu of the workspace's own suite
        [exp] = session.store.query(task="relu", source="human")
        assert exp.id == edit.experience_id and exp.outcome["feasible"]
        assert not pending_in(workspace.kernels_dir / "relu")
