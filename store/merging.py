"""One task's records moved under another key: two keys found to name the same task become one history.

An earlier EvoKernel keyed a task by the name of the folder a suite was opened from, so a workspace that saw
one task file through two folders (``MultiKernelBench/reference`` and ``.../reference/npukernelbench_level0``)
kept two histories of it (``10_relu`` and ``10_relu@reference-npukernelbench_level0``). Which keys name the
same task is core's to decide (``core.identity``); this moves the records, in the caller's transaction:

- every experience of the merged key (its body, row, attempt-tree entry and near-duplicate fingerprint);
- the per-task counts every experience keeps (retrievals, citations, adoptions, the task of each Q update);
- the task state (the faster best stays the best; the other's start points stay start points);
- the runs that listed the key (their task lists and progress) and the response cache's sample aliases,
  so a replay of such a run still answers from the cache.
"""

from __future__ import annotations

from typing import Any

from store.codec import pack, text_key, unpack
from store.fingerprint import fingerprint
from store.records import TaskState
from store.schema import Tables, Txn


def merge_task(txn: Txn, t: Tables, source: str, into: str) -> int:
    """Move every record of task key ``source`` under ``into``; returns how many experiences moved."""
    if source == into:
        return 0
    moved = _move_experiences(txn, t, source, into)
    _rename_in_histories(txn, t, source, into)
    _merge_states(txn, t, source, into)
    _rename_in_runs(txn, t, source, into)
    _rename_samples(txn, t, source, into)
    return moved


def _move_experiences(txn: Txn, t: Tables, source: str, into: str) -> int:
    prefix = text_key(source) + b"\x00"
    entries: list[tuple[bytes, bytes]] = []
    cur = txn.cursor(db=t.bytask)
    if cur.set_range(prefix):
        for key, parent in cur:
            key = bytes(key)
            if not key.startswith(prefix):
                break
            entries.append((key, bytes(parent)))
    for key, parent in entries:
        exp_key = key[len(prefix):]
        raw = txn.get(exp_key, db=t.exp)
        if raw is None:
            continue
        body = unpack(raw)
        files = {name: _blob(txn, t, digest) for name, digest in (body.get("files") or {}).items()}
        old = fingerprint(source, body.get("kind", ""), body.get("backend", ""), files, body.get("title", ""),
                          body.get("text", ""), body.get("code_id", ""))
        if bytes(txn.get(old, db=t.dedup) or b"") == exp_key:
            txn.delete(old, db=t.dedup)
        new = fingerprint(into, body.get("kind", ""), body.get("backend", ""), files, body.get("title", ""),
                          body.get("text", ""), body.get("code_id", ""))
        if txn.get(new, db=t.dedup) is None:    # the same code under both keys: the older record answers for it
            txn.put(new, exp_key, db=t.dedup)
        body["task_id"] = into
        txn.put(exp_key, pack(body), db=t.exp)
        row = unpack(bytes(txn.get(exp_key, db=t.row) or pack({})))
        if row:
            row["task"] = into
            txn.put(exp_key, pack(row), db=t.row)
        txn.delete(key, db=t.bytask)
        txn.put(text_key(into) + b"\x00" + exp_key, parent, db=t.bytask)
    return len(entries)


def _blob(txn: Txn, t: Tables, digest: str) -> str:
    from store.codec import decode_blob

    raw = txn.get(bytes.fromhex(digest), db=t.blob)
    return decode_blob(raw) if raw is not None else ""


def _rename_in_histories(txn: Txn, t: Tables, source: str, into: str) -> None:
    updates: list[tuple[bytes, dict[str, Any]]] = []
    for key, raw in txn.cursor(db=t.hist):
        hist = unpack(raw)
        changed = False
        for name in ("retrieved_by", "cited_by"):
            counts = hist.get(name) or {}
            if source in counts:
                counts[into] = counts.get(into, 0) + counts.pop(source)
                changed = True
        adopters = hist.get("adopted_by") or []
        if source in adopters:
            hist["adopted_by"] = list(dict.fromkeys(into if a == source else a for a in adopters))
            changed = True
        for entry in hist.get("q_history") or []:
            if isinstance(entry, dict) and entry.get("task") == source:
                entry["task"] = into
                changed = True
        if changed:
            updates.append((bytes(key), hist))
    for key, hist in updates:
        txn.put(key, pack(hist), db=t.hist)
        row_raw = txn.get(key, db=t.row)
        if row_raw is not None and "adopted_by" in hist:
            row = unpack(row_raw)
            row["adoptions"] = len(hist["adopted_by"])
            txn.put(key, pack(row), db=t.row)


def _merge_states(txn: Txn, t: Tables, source: str, into: str) -> None:
    raw = txn.get(text_key(source), db=t.tasks)
    if raw is None:
        return
    theirs = TaskState.from_dict(unpack(raw))
    txn.delete(text_key(source), db=t.tasks)
    mine_raw = txn.get(text_key(into), db=t.tasks)
    if mine_raw is None:
        theirs.task_id = into
        txn.put(text_key(into), pack(theirs.to_dict()), db=t.tasks)
        return
    mine = TaskState.from_dict(unpack(mine_raw))
    if theirs.best_latency_ms is not None and (mine.best_latency_ms is None
                                               or theirs.best_latency_ms < mine.best_latency_ms):
        mine.best_latency_ms, mine.best_id = theirs.best_latency_ms, theirs.best_id
    mine.feasible = mine.feasible or theirs.feasible
    if mine.feasible:
        mine.stage = "refine" if "done" not in (mine.stage, theirs.stage) else mine.stage
    if mine.first_feasible_latency_ms is None:
        mine.first_feasible_latency_ms = theirs.first_feasible_latency_ms
    mine.start_points = list(dict.fromkeys([*mine.start_points, *theirs.start_points]))
    mine.iterations_used += theirs.iterations_used
    txn.put(text_key(into), pack(mine.to_dict()), db=t.tasks)


def _rename_in_runs(txn: Txn, t: Tables, source: str, into: str) -> None:
    updates: list[tuple[bytes, dict[str, Any]]] = []
    for key, raw in txn.cursor(db=t.runs):
        run = unpack(raw)
        tasks = run.get("tasks") or []
        progress = run.get("progress") or {}
        if source not in tasks and source not in progress:
            continue
        run["tasks"] = list(dict.fromkeys(into if x == source else x for x in tasks))
        if source in progress and into not in progress:
            progress[into] = progress.pop(source)
        updates.append((bytes(key), run))
    for key, run in updates:
        txn.put(key, pack(run), db=t.runs)


def _rename_samples(txn: Txn, t: Tables, source: str, into: str) -> None:
    """``sample:<run>:<task>:<iteration>`` aliases of the response cache (core.llm), renamed."""
    needle = f":{source}:"
    updates: list[tuple[bytes, bytes, bytes]] = []
    cur = txn.cursor(db=t.cache)
    if cur.set_range(text_key("sample:")):
        for key, value in cur:
            text = bytes(key).decode(errors="replace")
            if not text.startswith("sample:"):
                break
            if needle in text:
                updates.append((bytes(key), text_key(text.replace(needle, f":{into}:", 1)), bytes(value)))
    for old, new, value in updates:
        txn.delete(old, db=t.cache)
        if txn.get(new, db=t.cache) is None:
            txn.put(new, value, db=t.cache)
