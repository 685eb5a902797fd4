"""Typed engine events. The headless reporter and the workbench consume the same stream.

Subscribers are plain callables invoked in the engine's event loop thread, in emission order; they
must be quick (the TUI posts a message, the reporter updates a table). A subscriber that raises is
counted in ``EventBus.dropped`` and otherwise ignored: it never stops the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from verifier import Outcome


@dataclass(frozen=True)
class Event:
    """Base class; ``at`` is a wall-clock timestamp."""

    at: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {"event": type(self).__name__, **asdict(self)}


@dataclass(frozen=True)
class RunStarted(Event):
    run_id: str
    method: str
    tasks: tuple[str, ...]
    iterations: int
    model: str
    backend: str
    resumed: bool = False
    limits: str = ""      # the model's context and answer budget, requests at once, and where each was read


@dataclass(frozen=True)
class IterationStarted(Event):
    run_id: str
    iteration: int
    active_tasks: int


@dataclass(frozen=True)
class TaskStageChanged(Event):
    task: str
    stage: str            # "draft" | "refine" | "done"


@dataclass(frozen=True)
class PromptSent(Event):
    task: str
    iteration: int
    stage: str
    context_ids: tuple[str, ...]
    start_point: str | None = None
    chars: int = 0


@dataclass(frozen=True)
class AnswerProgress(Event):
    """A model call in flight, about once a second: ``sent`` False while it waits for a free request slot
    (``[llm] concurrency``), else the seconds since it was sent and the answer tokens received so far."""

    task: str
    iteration: int
    seconds: float
    tokens: int = 0
    sent: bool = True


@dataclass(frozen=True)
class CallRetried(Event):
    """A model call failed in a way that may pass (a silence past ``[llm] timeout_s``, a dropped connection, a
    429 or 5xx): ``reason`` in the client's words, and try ``next_try`` of ``tries`` comes after ``wait_s``."""

    task: str
    iteration: int
    reason: str
    next_try: int
    tries: int
    wait_s: float


@dataclass(frozen=True)
class PromptFitted(Event):
    """What a prompt left out to fit the model's context beside its answer budget (``left_out`` in words), and the
    answer budget it was sent with; emitted only when something was left out or the budget is below
    ``[llm] max_tokens``."""

    task: str
    iteration: int
    left_out: tuple[str, ...]
    max_tokens: int
    prompt_tokens: int


@dataclass(frozen=True)
class ResponseReceived(Event):
    task: str
    iteration: int
    tokens_in: int
    tokens_out: int
    cost: float
    seconds: float
    cached: bool
    files: tuple[str, ...] = ()
    problem: str = ""      # why the answer held no usable candidate ("" if it did)


@dataclass(frozen=True)
class GateChecked(Event):
    task: str
    iteration: int
    gate: str
    status: str
    message: str


@dataclass(frozen=True)
class AttemptRecorded(Event):
    """An attempt committed: what the verifier found is its ``outcome``, the same record the store keeps
    (verifier.outcome.Outcome: feasibility, the failing gate and why, latencies, paired ratios with their
    intervals and verdicts), never a copy of some of its fields."""

    task: str
    iteration: int
    experience_id: str
    parent_id: str | None
    stage: str
    source: str
    outcome: Outcome
    reward: float
    new_best: bool = False
    duplicate: bool = False   # the answer repeated an attempt already in memory (same normalised code)
    replaced_ms: float | None = None    # the best's own time, from the window it was verified in
    slip: bool = False        # a hand edit that failed to build or the format gate: a typo, not an experiment
    number: int | None = None   # its #n among the task's attempts, as the attempt tree numbers it (a repeat: the
                                # attempt it repeats); the iteration is the run's, a different count
    reason: str = ""          # why the reward is what it is, in words (core.policy.reward_reason), said once here
    not_judged: str = ""      # why the tool, not the kernel, failed its verification (twice): no verdict, no reward
    probe: bool = False       # a person's save marked as a probe (core.policy.PROBE_MARK): recorded, teaches nothing

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "outcome": self.outcome.to_dict()}


@dataclass(frozen=True)
class EditDetected(Event):
    """A person saved a candidate in kernels/<task>/; it is being verified. ``resumed``: the save was
    made in an earlier session, whose verification of it did not finish (the workbench closed). ``suite``:
    the task's suite when it is not the one the workbench shows (another suite's folder of this workspace)."""

    task: str
    files: tuple[str, ...]
    resumed: bool = False
    suite: str = ""


@dataclass(frozen=True)
class SizingProgress(Event):
    """``--size-scale auto`` sizing the suite's tasks in the background (``Session.size_unsized``): ``done`` of
    ``total`` sized so far, the last one ``task`` and what it came to (``said``: its reference's time, or why it
    could not be sized), its category from the operators its forward ran. ``total`` 0: nothing left to size."""

    done: int
    total: int
    task: str = ""
    said: str = ""
    category: str = ""


@dataclass(frozen=True)
class Notice(Event):
    """Something the user should know that is no problem: a save in a folder of no task, where it belongs
    and how to open that suite; two keys of one task merged into one history."""

    message: str
    task: str | None = None


@dataclass(frozen=True)
class ValuesUpdated(Event):
    task: str
    stage: str
    reward: float
    changes: tuple[tuple[str, float, float], ...]   # (experience id, Q before, Q after)


@dataclass(frozen=True)
class BudgetSpent(Event):
    task: str
    iterations: int


@dataclass(frozen=True)
class UsageUpdated(Event):
    tokens_in: int
    tokens_out: int
    cost: float


@dataclass(frozen=True)
class EngineProblem(Event):
    """Something went wrong that the user should see (an endpoint down, a broken task)."""

    message: str
    task: str | None = None
    fatal: bool = False


@dataclass(frozen=True)
class ClusterChanged(Event):
    """Verification runs on a Ray cluster: how many nodes can verify, and whether the run is waiting
    for one (it resumes by itself when a node joins)."""

    address: str
    nodes: int
    waiting: bool = False
    message: str = ""


@dataclass(frozen=True)
class ConfigReloaded(Event):
    """evokernel.toml changed while the workbench was open: ``taken`` ("[llm] max_tokens") apply from this run on;
    ``needs_restart`` (the backend, the suite, [verifier]...) apply once the workbench is opened again."""

    taken: tuple[str, ...]
    needs_restart: tuple[str, ...]


@dataclass(frozen=True)
class FinalWindow(Event):
    """A task's best timed beside its first feasible kernel and PyTorch in one window, at the end of a run
    (the report's best/first and best/ref): ``words`` says what that window found, or why it could not."""

    task: str
    feasible: bool
    words: str


@dataclass(frozen=True)
class RunFinished(Event):
    run_id: str
    status: str            # "finished" | "stopped" | "failed" | "budget"
    summary: dict[str, Any] = field(default_factory=dict)
    forgotten: bool = False   # it failed before its first answer: nothing recorded, no run kept to resume


Subscriber = Callable[[Event], None]


class EventBus:
    """Fan-out of events to subscribers, and an optional log of everything emitted."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self.dropped = 0

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def emit(self, event: Event) -> None:
        for fn in list(self._subscribers):
            try:
                fn(event)
            except Exception:  # a broken subscriber must not stop the engine
                self.dropped += 1
