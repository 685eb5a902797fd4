"""The Store: one workspace's memory on LMDB — experiences and their values, tasks, runs, LLM cache.

Every write is one LMDB transaction that lands whole or not at all; the map grows on demand; readers
(the TUI, another process) never block the writer and see only committed records. The retrieval
index lives beside the LMDB folder (``memory.lmdb`` → ``memory.index``) and is loaded or rebuilt on
the first ``retrieve``, never at open.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from store import experiences, merging, transfer, values
from store.codec import pack, text_key, unpack
from store.environment import Environment
from store.errors import ReadOnlyStore, SchemaMismatch, StoreNotFound, UnknownExperience
from store.records import Experience, RunRecord, TaskState
from store.schema import (
    SCHEMA_VERSION,
    TASK_CLAIM,
    Tables,
    Txn,
    apply_migrations,
    claim_key,
    migration_path,
    newer_message,
    older_message,
)
from store.stats import store_stats

if TYPE_CHECKING:
    from store.index import IndexDoc, RetrievalIndex

DEFAULT_MAP_SIZE = 64 << 20
_CHUNK = 1000


def index_dir(path: Path) -> Path:
    """Where the retrieval index of the memory at ``path`` lives (``memory.lmdb`` → ``memory.index``)."""
    stem = path.name[: -len(".lmdb")] if path.name.endswith(".lmdb") else path.name
    return path.parent / f"{stem}.index"

R = TypeVar("R")
_Body = tuple[dict[str, Any], dict[str, str]]   # an experience's body and files, as stored


class Store:
    """The memory of one workspace. Open it with ``Store.open(path)``; use it from any thread."""

    def __init__(self, env: Environment, readonly: bool) -> None:
        self._env = env
        self._readonly = readonly
        self._t = _tables(env)
        self._closed = False
        self._lock = env.shared.setdefault("index_lock", threading.Lock())

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, readonly: bool = False, map_size: int = DEFAULT_MAP_SIZE) -> Store:
        """Open the memory at ``path`` (an LMDB folder such as ``.evokernel/memory.lmdb``).

        Writable opens create it. An older schema is migrated when a migration exists; a newer one,
        or an older one that cannot be migrated, raises SchemaMismatch saying what to do.
        """
        env = Environment.acquire(path, readonly=readonly, map_size=map_size)
        held = True
        try:
            found = env.read(lambda txn: _schema(txn, env))
            if found is None:
                if readonly:
                    raise StoreNotFound(f"no memory at {env.path} yet; a run or `evokernel memory import` creates it")
                env.write(lambda txn: _initialise(txn, env))
            elif found > SCHEMA_VERSION:
                raise SchemaMismatch(newer_message(str(env.path), found))
            elif found < SCHEMA_VERSION:
                if migration_path(found) is None:
                    raise SchemaMismatch(older_message(str(env.path), found))
                if readonly:
                    env.release()
                    held = False
                    cls.open(path, map_size=map_size).close()  # migrate through a writable open
                    return cls.open(path, readonly=True, map_size=map_size)
                env.write(lambda txn: _migrate(txn, env))
            tables = _tables(env)
            env.shared.setdefault("store_id", env.read(lambda txn: unpack(cast(bytes, txn.get(b"store_id",
                                                                                          db=tables.meta)))))
        except BaseException:
            if held:
                env.release()
            raise
        return cls(env, readonly)

    @property
    def path(self) -> Path:
        """The LMDB folder of this memory."""
        return self._env.path

    @property
    def readonly(self) -> bool:
        """Whether this store was opened read-only."""
        return self._readonly

    def close(self) -> None:
        """Release the store (the environment closes with its last user in this process)."""
        if not self._closed:
            self._closed = True
            self._env.release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group the writes this thread makes inside the block into one transaction."""
        if self._readonly:
            raise self._refuse()
        with self._env.transaction():
            yield

    def _refuse(self) -> ReadOnlyStore:
        return ReadOnlyStore(f"memory at {self.path} is open read-only; open it without readonly to write")

    def _write(self, fn: Callable[[Txn], R]) -> R:
        if self._readonly:
            raise self._refuse()
        return self._env.write(fn)

    # -- experiences ---------------------------------------------------------------------------

    def add_experience(self, exp: Experience, *, dedupe: bool = True) -> tuple[str, bool]:
        """Store ``exp``: (id, True); or (existing id, False) for a stored id or a near-duplicate.

        A near-duplicate has the same task, kind and backend and the same normalised code (or text
        when it has no files). On insert ``exp.id`` and its timestamps are filled in. ``dedupe`` False: stored
        as its own record whatever it resembles (a model's answer without code).
        """
        before = (exp.id, exp.created_at, exp.updated_at)
        try:
            return self._write(lambda txn: experiences.insert(txn, self._t, exp, dedupe))
        except BaseException:
            exp.id, exp.created_at, exp.updated_at = before
            raise

    def add_experiences(self, exps: Iterable[Experience]) -> list[tuple[str, bool]]:
        """Store several experiences in one transaction; (id, created) for each, in order."""
        exps = list(exps)
        before = [(e.id, e.created_at, e.updated_at) for e in exps]
        try:
            return self._write(lambda txn: [experiences.insert(txn, self._t, e) for e in exps])
        except BaseException:
            for e, (i, c, u) in zip(exps, before):
                e.id, e.created_at, e.updated_at = i, c, u
            raise

    def same_code(self, task_id: str, kinds: Iterable[str], backend: str, code_id: str,
                  files: dict[str, str]) -> str | None:
        """The id of a stored experience of ``task_id`` (one of ``kinds``, in that order) with the same code:
        the same ``code_id``, or for records stored without one, the same normalised ``files``."""
        kinds = list(kinds)
        return self._env.read(lambda txn: experiences.same_code(txn, self._t, task_id, kinds, backend, code_id,
                                                                 files))

    def get(self, exp_id: str) -> Experience | None:
        """The experience ``exp_id`` with its files, values and history, or None."""
        return self._env.read(lambda txn: experiences.load(txn, self._t, exp_id))

    def get_many(self, ids: Iterable[str]) -> list[Experience]:
        """The stored experiences among ``ids``, in the order given."""
        ids = list(ids)
        return self._env.read(lambda txn: experiences.many(txn, self._t, ids))

    def resolve_id(self, prefix: str) -> str:
        """The full id of the one experience whose id starts with ``prefix``."""
        def find(txn: Txn) -> list[str]:
            if txn.get(prefix.encode(), db=self._t.row) is not None:
                return [prefix]
            cur = txn.cursor(db=self._t.row)
            found: list[str] = []
            if prefix and cur.set_range(prefix.encode()):
                for raw in cur.iternext(values=False):
                    key = bytes(raw).decode()
                    if not key.startswith(prefix) or len(found) == 2:
                        break
                    found.append(key)
            return found

        found = self._env.read(find)
        if not found:
            raise UnknownExperience(f"no experience with id {prefix!r}; `evokernel memory list` shows the ids")
        if len(found) > 1:
            raise UnknownExperience(f"id prefix {prefix!r} matches several experiences; give more of the id")
        return found[0]

    def query(
        self, *, task: str | None = None, kind: str | None = None, stage: str | None = None,
        backend: str | None = None, source: str | None = None, sort: str = "recency",
        descending: bool = True, limit: int | None = None, offset: int = 0,
    ) -> list[Experience]:
        """Experiences passing the filters, sorted (recency, q1, q2, reward, adoptions) and paged."""
        filters = dict(task=task, kind=kind, stage=stage, backend=backend, source=source)

        def run(txn: Txn) -> list[Experience]:
            rows = experiences.sort_rows(experiences.matching_rows(txn, self._t, filters), sort, descending)
            page = rows[offset: None if limit is None else offset + limit]
            return experiences.many(txn, self._t, [i for i, _ in page])

        return self._env.read(run)

    def count(self, **filters: str | None) -> int:
        """How many experiences pass the filters (task, kind, stage, backend, source)."""
        if not any(v is not None for v in filters.values()):
            return self._env.read(lambda txn: txn.stat(self._t.order)["entries"])
        return self._env.read(lambda txn: len(experiences.matching_rows(txn, self._t, filters)))

    def children(self, parent_id: str) -> list[Experience]:
        """The attempts made from ``parent_id``, oldest first."""
        def run(txn: Txn) -> list[Experience]:
            prefix = parent_id.encode() + b"\x00"
            cur = txn.cursor(db=self._t.byparent)
            ids: list[str] = []
            if cur.set_range(prefix):
                for key in cur.iternext(values=False):
                    key = bytes(key)
                    if not key.startswith(prefix):
                        break
                    ids.append(key[len(prefix):].decode())
            return experiences.many(txn, self._t, ids)

        return self._env.read(run)

    def attempt_tree(self, task_id: str) -> list[tuple[str, str | None]]:
        """(id, parent id) of every experience of ``task_id``, in creation order."""
        def run(txn: Txn) -> list[tuple[str, str | None]]:
            prefix = text_key(task_id) + b"\x00"
            cur = txn.cursor(db=self._t.bytask)
            out: list[tuple[str, str | None]] = []
            if cur.set_range(prefix):
                for key, parent in cur:
                    key = bytes(key)
                    if not key.startswith(prefix):
                        break
                    out.append((key[len(prefix):].decode(), unpack(parent)))
            return out

        return self._env.read(run)

    def iter_experiences(self, **filters: str | None) -> Iterator[Experience]:
        """Every experience passing the filters, in insertion order, read in short transactions."""
        wanted = experiences.active_filters(filters)
        after = 0
        while True:
            def chunk(txn: Txn, after: int = after) -> tuple[list[Experience], int | None]:
                out = []
                pairs = experiences.ids_by_seq(txn, self._t, after, limit=_CHUNK)
                for _seq, exp_id in pairs:
                    row = experiences.row(txn, self._t, exp_id)
                    if row is None or not experiences.row_matches(row, wanted):
                        continue
                    exp = experiences.load(txn, self._t, exp_id)
                    if exp is not None:
                        out.append(exp)
                return out, (pairs[-1][0] if pairs else None)

            batch, last = self._env.read(chunk)
            yield from batch
            if last is None:
                return
            after = last

    def update_extra(self, exp_id: str, extra: dict[str, Any]) -> None:
        """Merge ``extra`` into the experience's free-form ``extra`` field."""
        def run(txn: Txn) -> None:
            raw = txn.get(exp_id.encode(), db=self._t.exp)
            if raw is None:
                raise UnknownExperience(f"no experience with id {exp_id!r}")
            body = unpack(raw)
            body["extra"] = {**(body.get("extra") or {}), **extra}
            txn.put(exp_id.encode(), pack(body), db=self._t.exp)

        self._write(run)

    # -- values --------------------------------------------------------------------------------

    def update_values(
        self, ids: Iterable[str], *, stage: str, reward: float, alpha: float, task_id: str | None = None,
        weights: dict[str, float] | None = None, cited: Iterable[str] | None = None, by: str | None = None,
    ) -> dict[str, float]:
        """In one transaction, Q ← Q + α·w·(r − Q) on each id's Q1 (stage "draft") or Q2 ("refine").

        ``w`` is ``weights.get(id, 1.0)``; the update count grows by one and the history keeps the last
        32 updates, each with its weight, (given ``cited``) whether the answer cited the id and (given ``by``)
        the attempt whose reward it was. Returns the new values of the ids that exist.
        """
        ids = list(ids)
        cited = list(cited) if cited is not None else None
        return self._write(lambda txn: values.update_values(
            txn, self._t, ids, stage=stage, reward=reward, alpha=alpha, task_id=task_id, weights=weights,
            cited=cited, by=by))

    def record_retrieval(self, task_id: str, ids: Iterable[str]) -> None:
        """Count one retrieval of each id for ``task_id``."""
        ids = list(ids)
        self._write(lambda txn: values.record_retrieval(txn, self._t, task_id, ids))

    def record_adoption(self, task_id: str, ids: Iterable[str]) -> None:
        """Note that ``task_id`` adopted (cited) each id (every citation counted, per task)."""
        ids = list(ids)
        self._write(lambda txn: values.record_adoption(txn, self._t, task_id, ids))

    def update_reward_stats(self, key: str, value: float) -> dict[str, Any]:
        """Add ``value`` to the running statistics ``key``: returns count, mean, var, std."""
        return self._write(lambda txn: values.update_reward_stats(txn, self._t, key, value))

    def reward_stats(self, key: str) -> dict[str, Any]:
        """The running statistics ``key`` (zeros before the first value)."""
        return self._env.read(lambda txn: values.reward_stats(txn, self._t, key))

    # -- tasks, runs, cache ----------------------------------------------------------------------

    def get_task(self, task_id: str) -> TaskState | None:
        """The stored state of ``task_id``, or None."""
        raw = self._env.read(lambda txn: txn.get(text_key(task_id), db=self._t.tasks))
        return TaskState.from_dict(unpack(raw)) if raw is not None else None

    def put_task(self, state: TaskState) -> None:
        """Store ``state`` (its ``updated_at`` becomes now)."""
        state.updated_at = time.time()
        data = pack(state.to_dict())
        self._write(lambda txn: txn.put(text_key(state.task_id), data, db=self._t.tasks))

    def list_tasks(self) -> list[TaskState]:
        """Every stored task state, by task id."""
        raws = self._env.read(lambda txn: [bytes(v) for v in txn.cursor(db=self._t.tasks).iternext(keys=False)])
        return [TaskState.from_dict(unpack(r)) for r in raws]

    def task_claims(self) -> dict[str, dict[str, Any]]:
        """Every task key this memory knows, with what it stands for (``store.schema.TASK_CLAIM``)."""
        def run(txn: Txn) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            cur = txn.cursor(db=self._t.meta)
            if cur.set_range(TASK_CLAIM):
                for key, raw in cur:
                    key = bytes(key)
                    if not key.startswith(TASK_CLAIM):
                        break
                    out[key[len(TASK_CLAIM):].decode(errors="replace")] = unpack(raw)
            return out

        return self._env.read(run)

    def claim_task(self, key: str, claim: dict[str, Any], *, replacing: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
        """Claim task key ``key`` for ``claim`` when no claim holds it (or exactly ``replacing`` does: a legacy
        claim being adopted); returns the claim that holds it now (``claim`` when this call took it). One
        transaction: of two processes claiming one key, one wins and the other is told so."""
        def run(txn: Txn) -> dict[str, Any]:
            raw = txn.get(claim_key(key), db=self._t.meta)
            held = unpack(raw) if raw is not None else None
            if held is None or (replacing is not None and held == replacing):
                txn.put(claim_key(key), pack(claim), db=self._t.meta)
                return claim
            return cast(dict[str, Any], held)

        return self._write(run)

    def update_claim(self, key: str, claim: dict[str, Any], *, held: dict[str, Any]) -> bool:
        """Replace task key ``key``'s claim with ``claim`` (what it stands for, with more known: the task's file,
        another suite's name for it) if it is still exactly ``held``; whether it was replaced."""
        def run(txn: Txn) -> bool:
            raw = txn.get(claim_key(key), db=self._t.meta)
            if raw is None or unpack(raw) != held:
                return False
            txn.put(claim_key(key), pack(claim), db=self._t.meta)
            return True

        return self._write(run)

    def merge_task(self, source: str, into: str, claim: dict[str, Any]) -> int:
        """Move every record of task key ``source`` under ``into`` (``store.merging``: experiences, values'
        histories, the task state, runs) and give ``source`` the claim ``claim`` (core's: that it now stands for
        ``into``), in one transaction; returns how many experiences moved."""
        def run(txn: Txn) -> int:
            moved = merging.merge_task(txn, self._t, source, into)
            txn.put(claim_key(source), pack(claim), db=self._t.meta)
            return moved

        return self._write(run)

    def put_run(self, run: RunRecord) -> None:
        """Store ``run`` (``started_at`` defaults to now; ``updated_at`` becomes now)."""
        run.updated_at = time.time()
        run.started_at = run.started_at or run.updated_at
        data = pack(run.to_dict())
        self._write(lambda txn: txn.put(text_key(run.id), data, db=self._t.runs))

    def delete_run(self, run_id: str) -> None:
        """Forget run ``run_id`` (a run that recorded nothing: no attempt refers to it)."""
        self._write(lambda txn: txn.delete(text_key(run_id), db=self._t.runs))

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run ``run_id``, or None."""
        raw = self._env.read(lambda txn: txn.get(text_key(run_id), db=self._t.runs))
        return RunRecord.from_dict(unpack(raw)) if raw is not None else None

    def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        raws = self._env.read(lambda txn: [bytes(v) for v in txn.cursor(db=self._t.runs).iternext(keys=False)])
        return sorted((RunRecord.from_dict(unpack(r)) for r in raws), key=lambda r: (r.started_at, r.id))

    def cache_get(self, key: str) -> dict[str, Any] | None:
        """The cached LLM response for request hash ``key``, or None."""
        raw = self._env.read(lambda txn: txn.get(text_key(key), db=self._t.cache))
        return unpack(raw) if raw is not None else None

    def cache_put(self, key: str, value: dict[str, Any]) -> None:
        """Cache the LLM response ``value`` under request hash ``key``."""
        data = pack(value)
        self._write(lambda txn: txn.put(text_key(key), data, db=self._t.cache))

    # -- retrieval -----------------------------------------------------------------------------

    def retrieve(
        self, query: str, *, k: int, backend: str | None = None, stage: str | None = None,
        q_floor: float | None = None, kinds: Iterable[str] | None = None, exclude_ids: Iterable[str] = (),
    ) -> list[tuple[Experience, float]]:
        """The ``k`` experiences most similar to ``query`` by BM25, best first, with their scores.

        Only experiences of ``backend`` or backend-agnostic ones (backend "") and of ``kinds`` take
        part; with ``q_floor``, those whose value for ``stage`` (Q1 for "draft", Q2 for "refine") is
        below it are left out, as are ``exclude_ids``.
        """
        if k <= 0:
            return []
        qname = None
        if q_floor is not None:
            if stage not in values.VALUE_STAGES:
                raise ValueError(f"a q_floor needs stage 'draft' or 'refine', not {stage!r}")
            qname = values.VALUE_STAGES[stage][0]
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds) if kinds is not None else None
        exclude = {exclude_ids} if isinstance(exclude_ids, str) else set(exclude_ids)

        with self._lock:
            index = self._current_index()

            def pick(txn: Txn) -> list[tuple[Experience, float]]:
                out: list[tuple[Experience, float]] = []
                for exp_id, score in index.ranked(query, backend=backend, kinds=kinds, first=k + len(exclude) + 8):
                    if exp_id in exclude:
                        continue
                    if qname is not None:
                        row = experiences.row(txn, self._t, exp_id)
                        if row is None or row[qname] < q_floor:
                            continue
                    exp = experiences.load(txn, self._t, exp_id)
                    if exp is not None:
                        out.append((exp, score))
                        if len(out) >= k:
                            break
                return out

            return self._env.read(pick)

    def build_index(self) -> None:
        """Rebuild the retrieval index from the store now and save it (retrieve does this when needed)."""
        with self._lock:
            head, store_id = self._env.read(self._head)
            self._env.shared["index"] = self._build_index(head, store_id)

    def _head(self, txn: Txn) -> tuple[int, str]:
        raw = txn.get(b"seq", db=self._t.meta)
        return (unpack(raw) if raw is not None else 0), self._env.shared["store_id"]

    def _current_index(self) -> RetrievalIndex:
        from store.index import RetrievalIndex

        head, store_id = self._env.read(self._head)
        index = self._env.shared.get("index")
        if index is None:
            index = RetrievalIndex.load(index_dir(self.path), store_id)
        if index is None or index.store_id != store_id or index.wants_rebuild(head):
            index = self._build_index(head, store_id)
        elif index.seen < head:
            index.extend(self._index_docs(index.seen, head))
        self._env.shared["index"] = index
        return index

    def _build_index(self, head: int, store_id: str) -> RetrievalIndex:
        from store.index import RetrievalIndex

        return RetrievalIndex.build(index_dir(self.path), store_id, self._index_docs(0, head), head)

    def _index_docs(self, after: int, until: int) -> Iterator[IndexDoc]:
        from store.index import IndexDoc
        from store.terms import document_text

        while after < until:
            def chunk(txn: Txn, after: int = after) -> list[tuple[int, str, _Body | None]]:
                out = []
                for seq, exp_id in experiences.ids_by_seq(txn, self._t, after, until, limit=_CHUNK):
                    found = experiences.load_body(txn, self._t, exp_id)
                    out.append((seq, exp_id, found))
                return out

            batch = self._env.read(chunk)
            if not batch:
                return
            for seq, exp_id, found in batch:
                if found is not None:
                    body, files = found
                    yield IndexDoc(seq, exp_id, body["backend"], body["kind"], document_text(body, files))
            after = batch[-1][0]

    # -- export, import, stats -------------------------------------------------------------------

    def export_jsonl(self, path: str | os.PathLike[str], **filters: str | None) -> int:
        """Write the experiences passing the filters to a JSON Lines file; returns how many."""
        wanted = experiences.active_filters(filters)
        return transfer.write_jsonl(Path(path), self.iter_experiences(**wanted), source=self.path, filters=wanted)

    def import_jsonl(self, path: str | os.PathLike[str]) -> tuple[int, int]:
        """Add the experiences of a JSON Lines export, keeping ids, values and history.

        Returns (added, skipped): experiences already here (same id) or near-duplicates are skipped,
        so importing the same file twice adds nothing the second time.
        """
        added = seen = 0
        for batch in transfer.checked_batches(Path(path)):
            added += sum(created for _, created in self.add_experiences(batch))
            seen += len(batch)
        return added, seen - added

    def stats(self) -> dict[str, Any]:
        """Counts by kind, stage, backend and source; sizes; mean values; reward statistics."""
        out: dict[str, Any] = {"path": str(self.path), "schema": SCHEMA_VERSION,
                               "store_id": self._env.shared["store_id"]}
        out.update(self._env.read(lambda txn: store_stats(txn, self._t)))
        out["map_size"] = self._env.map_size()
        out["used_bytes"] = self._env.used_bytes()
        return out


def _tables(env: Environment) -> Tables:
    assert env.tables is not None, "Environment.acquire opens the tables"
    return env.tables


def _schema(txn: Txn, env: Environment) -> int | None:
    raw = txn.get(b"schema", db=_tables(env).meta)
    return unpack(raw) if raw is not None else None


def _initialise(txn: Txn, env: Environment) -> None:
    meta = _tables(env).meta
    if txn.get(b"schema", db=meta) is not None:  # another process got there first
        return
    txn.put(b"schema", pack(SCHEMA_VERSION), db=meta)
    txn.put(b"store_id", pack(secrets.token_hex(8)), db=meta)
    txn.put(b"created_at", pack(time.time()), db=meta)
    txn.put(b"seq", pack(0), db=meta)


def _migrate(txn: Txn, env: Environment) -> None:
    found = _schema(txn, env)
    if found is not None and found < SCHEMA_VERSION:
        if migration_path(found) is None:
            raise SchemaMismatch(older_message(str(env.path), found))
        apply_migrations(txn, _tables(env), found)
