"""Records the store holds: experiences, task states and runs, as plain dataclasses.

Each converts to and from a plain dict (``to_dict`` / ``from_dict``) of JSON- and msgpack-friendly
values; ``from_dict`` ignores keys it does not know, so a newer export still imports.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

KINDS = (
    "api_template",
    "success",
    "failure",
    "draft_trace",
    "refine_trace",
    "best_practice",
    "human_edit",
    "rule",
    "baseline_trace",   # attempts of the pass@k / refinement baselines: kept for reports, never retrieved
    "not_judged",       # an attempt whose verification the tool itself failed: shown, never retrieved or a parent
)
STAGES = ("draft", "refine", "")
SOURCES = ("seed", "llm", "human")
# How many value updates an experience remembers (newest last).
HISTORY_CAP = 32

_id_lock = threading.Lock()
_last_id = (0, 0)


def new_id() -> str:
    """A new experience id: 12 hex digits of milliseconds then 8 random hex digits.

    Ids sort by creation time; within one process, ids made in the same millisecond still sort in
    the order they were made (the random part counts up).
    """
    global _last_id
    ms = int(time.time() * 1000) & 0xFFFF_FFFF_FFFF
    with _id_lock:
        last_ms, last_rand = _last_id
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
            if rand > 0xFFFF_FFFF:
                ms, rand = last_ms + 1, int.from_bytes(os.urandom(3), "big")
        else:
            rand = int.from_bytes(os.urandom(3), "big")  # leaves room to count up within the ms
        _last_id = (ms, rand)
    return f"{ms:012x}{rand:08x}"


T = TypeVar("T")


def _from_dict(cls: type[T], data: dict[str, Any]) -> T:
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Experience:
    """One attempt or piece of knowledge in memory, with its learned stage values Q1 and Q2."""

    task_id: str
    kind: str
    backend: str
    stage: str = ""
    title: str = ""
    text: str = ""
    files: dict[str, str] = field(default_factory=dict)
    outcome: dict[str, Any] | None = None   # the verifier's Outcome as plain data; core reads it (core.attempts)
    reward: float | None = None
    parent_id: str | None = None
    source: str = "llm"
    model: str = ""
    run_id: str | None = None
    iteration: int | None = None
    signature: dict[str, Any] = field(default_factory=dict)
    code_id: str = ""   # its code's identity as the caller reads it (comments and spacing aside): near-duplicates
    #                     are found by it when given (store.fingerprint), else by the store's own normalisation
    id: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    q1: float = 0.0
    q2: float = 0.0
    n1: int = 0
    n2: int = 0
    q_history: list[Any] = field(default_factory=list)
    adoptions: int = 0
    adopted_by: list[str] = field(default_factory=list)
    retrieved_by: dict[str, int] = field(default_factory=dict)
    cited_by: dict[str, int] = field(default_factory=dict)    # answers that cited it, per task
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data (files with their contents)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Experience:
        """An experience from ``to_dict`` output; unknown keys are ignored."""
        return _from_dict(cls, data)

    def q(self, stage: str) -> float:
        """The value for ``stage``: Q1 when drafting, Q2 when refining."""
        return self.q1 if stage == "draft" else self.q2


@dataclass
class TaskState:
    """Where a task stands: stage, best-so-far latency, start points P(x) and budget used."""

    task_id: str
    stage: str = "draft"
    feasible: bool = False
    best_latency_ms: float | None = None
    best_id: str | None = None
    first_feasible_latency_ms: float | None = None
    start_points: list[str] = field(default_factory=list)
    iterations_used: int = 0
    budget: int = 0
    updated_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskState:
        """A task state from ``to_dict`` output; unknown keys are ignored."""
        return _from_dict(cls, data)


@dataclass
class TaskProgress:
    """One task's progress within a run."""

    iterations_used: int = 0
    feasible: bool = False
    stage: str = "draft"
    attempts: list[str] = field(default_factory=list)
    best_id: str | None = None
    best_ms: float | None = None
    first_ms: float | None = None
    reference_ms: float | None = None
    broken: str = ""               # why the task ended early (a broken reference, unusable answers)
    unusable_streak: int = 0       # answers in a row without usable code
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskProgress:
        """A task's progress from ``to_dict`` output (or a run stored before this type: same keys)."""
        data = dict(data)
        data["broken"] = str(data.get("broken") or "")
        return _from_dict(cls, data)


@dataclass
class RunRecord:
    """A run: its configuration, tasks and progress, enough to resume it after a crash."""

    id: str
    method: str
    config: dict[str, Any]
    tasks: list[str]
    status: str = "running"
    iteration: int = 0
    started_at: float = 0.0
    updated_at: float = 0.0
    progress: dict[str, TaskProgress] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.progress = {k: v if isinstance(v, TaskProgress) else TaskProgress.from_dict(v)
                         for k, v in self.progress.items()}

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """A run from ``to_dict`` output; unknown keys are ignored."""
        return _from_dict(cls, data)
