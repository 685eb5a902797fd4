"""What ``Store.stats`` reports of the memory, read in one transaction."""

from __future__ import annotations

from typing import Any

from store import experiences, values
from store.codec import unpack
from store.schema import Tables, Txn


def store_stats(txn: Txn, t: Tables) -> dict[str, Any]:
    """Counts by kind, stage, backend and source; table sizes; mean values; reward statistics."""
    by: dict[str, dict[str, int]] = {f: {} for f in ("kind", "stage", "backend", "source")}
    tasks: set[str] = set()
    q1 = q2 = 0.0
    n = 0
    for _, row in experiences.matching_rows(txn, t, {}):
        n += 1
        for f, counts in by.items():
            counts[row[f]] = counts.get(row[f], 0) + 1
        tasks.add(row["task"])
        q1 += row["q1"]
        q2 += row["q2"]
    sizes = {}
    for name in ("exp", "row", "hist", "blob", "cache"):
        st = txn.stat(getattr(t, name))
        sizes[name] = (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * st["psize"]
    seq_raw = txn.get(b"seq", db=t.meta)
    return {
        "experiences": n, "tasks_with_experiences": len(tasks),
        "by_kind": by["kind"], "by_stage": by["stage"], "by_backend": by["backend"],
        "by_source": by["source"],
        "mean_q1": q1 / n if n else 0.0, "mean_q2": q2 / n if n else 0.0,
        "task_states": txn.stat(t.tasks)["entries"], "runs": txn.stat(t.runs)["entries"],
        "cache_entries": txn.stat(t.cache)["entries"], "blobs": txn.stat(t.blob)["entries"],
        "bytes": sizes, "last_seq": unpack(seq_raw) if seq_raw is not None else 0,
        "reward_stats": values.all_reward_stats(txn, t),
    }
