"""Schema: the named sub-databases of a memory, its version, and migrations between versions.

Tables (LMDB named databases), keys → values:

* ``meta``      ``schema`` → version, ``store_id`` → random hex, ``seq`` → last insertion number,
                ``created_at``, ``rstats:<key>`` → running reward statistics, ``task:<key>`` → what a
                task key names (its suite and its id there: see ``TASK_CLAIM``)
* ``exp``       id → immutable body of an experience (files as content addresses)
* ``row``       id → the small part every list, filter and sort reads (kind, task, Q1, Q2, …)
* ``hist``      id → what grows: Q history, adopting tasks, retrievals per task
* ``blob``      SHA-256 → file content (stored once however many experiences hold it)
* ``bytask``    task id, NUL, id → parent id (the attempt tree, in id = creation order)
* ``byparent``  parent id, NUL, id → empty (children of an attempt)
* ``bykind``    kind, NUL, id → empty (rules and templates without scanning every row)
* ``dedup``     fingerprint → id (near-duplicate detection)
* ``order``     insertion number → id (what the retrieval index has not seen yet)
* ``tasks``     task id → TaskState;  ``runs`` run id → RunRecord;  ``cache`` request hash → response
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from store.codec import pack, text_key, unpack

# The types of a transaction (values read as bytes, never buffers) and of a table handle, for
# annotations only: lmdb's classes take no type arguments at run time.
if TYPE_CHECKING:
    import lmdb

    Txn: TypeAlias = lmdb.Transaction[bytes]
    Db: TypeAlias = lmdb._Database
else:
    Txn = Db = object

SCHEMA_VERSION = 2

TABLES = ("meta", "exp", "row", "hist", "blob", "bytask", "byparent", "bykind", "dedup", "order", "tasks", "runs",
          "cache")


@dataclass(frozen=True)
class Tables:
    """Open handles of every named database of one environment."""

    meta: Db
    exp: Db
    row: Db
    hist: Db
    blob: Db
    bytask: Db
    byparent: Db
    bykind: Db
    dedup: Db
    order: Db
    tasks: Db
    runs: Db
    cache: Db


TASK_CLAIM = b"task:"
"""The prefix of a task key's claim in ``meta``: ``task:<key>`` → ``{"suite": label, "name": id}``, the suite
and the task id in it that the key (the ``task_id`` of experiences, task states and runs) stands for; or
``{"legacy": True, "suite_spec": spec or None}`` for a key a memory of schema 1 held (written before tasks had
a suite: the suite of the earliest run that listed it, None when no run did). What a key means is core's
(``core.identity``); the store only keeps the claims."""


def claim_key(key: str) -> bytes:
    """The ``meta`` key of task key ``key``'s claim."""
    return TASK_CLAIM + text_key(key)


def _claim_schema_1_tasks(txn: Txn, t: Tables) -> None:
    """Schema 1 -> 2: tasks were known by their id alone. Every task id the memory holds (experiences, task
    states, runs) keeps its records under that id, claimed as a legacy key with the suite of the earliest
    run that listed it: nothing is moved or lost, and core decides which suite's task it is."""
    ids: set[str] = set()
    for key in txn.cursor(db=t.bytask).iternext(values=False):
        ids.add(bytes(key).split(b"\x00", 1)[0].decode(errors="replace"))
    for raw in txn.cursor(db=t.tasks).iternext(keys=False):
        ids.add(str(unpack(bytes(raw)).get("task_id") or ""))
    runs = sorted((unpack(bytes(raw)) for raw in txn.cursor(db=t.runs).iternext(keys=False)),
                  key=lambda r: (r.get("started_at") or 0, r.get("id") or ""))
    spec: dict[str, str | None] = {}
    for run in runs:
        for task in run.get("tasks") or []:
            ids.add(str(task))
            spec.setdefault(str(task), str((run.get("config") or {}).get("suite") or "") or None)
    for task_id in sorted(i for i in ids if i and i != "*"):   # "*": knowledge of no task (core.seeds)
        if txn.get(claim_key(task_id), db=t.meta) is None:
            txn.put(claim_key(task_id), pack({"legacy": True, "suite_spec": spec.get(task_id)}), db=t.meta)


# MIGRATIONS[v] upgrades a memory of schema v to v + 1 inside one write transaction:
# fn(txn, tables). A version with no entry here cannot be migrated forward.
MIGRATIONS: dict[int, Callable[[Txn, Tables], None]] = {1: _claim_schema_1_tasks}


def migration_path(found: int) -> list[int] | None:
    """The versions to migrate through to reach SCHEMA_VERSION from ``found``, or None if impossible."""
    steps = list(range(found, SCHEMA_VERSION))
    return steps if all(v in MIGRATIONS for v in steps) else None


def apply_migrations(txn: Txn, tables: Tables, found: int) -> None:
    """Upgrade a memory of schema ``found`` to SCHEMA_VERSION inside the write transaction ``txn``."""
    for version in migration_path(found) or []:
        MIGRATIONS[version](txn, tables)
        txn.put(b"schema", pack(version + 1), db=tables.meta)


def newer_message(path: str, found: int) -> str:
    """What to say when a memory was written by a newer evokernel."""
    return (
        f"memory at {path} was written by store schema v{found}, newer than this evokernel reads "
        f"(v{SCHEMA_VERSION}); upgrade evokernel, or export it with the newer one and import the file here"
    )


def older_message(path: str, found: int) -> str:
    """What to say when a memory was written by an older evokernel that cannot be migrated."""
    return (
        f"memory at {path} was written by store schema v{found}, older than this evokernel's "
        f"v{SCHEMA_VERSION}, and cannot be migrated; export it with the older evokernel and import the file here"
    )
