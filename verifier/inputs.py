"""Trial inputs: the task's own ``get_inputs()`` draws, reshaped into several value distributions,
and widened beyond the task's range so a kernel must be right on the operator's domain.

Distributions:

* ``normal``: the task's own draw, as is.
* ``uniform``, ``heavy_tailed`` (tail index 3, like Student-t with 3 degrees of freedom), ``spike``
  (one large value): each keeps the *support* of every floating input as sampled (all >= 0 stays
  >= 0, all in [0, 1] stays in [0, 1], otherwise real-valued).
* ``signed`` and ``wide`` (the *widened* trials): sign-symmetric normal values at the input's own
  RMS, and at 8x it. ``torch.rand`` inputs become negative and larger than one, so a branch the
  task's own draw never reaches (SELU's negative side, Huber's linear part) is exercised.

The widening rule for preconditions. A task may rely on its inputs' range (``log`` of positive
values, probabilities for a binary cross-entropy). Widened trials therefore go through the
reference first: one the reference refuses (raises), or on which more than a tenth of a floating
output is NaN or infinite (log or sqrt of sign-symmetric values: about half), is dropped and the
verdict says so; in one that is kept, every place
where the reference's output is NaN or infinite is not compared (the operator is undefined
there, so any value is right). A task whose precondition the reference does not reveal this way
sets ``WIDEN_INPUTS = False`` at module level and gets no widened trials.

Integer and boolean inputs (labels, indices, masks) are left as the task made them.

Seeds are drawn from the operating system for every verification (``trial_plan``): nothing in
this source predicts the inputs a candidate is checked on. Each trial has a seed for its inputs
and an independent one for the model's parameters, so input rows never repeat the draws behind
the weights. Messages print the seeds so that a failure can be reproduced.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

# Bump when input generation changes.
INPUTS_VERSION = 3

BASE_DISTRIBUTIONS = ("normal", "uniform", "heavy_tailed", "spike")
WIDENED = ("signed", "wide")
DISTRIBUTIONS = BASE_DISTRIBUTIONS + WIDENED
WIDE_FACTOR = 8.0
DESCRIPTIONS = {
    "normal": "the task's own inputs",
    "uniform": "uniform inputs",
    "heavy_tailed": "heavy-tailed inputs",
    "spike": "inputs with a single large spike",
    "signed": "widened inputs: sign-symmetric at the task's magnitude",
    "wide": f"widened inputs: sign-symmetric at {WIDE_FACTOR:g}x the task's magnitude",
}


def new_seed() -> int:
    """A seed from the operating system's random source (62 bits: every torch seeding API takes it)."""
    return secrets.randbits(62)


@dataclass(frozen=True)
class Trial:
    """One correctness trial: an input seed, a distribution, and the sizes it runs at."""

    seed: int
    distribution: str
    overrides: tuple[tuple[str, int], ...] = ()   # sizes changed for this trial (a second shape)
    init_seed: int | None = None                   # seeds the model's parameters (``seed`` when None)
    shape: str = ""                                # "", or which second shape (verifier.task.SHAPE_KINDS)
    case: int | None = None                        # a multi-case task's case (verifier.cases)

    @property
    def model_seed(self) -> int:
        """The seed set before constructing ``Model``/``ModelNew`` (inputs always use ``seed``)."""
        return self.seed if self.init_seed is None else self.init_seed

    @property
    def instance(self) -> tuple[int, tuple[tuple[str, int], ...], int | None]:
        """Which model instance the trial calls: trials with the same parameter seed, sizes and case share
        one (the correctness job builds it once and calls it for each of them)."""
        return self.model_seed, self.overrides, self.case

    @property
    def widened(self) -> bool:
        return self.distribution in WIDENED

    def describe(self, seed: bool = True, case: bool = True) -> str:
        """The trial in words; ``case`` False leaves the case out (the caller names it by its number)."""
        text = DESCRIPTIONS[self.distribution] + (f", seed {self.seed}" if seed else "")
        if self.overrides:
            kind = f" ({self.shape})" if self.shape else ""
            text += f", second shape{kind} " + ", ".join(f"{k}={v}" for k, v in self.overrides)
        if self.case is not None and case:
            text += f", case {self.case + 1}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"seed": self.seed, "distribution": self.distribution,
                             "overrides": [list(p) for p in self.overrides]}
        if self.init_seed is not None:
            d["init_seed"] = self.init_seed
        if self.shape:
            d["shape"] = self.shape
        if self.case is not None:
            d["case"] = self.case
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        return cls(int(d["seed"]), d["distribution"], tuple((k, int(v)) for k, v in d.get("overrides", ())),
                   d.get("init_seed"), d.get("shape", ""), d.get("case"))


