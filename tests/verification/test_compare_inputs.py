"""Output comparison and trial inputs."""

from __future__ import annotations

import torch

from verifier.compare import Agreement, Mismatch, compare_outputs
from verifier.inputs import BASE_DISTRIBUTIONS, Trial, make_inputs
from verifier.worker import flatten


def _wrap(value):
    structure, leaves = flatten(value)
    return {"structure": structure, "leaves": leaves}


def cmp(expected, got, noise=(0.0,)):
    return compare_outputs(_wrap(expected), _wrap(got), list(noise), lambda d: (1e-4, 1e-4), what="trial 1")


def test_equal_and_within_tolerance():
    x = torch.randn(100)
    assert isinstance(cmp(x, x.clone()), Agreement)
    assert isinstance(cmp(x, x + 5e-5), Agreement)


def test_value_mismatch_names_the_worst_element():
    x = torch.zeros(4, 4)
    y = x.clone()
    y[2, 3] = 1.0
    verdict = cmp(x, y)
    assert isinstance(verdict, Mismatch)
    assert "1 of 16 values differ" in verdict.message and "(2, 3)" in verdict.message


def test_noise_allowance_accepts_reordering_but_not_errors():
    x = torch.ones(10)
    assert isinstance(cmp(x, x + 1e-3, noise=[2e-4]), Agreement)
    assert isinstance(cmp(x, x + 1e-2, noise=[2e-4]), Mismatch)


def test_strict_structure_shape_dtype_nan_inf():
    x = torch.randn(3, 4)
    assert "shape (4, 3)" in cmp(x, x.t().contiguous()).message
    assert "dtype float64" in cmp(x, x.double()).message
    assert "tuple" in cmp(x, (x,)).message
    y = x.clone()
    y[0, 0] = float("nan")
    assert "NaN where the reference has none" in cmp(x, y).message
    z = x.clone()
    z[0, 0] = float("inf")
    w = x.clone()
    w[0, 0] = -float("inf")
    assert "infinities" in cmp(z, w).message
    assert isinstance(cmp(z, z.clone()), Agreement)
    assert "values differ" in cmp(torch.arange(4), torch.arange(4) + 1).message


def test_trial_inputs_are_deterministic_and_keep_their_support():
    def get_inputs():
        return [torch.randn(64, 64), torch.rand(64, 64), torch.rand(64) + 2.0, torch.randint(0, 10, (64,))]

    for i, dist in enumerate(BASE_DISTRIBUTIONS):
        trial = Trial(seed=i, distribution=dist)
        a, b = make_inputs(get_inputs, trial), make_inputs(get_inputs, trial)
        for x, y in zip(a, b):
            assert torch.equal(x, y)
        real, unit, positive, labels = a
        assert 0 <= float(unit.min()) and float(unit.max()) <= 1
        assert float(positive.min()) >= 0
        torch.manual_seed(trial.seed)
        assert torch.equal(labels, get_inputs()[3])  # integer inputs are left as the task made them
        assert real.shape == (64, 64) and real.dtype == torch.float32
    heavy = make_inputs(get_inputs, Trial(1, "heavy_tailed"))[0]
    normal = make_inputs(get_inputs, Trial(1, "normal"))[0]
    assert float(heavy.abs().max()) > float(normal.abs().max())
    spike = make_inputs(get_inputs, Trial(1, "spike"))[0]
    assert float(spike.abs().max()) > 20
