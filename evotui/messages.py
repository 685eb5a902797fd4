"""The workbench's messages: what the engine host, the workers and the widgets tell the screens and
the app. Each is a small dataclass; the high-rate ones (gate progress, token counts, loaded panes)
set ``can_replace`` so a burst never floods the queue: a newer message of the same kind replaces
an older one still waiting.

Widgets post messages and the screens or the app decide what happens (no widget touches the
session); screens ask the app for what to show with ``Read*`` requests and never call it. Threads post
with ``post_message``, which is thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.message import Message
from textual.message_pump import MessagePump

from core import events as ev
from core.attempts import AttemptLine, Outcome, TaskRow


@dataclass(eq=False)
class WorkbenchMessage(Message):
    """Base class: a dataclass message (Textual's ``Message.__post_init__`` does its bookkeeping)."""


# -- from the engine host ---------------------------------------------------------------------------


@dataclass(eq=False)
class WorkspaceOpened(WorkbenchMessage):
    """The session is open: the suite's tasks, the model (or why there is none)."""

    name: str
    backend: str
    model: str
    tasks: list[TaskRow]
    llm_problem: str | None
    resumable: Any = None        # the latest interrupted run (a RunRecord), which r resumes
    recent: list[Any] = field(default_factory=list)   # the latest attempts, newest last: (Experience, its #n) pairs


@dataclass(eq=False)
class WorkspaceFailed(WorkbenchMessage):
    """The session could not open (a broken config or suite): one line for the user."""

    message: str


@dataclass(eq=False)
class EngineEvent(WorkbenchMessage):
    """A core event (``core.events``), forwarded from the engine's thread as it was emitted."""

    event: ev.Event

    def can_replace(self, message: Message) -> bool:
        if not isinstance(message, EngineEvent):
            return False
        new, old = self.event, message.event
        if isinstance(new, ev.UsageUpdated) and isinstance(old, ev.UsageUpdated):
            return True      # totals: the newest says all
        if isinstance(new, ev.GateChecked) and isinstance(old, ev.GateChecked):
            return (new.task, new.iteration) == (old.task, old.iteration)   # live status of one attempt
        if isinstance(new, ev.AnswerProgress) and isinstance(old, ev.AnswerProgress):
            return new.task == old.task      # a call's wait: the newest says all
        return False


@dataclass(eq=False)
class RunRefused(WorkbenchMessage):
    """A run could not start; ``reason`` says what to configure or what is wrong. ``finished``: the run to resume
    has finished meanwhile (another process ran it to its end)."""

    reason: str
    finished: bool = False


# -- from widgets -----------------------------------------------------------------------------------


@dataclass(eq=False)
class TaskHighlighted(WorkbenchMessage):
    """The task table's cursor is on ``task_id``."""

    task_id: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TaskHighlighted)


@dataclass(eq=False)
class StatusesDrawn(WorkbenchMessage):
    """The task table drew new statuses of ``task_ids`` (a batch)."""

    task_ids: tuple[str, ...]


@dataclass(eq=False)
class AttemptHighlighted(WorkbenchMessage):
    """The attempt tree's cursor is on ``exp_id`` of ``task_id``."""

    task_id: str
    exp_id: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AttemptHighlighted)


@dataclass(eq=False)
class ExperienceHighlighted(WorkbenchMessage):
    """The memory list's cursor is on ``exp_id``."""

    exp_id: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ExperienceHighlighted)


@dataclass(eq=False)
class RelativeChosen(WorkbenchMessage):
    """``exp_id`` (a parent or child of the experience shown) was chosen in the detail pane: show it."""

    exp_id: str


# -- from the screens to the app: what to read (the app's readers answer ``reply_to`` with a *Loaded) ---


@dataclass(eq=False)
class PanesDrawn(WorkbenchMessage):
    """The main screen is drawn: the app opens the session now, so its data arrives once every pane is up."""


@dataclass(eq=False)
class ReadRequest(WorkbenchMessage):
    """Base class: a screen asks the app to read something from the memory; the answer goes to ``reply_to``."""

    reply_to: MessagePump


@dataclass(eq=False)
class ReadAttempts(ReadRequest):
    """The attempt tree of ``task_id`` and the attempt shown first (answered by ``AttemptsLoaded``)."""

    task_id: str


