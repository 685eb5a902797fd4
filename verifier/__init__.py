"""The verifier: gates, backends, the sandboxed worker and timing. It knows nothing of memory or
LLMs: input = a task and a candidate's files, output = an ``Outcome`` record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifier.config import VerifyConfig
from verifier.errors import SandboxError, ToolchainMissing, UnknownBackend, VerifierError
from verifier.outcome import GATES, GateResult, Outcome
from verifier.task import TaskSpec

if TYPE_CHECKING:
    from verifier.harness.verify import Verifier

__all__ = ["GATES", "GateResult", "Outcome", "SandboxError", "TaskSpec", "ToolchainMissing", "UnknownBackend",
           "VerifierError", "VerifyConfig", "Verifier"]


def __getattr__(name: str) -> type[Verifier]:
    # Verifier pulls in the sandbox and build machinery; import it on first use.
    if name == "Verifier":
        from verifier.harness.verify import Verifier

        return Verifier
    raise AttributeError(name)
