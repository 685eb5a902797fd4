"""Comparing a candidate's outputs with the reference's, strictly, with messages that say what to fix.

Checks, in order: result structure and types, shape, dtype, NaN positions, infinities (position and
sign), then values, two ways:

* element-wise: ``|got - expected| <= atol + rtol * |expected| + k * noise``, where ``noise`` is
  the RMS rounding error the float32 reference itself shows against float64 for that output (zero
  for exact operators such as ReLU, about 1e-6 for long reductions) and ``k`` is 256 while that stays
  under 0.1 % of the output's RMS, never below 8 (``noise_allowed``: a kernel accumulating in order
  rounds more than PyTorch's cascaded sums);
* norm-wise, per output: ``||got - expected|| <= max(2 rtol, 1e-3) * ||expected|| + k * noise * sqrt(n)``
  (2-norms over the n values compared). ``atol`` alone would accept an output of zeros wherever the
  reference is small (a softmax over long rows, every value about 1/dim); this bound does not,
  whatever the magnitude.

A correct reordering of a reduction passes both; a wrong answer does not. Places the reference
cannot decide are left out of both: where two runs of the reference differ (``ignore``), and, in a
widened trial, where the reference is NaN or infinite (the operator is undefined there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from verifier.tolerance import Tolerance

NOISE_FACTOR = 8.0          # always allowed: this many times the reference's own rounding noise
REORDER_FACTOR = 256.0      # allowed while under REORDER_CAP of the output's RMS: see noise_allowed
REORDER_CAP = 1e-3
NORM_RTOL_FACTOR = 2.0
NORM_RTOL_FLOOR = 1e-3


def noise_allowed(noise: float, rms: float) -> float:
    """What rounding may add to ``atol`` for an output whose float32 reference shows RMS rounding
    ``noise`` against float64 and whose values have RMS ``rms``.

    The reference's own noise understates a correct kernel's: PyTorch sums in cascades, while a
    kernel's natural loop accumulates in order. Measured on row sums of 1K to 4M float32 values
    (``bench/tolerance_margin.py``), in-order, 8- and 16-lane and 4-chunk accumulations need up to
    69 times the reference's noise, while dropping one term needs 1,973 times and more (where rtol
    does not already hide it) and rounding inputs to bfloat16 19,275 times. So up to
    ``REORDER_FACTOR`` times the noise is allowed, but never more than ``REORDER_CAP`` of the
    output's RMS (an ill-conditioned output, whose noise is large, gets no wider allowance than
    that) and never less than ``NOISE_FACTOR`` times the noise."""
    return max(NOISE_FACTOR * noise, min(REORDER_FACTOR * noise, REORDER_CAP * rms))


def norm_rtol(rtol: float) -> float:
    """The norm-wise relative bound for an element-wise ``rtol``."""
    return max(NORM_RTOL_FACTOR * rtol, NORM_RTOL_FLOOR)


@dataclass
class Mismatch:
    message: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None


@dataclass
class Agreement:
    max_abs_error: float
    max_rel_error: float
    norm_rel_error: float = 0.0


def _structure_text(s: Any) -> str:
    t = s.get("t")
    if t in ("tuple", "list"):
        return f"{t} of {len(s['items'])}"
    return str(t)


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


def _norm(x: torch.Tensor) -> float:
    """The 2-norm, in the tensor's own precision unless that overflows."""
    value = float(torch.linalg.vector_norm(x))
    return value if math.isfinite(value) else float(torch.linalg.vector_norm(x.double()))