def trial_plan(n_base: int, *, widen: bool = True) -> list[Trial]:
    """The trials at the task's own shape, with fresh seeds: over the task's own range (distributions
    in turn), then, with ``widen``, the two widened ones in place of the last repeats (at least the
    four own-range distributions are kept: ``n_base`` = 5 gives 4 + 2). The third trial's model has
    the first trial's parameters, so the performance gate can re-check the instance it timed (which
    has only ever seen the first trial's inputs) on the third trial's unseen inputs."""
    own = max(len(BASE_DISTRIBUTIONS), n_base - len(WIDENED)) if widen else n_base
    params = [new_seed() for _ in range(own)]
    trials = [Trial(seed=new_seed(), distribution=BASE_DISTRIBUTIONS[i % len(BASE_DISTRIBUTIONS)],
                    init_seed=params[0] if i == 2 else params[i]) for i in range(own)]
    if widen:
        trials += [Trial(seed=new_seed(), distribution=d, init_seed=new_seed()) for d in WIDENED]
    return trials


def shape_trial(kind: str, overrides: dict[str, int]) -> Trial:
    """A second-shape trial (``kind``: verifier.task.SHAPE_KINDS) with fresh seeds, on the task's own draw."""
    return Trial(seed=new_seed(), distribution="normal", overrides=tuple(sorted(overrides.items())),
                 init_seed=new_seed(), shape=kind)


def case_trials(base: list[Trial], n_cases: int) -> list[Trial]:
    """The trial plan of a task with ``n_cases`` cases (``verifier.cases``): every case gets the base plan's
    trials (its own seeds), case 0 first so trials 0..2 keep their roles in the performance gate."""
    out = []
    for k in range(max(1, n_cases)):
        for t in base:
            if k == 0:
                out.append(replace(t, case=0))
            else:
                out.append(replace(t, seed=t.seed + 100 * k, case=k,
                                   init_seed=None if t.init_seed is None else t.init_seed + 100 * k))
    return out


def _heavy_tailed(shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """Symmetric, tail index 3 (Student-t with 3 degrees of freedom has the same tail), unit scale:
    sign(u) ((1 - |u|)^(-1/3) - 1) for u uniform in (-1, 1), one draw per value."""
    u = torch.rand(shape, generator=gen).mul_(2.0).sub_(1.0)
    sign = torch.sign(u)
    return u.abs_().neg_().add_(1.0).clamp_min_(1e-12).pow_(-1.0 / 3.0).sub_(1.0).mul_(sign).mul_(1.5)


def _reshape(x: torch.Tensor, distribution: str, gen: torch.Generator) -> torch.Tensor:
    if distribution == "normal" or x.numel() == 0:
        return x
    original = x
    x = x.detach().to("cpu", torch.float32).contiguous()
    sample = x.view(-1)[:: max(1, x.numel() // 65536)]  # statistics from a strided sample
    sample = sample[torch.isfinite(sample)]
    shape = x.shape
    if distribution in WIDENED:
        rms = float(sample.square().mean().sqrt()) if sample.numel() else 1.0
        rms = rms if rms > 0 and math.isfinite(rms) else 1.0
        scale = rms * (WIDE_FACTOR if distribution == "wide" else 1.0)
        return torch.randn(shape, generator=gen).mul_(scale).to(original.dtype).reshape(original.shape)
    lo, hi = (float(v) for v in torch.aminmax(x))
    support = "unit" if lo >= 0.0 and hi <= 1.0 else "nonneg" if lo >= 0.0 else "real"
    mean = float(sample.mean()) if sample.numel() else 0.0
    std = float(sample.std()) if sample.numel() > 1 else 1.0
    std = std if std > 0 and std == std else 1.0
    if distribution == "uniform":
        y = torch.rand(shape, generator=gen)
        if support == "nonneg":
            y.mul_(hi if hi == hi and hi != float("inf") else 1.0)
        elif support == "real":
            y.mul_(2 * std * 3**0.5).add_(mean - std * 3**0.5)
    elif distribution == "heavy_tailed":
        t = _heavy_tailed(shape, gen)
        if support == "unit":
            y = t.mul_(3.0).sigmoid_()
        elif support == "nonneg":
            y = t.abs_().mul_(max(mean, std))
        else:
            y = t.mul_(std).add_(mean)
    elif distribution == "spike":
        y = x.clone()
        flat = y.view(-1)
        index = int(torch.randint(flat.numel(), (1,), generator=gen))
        if support == "unit":
            flat[index] = 1.0
        elif support == "nonneg":
            flat[index] = mean + 50 * std
        else:
            flat[index] = mean + (50 * std if float(torch.rand(1, generator=gen)) < 0.5 else -50 * std)
    else:
        raise ValueError(f"unknown distribution {distribution!r}")
    return y.to(original.dtype).reshape(original.shape)


def make_inputs(get_inputs: Callable[[], list[Any]], trial: Trial) -> list[Any]:
    """Inputs for one trial: ``get_inputs()`` (the trial's case of a multi-case task) under the trial's
    seed, reshaped to its distribution."""
    from verifier.cases import inputs_for

    torch.manual_seed(trial.seed)
    inputs = list(inputs_for(get_inputs, trial.case)())
    stream = (trial.seed * 7919 + DISTRIBUTIONS.index(trial.distribution)) % (1 << 62)
    gen = torch.Generator().manual_seed(stream)
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            out.append(_reshape(x, trial.distribution, gen))
        else:
            out.append(x)
    return out
