"""The seam between the engine and its memory: what core/ may call, as a Protocol.

``store.Store`` implements it on LMDB; a test may pass any object with these methods instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from store.records import Experience, RunRecord, TaskState


class Memory(Protocol):
    """Experiences with stage values Q1/Q2, task states, runs and the LLM cache of one workspace."""

    def add_experience(self, exp: Experience, *, dedupe: bool = True) -> tuple[str, bool]:
        """Store ``exp``: (id, True), or (existing id, False) for a stored id or, with ``dedupe``, a
        near-duplicate."""

    def add_experiences(self, exps: Iterable[Experience]) -> list[tuple[str, bool]]:
        """Store several experiences in one transaction; (id, created) for each, in order."""

    def update_extra(self, exp_id: str, extra: dict[str, Any]) -> None:
        """Merge ``extra`` into the experience's free-form ``extra`` field."""

    def query(
        self, *, task: str | None = None, kind: str | None = None, stage: str | None = None,
        backend: str | None = None, source: str | None = None, sort: str = "recency",
        descending: bool = True, limit: int | None = None, offset: int = 0,
    ) -> list[Experience]:
        """Experiences passing the filters, sorted (recency, q1, q2, reward, adoptions) and paged."""

    def same_code(self, task_id: str, kinds: Iterable[str], backend: str, code_id: str,
                  files: dict[str, str]) -> str | None:
        """The id of a stored experience of ``task_id`` (one of ``kinds``) with the same code, or None."""

    def get(self, exp_id: str) -> Experience | None:
        """The experience ``exp_id`` with files, values and history, or None."""

    def get_many(self, ids: Iterable[str]) -> list[Experience]:
        """The stored experiences among ``ids``, in the order given."""

    def children(self, parent_id: str) -> list[Experience]:
        """The attempts made from ``parent_id``, oldest first."""

    def attempt_tree(self, task_id: str) -> list[tuple[str, str | None]]:
        """(id, parent id) of every experience of ``task_id``, in creation order."""

    def retrieve(
        self, query: str, *, k: int, backend: str | None = None, stage: str | None = None,
        q_floor: float | None = None, kinds: Iterable[str] | None = None, exclude_ids: Iterable[str] = (),
    ) -> list[tuple[Experience, float]]:
        """The ``k`` most similar experiences by BM25 (best first), filtered; the caller picks by Q."""

    def update_values(
        self, ids: Iterable[str], *, stage: str, reward: float, alpha: float, task_id: str | None = None,
        weights: dict[str, float] | None = None, cited: Iterable[str] | None = None, by: str | None = None,
    ) -> dict[str, float]:
        """In one transaction, Q ← Q + α·w·(r − Q) on Q1 ("draft") or Q2 ("refine"); the new values. Each
        update's history entry keeps its weight, whether the answer cited the id (``cited``) and the attempt
        whose reward it was (``by``)."""

    def record_retrieval(self, task_id: str, ids: Iterable[str]) -> None:
        """Count one retrieval of each id for ``task_id``."""

    def record_adoption(self, task_id: str, ids: Iterable[str]) -> None:
        """Note that ``task_id`` adopted (cited) each id."""

    def update_reward_stats(self, key: str, value: float) -> dict[str, Any]:
        """Add ``value`` to running statistics ``key``; returns count, mean, var, std."""

    def reward_stats(self, key: str) -> dict[str, Any]:
        """The running statistics ``key``."""

    def get_task(self, task_id: str) -> TaskState | None:
        """The stored state of ``task_id``, or None."""

    def put_task(self, state: TaskState) -> None:
        """Store a task's state."""

    def task_claims(self) -> dict[str, dict[str, Any]]:
        """Every task key the memory knows, with the suite and task id it stands for (core.identity)."""

    def claim_task(self, key: str, claim: dict[str, Any], *, replacing: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
        """Claim task key ``key`` unless held (or held by exactly ``replacing``); the claim holding it now."""

    def update_claim(self, key: str, claim: dict[str, Any], *, held: dict[str, Any]) -> bool:
        """Replace ``key``'s claim with ``claim`` if it is still exactly ``held``; whether it was replaced."""

    def merge_task(self, source: str, into: str, claim: dict[str, Any]) -> int:
        """Move every record of task key ``source`` under ``into`` and give ``source`` the claim ``claim``, in one
        transaction; how many experiences moved."""

    def put_run(self, run: RunRecord) -> None:
        """Store a run's configuration and progress."""

    def delete_run(self, run_id: str) -> None:
        """Forget a run that recorded nothing."""

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run ``run_id``, or None."""

    def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""

    def cache_get(self, key: str) -> dict[str, Any] | None:
        """The cached LLM response for request hash ``key``, or None."""

    def cache_put(self, key: str, value: dict[str, Any]) -> None:
        """Cache an LLM response under its request hash."""

    def transaction(self) -> AbstractContextManager[None]:
        """Group the writes of this thread inside the block into one transaction."""
