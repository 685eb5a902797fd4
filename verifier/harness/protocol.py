"""The verifier seam: what the engine needs of a verifier, whichever machine runs the gates.

Two implementations: ``verifier.harness.verify.Verifier`` runs every gate in this process's sandbox, and
``verifier.harness.cluster.ClusterVerifier`` sends each verification to a verifier actor on a Ray node.
Both return the same ``Outcome``; the engine cannot tell them apart except by what the cluster
one adds (``Outcome.node``, ``cancel``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from verifier.errors import VerifierError
from verifier.outcome import GateResult, Outcome
from verifier.task import TaskSpec
from verifier.tolerance import Tolerance


class VerificationCancelled(VerifierError):
    """A verification was abandoned because the run was stopped (nothing about the candidate)."""


@runtime_checkable
class VerifierProtocol(Protocol):
    """A verifier for one backend."""

    backend: Any
    """The backend object (``backend.name`` is the backend's name)."""

    def verify(self, task: TaskSpec, candidate: str | Path | dict[str, str],
               on_gate: Callable[[GateResult], None] | None = None, *, fresh: bool = False,
               best: dict[str, str] | None = None) -> Outcome:
        """Run every gate and return the Outcome (a failing candidate is an Outcome, never an error).
        ``on_gate`` hears each gate's verdict; ``best``: the task's best files, timed beside the candidate."""
        ...

    def tolerance_for(self, task: TaskSpec) -> Tolerance:
        """The ``(atol, rtol)`` the gates hold ``task``'s outputs to, per output dtype (``verifier.tolerance``):
        what prompts state, so it must be what this verifier's gates apply."""
        ...

    def close(self) -> None:
        """Release sandboxes, actors and connections."""
        ...
