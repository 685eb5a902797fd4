"""Errors of the verifier's own making (bad arguments, missing toolchain). A failing candidate is
an ``Outcome``, never one of these."""

from __future__ import annotations


class VerifierError(Exception):
    """Base class: one line, actionable."""


class UnknownBackend(VerifierError):
    """A backend name that is not in the table; the message lists the valid ones."""


class ToolchainMissing(VerifierError):
    """The backend's compiler, SDK or device is not available here."""


class SandboxError(VerifierError):
    """The sandbox could not be started (not a candidate's failure)."""


class ReferenceFailed(VerifierError):
    """The task's own reference could not run: the task is broken, not the candidate."""


class NondeterministicReference(ReferenceFailed):
    """The reference gives different results on the same inputs, in training and in eval mode, at most
    places of an output: it cannot judge a candidate (the task's fault, not the candidate's)."""
