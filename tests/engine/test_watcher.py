"""Hand edits: saves in kernels/<task>/ are re-verified (coalesced), the engine's own writes are not,
and a verified edit becomes a human experience."""

from __future__ import annotations

import asyncio

import pytest

from core.events import EventBus
from core.watcher import EditWatcher
from core.workspace_files import read_candidate_files, write_candidate

import candidates as C


async def _until(predicate, timeout=30.0):
    end = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < end:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False


def test_saves_coalesce_and_engine_writes_are_ignored(tmp_path):
    kernels = tmp_path / "kernels"
    (kernels / "relu").mkdir(parents=True)
    calls: list[tuple[str, dict, str | None]] = []

    async def verify(task_id, files, parent):
        calls.append((task_id, files, parent))
        await asyncio.sleep(0.5)  # a verification takes a while; saves during it wait

    async def scenario():
        watcher = EditWatcher(kernels, {"relu", "softmax"}, verify, EventBus())
        runner = asyncio.create_task(watcher.run())
        # the watch in place first: its first wake-up compares every folder, and one that fell inside the burst
        # below (a slow start under load: importing watchfiles, the thread) verified the burst's middle ('edit 3')
        await asyncio.wait_for(watcher.ready.wait(), 30)
        folder = kernels / "relu"
        write_candidate(folder, {"kernel.cpp": "// engine\n", "model.py": "x = 1\n"}, "a1")   # the engine's write
        await asyncio.sleep(0.8)
        assert calls == []
        for i in range(5):                                                                   # a burst of saves
            (folder / "kernel.cpp").write_text(f"// edit {i}\n")
            await asyncio.sleep(0.03)
        assert await _until(lambda: len(calls) >= 1)
        (folder / "kernel.cpp").write_text("// edit during verification\n")
        await asyncio.sleep(0.1)
        (folder / "kernel.cpp").write_text("// the last edit\n")
        assert await _until(lambda: len(calls) >= 2)
        await asyncio.sleep(1.0)
        (kernels / "relu" / "best").mkdir(exist_ok=True)
        (kernels / "relu" / "best" / "kernel.cpp").write_text("// best copies are not edits\n")
        (kernels / "relu" / ".hidden.tmp").write_text("editor swap file\n")
        await asyncio.sleep(0.8)
        watcher.stop_event.set()
        await runner

    asyncio.run(scenario())
    assert [c[0] for c in calls] == ["relu", "relu"]
    assert calls[0][1]["kernel.cpp"] == "// edit 4\n"          # the burst became one verification
    assert calls[1][1]["kernel.cpp"] == "// the last edit\n"    # saves during it coalesced into the next
    assert calls[0][2] == "a1"                                   # the parent is what the engine put there


@pytest.mark.slow
def test_a_saved_edit_becomes_a_human_experience(workspace, monkeypatch):
    from core.session import Session

    ws = workspace
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    bus = EventBus()
    seen = []
    bus.subscribe(seen.append)

    async def scenario(session):
        watcher = session.edit_watcher()
        runner = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.5)
        folder = session.task_folder("relu")                     # a starter candidate, written by us
        await asyncio.sleep(0.5)
        (folder / "model.py").write_text("def broken(:\n")       # a syntax error: an outcome, not a crash
        assert await _until(lambda: any(type(e).__name__ == "AttemptRecorded" for e in seen), 120)
        for name, text in C.elementwise(C.RELU).items():
            (folder / name).write_text(text)
        assert await _until(lambda: sum(type(e).__name__ == "AttemptRecorded" for e in seen) >= 2, 180)
        watcher.stop_event.set()
        await runner

    with Session(ws, bus=bus) as session:
        asyncio.run(scenario(session))
        recorded = [e for e in seen if type(e).__name__ == "AttemptRecorded"]
        assert [r.source for r in recorded] == ["human", "human"]
        assert recorded[0].outcome.failed_gate == "format" and "syntax error" in recorded[0].outcome.message
        assert recorded[1].outcome.feasible and recorded[1].new_best
        exp = session.store.get(recorded[1].experience_id)
        assert exp.kind == "human_edit" and exp.source == "human" and exp.reward == 1.0
        state = session.store.get_task("relu")
        assert state.feasible and exp.id in state.start_points
        assert (ws.kernels_dir / "relu" / "best" / "kernel.cpp").read_text() == exp.files["kernel.cpp"]


def test_a_project_keeps_its_folders_and_links_are_never_followed(tmp_path):
    """A custom-op project's files sit in op_host/ and op_kernel/: written and read back with their paths, its
    saves seen by the watcher; links and best/ are no part of the candidate."""
    kernels = tmp_path / "kernels"
    folder = kernels / "add"
    files = {"model.py": "m = 1\n", "op_host/add_custom.cpp": "// host\n", "op_kernel/erf/tail.h": "// tail\n",
             "add_custom.json": "[]\n", "binding.cpp": "// binding\n"}
    write_candidate(folder, files, "a1")
    assert read_candidate_files(folder) == files
    (tmp_path / "secret.h").write_text("// not the candidate's\n")
    (folder / "op_host/linked.h").symlink_to(tmp_path / "secret.h")
    (folder / "linked_dir").symlink_to(tmp_path, target_is_directory=True)
    (folder / "best/op_host").mkdir(parents=True)
    (folder / "best/op_host/old.cpp").write_text("// best\n")
    (folder / "build").mkdir()                          # a folder no form keeps sources in
    (folder / "build/generated.cpp").write_text("// a person's build\n")
    assert read_candidate_files(folder) == files
    write_candidate(folder, {"model.py": "m = 2\n", "kernel.cpp": "// flat\n"}, "a2")
    assert read_candidate_files(folder) == {"model.py": "m = 2\n", "kernel.cpp": "// flat\n"}
    assert not (folder / "op_kernel").exists()          # folders the old files leave empty go
    watcher = EditWatcher(kernels, {"add"}, lambda *a: None, EventBus())
    assert watcher.task_of(folder / "op_host/add_custom.cpp") == "add"
    assert watcher.task_of(folder / "best/op_host/old.cpp") is None
    assert watcher.task_of(folder / "op_host/.x.cpp.tmp") is None


