"""EvoKernel's error base class and one subclass per area of the engine.

Each carries a one-line, actionable message. The CLI and the TUI catch ``user_errors()`` and show
the line; anything else is a bug of ours and keeps its traceback.
"""

from __future__ import annotations


class EvoKernelError(Exception):
    """Base class: something the user can fix, described in one line."""


class TaskError(EvoKernelError):
    """A task or suite could not be found or loaded."""


class ConfigError(EvoKernelError):
    """evokernel.toml or an option is invalid."""


class WorkspaceError(EvoKernelError):
    """The workspace is missing, unreadable or inconsistent."""


class RunAlreadyFinished(WorkspaceError):
    """A run asked to resume has finished meanwhile (another process ran it to its end): nothing to resume."""


class LLMError(EvoKernelError):
    """The LLM endpoint is not configured, unreachable or refused the request."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Every exception type whose message is meant for the user (ours and the layers below)."""
    from store.errors import StoreError
    from verifier import VerifierError

    return (EvoKernelError, VerifierError, StoreError)
