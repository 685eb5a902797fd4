"""Timing the reference: one forward per case, the best of a few calls, each call's wall time and the CPU
time its threads ran (``time_reference``); the aten operators a forward dispatches (``trace_ops``). This
runs inside the probe's job, at the sizes the search (``verifier.sizing.search``) asks for."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict

from verifier.task import TaskSpec, load_task_module

if TYPE_CHECKING:
    from torch._ops import OpOverload


class Timing(TypedDict):
    """One spec's reference timed (:func:`time_reference`)."""

    ms: float                    # the geometric mean over the cases
    case_ms: list[float]
    ops: dict[str, int]          # aten ops of the first case's forward (empty unless traced)
    on_cpu: NotRequired[float]   # the share of the best call's wall time its threads ran (1.0 when absent)


class Measure(Protocol):
    """Times one spec: :func:`time_reference`, or a test's script of the times a busy machine gives."""

    def __call__(self, spec: TaskSpec, threads: int, call_cap_s: float, /, trace: bool = False) -> Timing: ...


def case_inputs(module: ModuleType, k: int | None) -> list[Any]:
    """The inputs of case ``k`` of a loaded task (its ``get_inputs()`` for case 0 or none)."""
    from verifier.cases import inputs_for

    return list(inputs_for(module.get_inputs, k if k else None)() if k else module.get_inputs())


def time_reference(spec: TaskSpec, threads: int, call_cap_s: float, trace: bool = False) -> Timing:
    """Build the model once and time one forward per case (best of a few calls, fewer for slow ones):
    ``{"ms" (geometric mean over cases), "case_ms", "ops" (aten ops of the first case's forward),
    "on_cpu" (the share of its best call's wall time its threads ran: well under 1, it waited for a CPU)}``."""
    import torch

    torch.set_num_threads(threads)
    module = load_task_module(spec)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    if hasattr(model, "eval"):
        model.eval()
    case_ms: list[float] = []
    on_cpu: list[float] = []
    ops: dict[str, int] = {}
    for k in range(max(1, len(spec.cases))):
        torch.manual_seed(1 + k)
        try:
            inputs = case_inputs(module, k)
            with torch.no_grad():
                first = _call(model, inputs)
        except Exception as exc:
            exc.evokernel_case = k  # type: ignore[attr-defined]   # which case failed, for the sizer
            raise
        with torch.no_grad():
            calls = [first]
            if first[0] < call_cap_s:
                # calls for at least 0.4 s in all (shared by the cases): a first few slow calls (an operator's
                # warm-up) and a moment of the machine's other load both pass, and the best call is the
                # operator's own time
                span = min(4.0, max(0.4 / max(1, len(spec.cases)), 3 * first[0]))
                budget = time.perf_counter() + span
                while len(calls) < 200 and (time.perf_counter() < budget or len(calls) < 3):
                    calls.append(_call(model, inputs))
                calls = calls[1:]  # the first call warms caches and allocators
            if trace and k == 0:
                ops = trace_ops(model, inputs)
        # the best of a few calls: on a shared machine the median moves with whatever else runs. A call's time
        # is the CPU time its threads ran (never more than its wall time): a call preempted by the machine's
        # other load waits without running, so its CPU time is the operator's own, whatever the load
        wall, cpu = min(calls)
        case_ms.append(min(min(w, c if c > 0 else w) for w, c in calls) * 1e3)
        on_cpu.append(min(1.0, cpu / wall) if wall > 0 else 1.0)
    geo = math.exp(sum(math.log(max(t, 1e-6)) for t in case_ms) / len(case_ms))
    return {"ms": geo, "case_ms": case_ms, "ops": ops, "on_cpu": min(on_cpu)}


def _call(model: Callable[..., object], inputs: list[Any]) -> tuple[float, float]:
    """One forward: its wall time and the process's CPU time (all threads) in it, in seconds. A call whose
    threads ran for much less than its wall time waited for a CPU: the machine's other load slowed it."""
    c0, t0 = time.process_time(), time.perf_counter()
    model(*inputs)
    return time.perf_counter() - t0, time.process_time() - c0


def trace_ops(model: Callable[..., object], inputs: list[Any]) -> dict[str, int]:
    """The aten operators one forward runs, with counts (a TorchDispatchMode sees them after
    decomposition of nothing: what PyTorch itself dispatches)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, int] = {}

    # torch's TorchDispatchMode has no annotations (its __init_subclass__ and __init__ are untyped calls)
    class Ops(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            name = func.overloadpacket.__name__
            seen[name] = seen.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Ops():  # type: ignore[no-untyped-call]
            model(*inputs)
    except Exception:
        pass
    return seen
