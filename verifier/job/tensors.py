"""A job's tensors: a forward's results flattened into leaves, inputs snapshotted and compared after a call
(a kernel that writes its inputs), and inputs moved to the job's device."""

from __future__ import annotations

import copy
from typing import Any

import torch


def flatten(value: Any, copy: bool = True, cpu: bool = True) -> tuple[Any, list[torch.Tensor]]:
    """(structure, tensor leaves) of a forward's result; numbers become 0-d tensors. Leaves are copies
    unless ``copy`` is False (results nothing else writes to: the reference's own; a timed call's,
    read before the next call), moved to the CPU unless ``cpu`` is False as well."""
    leaves: list[torch.Tensor] = []
    return _walk(value, leaves, copy, cpu), leaves


def _walk(v: Any, leaves: list[torch.Tensor], copy: bool, cpu: bool) -> Any:
    # A module-level function, not a closure that calls itself: such a closure is a reference cycle
    # (function -> cell -> function) that holds ``leaves`` until the garbage collector runs. In the
    # timing window that kept every timed call's output alive for many rounds, so each call's
    # ``torch.empty_like`` got fresh heap pages and paid their page faults inside the timed call
    # (1,024 faults and ~1.2 ms per call for a 4 MiB output; the same for the reference and the
    # candidate, which pulled every speedup towards 1).
    if isinstance(v, torch.Tensor):
        if not copy and not cpu:
            leaves.append(v.detach())
            return {"t": "tensor", "device": v.device.type}
        leaf = v.detach().to("cpu").contiguous()
        leaves.append(leaf.clone() if copy and leaf.data_ptr() == v.data_ptr() else leaf)
        return {"t": "tensor", "device": v.device.type}
    if isinstance(v, (tuple, list)):
        return {"t": type(v).__name__, "items": [_walk(x, leaves, copy, cpu) for x in v]}
    if isinstance(v, bool):
        leaves.append(torch.tensor(v))
        return {"t": "bool"}
    if isinstance(v, int):
        leaves.append(torch.tensor(v))
        return {"t": "int"}
    if isinstance(v, float):
        leaves.append(torch.tensor(v, dtype=torch.float64))
        return {"t": "float"}
    if v is None:
        return {"t": "None"}
    return {"t": type(v).__name__, "unsupported": True}


def _snapshot(inputs: list[Any]) -> list[Any]:
    return [x.detach().clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if a.is_floating_point():  # NaN != NaN: compare NaN positions, then the rest
        return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    return torch.equal(a, b)


def _changed(before: list[Any], after: list[Any]) -> list[int]:
    """Indices of tensor inputs whose values differ after the call."""
    return [i for i, (a, b) in enumerate(zip(before, after)) if isinstance(a, torch.Tensor) and not _identical(a, b)]


def _to_device(inputs: list[Any], device: str) -> list[Any]:
    if device == "cpu":
        return inputs
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
