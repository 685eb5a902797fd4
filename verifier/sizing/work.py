"""The work model: how much a task's reference does at given sizes, without running it at them. Bytes of
its tensors on the meta device (``meta_bytes``: nothing allocated) and its least work counted there
(``counted_cases``: bytes moved and FLOPs, by ``verifier.machine.roofline.count_forward``) as milliseconds
at the nominal rates of one core (``limits.NOMINAL_GBPS``, ``NOMINAL_GFLOPS``); a forward the meta
device cannot run is counted on small real runs and carried to its size (``real_counted_ms``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from verifier.cases import case_bytes
from verifier.sizing.limits import NOMINAL_GBPS, NOMINAL_GFLOPS, NOMINAL_OP_US, REAL_COUNT_BYTES
from verifier.sizing.measure import case_inputs, trace_ops
from verifier.sizing.scaling import scale_cases
from verifier.task import TaskSpec, load_task_module

if TYPE_CHECKING:
    import torch


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def meta_bytes(spec: TaskSpec) -> int | None:
    """Bytes of the model's parameters and buffers plus the largest case's inputs, on the meta device
    (nothing allocated); None when the task cannot be built there (it reads values, say)."""
    import torch

    try:
        module = load_task_module(spec)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            state = _nbytes(list(model.parameters()) + list(model.buffers())) if hasattr(model, "parameters") else 0
        per_case = []
        for k in range(max(1, len(spec.cases))):
            try:
                with torch.device("meta"):
                    per_case.append(_nbytes(_tensors(case_inputs(module, k))))
            except Exception:
                if not spec.case_file:
                    raise
                per_case.append(case_bytes(spec.cases[k]))   # a case maker that reads values: its shapes say it
    except Exception:
        return None
    return state + max(per_case)


def counted_ms(spec: TaskSpec, origins: tuple[dict[str, Any], ...] = ()) -> list[float] | None:
    """Each case's least work (see :func:`counted_cases`); None when any case cannot be counted."""
    got = counted_cases(spec, origins)
    return None if got is None or any(w is None for w in got) else [w for w in got if w is not None]


def counted_cases(spec: TaskSpec, origins: tuple[dict[str, Any], ...] = (), each_case: bool = False,
                  errors: dict[int, str] | None = None) -> list[float | None] | None:
    """Each case's least work, counted on the meta device (``verifier.machine.roofline.count_forward``:
    bytes moved and FLOPs), as milliseconds at the nominal rates (NOMINAL_GBPS, NOMINAL_GFLOPS); None when
    a forward cannot run there (an op without a meta kernel, a reference that reads values) and cannot be
    counted on small real runs either (:func:`real_counted_ms`: a multi-case task's case only). ``origins``:
    each case as the task writes it (the anchors of a real count, the same whatever the factor).
    ``each_case``: a case that cannot be counted at all (its reference fails at these sizes) is None in the
    list instead, and what it raised in ``errors``."""
    import torch

    from verifier.machine.roofline import count_forward

    def on_meta(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to("meta")
        if isinstance(value, (list, tuple)):
            return type(value)(on_meta(v) for v in value)
        return value

    try:
        module = load_task_module(spec)
        out: list[float | None] = []
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
        for k in range(max(1, len(spec.cases))):
            try:
                try:
                    with torch.device("meta"):
                        inputs = case_inputs(module, k)
                except Exception:
                    if not spec.case_file:
                        raise
                    # a case maker that reads values (a random mean drawn with .item()): the case's inputs are made
                    # for real (a multi-case task's cases are within their memory budget), the forward on meta
                    inputs = on_meta(case_inputs(module, k))
                with torch.device("meta"):
                    work = count_forward(model, inputs)
            except Exception:
                if not spec.case_file:
                    raise
                # the forward cannot run on meta (nonzero's output size, a value read in it): counted for real
                try:
                    out.append(real_counted_ms(spec, k, origins[k] if k < len(origins) else spec.cases[k]))
                except Exception as exc:
                    if not each_case:
                        raise
                    out.append(None)   # its reference fails at these sizes (a constraint scaling broke)
                    if errors is not None:
                        errors[k] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
                continue
            out.append(_nominal_ms(work))
    except Exception:
        return None
    return out


def _nominal_ms(work: dict[str, Any]) -> float:
    return 1e3 * (float(work["bytes"]) / (NOMINAL_GBPS * 1e9) + float(work["flops"]) / (NOMINAL_GFLOPS * 1e9))


_REAL_COUNTS: dict[str, tuple[int, float]] = {}   # (source, case) -> (its input bytes, its nominal ms)


def real_counted_ms(spec: TaskSpec, k: int, origin: dict[str, Any]) -> float:
    """Case ``k``'s least work, for a forward the meta device cannot run: counted by ``count_forward`` on
    real tensors (made by the task under a fixed seed, so the same values, the same output sizes and the
    same count in every run, whatever the load) at two small sizes of the case as the task writes it
    (``origin`` scaled to REAL_COUNT_BYTES), each operator it dispatches counted at NOMINAL_OP_US beside its
    bytes and FLOPs, then carried to the case's own size by the power of its input
    bytes those two counts show (a linear scan's 1, an all-pairs suppression's near 2). A count takes no
    time into account: the timing that follows confirms it, as it confirms a count on meta."""
    import random

    import torch

    from verifier.machine.roofline import count_forward

    anchors = []
    for target in REAL_COUNT_BYTES:
        case = _scaled_to(origin, target)
        key = json.dumps([spec.source, case], sort_keys=True)
        if key not in _REAL_COUNTS:
            small = replace(spec, cases=(case,), size_overrides={})
            module = load_task_module(small)
            torch.manual_seed(0)
            random.seed(0)
            with torch.device("cpu"):
                model = module.Model(*module.get_init_inputs())
                inputs = case_inputs(module, 0)
                work = _nominal_ms(count_forward(model, inputs))
                # such a forward is often a loop in Python over its elements (nms): each operator it dispatches
                # costs its launch, whatever its size
                work += sum(trace_ops(model, inputs).values()) * NOMINAL_OP_US / 1e3
                _REAL_COUNTS[key] = (case_bytes(case), work)
        anchors.append(_REAL_COUNTS[key])
    (b1, w1), (b2, w2) = anchors
    p = math.log(w2 / w1) / math.log(b2 / b1) if b2 > b1 and w1 > 0 and w2 > 0 else 1.0
    p = min(3.0, max(0.5, p))
    return float(w2 * (max(1, case_bytes(spec.cases[k])) / max(1, b2)) ** p)


def _scaled_to(case: dict[str, Any], target: int) -> dict[str, Any]:
    """``case`` with every extent scaled alike (its constraints kept) to the largest size whose inputs
    take at most ``target`` bytes (the smallest it scales to, when even that is over)."""
    a, b = math.log(1e-4), math.log(1e4)
    for _ in range(40):
        mid = (a + b) / 2
        a, b = (mid, b) if case_bytes(scale_cases((case,), math.exp(mid))[0]) <= target else (a, mid)
    return scale_cases((case,), math.exp(a))[0]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values)) if values else 0.0
