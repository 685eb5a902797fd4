"""Every numerical claim the CPU seed knowledge makes (core/knowledge/cpu/) checked against what PyTorch
really computes here: accumulation precision, formulas and constants, NaN/Inf behaviour. Each test
first finds its claim in the file, so a changed claim is a failing test until it is checked again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

KNOWLEDGE = Path(__file__).parents[2] / "core" / "knowledge" / "cpu"


def _text(name: str) -> str:
    return " ".join((KNOWLEDGE / name).read_text().split())


def _claims(name: str, *phrases: str) -> None:
    text = _text(name)
    for phrase in phrases:
        assert phrase in text, f"{name} no longer says {phrase!r}: check the claim again"


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scans_accumulate_in_double_like_pytorch(op):
    _claims("scans.md", "Keep the running sum (or product) in `double` and store it as `float`",
            "their outputs equal a double running sum rounded to float, exactly")
    gen = torch.Generator().manual_seed(0)
    n = 1 << 20 if op == "cumsum" else 1 << 16
    x = torch.rand(n, generator=gen) * 2 - 0.5 if op == "cumsum" else torch.rand(n, generator=gen) * 0.2 + 0.9
    got = getattr(torch, op)(x, 0).numpy()
    as_double = getattr(np, op)(x.numpy().astype(np.float64)).astype(np.float32)
    assert np.array_equal(got, as_double)
    rows = torch.rand(4, 70_000, generator=gen) - 0.3    # along a dimension, rows longer than 64K
    assert np.array_equal(torch.cumsum(rows, 1).numpy(),
                          np.cumsum(rows.numpy().astype(np.float64), axis=1).astype(np.float32))


def test_a_float_running_sum_drifts_as_the_scans_item_says():
    _claims("scans.md", "by 8.5 after 1M values in [-0.5, 1.5]")
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1 << 20, generator=gen) * 2 - 0.5
    in_float = np.cumsum(x.numpy(), dtype=np.float32)      # sequential float32 running sum
    drift = float(np.abs(torch.cumsum(x, 0).numpy() - in_float).max())
    assert 1.0 < drift < 50.0        # several units: far beyond atol = rtol = 1e-4 at sums near 5e5


def test_gelu_exact_is_the_default_and_tanh_only_when_asked():
    _claims("math.md", "`gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))` (exact, the default)",
            "the tanh form only with `approximate='tanh'`")
    x = torch.linspace(-8, 8, 10_001, dtype=torch.float64)
    exact = 0.5 * x * (1 + torch.erf(x / np.sqrt(2)))
    tanh = 0.5 * x * (1 + torch.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    assert torch.allclose(torch.nn.functional.gelu(x), exact, atol=1e-12, rtol=0)
    assert torch.allclose(torch.nn.functional.gelu(x, approximate="tanh"), tanh, atol=1e-12, rtol=0)
    assert (exact - tanh).abs().max() > 1e-4       # the two forms differ beyond the CPU tolerance


def test_sigmoid_and_silu_formulas_and_their_large_inputs():
    _claims("math.md", "`sigmoid(x) = 1 / (1 + exp(-x))`", "`silu(x) = x * sigmoid(x)`",
            "`exp(-x)` overflow in sigmoid is fine: 1/(1+inf) = 0")
    x = torch.tensor([-1e4, -100.0, -88.8, -3.0, 0.0, 3.0, 100.0, 1e4, float("inf"), float("-inf")])
    with np.errstate(over="ignore"):
        formula = 1 / (1 + np.exp(-x.numpy()))
    assert np.allclose(torch.sigmoid(x).numpy(), formula, atol=1e-7, rtol=1e-6)
    assert np.all(np.isfinite(formula))
    finite = x[torch.isfinite(x)]
    assert torch.allclose(torch.nn.functional.silu(finite), finite * torch.sigmoid(finite), atol=1e-6, rtol=1e-6)


def test_softplus_threshold_and_formula():
    _claims("math.md", "`softplus(x) = x > 20 ? x : log1p(exp(x))` (beta 1, threshold 20)")
    x = torch.tensor([-100.0, -20.0, -1.0, 0.0, 1.0, 19.9, 20.0, 20.1, 50.0, float("inf"), float("-inf")])
    formula = torch.where(x > 20, x, torch.log1p(torch.exp(x)))
    # equal up to float32 denormals (exp(-100) is one; vectorised and scalar exp differ there)
    assert torch.allclose(torch.nn.functional.softplus(x), formula, atol=1e-37, rtol=1e-6)
    assert torch.nn.functional.softplus(torch.tensor([20.0, 20.5]))[1].item() == 20.5   # above 20: x itself


def test_selu_constants_and_elu_formula():
    _claims("math.md", "alpha = 1.6732632423543772, scale = 1.0507009873554805",
            "`elu(x) = x > 0 ? x : alpha (exp(x) - 1)`")
    x = torch.linspace(-10, 10, 2001, dtype=torch.float64)
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    selu = scale * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))
    assert torch.allclose(torch.selu(x), selu, atol=1e-12, rtol=0)
    assert torch.allclose(torch.nn.functional.elu(x, alpha=0.7), torch.where(x > 0, x, 0.7 * (torch.exp(x) - 1)),
                          atol=1e-12, rtol=0)


def test_layer_norm_uses_the_biased_variance():
    _claims("reductions.md", "the biased variance (divide by N)")
    x = torch.randn(4, 33, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    eps = 1e-5
    mean = x.mean(-1, keepdim=True)
    biased = ((x - mean) ** 2).mean(-1, keepdim=True)
    ours = (x - mean) / torch.sqrt(biased + eps)
    assert torch.allclose(torch.nn.functional.layer_norm(x, (33,), eps=eps), ours, atol=1e-12)
    unbiased = (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps)
    assert not torch.allclose(torch.nn.functional.layer_norm(x, (33,), eps=eps), unbiased, atol=1e-4)


def test_the_contract_s_relu_keeps_nan_and_negative_zero_like_pytorch(tmp_path):
    """Every prompt carries the contract's relu kernel, and every prompt asks for "NaN/Inf where the reference has
    them"; the kernel was `x > 0 ? x : 0`, which turns NaN into 0 where torch.relu keeps it (a model-played run
    copied the pattern into its first kernels). Built with g++ as the CPU backend builds it and run on NaN, ±0 and
    ±inf beside torch.relu."""
    import ctypes
    import re
    import subprocess

    text = (KNOWLEDGE / "contract.md").read_text()
    source = re.search(r"```cpp file=kernel\.cpp\n(.*?)```", text, re.S).group(1)
    assert "relu_forward" in source
    (tmp_path / "kernel.cpp").write_text(source)
    subprocess.run(["g++", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17",
                    str(tmp_path / "kernel.cpp"), "-o", str(tmp_path / "kernel.so")], check=True)
    lib = ctypes.CDLL(str(tmp_path / "kernel.so"))
    x = torch.tensor([float("nan"), -0.0, 0.0, -1.5, 2.5, float("inf"), float("-inf")] * 40)
    out = torch.empty_like(x)
    lib.relu_forward(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(x.numel()))
    want = torch.relu(x)
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out.nan_to_num(), want.nan_to_num())
    assert torch.equal(out.signbit(), want.signbit())
    _claims("vectorization.md", "branch-free (`x < 0.f ? 0.f : x` becomes a blend)")
