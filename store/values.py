"""Values: the learned Q1/Q2 of experiences, their use counts, and running reward statistics.

Every function works inside a write transaction the caller holds, so a batch of updates lands whole.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

from store.codec import pack, unpack
from store.records import HISTORY_CAP
from store.schema import Tables, Txn

VALUE_STAGES = {"draft": ("q1", "n1"), "refine": ("q2", "n2")}


def update_values(
    txn: Txn, t: Tables, ids: Iterable[str], *, stage: str, reward: float, alpha: float, task_id: str | None,
    weights: dict[str, float] | None, cited: Iterable[str] | None = None, by: str | None = None,
) -> dict[str, float]:
    """Q ← Q + α·w·(r − Q) for the stage's value of each existing id; returns the new values.

    Ids that are not stored are skipped (they are absent from the result). Each update is kept in the id's
    history with its weight and, when ``cited`` is given, whether the answer cited the id: how the value was
    earned.
    """
    cited_set = set(cited) if cited is not None else None
    if stage not in VALUE_STAGES:
        raise ValueError(f"stage must be 'draft' (Q1) or 'refine' (Q2), not {stage!r}")
    if not math.isfinite(reward) or not math.isfinite(alpha):
        raise ValueError(f"reward and alpha must be finite numbers, got {reward!r} and {alpha!r}")
    qname, nname = VALUE_STAGES[stage]
    now = time.time()
    out: dict[str, float] = {}
    for exp_id in dict.fromkeys(ids):  # once per id, in order
        key = exp_id.encode()
        raw = txn.get(key, db=t.row)
        if raw is None:
            continue
        row = unpack(raw)
        w = 1.0 if weights is None else float(weights.get(exp_id, 1.0))
        q = row[qname] + alpha * w * (reward - row[qname])
        row[qname], row[nname], row["updated"] = q, row[nname] + 1, now
        txn.put(key, pack(row), db=t.row)
        hist = _hist(txn, t, key)
        entry: dict[str, Any] = {"t": now, "stage": stage, "q": q, "reward": reward, "task": task_id, "w": w}
        if cited_set is not None:
            entry["cited"] = exp_id in cited_set
        if by:
            entry["by"] = by
        hist["q_history"] = (hist.get("q_history", []) + [entry])[-HISTORY_CAP:]
        txn.put(key, pack(hist), db=t.hist)
        out[exp_id] = q
    return out


def _hist(txn: Txn, t: Tables, key: bytes) -> dict[str, Any]:
    raw = txn.get(key, db=t.hist)
    return unpack(raw) if raw is not None else {"q_history": [], "adopted_by": [], "retrieved_by": {}, "cited_by": {}}


def record_retrieval(txn: Txn, t: Tables, task_id: str, ids: Iterable[str]) -> None:
    """Count one retrieval of each id for ``task_id``."""
    for exp_id in dict.fromkeys(ids):
        key = exp_id.encode()
        if txn.get(key, db=t.row) is None:
            continue
        hist = _hist(txn, t, key)
        counts = hist.setdefault("retrieved_by", {})
        counts[task_id] = counts.get(task_id, 0) + 1
        txn.put(key, pack(hist), db=t.hist)


def record_adoption(txn: Txn, t: Tables, task_id: str, ids: Iterable[str]) -> None:
    """Note that ``task_id`` adopted (cited) each id: every citation counts in ``cited_by`` (per task);
    ``adoptions`` counts distinct tasks."""
    for exp_id in dict.fromkeys(ids):
        key = exp_id.encode()
        raw = txn.get(key, db=t.row)
        if raw is None:
            continue
        hist = _hist(txn, t, key)
        counts = hist.setdefault("cited_by", {})
        counts[task_id] = counts.get(task_id, 0) + 1
        adopters = hist.setdefault("adopted_by", [])
        if task_id in adopters:
            txn.put(key, pack(hist), db=t.hist)
            continue
        adopters.append(task_id)
        txn.put(key, pack(hist), db=t.hist)
        row = unpack(raw)
        row["adoptions"] = len(adopters)
        txn.put(key, pack(row), db=t.row)


def _stats_key(key: str) -> bytes:
    return b"rstats:" + key.encode()


def _public(state: dict[str, Any]) -> dict[str, Any]:
    n = state["count"]
    var = state["m2"] / n if n > 0 else 0.0
    return {"count": n, "mean": state["mean"], "var": var, "std": math.sqrt(var)}


def update_reward_stats(txn: Txn, t: Tables, key: str, value: float) -> dict[str, Any]:
    """Add ``value`` to the running statistics ``key`` (Welford); returns count, mean, var, std."""
    if not math.isfinite(value):
        raise ValueError(f"reward statistics take finite values, got {value!r}")
    raw = txn.get(_stats_key(key), db=t.meta)
    state = unpack(raw) if raw is not None else {"count": 0, "mean": 0.0, "m2": 0.0}
    n = state["count"] + 1
    delta = value - state["mean"]
    mean = state["mean"] + delta / n
    state = {"count": n, "mean": mean, "m2": state["m2"] + delta * (value - mean)}
    txn.put(_stats_key(key), pack(state), db=t.meta)
    return _public(state)


def reward_stats(txn: Txn, t: Tables, key: str) -> dict[str, Any]:
    """The running statistics ``key``: count, mean, var (population) and std; zeros if none yet."""
    raw = txn.get(_stats_key(key), db=t.meta)
    return _public(unpack(raw) if raw is not None else {"count": 0, "mean": 0.0, "m2": 0.0})


def all_reward_stats(txn: Txn, t: Tables) -> dict[str, dict[str, Any]]:
    """Every running statistics key with its values."""
    out = {}
    cur = txn.cursor(db=t.meta)
    if cur.set_range(b"rstats:"):
        for key, raw in cur:
            key = bytes(key)
            if not key.startswith(b"rstats:"):
                break
            out[key[7:].decode()] = _public(unpack(raw))
    return out