def compare_outputs(
    expected: dict[str, Any], got: dict[str, Any], noise: list[float], tolerance: Tolerance, *, what: str,
    ignore: list[torch.Tensor | None] | None = None, undefined_ok: bool = False,
) -> Mismatch | Agreement:
    """Compare one trial's outputs. ``tolerance(dtype_name) -> (atol, rtol)``; ``what`` names the trial.
    ``ignore``: per output, a mask of places not compared (None: all compared). ``undefined_ok``: places
    where the reference is NaN or infinite are not compared (a widened trial). Each output in turn: its kind,
    shape and dtype; an integer or boolean output exactly; a floating one by ``_compare_floats``."""
    msg = _compare_structure(expected["structure"], got["structure"], "")
    if msg:
        return Mismatch(f"{what}: {msg}")
    max_abs = max_rel = max_norm = 0.0
    for i, (e, g) in enumerate(zip(expected["leaves"], got["leaves"])):
        name = "the output" if len(expected["leaves"]) == 1 else f"output {i}"
        skip = ignore[i] if ignore is not None and i < len(ignore) else None
        if skip is not None and (skip.shape != e.shape or not bool(skip.any())):
            skip = None
        problem = _leaf_problem(name, e, g) or (_exact_problem(name, e, g, skip) if not e.is_floating_point()
                                                 else None)
        if problem:
            return Mismatch(f"{what}: {problem}")
        if not e.is_floating_point() or not e.numel() or (skip is None and torch.equal(e, g)):
            continue   # an exact output that matched, or identical values (NaN never equals itself)
        leaf = _compare_floats(e, g, name, skip, undefined_ok, tolerance, noise[i] if i < len(noise) else 0.0)
        if leaf.peak is not None:
            max_abs, max_rel = max(max_abs, leaf.peak), max(max_rel, leaf.rel)
        if leaf.problem:
            return Mismatch(f"{what}: {leaf.problem}", *((max_abs, max_rel) if leaf.peak is not None else ()))
        max_norm = max(max_norm, leaf.norm)
    return Agreement(max_abs, max_rel, max_norm)


def _leaf_problem(name: str, e: torch.Tensor, g: Any) -> str | None:
    """What is wrong with an output's kind, shape or dtype, or None."""
    if not isinstance(g, torch.Tensor):
        return f"{name} is not a tensor"
    if g.shape != e.shape:
        return f"{name} has shape {tuple(g.shape)}, expected {tuple(e.shape)}"
    if g.dtype != e.dtype:
        return f"{name} has dtype {str(g.dtype)[6:]}, expected {str(e.dtype)[6:]}"
    return None


def _exact_problem(name: str, e: torch.Tensor, g: torch.Tensor, skip: torch.Tensor | None) -> str | None:
    """An integer or boolean output, compared exactly outside ``skip``."""
    differ = e != g
    if skip is not None:
        differ &= ~skip
    if bool(differ.any()):
        return f"{name}: {int(differ.sum())} of {e.numel()} values differ (exact match required)"
    return None


@dataclass
class _Leaf:
    """One floating output compared: what is wrong (or ""), its largest absolute and (sampled) relative error
    (None when a NaN or infinity mask already differs), and its norm-wise relative error."""

    problem: str = ""
    peak: float | None = None
    rel: float = 0.0
    norm: float = 0.0


