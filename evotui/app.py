"""The workbench app. ``make_app`` builds it for the CLI and the tests alike.

The app owns the engine host (the Session on its own thread), the run state shown in the header and
the theme; screens own their panes. Core events arrive as ``EngineEvent`` messages and are handed to
the main screen in order. Readers (``evotui.readers``) and commands (``evotui.run_control``) are
mixed in from their own modules.
"""

from __future__ import annotations

import asyncio
import functools
import gc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from core import events as ev
from core.attempts import Experience, outcome_of
from core.config import Config
from core.errors import EvoKernelError
from core.workspace import Workspace
from evotui import appearance, keys
from evotui.engine_host import EngineHost, SessionFactory, open_session
from evotui.messages import (
    EngineEvent,
    PanesDrawn,
    RunStateChanged,
    ThemeChanged,
    WorkspaceFailed,
    WorkspaceOpened,
)
from evotui.preferences import Preferences
from evotui.readers import Readers
from evotui.run_control import RunControl
from evotui.screens.first_run import FirstRunScreen
from evotui.screens.main import MainScreen
from evotui.screens.memory import MemoryScreen
from evotui.widgets import marks
from evotui.widgets.marks import plural
from evotui.widgets.run_header import RunStatus
from evotui.widgets.task_table import TaskTable

# A run's end status -> the state shown; "paused" and "failed" runs are resumed by r.
KEEP = object()
FINISHED_STATE = {"finished": "finished", "stopped": "paused", "failed": "failed", "budget": "budget spent"}


