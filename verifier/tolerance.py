"""The correctness tolerance: one function from a task, an output's dtype and the verifier's settings to
the ``(atol, rtol)`` its outputs are held to.

Whichever is given first decides, each separately for atol and rtol:

1. the task's own ``ATOL`` / ``RTOL`` (module-level constants of its reference, ``TaskSpec.atol``/``rtol``);
2. the workspace's ``[verifier] atol`` / ``rtol`` (``VerifyConfig``);
3. the backend's default for the dtype (``Backend.tolerance``: CPU float32 1e-4), no tighter than the
   dtype's floor (``LOW_PRECISION_TOLERANCE``: float16 1e-2, bfloat16 3e-2).

The correctness gate and the performance gate's checks of every timed call apply it
(``verifier.compare.compare_outputs``, which also allows a multiple of the reference's own
rounding noise on top of ``atol``), and the prompts state it: both ask the verifier
(``VerifierProtocol.tolerance_for``, on this machine and on a cluster alike), so a prompt never states a
tolerance other than the one applied.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from verifier.cases import canonical_dtype

if TYPE_CHECKING:
    from verifier.config import VerifyConfig
    from verifier.task import TaskSpec

class Defaults(Protocol):
    """What the tolerance reads of a backend (``verifier.backends.base.Backend.tolerance``): its default (atol,
    rtol) for an output's dtype."""

    def tolerance(self, dtype: str) -> tuple[float, float]: ...


Tolerance = Callable[[str], tuple[float, float]]
"""(atol, rtol) for an output's dtype name: one task's tolerance under one verifier (``tolerance_for``)."""

LOW_PRECISION_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}
"""Floor of (atol, rtol) for outputs in a low-precision dtype: a kernel that accumulates in float32 and
rounds once differs from a reference that rounds at every step by a few units in the last place."""


def floored(dtype: str, atol: float, rtol: float) -> tuple[float, float]:
    """``(atol, rtol)`` for outputs of ``dtype``, no tighter than that dtype's floor."""
    floor = LOW_PRECISION_TOLERANCE.get(canonical_dtype(dtype))
    if floor is None:
        return atol, rtol
    return max(atol, floor[0]), max(rtol, floor[1])


def tolerance(task: TaskSpec, dtype: str, config: VerifyConfig, backend: Defaults) -> tuple[float, float]:
    """``(atol, rtol)`` for ``task``'s outputs of ``dtype`` under ``config`` on ``backend``: see the module's
    docstring for which setting decides."""
    atol, rtol = floored(dtype, *backend.tolerance(canonical_dtype(dtype)))
    atol = task.atol if task.atol is not None else config.atol if config.atol is not None else atol
    rtol = task.rtol if task.rtol is not None else config.rtol if config.rtol is not None else rtol
    return atol, rtol


def tolerance_for(task: TaskSpec, config: VerifyConfig, backend: Defaults) -> Tolerance:
    """``tolerance`` for one task under one verifier, as a function of the output's dtype (what the gates
    and the prompts take)."""
    return functools.partial(_of_dtype, task, config, backend)


def _of_dtype(task: TaskSpec, config: VerifyConfig, backend: Defaults, dtype: str) -> tuple[float, float]:
    return tolerance(task, dtype, config, backend)