def _compare_floats(e: torch.Tensor, g: torch.Tensor, name: str, skip: torch.Tensor | None, undefined_ok: bool,
                    tolerance: Tolerance, leaf_noise: float) -> _Leaf:
    """A floating output: NaN and infinity masks (``_nonfinite_problem``), then element-wise and norm-wise (see
    the module's docstring), in the tolerance of the output's own dtype."""
    dtype = str(e.dtype)[6:]        # the output's own dtype decides its tolerance, not the widened one
    if e.dtype in (torch.float16, torch.bfloat16):
        e, g = e.float(), g.float()
    if undefined_ok:
        undefined = ~torch.isfinite(e)
        if bool(undefined.any()):
            skip = undefined if skip is None else skip | undefined
    if skip is not None:  # places nobody can judge: both sides set equal there
        e = e.masked_fill(skip, 0.0)
        g = g.masked_fill(skip, 0.0)
    diff = (g - e).abs_()
    peak = float(diff.max())
    # Any NaN or infinity in either side shows in the difference: check their masks only then.
    finite_e = None
    if not math.isfinite(peak):
        problem = _nonfinite_problem(name, e, g)
        if problem:
            return _Leaf(problem)
        finite_e = torch.isfinite(e)
        diff.masked_fill_(~finite_e, 0.0)
        peak = float(diff.max())
    atol, rtol = tolerance(dtype)
    leaf = _Leaf(peak=peak, rel=_max_rel_sampled(diff, e))
    # The norms now: the differences are turned into excesses in place below.
    e_fin = e if finite_e is None else e.masked_fill(~finite_e, 0.0)
    n = e.numel() - (int(skip.sum()) if skip is not None else 0)
    e_norm, d_norm = _norm(e_fin), _norm(diff)
    noise_allowance = noise_allowed(leaf_noise, e_norm / math.sqrt(max(n, 1)))
    allowance = atol + noise_allowance
    noise_text = f" + {noise_allowance / leaf_noise:.0f} x reference noise {leaf_noise:.1e}" if leaf_noise else ""
    excess = diff.sub_(e.abs().mul_(rtol))           # |got - expected| - rtol |expected|, in place
    if finite_e is not None:
        excess.masked_fill_(~finite_e, float("-inf"))
    if float(excess.max()) > allowance:
        n_bad = int((excess > allowance).sum())
        worst = int(torch.argmax(excess))
        leaf.problem = (
            f"{name}: {n_bad} of {e.numel()} values differ; worst at {_index_text(worst, e.shape)}: got "
            f"{float(g.reshape(-1)[worst]):.6g}, expected {float(e.reshape(-1)[worst]):.6g} "
            f"(tolerance |got - expected| <= atol + rtol * |expected|{noise_text}, atol {atol:g}, rtol {rtol:g})")
        return leaf
    if e_norm > 0:
        bound = norm_rtol(rtol) * e_norm + noise_allowance * math.sqrt(max(n, 1))
        leaf.norm = d_norm / e_norm
        if d_norm > bound:
            leaf.problem = (
                f"{name}: norm-wise relative error ||got - expected|| / ||expected|| = {leaf.norm:.3g} "
                f"exceeds {norm_rtol(rtol):g}{noise_text} (the values are small, |expected| up to "
                f"{float(e_fin.abs().max()):.3g}, so the element-wise atol {atol:g} alone would not see it)")
    return leaf


def _nonfinite_problem(name: str, e: torch.Tensor, g: torch.Tensor) -> str | None:
    """NaN and infinities in the same places (and signs) on both sides, or what differs."""
    nan_e, nan_g = torch.isnan(e), torch.isnan(g)
    if not torch.equal(nan_e, nan_g):
        extra, missing = int((nan_g & ~nan_e).sum()), int((nan_e & ~nan_g).sum())
        return (f"{name} has NaN where the reference has none ({extra} places)" if extra
                else f"{name} lacks NaN the reference has ({missing} places)")
    inf_e, inf_g = torch.isinf(e), torch.isinf(g)
    if not torch.equal(inf_e, inf_g) or not torch.equal(e[inf_e], g[inf_g]):
        return (f"{name} has infinities in other places or signs than the reference "
                f"({int(inf_g.sum())} vs {int(inf_e.sum())})")
    return None


def compare_picked(expected: dict[str, Any], got: dict[str, Any], seed: int, limit: int | None, noise: list[float],
                   tolerance: Tolerance, *, what: str, ignore: list[torch.Tensor | None] | None = None,
                   undefined_ok: bool = False) -> Mismatch | Agreement:
    """Compare a result reduced to the positions ``seed`` draws (``verifier.jobs.pick``: ``got``) with the
    full ``expected`` at the same positions; the places not compared (``ignore``) are picked alike."""
    from verifier.jobs import pick_positions

    shapes = [list(leaf.shape) for leaf in expected["leaves"]]
    if got.get("shapes") != shapes:
        return Mismatch(f"{what}: output shapes {got.get('shapes')}, expected {shapes}")
    positions = pick_positions([leaf.numel() for leaf in expected["leaves"]], seed, limit)

    def at(x: torch.Tensor | None, idx: torch.Tensor | None) -> torch.Tensor | None:
        return x if x is None or idx is None else x.reshape(-1)[idx]

    picked = {"structure": expected["structure"],
              "leaves": [at(leaf, idx) for leaf, idx in zip(expected["leaves"], positions)]}
    masks = None
    if ignore is not None:
        masks = [None if m is None or list(m.shape) != shape else at(m, idx)
                 for m, shape, idx in zip(ignore, shapes, positions)]
    sampled = any(idx is not None for idx in positions)
    return compare_outputs(picked, got, noise, tolerance, what=what + (" (at random positions)" if sampled else ""),
                           ignore=masks, undefined_ok=undefined_ok)
