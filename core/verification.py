"""How the engine and the commands get a verifier: configured from the workspace, its state hidden
from candidates, its caches inside the workspace."""

from __future__ import annotations

from verifier import Outcome, VerifyConfig
from verifier.verify import Verifier

from core.workspace import Workspace


def open_verifier(workspace: Workspace, backend: str | None = None, config: VerifyConfig | None = None) -> Verifier:
    """A verifier for ``backend`` (default: the workspace's) with the workspace's settings."""
    ws_config = workspace.config()
    cache = workspace.cache_dir if workspace.exists() else None
    return Verifier(backend or ws_config.backend, config or ws_config.verifier, cache_dir=cache,
                    hidden_paths=workspace.private_paths())


__all__ = ["Outcome", "Verifier", "open_verifier"]
