"""The engine's home inside the workbench: a background thread running its own asyncio event loop.

The Session (store, verifier, LLM client, engine) is opened there, runs and the edit watcher live
there, and every core event is forwarded to the app as an ``EngineEvent`` message the moment it is
emitted. The app never waits on this loop: it submits coroutines with ``submit`` (which returns a
``concurrent.futures.Future``) and awaits them from its own workers with ``call``.

The lazy parts of the Session (verifier, LLM client, engine) are only ever touched from this loop's
thread, so they are created once. Store reads for the panes go through the Session's read-only
views, which are safe from any thread (the app's thread workers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from textual.message import Message

from core import events as ev
from core.attempts import Outcome
from core.errors import LLMError
from core.workspace import Workspace
from evotui.messages import EngineEvent, WorkspaceFailed, WorkspaceOpened

if TYPE_CHECKING:
    from pathlib import Path

    from core.attempts import Experience, RunRecord
    from core.config import Config
    from core.session import Session
    from core.watcher import EditWatcher

T = TypeVar("T")

RESUMABLE = ("running", "stopped", "failed")
"""Statuses of a latest run that the workbench offers to resume (running: it was killed)."""

RECENT = 12   # attempts the log shows again after a restart


def recent_attempts(store: Any, limit: int = RECENT) -> list[tuple[Experience, int | None]]:
    """The latest attempt of every task and the ``limit`` latest overall, oldest first, each with its
    ``#n`` in its task's tree: what the task statuses and the log showed before the workbench was closed."""
    from core.attempts import ATTEMPT_KINDS, attempt_numbers

    exps = [e for kind in ATTEMPT_KINDS for e in store.iter_experiences(kind=kind)]
    exps.sort(key=lambda e: (e.created_at, e.id))
    latest = {e.task_id: e for e in exps}
    keep = {e.id for e in exps[-limit:]} | {e.id for e in latest.values()}
    kept = [e for e in exps if e.id in keep]
    numbers = attempt_numbers(store, {e.task_id for e in kept})
    return [(e, numbers.get(e.id)) for e in kept]


SessionFactory = Callable[["Workspace", "Config | None", ev.EventBus], "Session"]
"""What opens the session on the engine's thread: ``Session`` itself, or a test's (the canned verifier)."""


def open_session(workspace: Workspace, config: Config | None, bus: ev.EventBus) -> Session:
    """The real session: the verifier and the model the configuration names."""
    from core.session import Session

    return Session(workspace, config, bus=bus)


