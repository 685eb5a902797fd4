"""Comparing a candidate's outputs with the reference's, strictly, with messages that say what to fix.

Checks, in order: result structure and types, shape, dtype, NaN positions, infinities (position and
sign), then values: ``|got - expected| <= atol + rtol * |expected| + 8 * noise``, where ``noise`` is
the RMS rounding error the float32 reference itself shows against float64 for that output (zero
for exact operators such as ReLU, about 1e-6 for long reductions). A correct reordering of a
reduction passes; a wrong answer does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

NOISE_FACTOR = 8.0


@dataclass
class Mismatch:
    message: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None


@dataclass
class Agreement:
    max_abs_error: float
    max_rel_error: float


def _structure_text(s: Any) -> str:
    t = s.get("t")
    if t in ("tuple", "list"):
        return f"{t} of {len(s['items'])}"
    return t


def _compare_structure(exp: Any, got: Any, path: str) -> str | None:
    if exp.get("t") != got.get("t"):
        return f"{path or 'the result'} is a {_structure_text(got)}, expected a {_structure_text(exp)}"
    if got.get("unsupported"):
        return f"{path or 'the result'} has unsupported type {got['t']}"
    if exp["t"] in ("tuple", "list"):
        if len(exp["items"]) != len(got["items"]):
            return f"{path or 'the result'} has {len(got['items'])} items, expected {len(exp['items'])}"
        for i, (e, g) in enumerate(zip(exp["items"], got["items"])):
            msg = _compare_structure(e, g, f"{path}[{i}]")
            if msg:
                return msg
    if exp["t"] == "tensor" and exp.get("device") != got.get("device"):
        return f"{path or 'the output'} is on {got.get('device')}, expected {exp.get('device')}"
    return None


def _index_text(flat_index: int, shape: torch.Size) -> str:
    if not shape:
        return "()"
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim)
        flat_index //= dim
    return str(tuple(reversed(idx)))


def _max_rel_sampled(diff: torch.Tensor, expected: torch.Tensor, limit: int = 1 << 20) -> float:
    """The largest relative error, over at most ``limit`` evenly spaced elements (for the report only)."""
    step = max(1, diff.numel() // limit)
    d, e = diff.reshape(-1)[::step], expected.reshape(-1)[::step]
    rel = d / e.abs().clamp_min(1e-12)
    return float(torch.nan_to_num(rel, nan=0.0, posinf=0.0).max()) if rel.numel() else 0.0


def compare_outputs(
    expected: dict, got: dict, noise: list[float], tolerance, *, what: str
) -> Mismatch | Agreement:
    """Compare one trial's outputs. ``tolerance(dtype_name) -> (atol, rtol)``; ``what`` names the trial."""
    msg = _compare_structure(expected["structure"], got["structure"], "")
    if msg:
        return Mismatch(f"{what}: {msg}")
    max_abs = max_rel = 0.0
    for i, (e, g) in enumerate(zip(expected["leaves"], got["leaves"])):
        name = "the output" if len(expected["leaves"]) == 1 else f"output {i}"
        if not isinstance(g, torch.Tensor):
            return Mismatch(f"{what}: {name} is not a tensor")
        if g.shape != e.shape:
            return Mismatch(f"{what}: {name} has shape {tuple(g.shape)}, expected {tuple(e.shape)}")
        if g.dtype != e.dtype:
            return Mismatch(f"{what}: {name} has dtype {str(g.dtype)[6:]}, expected {str(e.dtype)[6:]}")
        if not e.is_floating_point():
            if not torch.equal(e, g):
                bad = int((e != g).sum())
                return Mismatch(f"{what}: {name}: {bad} of {e.numel()} values differ (exact match required)")
            continue
        if e.dtype in (torch.float16, torch.bfloat16):
            e, g = e.float(), g.float()
        if not e.numel():
            continue
        diff = (g - e).abs_()
        peak = float(diff.max())
        # Any NaN or infinity in either side shows in the difference: check their masks only then.
        finite_e = None
        if not math.isfinite(peak):
            nan_e, nan_g = torch.isnan(e), torch.isnan(g)
            if not torch.equal(nan_e, nan_g):
                extra, missing = int((nan_g & ~nan_e).sum()), int((nan_e & ~nan_g).sum())
                return Mismatch(f"{what}: {name} has NaN where the reference has none ({extra} places)"
                                if extra else f"{what}: {name} lacks NaN the reference has ({missing} places)")
            inf_e, inf_g = torch.isinf(e), torch.isinf(g)
            if not torch.equal(inf_e, inf_g) or not torch.equal(e[inf_e], g[inf_g]):
                return Mismatch(f"{what}: {name} has infinities in other places or signs than the reference "
                                f"({int(inf_g.sum())} vs {int(inf_e.sum())})")
            finite_e = torch.isfinite(e)
            diff.masked_fill_(~finite_e, 0.0)
            peak = float(diff.max())
        atol, rtol = tolerance(str(e.dtype)[6:])
        leaf_noise = noise[i] if i < len(noise) else 0.0
        allowance = atol + NOISE_FACTOR * leaf_noise
        max_abs = max(max_abs, peak)
        max_rel = max(max_rel, _max_rel_sampled(diff, e))
        excess = diff.sub_(e.abs().mul_(rtol))           # |got - expected| - rtol |expected|, in place
        if finite_e is not None:
            excess.masked_fill_(~finite_e, float("-inf"))
        if float(excess.max()) > allowance:
            bad = excess > allowance
            n_bad = int(bad.sum())
            worst = int(torch.argmax(excess))
            at = _index_text(worst, e.shape)
            noise_text = f" + {NOISE_FACTOR:g} x reference noise {leaf_noise:.1e}" if leaf_noise else ""
            return Mismatch(
                f"{what}: {name}: {n_bad} of {e.numel()} values differ; worst at {at}: got "
                f"{float(g.reshape(-1)[worst]):.6g}, expected {float(e.reshape(-1)[worst]):.6g} "
                f"(tolerance atol {atol:g} + rtol {rtol:g}{noise_text})",
                max_abs, max_rel,
            )
    return Agreement(max_abs, max_rel)
