"""Trial inputs: the task's own ``get_inputs()`` reshaped into several value distributions.

Each distribution keeps the *support* of every floating input as sampled (all >= 0 stays >= 0, all
in [0, 1] stays in [0, 1], otherwise real-valued), so domain-restricted operators stay defined.
Integer and boolean inputs (labels, indices, masks) are left as the task made them. Both the
reference and the candidate build inputs with this function from the same seed, so neither needs
the other's data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# Bump when input generation changes: cached reference outputs depend on it.
INPUTS_VERSION = 2

DISTRIBUTIONS = ("normal", "uniform", "heavy_tailed", "spike")
DESCRIPTIONS = {
    "normal": "the task's own inputs",
    "uniform": "uniform inputs",
    "heavy_tailed": "heavy-tailed (Student-t) inputs",
    "spike": "inputs with a single large spike",
}


@dataclass(frozen=True)
class Trial:
    """One correctness trial: a seed, a distribution, and the sizes it runs at."""

    seed: int
    distribution: str
    overrides: tuple[tuple[str, int], ...] = ()   # sizes changed for this trial (the second shape)
    init_seed: int | None = None                   # seeds the model's parameters when not ``seed``
    case: int | None = None                        # a multi-case task's case (verifier.cases)

    @property
    def model_seed(self) -> int:
        """The seed set before constructing ``Model``/``ModelNew`` (inputs always use ``seed``)."""
        return self.seed if self.init_seed is None else self.init_seed

    def describe(self) -> str:
        text = f"{DESCRIPTIONS[self.distribution]}, seed {self.seed}"
        if self.overrides:
            text += ", second shape " + ", ".join(f"{k}={v}" for k, v in self.overrides)
        if self.case is not None:
            text += f", case {self.case + 1}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = {"seed": self.seed, "distribution": self.distribution, "overrides": [list(p) for p in self.overrides]}
        if self.init_seed is not None:
            d["init_seed"] = self.init_seed
        if self.case is not None:
            d["case"] = self.case
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trial":
        return cls(d["seed"], d["distribution"], tuple((k, int(v)) for k, v in d.get("overrides", ())),
                   d.get("init_seed"), d.get("case"))


def trial_plan(n_base: int) -> list[Trial]:
    """The base-shape trials: distributions in turn, a new seed each. The third trial's model has the
    first trial's parameters, so the performance gate can re-check the instance it timed (which has
    only ever seen the first trial's inputs) on the third trial's unseen inputs."""
    return [Trial(seed=1000 + i, distribution=DISTRIBUTIONS[i % len(DISTRIBUTIONS)],
                  init_seed=1000 if i == 2 else None) for i in range(n_base)]


def _student_t3(shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """Student-t with 3 degrees of freedom: z / sqrt(chi2_3 / 3), chi2_3 = 2 Exp(1) + z'^2."""
    z = torch.randn(shape, generator=gen)
    chi2 = torch.rand(shape, generator=gen).clamp_min_(1e-12).log_().mul_(-2.0)
    chi2.add_(torch.randn(shape, generator=gen).square_())
    return z.div_(chi2.div_(3.0).sqrt_())


def _reshape(x: torch.Tensor, distribution: str, gen: torch.Generator) -> torch.Tensor:
    if distribution == "normal" or x.numel() == 0:
        return x
    original = x
    x = x.detach().to("cpu", torch.float32).contiguous()
    lo, hi = (float(v) for v in torch.aminmax(x))
    support = "unit" if lo >= 0.0 and hi <= 1.0 else "nonneg" if lo >= 0.0 else "real"
    sample = x.view(-1)[:: max(1, x.numel() // 65536)]  # statistics from a strided sample
    sample = sample[torch.isfinite(sample)]
    mean = float(sample.mean()) if sample.numel() else 0.0
    std = float(sample.std()) if sample.numel() > 1 else 1.0
    std = std if std > 0 and std == std else 1.0
    shape = x.shape
    if distribution == "uniform":
        y = torch.rand(shape, generator=gen)
        if support == "nonneg":
            y.mul_(hi if hi == hi and hi != float("inf") else 1.0)
        elif support == "real":
            y.mul_(2 * std * 3**0.5).add_(mean - std * 3**0.5)
    elif distribution == "heavy_tailed":
        t = _student_t3(shape, gen)
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


def make_inputs(get_inputs, trial: Trial) -> list[Any]:
    """Inputs for one trial: ``get_inputs()`` (the trial's case of a multi-case task) under the trial's
    seed, reshaped to its distribution."""
    from verifier.cases import inputs_for

    torch.manual_seed(trial.seed)
    inputs = list(inputs_for(get_inputs, trial.case)())
    gen = torch.Generator().manual_seed(trial.seed * 7919 + DISTRIBUTIONS.index(trial.distribution))
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            out.append(_reshape(x, trial.distribution, gen))
        else:
            out.append(x)
    return out
