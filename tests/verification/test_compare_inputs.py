"""Output comparison and trial inputs."""

from __future__ import annotations

import torch

from verifier.compare import Agreement, Mismatch, compare_outputs
from verifier.inputs import BASE_DISTRIBUTIONS, Trial, make_inputs
from verifier.job.tensors import flatten


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


def test_a_sum_accumulated_in_order_passes_where_a_dropped_term_or_bfloat16_inputs_fail():
    """PyTorch sums long rows in cascades; a kernel's plain loop accumulates in order and rounds more
    (here 14 times the reference's own noise at one row: refused when 8 times was the allowance).
    Wrong sums stay far outside: one term dropped, inputs rounded to bfloat16."""
    import numpy as np

    torch.manual_seed(4)
    x = torch.randn(64, 65536)
    expected = x.sum(1)
    noise = float((expected.double() - x.double().sum(1)).pow(2).mean().sqrt())
    in_order = torch.from_numpy(np.add.accumulate(x.numpy(), axis=1, dtype=np.float32)[:, -1].copy())
    assert isinstance(cmp(expected, in_order, noise=[noise]), Agreement)
    dropped = (x.double().sum(1) - x[:, 0].double()).float()
    assert "values differ" in cmp(expected, dropped, noise=[noise]).message
    rounded = x.bfloat16().double().sum(1).float()
    assert "values differ" in cmp(expected, rounded, noise=[noise]).message


def test_the_reordering_allowance_is_capped_by_the_outputs_size():
    """An output whose reference noise is large against its values gets at most 0.1 % of their RMS
    beyond 8 times the noise: never the 256 times meant for long sums."""
    from verifier.compare import noise_allowed

    assert noise_allowed(1e-6, 1.0) == 256e-6                  # a long sum: the reordering allowance
    assert noise_allowed(1e-4, 1.0) == 1e-3                    # capped at 0.1 % of the RMS
    assert noise_allowed(1e-3, 1.0) == 8e-3                    # never below 8 times the noise
    assert noise_allowed(0.0, 1.0) == 0.0                      # exact operators: nothing


def test_a_half_precision_output_is_judged_by_its_own_dtypes_tolerance():
    """Found by a model played through the loopback server on a public multi-case gelu: an fp16 output
    one unit in the last place from the reference (-0.127808 vs -0.12793) was refused at float32's
    atol 1e-4, though the prompt (and the backend) say fp16 is judged at 1e-2. The comparison widened
    the values to float32 before asking for the tolerance, and asked by the widened dtype."""
    asked: list[str] = []

    def tolerance(dtype: str) -> tuple[float, float]:
        asked.append(dtype)
        return (1e-2, 1e-2) if dtype in ("float16", "bfloat16") else (1e-4, 1e-4)

    for dtype in (torch.float16, torch.bfloat16):
        e = torch.full((8,), -0.12793, dtype=dtype)
        g = e.clone()
        g.view(torch.int16)[3] -= 1                  # one unit in the last place (fp16: -0.127808)
        assert not torch.equal(e, g)
        out = compare_outputs(_wrap(e), _wrap(g), [0.0], tolerance, what="trial 1")
        assert isinstance(out, Agreement), out
        bad = g.clone()
        bad[5] = -0.2
        assert isinstance(compare_outputs(_wrap(e), _wrap(bad), [0.0], tolerance, what="trial 1"), Mismatch)
    assert set(asked) == {"float16", "bfloat16"}