class EvoKernelApp(RunControl, Readers, App[None]):
    """The EvoKernel workbench on one workspace."""

    TITLE = "EvoKernel"
    CSS_PATH = appearance.css_paths()
    BINDINGS = keys.bindings("app")

    run_status: reactive[RunStatus] = reactive(RunStatus, init=False)

    def __init__(self, workspace: Workspace, config: Config, *, created: list[str] | None = None, watch: bool = True,
                 session_factory: SessionFactory = open_session) -> None:
        super().__init__()
        self.workspace = workspace
        self.created = list(created or [])
        self.prefs = Preferences.load(workspace.state_dir)
        self.config = config
        self.host = EngineHost(workspace, self.post_message, watch=watch, config=config,
                               session_factory=session_factory)
        self.main = MainScreen()
        self._memory: MemoryScreen | None = None
        self._before_start: tuple[str, str | None] = ("idle", None)
        self._theme_ready = False
        self.open_problem: str | None = None     # why the workspace could not be opened
        for theme in appearance.textual_themes():
            self.register_theme(theme)
        names = appearance.theme_names()
        wanted = self.prefs.theme or self.config.theme
        self.theme = appearance.full_name(wanted if wanted in names else names[0])   # before any pane draws
        self._theme_ready = True
        self.set_reactive(EvoKernelApp.run_status, RunStatus(workspace=workspace.root.name,
                                                             backend=self.config.backend,
                                                             model=self.config.llm.model or ""))

    def get_default_screen(self) -> Screen[None]:
        return self.main

    def on_mount(self) -> None:
        if self.created:
            ready = bool(self.config.llm.base_url and self.config.llm.model)
            self.push_screen(FirstRunScreen(str(self.workspace.root), self.created, ready, suite=self.config.suite,
                                            size_scale=self.config.size_scale, backend=self.config.backend))

    def on_panes_drawn(self, message: PanesDrawn) -> None:
        """Open the session in the background, once the main screen is drawn."""
        if self.host.loop is None:
            self.host.start()

    async def on_unmount(self) -> None:
        await asyncio.to_thread(self.host.close)

    # -- run state ----------------------------------------------------------------------------------

    def set_run_state(self, state: str, run_id: str | None | object = KEEP, **changes: Any) -> None:
        """The run state in the header (and a ``RunStateChanged`` message); the run id stays unless given."""
        self.run_status = self.run_status.but(state=state, run_id=self.run_status.run_id if run_id is KEEP else run_id,
                                              **changes)
        self.post_message(RunStateChanged(state, self.run_status.run_id))

    def on_workspace_opened(self, message: WorkspaceOpened) -> None:
        # What is loaded by now (PyTorch, the suite, the store) lives as long as the app: keep it out
        # of the collector's full passes, which would otherwise stall the interface for ~0.2 s each.
        gc.freeze()
        self.run_status = self.run_status.but(state="idle", model=message.model, backend=message.backend,
                                              llm_ok=message.llm_problem is None)
        self.main.suite = marks.suite_name(self.config.suite, self.config.size_scale)
        self.main.show_tasks(message.tasks)
        llm = (f"model {message.model} at {self.host.opened.config.llm.base_url}" if message.llm_problem is None
               else message.llm_problem)
        suite = marks.suite_name(self.config.suite, self.config.size_scale, full=True)
        self.main.note(f"workspace {message.name}: {plural(len(message.tasks), 'task')} of {suite}, "
                       f"{message.backend} backend"
                       f" · {llm}",
                       "" if message.llm_problem is None else "warn")
        self._restore(message.recent)
        run = message.resumable
        if run is not None:
            self.set_run_state("paused", run.id, iteration=run.iteration, iterations=run.config.get("iterations"),
                               tokens=run.tokens_in + run.tokens_out, cost=run.cost)
            self.main.note(f"run {run.id} ({plural(len(run.tasks), 'task')}) did not finish ({run.status}): "
                           "r resumes it")

    def _restore(self, recent: list[tuple[Experience, int | None]]) -> None:
        """After a restart: each task's status is its latest attempt's verdict, and the log lists the
        latest attempts again, at the time they were made."""
        table = self.main.query_one("#tasks", TaskTable)
        for exp, number in recent:
            result = outcome_of(exp)
            human = exp.source == "human"
            verdict = marks.verdict(result)
            table.set_status(exp.task_id, f"{marks.attempt_label(number, human)} {verdict}",
                             "ok" if result.feasible else "fail")
            who = marks.attempt_label(number, human, exp.stage)
            short = marks.short_verdict(result) if not result.feasible else verdict
            self.main.note(f"earlier: {exp.task_id} {who}: {short}", "dim", exp.created_at)

    def on_workspace_failed(self, message: WorkspaceFailed) -> None:
        self.open_problem = message.message
        self.run_status = self.run_status.but(state="unavailable")
        self.main.note(f"cannot open the workspace: {message.message}", "fail")
        self.main.show_unavailable(message.message)
        self.notify(message.message, title="Cannot open the workspace", severity="error", timeout=30, markup=False)

    def on_engine_event(self, message: EngineEvent) -> None:
        e = message.event
        if isinstance(e, ev.RunStarted):
            gc.freeze()   # the LLM client and the sandbox's modules are loaded now too
            self.set_run_state("running", e.run_id, model=e.model, iteration=None, iterations=e.iterations)
            self.load_task_rows(self.main)
        elif isinstance(e, ev.IterationStarted):
            self.run_status = self.run_status.but(iteration=e.iteration)
        elif isinstance(e, ev.ClusterChanged):
            self.run_status = self.run_status.but(cluster=e.address, nodes=e.nodes, cluster_waiting=e.waiting)
        elif isinstance(e, ev.UsageUpdated):
            self.run_status = self.run_status.but(tokens=e.tokens_in + e.tokens_out, cost=e.cost)
        elif isinstance(e, ev.SizingProgress):
            self.run_status = self.run_status.but(sizing=f"sizing {e.done}/{e.total}" if e.done < e.total else "")
        elif isinstance(e, ev.RunFinished):   # a forgotten run (nothing recorded) is no run for r to resume
            self.set_run_state(FINISHED_STATE.get(e.status, e.status), None if e.forgotten else e.run_id)
            self.load_task_rows(self.main)
        self.main.apply_event(e)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failed worker ends up: a notification and a line in the log, never a crash."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        text = str(error) if isinstance(error, EvoKernelError) else f"{type(error).__name__}: {error}"
        if event.worker.group == "run":
            self.set_run_state("failed")
        self.main.note(f"{event.worker.name} failed: {text}", "fail")
        self.notify(text, title=f"{event.worker.name} failed", severity="error", timeout=10, markup=False)

    # -- screens and themes -------------------------------------------------------------------------

    def action_memory(self) -> None:
        """m: the memory browser (m or escape again goes back)."""
        if isinstance(self.screen, MemoryScreen):
            self.pop_screen()
            return
        if self.unavailable("browse the memory"):
            return
        if self._memory is None:
            self._memory = MemoryScreen(list(self.main.tasks))
            self.install_screen(self._memory, name="memory")
        else:
            self._memory.action_refresh()
        self.push_screen("memory")

    def action_next_theme(self) -> None:
        """t: the next theme of themes/ (remembered for this workspace)."""
        names = appearance.theme_names()
        current = appearance.short_name(self.theme)
        self.theme = appearance.full_name(names[(names.index(current) + 1) % len(names)] if current in names
                                          else names[0])

    def watch_theme(self, name: str) -> None:
        if not self._theme_ready:
            return
        self.prefs.theme = appearance.short_name(name)
        try:
            self.prefs.save(self.workspace.state_dir)
        except OSError as exc:
            self.notify(f"could not remember the theme: {exc}", severity="warning")
        self.post_message(ThemeChanged(self.prefs.theme))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Textual's own theme picker lists every built-in theme; ours switches between themes/ only
        yield from (c for c in super().get_system_commands(screen) if c.title != "Theme")
        for key in keys.commands():   # every key that is a command, titled with its key
            yield SystemCommand(keys.command_title(key), key.command_help, functools.partial(self.run_key, key))

    async def run_key(self, key: keys.Key) -> None:
        """What pressing ``key`` does, wherever the palette was opened: its action in its owner's namespace."""
        owner = self if key.owner == "app" else self.main.query_one("#tasks") if key.owner == "tasks" else self.main
        await self.run_action(key.action, owner)


def make_app(workspace_path: str | Path, *, created: list[str] | None = None, watch: bool = True,
             suite: str | None = None, size_scale: float | str | None = None, config: Config | None = None,
             session_factory: SessionFactory = open_session) -> EvoKernelApp:
    """The workbench on the workspace at ``workspace_path`` (which must exist: see ``Workspace.init``).

    ``created`` lists what was just created (it shows the first-run screen); ``watch=False`` turns off
    re-verifying saves in kernels/ (for screenshots); ``suite`` and ``size_scale`` override the
    workspace's settings for this session (``evokernel ui --suite --size-scale``, as ``run`` takes).
    ``config`` replaces the workspace's settings whole; ``session_factory`` opens the session on the engine's
    thread (default: the real one; tests pass one with the canned verifier and a scripted model)."""
    workspace = Workspace(Path(workspace_path).resolve())
    overrides = {k: v for k, v in (("suite", suite), ("size_scale", size_scale)) if v is not None}
    settings = (config or workspace.config()).model_copy(update=overrides)
    return EvoKernelApp(workspace, settings, created=created, watch=watch, session_factory=session_factory)
