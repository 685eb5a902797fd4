"""Seed knowledge M0: per-backend API templates and best practices shipped as Markdown files under
``core/knowledge/<backend>/``, loaded into memory on first use (idempotently: the store drops
near-duplicates, so loading twice adds nothing).

A file starts with a small header::

    ---
    kind: api_template            (or best_practice)
    title: OpenMP parallel loops and reductions
    names: omp, parallel, reduction, sum
    ---
    body in Markdown
"""

from __future__ import annotations

from pathlib import Path

from store import Experience
from store.protocol import Memory
from verifier import knowledge_folder

KNOWLEDGE_ROOT = Path(__file__).parent / "knowledge"


def knowledge_dir(backend: str) -> Path:
    """The backend's seed-knowledge folder: the one its class declares (``knowledge_dir``, a plugin
    backend's own), else ``core/knowledge/<backend>``."""
    folder = knowledge_folder(backend)
    return Path(folder) if folder else KNOWLEDGE_ROOT / backend
# The task id of knowledge that belongs to no one task (seed items, consolidated rules).
GENERAL_TASK = "*"


def _parse(path: Path, backend: str) -> Experience:
    text = path.read_text()
    meta: dict[str, str] = {}
    body = text
    if text.startswith("---"):
        head, _, body = text[3:].partition("\n---")
        for line in head.strip().splitlines():
            key, _, value = line.partition(":")
            meta[key.strip()] = value.strip()
        body = body.lstrip("-").lstrip("\n")
    names = [n.strip() for n in meta.get("names", "").split(",") if n.strip()]
    return Experience(
        task_id=GENERAL_TASK, kind=meta.get("kind", "api_template"), backend=backend, stage="",
        title=meta.get("title", path.stem), text=body.strip(), source="seed",
        signature={"text": f"{meta.get('title', '')} {' '.join(names)}"},
        extra={"names": names, "seed_file": f"{backend}/{path.name}"},
    )


def seed_items(backend: str) -> list[Experience]:
    """The seed knowledge of ``backend`` (empty when it ships none)."""
    folder = knowledge_dir(backend)   # the backend's own folder (a plugin's), else core/knowledge/<backend>
    return [_parse(p, backend) for p in sorted(folder.glob("*.md"))] if folder.is_dir() else []


def ensure_seeded(store: Memory, backend: str) -> int:
    """Load ``backend``'s seed knowledge into ``store``; returns how many items were new."""
    results = store.add_experiences(seed_items(backend))
    return sum(1 for _, created in results if created)


def api_items(store: Memory, backend: str) -> list[Experience]:
    """The API templates in memory for ``backend`` (seeded or imported)."""
    return [e for e in store.query(kind="api_template", backend=backend, limit=None) if e.text]
