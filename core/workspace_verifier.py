"""The workspace's verifier: how the engine and the commands get one (configured from the workspace, its
state hidden from candidates, its caches inside the workspace), and the references it times for
``evokernel tasks --time``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.workspace import Workspace
from verifier import Outcome, Verifier, VerifyConfig

if TYPE_CHECKING:
    from core.tasks import Task
    from verifier import VerifierProtocol


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
    from verifier import ReferenceFailed

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


def verify_folder(workspace: Workspace, task: Task, folder: Path, verifier: VerifierProtocol, *,
                  fresh: bool = False, on_gate: Callable[[Any], None] | None = None) -> tuple[Outcome, str]:
    """``evokernel verify``: the candidate in ``folder`` verified for ``task``, and what to say of the record it
    was found in ("" when nothing). When the memory holds an attempt with this code timed beside a best, that
    best is timed beside it again, ``--fresh`` or not: the recorded verdict of that window is found, and a fresh
    one replaces it, so a later plain ``verify`` shows the verdict ``verify --fresh`` just measured (#51: a fresh
    one without the best was recorded apart, and the next ``verify`` showed the older window's)."""
    from core.attempts import recorded_best

    recorded = recorded_best(workspace, task.id, folder, verifier.backend.name)
    outcome = verifier.verify(task.spec(), folder, on_gate, fresh=fresh, best=recorded[1] if recorded else None)
    said = ""
    if recorded and fresh:
        said = (f"timed beside the best that attempt {recorded[0]} of {task.id} was timed beside, as the workbench "
                "did: this verdict replaces the recorded one")
    elif recorded and not outcome.from_cache:
        said = (f"the workbench's verdict for these files (attempt {recorded[0]} of {task.id}) was measured with "
                "other settings (threads, sizes, verifier options or machine): verified again")
    return outcome, said


__all__ = ["Outcome", "Verifier", "open_verifier", "time_references", "verify_folder"]