def test_a_folder_made_with_its_files_at_once_is_verified(tmp_path):
    """kernels/<task>/ arriving with its files already in it (moved in, or made and written at once, as
    a script does): the files land before any watch on the new folder, and the folder's creation is all
    the watcher hears. Seen in the fresh-clone walk-through of issue 27: such a save waited for the next."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    calls: list[dict] = []

    async def verify(task_id, files, parent):
        calls.append(files)

    async def scenario():
        watcher = EditWatcher(kernels, {"relu", "softmax"}, verify, EventBus())
        runner = asyncio.create_task(watcher.run())
        await asyncio.wait_for(watcher.ready.wait(), 10)
        drafted = tmp_path / "drafted"
        drafted.mkdir()
        (drafted / "model.py").write_text("x = 1\n")
        (drafted / "kernel.cpp").write_text("// moved in\n")
        drafted.rename(kernels / "relu")                    # one event: the folder's creation
        assert await _until(lambda: len(calls) == 1, timeout=8), "a folder moved in was not verified"
        folder = kernels / "softmax"
        folder.mkdir()
        (folder / "model.py").write_text("x = 2\n")
        (folder / "kernel.cpp").write_text("// made and written at once\n")
        assert await _until(lambda: len(calls) == 2, timeout=8), "a folder made and written at once was not verified"
        watcher.stop_event.set()
        await runner

    asyncio.run(scenario())
    assert calls[0]["kernel.cpp"] == "// moved in\n" and calls[1]["kernel.cpp"] == "// made and written at once\n"


def test_a_save_whose_verification_was_cut_short_is_verified_at_the_next_opening(tmp_path):
    """The workbench closed (its tasks cancelled) while a save was being verified: the next watcher on
    that folder verifies the save instead of taking it as seen; a save that got its verdict is not
    verified again."""
    from core.workspace_files import PENDING_MARK

    kernels = tmp_path / "kernels"
    for t in ("relu", "softmax"):
        (kernels / t).mkdir(parents=True)
    started: list[str] = []
    calls: list[tuple[str, dict]] = []

    async def never_finishes(task_id, files, parent):
        started.append(task_id)
        await asyncio.sleep(3600)

    async def verify(task_id, files, parent):
        calls.append((task_id, files))
        return f"attempt-{len(calls)}"

    async def first_session():
        watcher = EditWatcher(kernels, {"relu", "softmax"}, never_finishes, EventBus())
        runner = asyncio.create_task(watcher.run())
        await watcher.ready.wait()
        (kernels / "relu" / "kernel.cpp").write_text("// saved just before quitting\n")
        assert await _until(lambda: started == ["relu"])
        # what the engine host does on quit: stop the watch, cancel every task but the watch itself
        watcher.stop_event.set()
        for task in list(watcher._running.values()):
            task.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(first_session())
    assert (kernels / "relu" / PENDING_MARK).exists()
    (kernels / "softmax" / "kernel.cpp").write_text("// saved while the workbench was closed\n")

    seen: list = []

    async def second_session():
        bus = EventBus()
        bus.subscribe(seen.append)
        watcher = EditWatcher(kernels, {"relu", "softmax"}, verify, bus)
        watcher.remember_all()                      # what the host does before showing the tasks
        runner = asyncio.create_task(watcher.run())
        assert await _until(lambda: len(calls) >= 1)
        await asyncio.sleep(1.0)                     # nothing else is verified
        watcher.stop_event.set()
        await runner

    asyncio.run(second_session())
    assert [(t, f["kernel.cpp"]) for t, f in calls] == [("relu", "// saved just before quitting\n")]
    detected = [e for e in seen if type(e).__name__ == "EditDetected"]
    assert [(e.task, e.resumed) for e in detected] == [("relu", True)]
    assert not (kernels / "relu" / PENDING_MARK).exists()      # its verdict is recorded: the note is gone
    assert read_candidate_files(kernels / "relu") == {"kernel.cpp": "// saved just before quitting\n"}

    async def third_session():                       # a save that got its verdict is seen, not verified again
        watcher = EditWatcher(kernels, {"relu", "softmax"}, verify, EventBus())
        watcher.remember_all()
        runner = asyncio.create_task(watcher.run())
        await watcher.ready.wait()
        await asyncio.sleep(1.0)
        watcher.stop_event.set()
        await runner

    asyncio.run(third_session())
    assert len(calls) == 1
