"""Scaling a task's sizes by a factor: its module-level sizes (``scale_values``, keeping the sizes that
divide others dividing them, and the fixed divisors a task declares) and a multi-case task's case extents
(``scale_cases``). Scaling keeps what the task declares between its sizes: equal sizes stay equal, and a
size that divides another still divides it (``block_len`` into ``seq_length``)."""

from __future__ import annotations

from math import lcm
from typing import Any

from verifier.task import MIN_SIZE


def scale_values(values: dict[str, int], factor: float, floor: int = MIN_SIZE,
                 fixed: tuple[int, ...] = ()) -> dict[str, int]:
    """``values`` scaled by ``factor``: equal values stay equal, a value that divides another still
    divides it (the larger is rounded to a multiple of the smaller), a ``fixed`` number that divides a
    value still divides it (``num_groups = 8`` into ``out_channels``), and none goes below
    ``min(value, floor)``. Sizes are not kept powers of two: all of a task's sizes doubling at once
    would change its time 30-fold in one step, past the whole window."""
    distinct = sorted(set(values.values()))
    scaled: dict[int, int] = {}
    below = 0   # the largest value scaled so far: a larger size never comes out smaller than a smaller one
    for v in distinct:  # ascending, so every divisor of v is already scaled
        lo = min(v, floor)
        r = max(lo, round(v * factor))
        divisors = [scaled[d] for d in distinct if d < v and v % d == 0 and d >= floor]
        divisors += [d for d in fixed if 1 < d <= v and v % d == 0]  # num_groups == channels: not scaled
        step = 1
        for d in divisors:
            step = lcm(step, d)
        if step > 1:
            if step > max(r, lo) * 4:   # incompatible divisors after scaling: keep the largest one only
                step = max(divisors)
            r = max(step, round(r / step) * step)
        if r < below:
            r = -(-below // step) * step
        scaled[v] = int(r)
        below = max(below, int(r))
    return {k: scaled[v] for k, v in values.items()}


# module constants that are not sizes but must keep dividing one: GroupNorm's groups, attention's heads
_FIXED_DIVISOR_WORDS = ("group", "head")


def fixed_divisors(source: str) -> tuple[int, ...]:
    """The task's module-level integers that a size must stay a multiple of (``num_groups = 8``,
    ``num_heads = 4``): they are not scaled, so the sizes they divide are rounded to their multiples."""
    from verifier.task import module_constants, size_constants

    sizes = size_constants(source)
    return tuple(sorted({v for k, v in module_constants(source).items()
                         if type(v) is int and v > 1 and k not in sizes
                         and any(w in k.lower() for w in _FIXED_DIVISOR_WORDS)}))


# list attributes that are an output's extents: scaled with the inputs' (interpolate's output size)
_OUTPUT_SIZE_NAMES = ("size", "output_size")


def case_sizes(cases: tuple[dict[str, Any], ...]) -> dict[str, int]:
    """The scalable extents of a multi-case task's cases, keyed ``case/input/dim`` (``case/input.j/dim``
    for the j-th tensor of an input that is a list of tensors)."""
    from verifier.cases import entry_shapes

    out = {}
    for c, case in enumerate(cases):
        extents = {n for entry in case.get("inputs", []) for shape in entry_shapes(entry) for n in shape}
        for i, entry in enumerate(case.get("inputs", [])):
            value = entry.get("value")
            if isinstance(value, list) and value and all(type(v) is int for v in value):
                # a list of extents given as an attribute (LayerNorm's normalized_shape): the numbers that
                # are a tensor's extents too are scaled with them (equal ones stay equal); others (repeat
                # counts, permutations) are not sizes, except an output size (interpolate's ``size``)
                output = str(entry.get("name", "")).lower() in _OUTPUT_SIZE_NAMES
                for d, n in enumerate(value):
                    if n >= MIN_SIZE and (n in extents or output):
                        out[f"{c}/{i}v/{d}"] = n
                continue
            listed = "shape" not in entry
            for j, shape in enumerate(entry_shapes(entry)):
                where = f"{i}.{j}" if listed else f"{i}"
                for d, n in enumerate(shape):
                    if isinstance(n, int) and n >= MIN_SIZE:
                        out[f"{c}/{where}/{d}"] = n
    return out


def _with_sizes(case: dict[str, Any], new: dict[str, int]) -> dict[str, Any]:
    """``case`` with the extents ``new`` names (keys as :func:`case_sizes` gives them for case 0)."""
    inputs = []
    for i, entry in enumerate(case.get("inputs", [])):
        entry = dict(entry)
        value = entry.get("value")
        if isinstance(value, list) and all(type(v) is int for v in value):
            entry["value"] = [new.get(f"0/{i}v/{d}", n) for d, n in enumerate(value)]
        elif "value" not in entry and isinstance(entry.get("shape"), list):
            entry["shape"] = [new.get(f"0/{i}/{d}", n) for d, n in enumerate(entry["shape"])]
        elif "value" not in entry and isinstance(entry.get("shapes"), list):
            entry["shapes"] = [[new.get(f"0/{i}.{j}/{d}", n) for d, n in enumerate(shape)]
                               if isinstance(shape, list) else shape for j, shape in enumerate(entry["shapes"])]
        inputs.append(entry)
    return {**case, "inputs": inputs}


def scale_cases(cases: tuple[dict[str, Any], ...], factor: float,
                each: dict[int, float] | None = None) -> tuple[dict[str, Any], ...]:
    """The cases with every tensor extent scaled by ``factor`` (per case, so a case's matching extents,
    like a matmul's inner dimensions, stay matching); ``each``: a further factor for some cases by index
    (a case shrunk to its time limit)."""
    out = []
    for k, case in enumerate(cases):
        sizes = case_sizes((case,))
        f = factor * (each or {}).get(k, 1.0)
        out.append(_with_sizes(case, scale_values(sizes, f, fixed=case_divisors(case)) if sizes else {}))
    return tuple(out)


def case_divisors(case: dict[str, Any]) -> tuple[int, ...]:
    """What a case's extents must stay multiples of when they are: its integer attributes (``num_groups``,
    a kernel or block size) and 2 (an even extent stays even: a task that halves it, SwiGLU's two
    chunks, needs it so)."""
    values = {2}
    for entry in case.get("inputs", []):
        v = entry.get("value")
        if type(v) is int and v > 1:
            values.add(v)
    return tuple(sorted(values))
