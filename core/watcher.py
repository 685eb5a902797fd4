"""Hand edits: watch ``kernels/``, re-verify a saved candidate in the background, log it as a human
experience (a start point if it is feasible and faster).

Saves are grouped: ``watchfiles`` debounces a burst of writes, and while a task's edit is being
verified, newer saves of that task wait and only the latest is verified next. The engine's own
writes (a new best put in the folder) are recognised by hash and ignored.

Successive saves form a chain that follows the working version: each logged edit is the child of the
last edit that passed correctness (noted in the folder's ``.evokernel-edit``), and the first edit after
the engine wrote the folder (a promoted attempt, a new best) is the child of that attempt. A save that
fails to build or the format gate (a typo, ``core.policy.is_slip``), gives a wrong result or fails the
anti-hack gate (an experiment, recorded and rewarded), or whose verification the tool failed (not
judged) is logged under its parent, but the verifier callback returns no id for it: the next save's
parent stays the last working version, so a reverted wrong edit never takes the credit of the real one.

A save whose verification is under way is noted in the folder (``.evokernel-pending``) until its
outcome is recorded: a workbench closed (or killed) before then verifies that save when it next
opens, instead of taking the folder as seen. Nothing a person saved is lost to a quit.

Every task folder of the workspace is watched, not only the suite's the workbench shows: a save in another
suite's folder (``kernels/relu/`` of the built-in suite while MultiKernelBench is shown) is verified and
recorded as that task's (``elsewhere`` names its suite), or, where that suite cannot be opened here, the log
says where the save belongs and how to open it, and the save keeps its pending note for the next opening
that can verify it (``SavedElsewhere``). A folder of no task says so once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from core import events as ev
from core.workspace_files import (
    clear_pending,
    engine_wrote,
    files_hash,
    note_edit,
    note_pending,
    parent_of_edit,
    pending_in,
    read_candidate_files,
)


class SavedElsewhere(Exception):  # noqa: N818 - a message for the user, not an error of the watcher
    """Raised by ``verify``: the save belongs to a task this workbench cannot verify (its suite is not found
    here); the message says where it belongs and how to open it. The save keeps its pending note."""


Verify = Callable[[str, dict[str, str], str | None], Awaitable[object]]
"""``verify(task_id, files, parent_id)``; when it returns a str, that is the id of the attempt the save
became (it passed correctness), and the next save of the task is its child; None (a typo, a wrong
result, not judged) leaves the parent of the next save as it was."""


class EditWatcher:
    """Re-verifies saved candidates. ``verify(task_id, files, parent_id)`` does the work."""

    def __init__(self, kernels_dir: Path, task_ids: set[str], verify: Verify, bus: ev.EventBus,
                 quiet_ms: int = 120, debounce_ms: int = 1600, *, elsewhere: dict[str, str] | None = None,
                 stranger: Callable[[str], str] | None = None):
        """``task_ids``: the folders of the suite shown; ``elsewhere``: the workspace's other task folders, each
        with its suite's name (watched as well); ``stranger(name)``: what to say of a folder of no task."""
        self.kernels_dir = Path(kernels_dir)
        self.elsewhere = dict(elsewhere or {})
        self.task_ids = set(task_ids) | set(self.elsewhere)
        self._stranger = stranger
        self._strangers_told: set[str] = set()
        self._verify = verify
        self.bus = bus
        self.quiet_ms = quiet_ms          # a burst ends after this long without a write
        self.debounce_ms = debounce_ms    # ... or after this long in all
        self._last: dict[str, str] = {}          # task -> hash last verified (or seen)
        self._pending: dict[str, bool] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self.stop_event = asyncio.Event()
        self.ready = asyncio.Event()              # set once the watch is in place

    def task_of(self, path: Path) -> str | None:
        """The task a changed path belongs to: kernels/<task>/<file>, or a file in a sub-folder of it (a
        custom-op project's op_host/...), not in best/, not hidden; or the folder kernels/<task> itself: a
        folder that arrives with its files (moved in, or made and written at once) is heard only as the
        folder, its files landing before any watch on it."""
        try:
            rel = Path(path).resolve().relative_to(self.kernels_dir.resolve())
        except ValueError:
            return None
        if (not rel.parts or any(p.startswith(".") for p in rel.parts) or rel.parts[0] not in self.task_ids
                or (len(rel.parts) > 1 and rel.parts[1] == "best")):
            return None
        return rel.parts[0]

    def remember(self, task_id: str) -> None:
        """Treat the folder's current content as seen (no verification for it), unless it is a save whose
        verification did not finish (the workbench closed during it): that one is verified once the
        watch is in place."""
        folder = self.kernels_dir / task_id
        digest = files_hash(read_candidate_files(folder))
        if digest != pending_in(folder):
            self._last[task_id] = digest

    def remember_all(self) -> None:
        """Take what every task folder holds now as seen: saves after this are edits. Call it before
        the workbench shows the tasks, so a save made as soon as they show is never taken as seen."""
        self.kernels_dir.mkdir(parents=True, exist_ok=True)
        for task_id in self.task_ids:
            if (self.kernels_dir / task_id).is_dir():
                self.remember(task_id)
        self._remembered = True

    async def run(self) -> None:
        """Watch until ``stop_event`` is set."""
        from watchfiles import Change, awatch

        if not getattr(self, "_remembered", False):
            self.remember_all()
        started = False
        async for changes in awatch(self.kernels_dir, debounce=self.debounce_ms, step=self.quiet_ms,
                                    stop_event=self.stop_event, recursive=True, yield_on_timeout=True,
                                    rust_timeout=1000):
            if not started:
                # The first wake-up (a change or a quiet second) means the watch is in place: saves
                # made between ``remember_all`` and now were not seen by it, so compare the folders.
                started = True
                self.ready.set()
                changes = changes | {(Change.modified, str(self.kernels_dir / t / "*")) for t in self.task_ids
                                     if (self.kernels_dir / t).is_dir()}   # the change kind is not read
            for task_id in {t for _, p in changes if (t := self.task_of(Path(p)))}:
                self.changed(task_id)
            self._tell_strangers(changes)
        for task in list(self._running.values()):
            await task

    def _tell_strangers(self, changes: Iterable[tuple[object, str]]) -> None:
        """A save in kernels/<name>/ where no task has that name: said once per folder, never silent."""
        if self._stranger is None:
            return
        root = self.kernels_dir.resolve()
        for _, p in changes:
            try:
                rel = Path(p).resolve().relative_to(root)
            except ValueError:
                continue
            name = rel.parts[0] if rel.parts else ""
            # a file in it, or the folder itself: one that arrives with its files is heard only as the folder
            heard = len(rel.parts) > 1 or (self.kernels_dir / name).is_dir()
            if (not heard or not name or name.startswith(".") or name in self.task_ids
                    or name in self._strangers_told or rel.parts[-1].startswith(".")):
                continue
            self._strangers_told.add(name)
            self.bus.emit(ev.Notice(self._stranger(name)))

    def changed(self, task_id: str) -> None:
        """A save happened in ``task_id``'s folder: verify it now, or after the one in flight."""
        if task_id in self._running:
            self._pending[task_id] = True
            return
        self._running[task_id] = asyncio.create_task(self._settle(task_id))

    async def _settle(self, task_id: str) -> None:
        try:
            while True:
                self._pending[task_id] = False
                folder = self.kernels_dir / task_id
                files = read_candidate_files(folder)
                digest = files_hash(files)
                if files and digest != self._last.get(task_id) and digest != engine_wrote(folder):
                    self._last[task_id] = digest
                    # a note already there for this very save: an earlier session's, cut short (this
                    # watcher's own notes go when their verdicts are in; it verifies one save at a time)
                    resumed = digest == pending_in(folder)
                    self.bus.emit(ev.EditDetected(task_id, tuple(sorted(files)), resumed=resumed,
                                                  suite=self.elsewhere.get(task_id, "")))
                    note_pending(folder, digest)
                    judged = True
                    try:
                        recorded = await self._verify(task_id, files, parent_of_edit(folder))
                        if isinstance(recorded, str):   # the attempt it became: the next save's parent
                            note_edit(folder, files, recorded)
                    except SavedElsewhere as where:
                        # not verifiable here: said, and the pending note stays for an opening that can
                        self.bus.emit(ev.Notice(str(where), task=task_id))
                        judged = False
                    except Exception as exc:  # noqa: BLE001 - shown to the user, the watcher goes on
                        self.bus.emit(ev.EngineProblem(f"verifying the edit of {task_id} failed: {exc}", task=task_id))
                    # recorded, or failed with a message: either way it has its outcome. A cancelled
                    # verification (the workbench closing) never gets here and keeps its note.
                    if judged and pending_in(folder) == digest:
                        clear_pending(folder)
                if not self._pending.get(task_id):
                    return
        finally:
            self._running.pop(task_id, None)