@dataclass(eq=False)
class ReadAttempt(ReadRequest):
    """One attempt and its parent (answered by ``AttemptLoaded``)."""

    exp_id: str


@dataclass(eq=False)
class ReadAnswer(ReadRequest):
    """The model's raw answer that gave attempt ``exp_id`` (answered by ``AnswerLoaded``)."""

    exp_id: str


@dataclass(eq=False)
class ReadAssembly(ReadRequest):
    """The hot loops' assembly of attempt ``exp_id``, built as verified (answered by ``AssemblyLoaded``)."""

    exp_id: str


@dataclass(eq=False)
class ReadMemory(ReadRequest):
    """A page of the memory browser's list: its filters, order and search (answered by ``MemoryLoaded``)."""

    filters: dict[str, str | None]
    sort: str
    search: str = ""      # words every shown experience's title or code holds


@dataclass(eq=False)
class ReadExperience(ReadRequest):
    """One experience in full for the memory browser's detail (answered by ``ExperienceLoaded``)."""

    exp_id: str


# -- from workers -----------------------------------------------------------------------------------


@dataclass(eq=False)
class TaskRowsLoaded(WorkbenchMessage):
    """Fresh task rows from the store (after a run starts or ends)."""

    rows: list[TaskRow]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TaskRowsLoaded)


@dataclass(eq=False)
class AttemptsLoaded(WorkbenchMessage):
    """The attempts of ``task_id`` as a tree, ready to show, with the one shown first (the best,
    else the newest: ``core.attempts.default_attempt``) and its parent, so both panes draw at once."""

    task_id: str
    lines: list[AttemptLine]
    first: Any = None
    first_parent: Any = None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AttemptsLoaded)


@dataclass(eq=False)
class AttemptLoaded(WorkbenchMessage):
    """One attempt with its files, and its parent for the diff (``None`` for a root)."""

    exp: Any
    parent: Any

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AttemptLoaded)


@dataclass(eq=False)
class AnswerLoaded(WorkbenchMessage):
    """The model's raw answer that gave attempt ``exp_id`` (None: a hand edit, or no longer cached)."""

    exp_id: str
    text: str | None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AnswerLoaded)


@dataclass(eq=False)
class AssemblyLoaded(WorkbenchMessage):
    """The hot loops of attempt ``exp_id`` in words and instructions (``core.inspection.assembly``)."""

    exp_id: str
    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AssemblyLoaded)


@dataclass(eq=False)
class VerifyFinished(WorkbenchMessage):
    """A re-verification (nothing recorded) ended with ``outcome``."""

    task_id: str
    label: str
    outcome: Outcome


@dataclass(eq=False)
class Promoted(WorkbenchMessage):
    """An attempt's files were put in ``folder`` (kernels/<task>/)."""

    task_id: str
    exp_id: str
    folder: Path


@dataclass(eq=False)
class MemoryLoaded(WorkbenchMessage):
    """A page of the memory: summaries (dicts of ``core.memory.summary``) and the total matching."""

    items: list[dict[str, Any]]
    total: int
    filters: dict[str, str | None] = field(default_factory=dict)
    sort: str = "recency"
    search: str = ""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MemoryLoaded)


@dataclass(eq=False)
class ExperienceLoaded(WorkbenchMessage):
    """One experience in full, for the memory browser's detail pane: with its ``#n`` among its task's
    attempts (None for knowledge), its parent's and children's summaries (``core.memory.summary``) and what was
    decided about it, and why (``core.memory.decisions``: its parent, reward, the values it moved, the best)."""

    exp: Any
    number: int | None = None
    parent: dict[str, Any] | None = None
    children: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[tuple[str, str]] = field(default_factory=list)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ExperienceLoaded)


# -- from the app -----------------------------------------------------------------------------------


@dataclass(eq=False)
class ThemeChanged(WorkbenchMessage):
    """The theme is now ``name`` (and remembered for this workspace)."""

    name: str


@dataclass(eq=False)
class RunStateChanged(WorkbenchMessage):
    """The run state shown in the header changed (idle, starting, running, pausing, paused, ...)."""

    state: str
    run_id: str | None = None
