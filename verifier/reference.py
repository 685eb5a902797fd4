"""The reference's results for one verification (``Reference``: its outputs at every trial, their rounding
noise, the places two runs disagree, the trials it is undefined on). A plain record: the harness computes it in a
clean process (``verifier.harness.reference_cache``; why a reference cannot judge a candidate is
``verifier.errors.ReferenceFailed``), the gates compare against it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifier.inputs import Trial


@dataclass
class Reference:
    trials: list[Trial]                       # base and widened trials kept, then the second shapes found
    outputs: list[dict[str, Any]]             # per trial: {"structure", "leaves"}
    noise: list[list[float]]                  # per trial, per output leaf
    alt_rejected: list[str] = field(default_factory=list)
    timing: dict[str, Any] | None = None
    bandwidth_gbps: float | None = None
    ignore: list[list[Any]] = field(default_factory=list)   # per trial, per leaf: places two runs differ, or None
    dropped: list[str] = field(default_factory=list)        # widened trials the reference is undefined on
    eval_mode: str = ""                                     # why both sides run in eval mode ("": they do not)
    nondeterministic: list[str] = field(default_factory=list)  # one line per output two runs disagree on

    @property
    def nbytes(self) -> int:
        return sum(leaf.numel() * leaf.element_size() for trial in self.outputs for leaf in trial["leaves"])

    def restricted(self, keep: list[int]) -> Reference:
        """This reference with only the trials at ``keep`` (in that order), their outputs, noise and masks."""
        return replace(self, trials=[self.trials[i] for i in keep], outputs=[self.outputs[i] for i in keep],
                       noise=[self.noise[i] for i in keep],
                       ignore=[self.ignore[i] if i < len(self.ignore) else [] for i in keep])
