"""How the engine and the commands get a verifier: configured from the workspace, its state hidden
from candidates, its caches inside the workspace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.workspace import Workspace
from verifier import Outcome, VerifyConfig
from verifier.harness.verify import Verifier

if TYPE_CHECKING:
    from core.tasks import Task


def open_verifier(workspace: Workspace, backend: str | None = None, config: VerifyConfig | None = None) -> Verifier:
    """A verifier for ``backend`` (default: the workspace's) with the workspace's settings."""
    ws_config = workspace.config()
    cache = workspace.cache_dir if workspace.exists() else None
    return Verifier(backend or ws_config.backend, config or ws_config.verifier, cache_dir=cache,
                    hidden_paths=workspace.private_paths())


def time_references(workspace: Workspace, tasks: Sequence[Task],
                    progress: Callable[[int, int, str, dict[str, Any]], None] | None = None,
                    ) -> dict[str, dict[str, Any]]:
    """Run and time each task's reference (cached per machine): ``{id: {"reference_ms", "second_shape"}}``,
    or ``{id: {"reference_error"}}`` for a reference that fails. ``progress(i, n, task_id, result)`` after each."""
    from verifier.harness.reference import ReferenceFailed

    out: dict[str, dict[str, Any]] = {}
    with open_verifier(workspace) as verifier:
        for i, task in enumerate(tasks, 1):
            try:
                ref = verifier.reference(task.spec())
                assert ref.timing is not None, "a reference that ran was timed"
                out[task.id] = {"reference_ms": ref.timing["median_ms"],
                                "second_shape": dict(ref.trials[-1].overrides) if ref.trials[-1].overrides else None}
            except ReferenceFailed as exc:
                out[task.id] = {"reference_error": str(exc)}
            if progress is not None:
                progress(i, len(tasks), task.id, out[task.id])
    return out


__all__ = ["Outcome", "Verifier", "open_verifier", "recorded_best", "time_references"]


def recorded_best(ws: Workspace, task_id: str, folder: Path, backend: str) -> tuple[str, dict[str, str]] | None:
    """When the memory holds an attempt of ``task_id`` with this code (comments and spacing aside,
    ``candidate_identity``) that was timed beside a best: (that attempt as the workbench names it, ``#n``,
    the best's files). Passing the same best to the verifier finds the verdict it recorded for that window."""
    from core.attempts import attempt_numbers
    from core.workspace_files import read_candidate_files
    from store import Store
    from store.errors import SchemaMismatch, StoreNotFound, StoreUnreadable
    from verifier.harness.candidate_files import candidate_identity

    if not ws.memory_path.exists():
        return None
    identity = candidate_identity(read_candidate_files(folder))
    try:
        with Store.open(ws.memory_path, readonly=True) as store:
            for exp in store.iter_experiences(task=task_id, backend=backend):
                best_id = (exp.extra or {}).get("best")
                if (exp.backend == backend and best_id and exp.files and exp.kind != "not_judged"
                        and (exp.code_id or candidate_identity(exp.files)) == identity):
                    best = store.get(best_id)
                    if best is not None and best.files:
                        number = attempt_numbers(store, [task_id]).get(exp.id)
                        return (f"#{number}" if number else exp.id), dict(best.files)
    except (StoreNotFound, StoreUnreadable, SchemaMismatch):
        return None   # a memory that cannot be read: verify as if none was recorded
    return None
