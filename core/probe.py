"""The probe process: size, run and time one task's reference, in a subprocess of its own.

``python -m core.probe JOB.json PROGRESS.jsonl``. Every step (a scale tried, its bytes and time) is
appended to PROGRESS as one JSON line before the next begins, so a probe killed for time or memory
still says how far it got; the last line has ``"final": true``. Run by :func:`core.sizing.run_probe`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict

from core.sizing import (
    CALL_CAP_S,
    CASES_BYTES_BUDGET,
    MAX_GROWTH,
    MAX_STEPS,
    NOMINAL_GBPS,
    NOMINAL_GFLOPS,
    NOMINAL_OP_US,
    RATE_STEP,
    REAL_COUNT_BYTES,
    START_BYTES,
    WINDOW_MS,
    case_cap_ms,
    fit_case_indices,
    fixed_divisors,
    scale_cases,
    scale_values,
)
from verifier.cases import case_bytes
from verifier.task import TaskSpec, load_task_module, size_constants

if TYPE_CHECKING:
    import torch
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


class _Progress:
    def __init__(self, path: str):
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def spec_at(spec: TaskSpec, factor: float, pinned: dict[int, str] | None = None,
            each: dict[int, float] | None = None) -> tuple[TaskSpec, dict[str, int], tuple[int, ...]]:
    """The spec with every size scaled by ``factor`` (module sizes and case extents), its overrides, and
    the index in ``spec.cases`` of each of its cases (cases dropped, pinned or over the budget, are gone:
    a case is known by that index, never by its place among those left).
    ``pinned``: cases by index whose reference failed at scaled sizes, "keep" (as written) or "drop";
    ``each``: a further factor for cases by index (shrunk to the time limit of one case)."""
    pinned = pinned or {}
    sizes = size_constants(spec.source)
    scaled = scale_values(sizes, factor, fixed=fixed_divisors(spec.source)) if sizes and factor != 1.0 else dict(sizes)
    overrides = {k: v for k, v in scaled.items() if v != sizes[k]}
    # cases listed in code (no case file) are described, not read by the task: they cannot be scaled
    cases = scale_cases(spec.cases, factor, each) if spec.cases and spec.case_file and (factor != 1.0 or each) \
        else spec.cases
    origin = tuple(range(len(cases)))
    if spec.case_file:  # never grown past the cases' memory budget (the largest shrink back to fit it)
        # a case kept as written that alone is over the budget cannot run here at all
        pinned = {k: ("drop" if how == "keep" and case_bytes(spec.cases[k]) > CASES_BYTES_BUDGET else how)
                  for k, how in pinned.items()}
        left = [k for k in range(len(cases)) if pinned.get(k) != "drop"]
        chosen = tuple(spec.cases[k] if pinned.get(k) == "keep" else cases[k] for k in left)
        placed = fit_case_indices(chosen, keep=frozenset(i for i, k in enumerate(left) if pinned.get(k) == "keep"))[0]
        cases = tuple(c for _, c in placed)
        origin = tuple(left[i] for i, _ in placed)
    return replace(spec, size_overrides=overrides, cases=cases), overrides, origin


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
                    per_case.append(_nbytes(_tensors(_case_inputs(module, k))))
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
                        inputs = _case_inputs(module, k)
                except Exception:
                    if not spec.case_file:
                        raise
                    # a case maker that reads values (a random mean drawn with .item()): the case's inputs are made
                    # for real (a multi-case task's cases are within their memory budget), the forward on meta
                    inputs = on_meta(_case_inputs(module, k))
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
                inputs = _case_inputs(module, 0)
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


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values)) if values else 0.0


def _case_inputs(module: ModuleType, k: int | None) -> list[Any]:
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
            inputs = _case_inputs(module, k)
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


@dataclass
class _Tried:
    """Sizes measured: the best time at them over every measurement (noise only ever slows a call)."""

    factor: float
    ms: float
    spec: TaskSpec
    overrides: dict[str, int]
    nbytes: int | None
    result: Timing
    calls: int = 1
    on_cpu: float = 1.0   # the share of the best call's wall time its threads ran
    origin: tuple[int, ...] = ()   # the index in the task's cases of each case of ``spec``


BUSY_ON_CPU = 0.75  # a call whose threads ran for less of its wall time than this waited for a CPU


def _sizes_key(spec: TaskSpec) -> str:
    return json.dumps([sorted(spec.size_overrides.items()), list(spec.cases)], sort_keys=True, default=str)


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "not enough memory" in text


def probe(job: dict[str, Any], progress: _Progress, measure: Measure | None = None) -> dict[str, Any]:
    """Size (``mode`` "auto") or just run the task in ``job``; ``measure`` times one spec (default
    :func:`time_reference`: the tests pass their own to script the times a busy machine gives)."""
    measure = measure or time_reference
    spec = TaskSpec.from_dict(job["spec"])
    threads = int(job.get("threads", 1))
    lo, hi = job.get("window", WINDOW_MS)
    cap = int(job["bytes_cap"])
    call_cap = float(job.get("call_cap_s", CALL_CAP_S))
    auto = job.get("mode") == "auto"
    factor = float(job.get("factor", 1.0))
    notes: list[str] = []
    has_sizes = bool(size_constants(spec.source)) or bool(spec.cases)

    pinned: dict[int, str] = {}   # cases whose reference failed at scaled sizes: kept as written, or dropped
    each: dict[int, float] = {}   # cases shrunk further to the time limit of one case, by their factor

    def at(f: float) -> tuple[TaskSpec, dict[str, int], tuple[int, ...]]:
        """The spec at ``f``, its overrides, and the index in ``spec.cases`` of each of its cases."""
        return spec_at(spec, f, pinned, each)

    current, overrides, origin = at(factor)
    load_task_module(current)  # a task that does not load fails here, before any sizing
    progress.write({"loaded": True})
    nbytes = meta_bytes(current)
    if nbytes is not None and nbytes > cap:
        if not auto:
            return {"ok": False, "loaded": True, "factor": factor, "bytes": nbytes,
                    "problem": f"needs {nbytes / 2**30:.1f} GiB of tensors at these sizes (cap {cap / 2**30:.1f} GiB): "
                               "use --size-scale auto or a smaller factor"}
        if not has_sizes:
            return {"ok": False, "loaded": True, "factor": factor, "bytes": nbytes,
                    "problem": f"needs {nbytes / 2**30:.1f} GiB and has no module-level sizes to scale"}
        # shrink on the meta device until the tensors fit: bisect the log of the factor
        a, b = math.log(1e-4), math.log(factor)
        for _ in range(30):
            mid = (a + b) / 2
            got = meta_bytes(at(math.exp(mid))[0])
            if got is not None and got <= cap:
                a = mid
            else:
                b = mid
        factor = math.exp(a)
        current, overrides, origin = at(factor)
        nbytes = meta_bytes(current)
        notes.append(f"shrunk to fit {cap / 2**30:.1f} GiB before timing")
        progress.write({"factor": factor, "bytes": nbytes})

    capped = False
    target = math.sqrt(lo * hi)
    # sizes from counted work: the factor whose counted work, at the nominal rates times ``rate``, takes the
    # window's middle (the largest the memory caps allow at most); no timing decides them unless it disagrees
    rate = 1.0
    def written(placed: tuple[int, ...]) -> tuple[dict[str, Any], ...]:
        """Each case of a spec whose cases are ``spec.cases`` at the indices ``placed``, as the task writes it."""
        return tuple(spec.cases[k] for k in placed)

    if auto and spec.case_file and len(spec.cases) > 1:
        # cases whose reference fails at the sizes counted (a split's sections no longer summing to its extent):
        # kept as written, or dropped when they fail even so, as a timing would find, but from the count
        for _ in range(2 * len(spec.cases)):
            errors: dict[int, str] = {}
            per_case = counted_cases(current, written(origin), each_case=True, errors=errors)
            bad = [i for i, w in enumerate(per_case or []) if w is None]
            if per_case is None or not bad or len(bad) >= len(per_case):
                break
            for i in bad:
                if i >= len(origin):
                    continue
                k = origin[i]
                if pinned.get(k) == "keep" or spec.cases[k] == current.cases[i]:
                    pinned[k] = "drop"
                    notes.append(f"case {k} dropped: its reference fails at its own sizes ({errors.get(i, '')})")
                else:
                    pinned[k] = "keep"
                    notes.append(f"case {k} kept as written: its reference fails at scaled sizes ({errors.get(i, '')})")
            current, overrides, origin = at(factor)
            nbytes = meta_bytes(current)
    counted = auto and has_sizes and counted_ms(current, written(origin)) is not None
    f_max = factor

    def fits(f: float) -> bool:
        """Within the memory cap, and a multi-case task's cases within their budget as scaled (the budget
        would shrink them to a common cap otherwise: sizes that move with the factor, not the count)."""
        got = meta_bytes(at(f)[0])
        if got is None or got > cap:
            return False
        return not spec.case_file or sum(case_bytes(c) for c in scale_cases(spec.cases, f, each)) <= \
            CASES_BYTES_BUDGET

    start = factor

    def largest_fit() -> float:
        """The largest factor (up to MAX_GROWTH) whose sizes fit the memory caps."""
        if not fits(start):
            return start
        if fits(MAX_GROWTH):
            return MAX_GROWTH
        a, b = math.log(start), math.log(MAX_GROWTH)
        for _ in range(16):
            mid = (a + b) / 2
            a, b = (mid, b) if fits(math.exp(mid)) else (a, mid)
        return math.exp(a)

    if counted:
        f_max = largest_fit()

    def predicted(f: float) -> float | None:
        at_f, _, placed = at(f)
        got = counted_ms(at_f, written(placed))
        return _geomean(got) if got else None

    def by_count(r: float) -> float:
        """The largest factor up to ``f_max`` whose counted work takes at most the window's middle at ``r``."""
        top = predicted(f_max)
        if top is not None and top * r <= target:
            return f_max
        a, b = math.log(1e-4), math.log(f_max)
        for _ in range(14):   # to 0.06 % of the factor: sizes move in whole steps long before that
            mid = (a + b) / 2
            got = predicted(math.exp(mid))
            a, b = (mid, b) if got is not None and got * r <= target else (a, mid)
        return math.exp(a)

    if counted:
        factor = by_count(rate)
        current, overrides, origin = at(factor)
        nbytes = meta_bytes(current)
        capped = factor >= f_max * 0.999 and f_max < MAX_GROWTH
        if capped and factor > 1.0:
            notes.append("growth stopped at the memory cap")
    elif auto and has_sizes and nbytes is not None and nbytes > START_BYTES:
        # no count: start small and grow by measured time (a GPU-sized call can take seconds on a CPU)
        a, b = math.log(1e-4), math.log(factor)
        for _ in range(20):
            mid = (a + b) / 2
            got = meta_bytes(at(math.exp(mid))[0])
            a, b = (mid, b) if got is not None and got <= START_BYTES else (a, mid)
        factor = math.exp(a)
        current, overrides, origin = at(factor)
        nbytes = meta_bytes(current)
    confirming = counted   # the sizes are the count's until a timing disagrees by more than the window
    calibrations = 0

    reason = ""
    inner = (lo * (hi / lo) ** 0.15, hi / (hi / lo) ** 0.15)  # 2-50 ms: about 3.2-31 ms
    tried: dict[str, _Tried] = {}  # by sizes: the best time measured at them (a shared machine only slows)
    previous: tuple[float, float] | None = None
    stuck = ""
    failures = 0
    too_small: float | None = None  # the largest factor at which the reference failed (sized too small)
    too_big: float | None = None    # the smallest factor at which it ran out of memory
    for step in range(MAX_STEPS + 2 * len(spec.cases)):  # a case pinned (see below) takes a step
        progress.write({"factor": factor, "bytes": nbytes, "started": True})
        try:
            result = measure(current, threads, call_cap, trace=False)
        except Exception as exc:
            oom = _out_of_memory(exc)
            case = getattr(exc, "evokernel_case", -1)
            k = origin[case] if spec.case_file and isinstance(case, int) and 0 <= case < len(origin) else -1
            if auto and not oom and k >= 0 and pinned.get(k) != "drop" and \
                    len([i for i in origin if pinned.get(i) != "drop"]) > 1:
                # one case's own constraint broken by scaling (a split's sections no longer summing to its
                # extent): that case stays as written from now on, and is dropped if it fails even so
                what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
                if pinned.get(k) == "keep" or spec.cases[k] == current.cases[int(case)]:
                    pinned[k] = "drop"
                    notes.append(f"case {k} dropped: its reference fails at its own sizes ({what})")
                else:
                    pinned[k] = "keep"
                    notes.append(f"case {k} kept as written: its reference fails at scaled sizes ({what})")
                if confirming:   # the count decides again, that case as written (or gone): its sizes cannot move
                    f_max = largest_fit()
                    factor = by_count(rate)
                    capped = factor >= f_max * 0.999 and f_max < MAX_GROWTH
                    if capped and factor > 1.0 and "growth stopped at the memory cap" not in notes:
                        notes.append("growth stopped at the memory cap")
                current, overrides, origin = at(factor)
                nbytes = meta_bytes(current)
                tried.clear()   # every size measured so far had that case at other sizes
                previous = None
                continue
            # out of memory: an intermediate the meta device does not count (attention's N x N scores), shrink;
            # otherwise scaled too small for the operator (a pooling window longer than its input), grow back
            if not (auto and has_sizes and (oom or factor < 1)):
                raise
            if failures >= 4:
                if not tried:
                    raise
                notes.append(f"at scale {factor:.3g} the reference failed ({type(exc).__name__}): "
                             "kept the sizes it ran at")
                break
            failures += 1
            confirming = False   # the count did not foresee it: the measured time decides from here
            if oom:
                too_big = factor if too_big is None else min(too_big, factor)
                notes.append(f"at scale {factor:.3g} the reference ran out of memory: shrunk")
                low = max([f for f in (too_small, *(t.factor for t in tried.values())) if f is not None and f < factor],
                          default=None)
                wanted = math.sqrt(low * factor) if low is not None else factor / 8
            else:
                too_small = factor if too_small is None else max(too_small, factor)
                notes.append(f"at scale {factor:.3g} the reference failed ({type(exc).__name__}): grown back")
                high = min([f for f in (too_big, *(t.factor for t in tried.values())) if f is not None and f > factor],
                           default=None)
                wanted = math.sqrt(factor * high) if high is not None else min(1.0, factor * 2)
            for _ in range(30):  # sizes at their floors move only once the factor has moved far enough
                if _sizes_key(at(wanted)[0]) != _sizes_key(current) or not 1e-4 < wanted < 1:
                    break
                wanted = min(1.0, wanted * 1.5) if not oom else max(1e-4, wanted / 1.5)
            factor = wanted
            current, overrides, origin = at(factor)
            nbytes = meta_bytes(current)
            continue
        if auto and spec.case_file and len(current.cases) > 1:
            limit = case_cap_ms(len(current.cases))
            slow_cases = [(i, t) for i, t in enumerate(result.get("case_ms", [])) if t > limit]
            if slow_cases:
                # a case the machine cannot run within the time limit of one case: shrunk (to a quarter of the
                # limit, by the work its sizes grow with), dropped if it is at its smallest sizes already
                changed = False
                for i, t in slow_cases:
                    if i >= len(origin):
                        continue
                    k = origin[i]
                    before = current.cases[i]
                    each[k] = each.get(k, 1.0) * (0.25 * limit / t) ** 0.5
                    shrunk, _, placed = at(factor)
                    after = dict(zip(placed, shrunk.cases)).get(k)
                    if pinned.get(k) != "keep" and after is not None and after != before:
                        notes.append(f"case {k} shrunk to the {limit:.0f} ms time limit of one case "
                                     f"(one call took {t:.0f} ms)")
                        changed = True
                    elif len([n for n in origin if pinned.get(n) != "drop"]) > 1:
                        pinned[k] = "drop"
                        notes.append(f"case {k} dropped: one call takes {t:.0f} ms at its smallest sizes, over "
                                     f"the {limit:.0f} ms time limit of one case")
                        changed = True
                if changed:
                    current, overrides, origin = at(factor)
                    nbytes = meta_bytes(current)
                    tried.clear()
                    previous = None
                    continue
        key = _sizes_key(current)
        entry = tried.get(key)
        if entry is None:
            entry = tried[key] = _Tried(factor, result["ms"], current, overrides, nbytes, result,
                                        on_cpu=result.get("on_cpu", 1.0), origin=origin)
        else:
            entry.calls += 1
            if result["ms"] < entry.ms:
                entry.ms, entry.result = result["ms"], result
                entry.on_cpu = result.get("on_cpu", 1.0)
        ms = entry.ms
        progress.write({"factor": factor, "bytes": nbytes, "ms": result["ms"]})
        if not auto or not has_sizes:
            break
        if confirming:
            if lo <= ms <= hi or (ms < lo and capped):
                break   # the count's sizes, confirmed (or as large as the memory caps allow)
            if entry.calls < 2:
                continue   # outside: measured again before the rate is corrected (a busy moment only slows)
            nominal = predicted(factor)
            confirming = False
            if nominal and calibrations < 3:
                # the operator runs at another rate than the nominal one: correct it in steps of RATE_STEP (a
                # load that slows a call less than that leaves the same sizes) and size from the count again
                step_rate = RATE_STEP ** round(math.log(ms / nominal) / math.log(RATE_STEP))
                if step_rate != rate:
                    calibrations += 1
                    rate = step_rate
                    wanted = by_count(rate)
                    if _sizes_key(at(wanted)[0]) != key:
                        factor = wanted
                        current, overrides, origin = at(factor)
                        nbytes = meta_bytes(current)
                        capped = factor >= f_max * 0.999 and f_max < MAX_GROWTH
                        if capped and factor > 1.0 and "growth stopped at the memory cap" not in notes:
                            notes.append("growth stopped at the memory cap")
                        confirming = True
                        continue
            # the count cannot place it: the measured time decides from here
        if inner[0] <= ms <= 3 * hi and entry.calls < (2 if entry.on_cpu >= BUSY_ON_CPU else 3):
            continue  # near or in the window: measure the same sizes again before trusting one noisy measurement
        if inner[0] <= ms <= inner[1] or (lo <= ms <= hi and step >= 5):
            break  # (auto aims inside the window's middle, so a noisy re-measurement stays in it)
        # the bracket from every size measured: a size measured slower than a larger one was slowed by noise
        below = max([t.factor for t in tried.values() if t.ms < inner[0]] + ([too_small] if too_small else []),
                    default=None)
        above = min([t.factor for t in tried.values() if t.ms > inner[1] and (below is None or t.factor > below)]
                    + ([too_big] if too_big else []), default=None)
        # work grows as factor**p: p from the last two measurements, else a guess (2: a matrix's worth)
        p = 2.0
        if previous and previous[0] != factor and previous[1] > 0:
            p = math.log(ms / previous[1]) / math.log(factor / previous[0])
            p = min(8.0, max(0.5, p)) if p == p else 2.0  # a conv's work is batch x in x out x h x w
        previous = (factor, ms)
        wanted = factor * (target / ms) ** (1.0 / p)
        wanted = min(wanted, MAX_GROWTH, factor * 8)  # grow at most 8x per step: overhead hides the work
        if below is not None and above is not None and not below < wanted < above:
            wanted = math.sqrt(below * above)        # bracketed: bisect between the two
        nxt, nxt_overrides, nxt_origin = at(wanted)
        # sizes move in steps (divisors, floors): nudge until they do move
        for _ in range(10):
            if _sizes_key(nxt) != key:
                break
            wanted = wanted * 1.3 if ms < lo else wanted / 1.3
            if not 1e-4 <= wanted <= MAX_GROWTH or (below is not None and wanted <= below) or \
                    (above is not None and wanted >= above):
                break
            nxt, nxt_overrides, nxt_origin = at(wanted)

        if _sizes_key(nxt) in tried and below is not None and above is not None:
            wanted = math.sqrt(below * above)  # a noisy estimate led back: bisect the bracket instead
            nxt, nxt_overrides, nxt_origin = at(wanted)
        for _ in range(5):  # no bracket yet: step on by a fixed ratio past the sizes already tried
            if _sizes_key(nxt) not in tried or (below is not None and above is not None):
                break
            wanted = wanted * (0.6 if ms > hi else 1.6)
            nxt, nxt_overrides, nxt_origin = at(wanted)
        if _sizes_key(nxt) in tried:
            under = max((t.ms for t in tried.values() if t.ms < lo), default=None)
            over = min((t.ms for t in tried.values() if t.ms > hi), default=None)
            if below is not None and above is not None and under is not None and over is not None:
                stuck = (f"its time jumps from {under:.3g} to {over:.3g} ms between neighbouring sizes tried "
                         "(a performance cliff, or a busy machine)")
                reason = "cliff"
            else:
                stuck = "no untried size closer to the window"
                reason = "no_closer_size"
            break
        nb = meta_bytes(nxt)
        if nb is not None and nb > cap:
            if wanted < factor or capped:
                break
            # grow only as far as the memory cap allows: the largest factor whose tensors fit
            a, b = math.log(factor), math.log(wanted)
            for _ in range(14):
                mid = (a + b) / 2
                got = meta_bytes(at(math.exp(mid))[0])
                a, b = (mid, b) if got is not None and got <= cap else (a, mid)
            capped = True
            notes.append("growth stopped at the memory cap")
            wanted = math.exp(a)
            nxt, nxt_overrides, nxt_origin = at(wanted)
            nb = meta_bytes(nxt)
            if _sizes_key(nxt) == key:
                break
        factor, current, overrides, origin, nbytes = wanted, nxt, nxt_overrides, nxt_origin, nb
    else:
        if auto and has_sizes:
            notes.append(f"stopped after {MAX_STEPS} sizing steps")
    if not tried:
        raise RuntimeError(f"the reference failed at every size tried ({'; '.join(notes)})")

    def distance(ms: float) -> float:  # how far outside the window, in log terms
        return 0.0 if lo <= ms <= hi else abs(math.log(ms / (lo if ms < lo else hi)))

    def closest() -> _Tried:
        return min(tried.values(), key=lambda t: (distance(t.ms), abs(math.log(max(t.ms, 1e-9) / target))))

    def nearest_over() -> _Tried | None:
        return min((t for t in tried.values() if t.ms > hi), key=lambda t: t.ms, default=None)

    def again(t: _Tried) -> None:
        progress.write({"factor": t.factor, "bytes": t.nbytes, "started": True})
        result = measure(t.spec, threads, call_cap, trace=False)
        progress.write({"factor": t.factor, "bytes": t.nbytes, "ms": result["ms"]})
        t.calls += 1
        if result["ms"] < t.ms:
            t.ms, t.result, t.on_cpu = result["ms"], result, result.get("on_cpu", 1.0)

    # the closest size over the window (the best one, or the upper side of a time jump) is measured again,
    # up to four times when its calls waited for a CPU: the machine's other load only ever slows a call
    for _ in range(6):
        best, slow_t = closest(), nearest_over()
        if not (auto and has_sizes) or slow_t is None or lo <= best.ms <= hi:
            break  # in the window, or nothing over it
        if slow_t.ms >= min(1e3 * call_cap, 20 * hi) or slow_t.calls >= (2 if slow_t.on_cpu >= BUSY_ON_CPU else 4):
            break
        again(slow_t)
    best = closest()
    factor, ms, current, overrides, nbytes, result = \
        best.factor, best.ms, best.spec, best.overrides, best.nbytes, best.result
    if spec.case_file:   # the cases the memory budget left out, each said by its own index
        for k in sorted(set(range(len(spec.cases))) - set(best.origin)):
            if pinned.get(k) != "drop":
                notes.append(f"case {k} dropped: over the cases' {CASES_BYTES_BUDGET / 2**20:.0f} MiB memory budget "
                             + ("as written (its reference fails at other sizes)" if pinned.get(k) == "keep"
                                else "at its smallest sizes"))
    out: dict[str, Any] = {"ok": True, "loaded": True, "factor": factor, "overrides": overrides,
           "cases": list(current.cases) if spec.cases else None, "ms": ms, "case_ms": result.get("case_ms", []),
           "bytes": nbytes, "notes": notes, "on_cpu": round(best.on_cpu, 3),
           "sized_by": ("" if not (auto and has_sizes) else "counted work" + (f" at {rate:g}x the nominal time"
                        if rate != 1 else "") if confirming else "measured time")}
    if job.get("trace", True):
        try:
            out["ops"] = measure(current, threads, call_cap, trace=True)["ops"] if ms and ms < 5000 else {}
        except Exception:
            out["ops"] = {}
    if reason == "cliff":  # the times as measured last (a size measured again after the jump was found)
        under = max((t.ms for t in tried.values() if t.ms < lo), default=None)
        over_ms = min((t.ms for t in tried.values() if t.ms > hi), default=None)
        if under is not None and over_ms is not None:
            stuck = (f"its time jumps from {under:.3g} to {over_ms:.3g} ms between neighbouring sizes tried "
                     "(a performance cliff, or a busy machine)")
    if ms is not None and not lo <= ms <= hi:
        smallest_ran = too_small is not None and best.factor == min(t.factor for t in tried.values())
        at_floor = has_sizes and ms > hi and (_sizes_key(current) == _sizes_key(at(1e-4)[0]) or smallest_ran)
        if ms > hi and best.on_cpu < BUSY_ON_CPU:
            why, reason = (f"the machine's other load: its best call ran on a CPU for {best.on_cpu:.0%} of its time"
                           + (f" (with {threads} threads: try threads = 1 on a shared machine)" if threads > 1 else "")
                           + ("; at its smallest sizes" if at_floor else "")), "busy"
        elif not has_sizes:
            why, reason = "no module-level sizes or cases to scale (literal shapes in get_inputs?)", "no_sizes"
        elif at_floor:
            why, reason = ("one call takes this long at its smallest sizes (each size at its floor or fixed"
                           + (", or the reference fails below them" if smallest_ran else "")
                           + "): its least work is over the window on this machine"), "at_floor"
        elif ms < lo and spec.case_file and \
                sum(case_bytes(c) for c in current.cases) >= 0.9 * CASES_BYTES_BUDGET:
            why, reason = (f"its {len(current.cases)} cases are at their memory budget "
                           f"({CASES_BYTES_BUDGET / 2**20:.0f} MiB of inputs in all: a verification keeps "
                           "every trial's results of every case)"), "memory_cap"
        elif ms < lo and capped:
            why, reason = (f"larger sizes would exceed the {cap / 2**20:.0f} MiB memory cap"
                           + (f" or the cases' {CASES_BYTES_BUDGET / 2**20:.0f} MiB budget" if spec.case_file else "")
                           ), "memory_cap"
        elif stuck and reason == "cliff" and (slowed := nearest_over()) is not None and slowed.on_cpu < BUSY_ON_CPU:
            why, reason = (stuck.split(" (")[0] + ", and the calls over the window ran on a CPU for "
                           f"{slowed.on_cpu:.0%} of their time: the machine's other load"), "busy"
        elif stuck:
            why = stuck
        else:
            why, reason = f"sizing stopped after {MAX_STEPS} steps", "steps"
        out["problem"] = (f"{ms:.3g} ms is outside the {lo:g}-{hi:g} ms window" + (f": {why}" if auto else
                          ": use --size-scale auto"))
        out["reason"] = reason if auto else "not_sized"
    return out


def main(argv: list[str]) -> int:
    job_path, progress_path = argv
    progress = _Progress(progress_path)
    job = json.loads(open(job_path).read())
    try:
        out = probe(job, progress)
    except MemoryError:
        out = {"ok": False, "problem": "out of memory building or running the reference: try --size-scale auto"}
    except BaseException as exc:  # the task's own code: any failure is the task's, in one line
        from verifier.npu_source import NpuOnly

        if isinstance(exc, NpuOnly):
            out = {"ok": False, "problem": f"refused: {exc}"}
        else:
            text = " ".join(str(exc).split())[:300]
            out = {"ok": False, "problem": f"reference failed: {type(exc).__name__}: {text}"}
    out["final"] = True
    progress.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