class EngineHost:
    """Owns the Session and its event loop thread; ``post`` delivers messages to the app."""

    def __init__(self, workspace: Workspace, post: Callable[[Message], Any], *, watch: bool = True,
                 config: Config | None = None, session_factory: SessionFactory = open_session):
        self.workspace = workspace
        self.config = config    # the workspace's settings with the command line's overrides
        self._open_session = session_factory
        self._post = post
        self._watch = watch
        self.session: Session | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._watcher: EditWatcher | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._run: concurrent.futures.Future[RunRecord] | None = None
        self._stop_sizing = threading.Event()
        self._sizer: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; the session opens there and ``WorkspaceOpened`` (or ``WorkspaceFailed``) follows."""
        self._thread = threading.Thread(target=self._main, name="evokernel-engine", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        # This thread keeps the interface's priority. It once lowered its own, which every process it
        # started inherited for good (nice cannot be raised back without privileges): the fork server
        # and every timed run then yielded to any other process on the machine. What keeps keys quick
        # now is that the work filling the cores (compilers, correctness trials, probes) runs at lower
        # priority, and timed runs at normal priority, alone (verifier.priority, verifier.machine.lock).
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.create_task(self._open())
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def _open(self) -> None:
        try:
            bus = ev.EventBus()
            bus.subscribe(self._forward)
            self.session = self._open_session(self.workspace, self.config, bus)
            rows = await asyncio.to_thread(self.session.task_rows)
            problem = self.session.llm_problem()
            last = self.session.latest_run()
            resumable = last if last is not None and last.status in RESUMABLE else None
            recent = await asyncio.to_thread(recent_attempts, self.session.store)
            if self._watch:   # what kernels/ holds now is seen; saves from here on are edits
                watcher = self._watcher = self.session.edit_watcher()
                await asyncio.to_thread(watcher.remember_all)
        except Exception as exc:  # noqa: BLE001 - a broken config or suite is shown, not raised
            self._post(WorkspaceFailed(str(exc)))
            return
        config = self.session.config
        self._post(WorkspaceOpened(name=self.workspace.root.name, backend=config.backend,
                                   model=config.llm.model or "", tasks=rows, llm_problem=problem,
                                   resumable=resumable, recent=recent))
        if self._watcher is not None:
            self._watch_task = asyncio.create_task(self._watch_edits())
        if config.size_scale == "auto":   # the tasks not sized yet, in the background: the workbench never waits
            self._sizer = threading.Thread(target=self._size, name="evokernel-sizing", daemon=True)
            self._sizer.start()

    def _size(self) -> None:
        """``Session.size_unsized`` on a thread of its own (a probe takes seconds to minutes), its progress posted
        as events; stopped between tasks when the workbench closes (the probe in flight ends with the session)."""
        session = self.session
        if session is None:
            return

        def progress(done: int, total: int, task: str, said: str, category: str) -> None:
            self._forward(ev.SizingProgress(done, total, task, said, category))

        try:
            session.size_unsized(progress, self._stop_sizing)
        except Exception as exc:  # noqa: BLE001 - sizing stops, the workbench goes on; said in the log
            if not self._stop_sizing.is_set():
                self._forward(ev.EngineProblem(f"sizing the tasks in the background stopped: {exc}"))

    async def _watch_edits(self) -> None:
        assert self._watcher is not None, "started only with a watcher"
        try:
            await self._watcher.run()
        except Exception as exc:  # noqa: BLE001 - hand edits stop being watched; the rest goes on
            self._forward(ev.EngineProblem(f"watching kernels/ stopped: {exc}"))

    def _forward(self, event: ev.Event) -> None:
        self._post(EngineEvent(event))

    def close(self, timeout: float = 20.0) -> None:
        """Stop the run (it stays resumable) and the watcher, close the session, end the thread."""
        if self.loop is None or self._thread is None or not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)

    async def _close(self) -> None:
        """Quitting never waits on work in flight (a verification, a run's attempts): it is abandoned, and
        nothing of it is recorded. A run stays resumable; a save being verified keeps its pending note and is
        verified at the next start (core.watcher). The verifier closes first, so the sandboxes and the
        timing processes end at once, and nothing records what their ending did to a verification."""
        self._stop_sizing.set()
        if self._run is not None and not self._run.done():
            if self.session is not None:
                self.session.stop_run()
            self._run.cancel()
        if self._watcher is not None:
            self._watcher.stop_event.set()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=2)
        if self.session is not None:
            await self.session.close_async()
            await asyncio.to_thread(self.session.close)

    @property
    def opened(self) -> Session:
        """The session, once ``WorkspaceOpened`` has been posted (it raises while the workspace opens)."""
        if self.session is None:
            raise RuntimeError("the workspace is still opening")
        return self.session

    # -- work submitted by the app ------------------------------------------------------------------

    def submit(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Run the coroutine ``fn()`` on the engine's loop."""
        if self.loop is None:
            raise RuntimeError("the engine host is not started")
        return asyncio.run_coroutine_threadsafe(fn(), self.loop)

    async def call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """From another event loop: run ``fn()`` on the engine's loop and await its result."""
        return await asyncio.wrap_future(self.submit(fn))

    async def run(self, task_ids: list[str] | None = None, resume_id: str | None = None) -> RunRecord:
        """Start a run over ``task_ids`` (all of the suite when None), or resume run ``resume_id``.
        Returns the finished RunRecord; raises LLMError (what to configure) without an endpoint."""
        future = self.submit(lambda: self._start_run(task_ids, resume_id))
        self._run = future
        return await asyncio.wrap_future(future)

    async def _start_run(self, task_ids: list[str] | None, resume_id: str | None) -> RunRecord:
        session = self.session
        if session is None:
            raise LLMError("the workspace is still opening")
        taken, restart = session.reload_config()   # evokernel.toml as it is now (a ConfigError refuses the run)
        if taken or restart:
            session.bus.emit(ev.ConfigReloaded(tuple(taken), tuple(restart)))
        problem = session.llm_problem()
        if problem:
            raise LLMError(problem)
        session.reset_engine()
        if resume_id is not None:
            return await session.resume(session.find_run(resume_id))
        tasks = await asyncio.to_thread(session.tasks, task_ids)   # under auto, sized first: off this loop
        return await session.run(tasks, method="evokernel", iterations=None, suite=None, scale=None)

    def stop_run(self) -> None:
        """Ask the run to stop after the attempts in flight (it ends "stopped" and can be resumed)."""
        if self.loop is not None and self.session is not None:
            self.loop.call_soon_threadsafe(self.session.stop_run)

    async def verify(self, task_id: str, files: dict[str, str]) -> Outcome:
        """Verify files for a task without recording anything; what the verifier found."""
        async def go() -> Outcome:
            session = self.opened
            _ = session.verifier      # created here, on this loop's thread, never in a worker
            return await asyncio.to_thread(session.verify_files, task_id, files)

        return await self.call(go)

    async def task_folder(self, task_id: str) -> Path:
        """kernels/<task>/, seeded with the best attempt or a starter candidate when empty."""
        async def go() -> Path:
            return await asyncio.to_thread(self.opened.task_folder, task_id)

        return await self.call(go)

    async def promote(self, exp_id: str) -> Path:
        """Put an attempt's files in kernels/<task>/; returns the folder."""
        async def go() -> Path:
            return await asyncio.to_thread(self.opened.promote, exp_id)

        return await self.call(go)
