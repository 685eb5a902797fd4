"""Memory browsing for the CLI and the TUI: stats, list, show, export and import as plain data.

Each function takes the path of a memory (``<workspace>/.evokernel/memory.lmdb``), opens it for as
long as the call lasts (read-only unless it writes) and returns dicts and lists that print as JSON.
A workspace without a memory raises ``store.errors.StoreNotFound`` with a one-line message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from store import Experience, Store
from store.experiences import FILTERS, SORTS
from store.records import KINDS, SOURCES

STAGES = ("draft", "refine")
__all__ = ["KINDS", "SOURCES", "SORTS", "STAGES", "export_memory", "import_memory", "list_experiences",
           "memory_stats", "show_experience", "summary"]


def summary(exp: Experience) -> dict[str, Any]:
    """The one-line view of an experience: identity, filters, values and the outcome's headline."""
    outcome = exp.outcome or {}
    return {
        "id": exp.id, "task": exp.task_id, "kind": exp.kind, "stage": exp.stage, "backend": exp.backend,
        "source": exp.source, "title": exp.title, "reward": exp.reward, "q1": exp.q1, "q2": exp.q2,
        "n1": exp.n1, "n2": exp.n2, "adoptions": exp.adoptions, "created_at": exp.created_at,
        "parent_id": exp.parent_id, "model": exp.model, "feasible": outcome.get("feasible"),
        "failed_gate": outcome.get("failed_gate"), "latency_ms": outcome.get("latency_ms"),
        "speedup": outcome.get("speedup"),
    }


def memory_stats(path: Path) -> dict[str, Any]:
    """Counts by kind, stage, backend and source, sizes and running reward statistics."""
    with Store.open(path, readonly=True) as store:
        return store.stats()


def list_experiences(
    path: Path, *, filters: dict[str, str | None] | None = None, sort: str = "recency", descending: bool = True,
    limit: int | None = 50, offset: int = 0,
) -> dict[str, Any]:
    """A page of experience summaries: ``{"total": matching, "items": [...]}``."""
    filters = {k: v for k, v in (filters or {}).items() if k in FILTERS}
    with Store.open(path, readonly=True) as store:
        items = store.query(**filters, sort=sort, descending=descending, limit=limit, offset=offset)
        total = store.count(**filters)
    return {"total": total, "offset": offset, "sort": sort, "filters": filters, "items": [summary(e) for e in items]}


def show_experience(path: Path, exp_id: str) -> dict[str, Any]:
    """Everything about one experience (id or unique id prefix), with its parent and children."""
    with Store.open(path, readonly=True) as store:
        exp = store.get(store.resolve_id(exp_id))
        parent = store.get(exp.parent_id) if exp.parent_id else None
        children = store.children(exp.id)
    data = exp.to_dict()
    data["parent"] = summary(parent) if parent else None
    data["children"] = [summary(c) for c in children]
    return data


def export_memory(path: Path, out: Path, *, filters: dict[str, str | None] | None = None) -> int:
    """Write the experiences passing ``filters`` to the JSON Lines file ``out``; returns how many."""
    filters = {k: v for k, v in (filters or {}).items() if k in FILTERS}
    with Store.open(path, readonly=True) as store:
        return store.export_jsonl(out, **filters)


def import_memory(path: Path, source: Path) -> dict[str, int]:
    """Add the experiences of a JSON Lines export (creating the memory if needed)."""
    with Store.open(path) as store:
        added, skipped = store.import_jsonl(source)
        total = store.count()
    return {"added": added, "skipped": skipped, "total": total}
