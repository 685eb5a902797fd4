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
from dataclasses import replace
from typing import Any

from core.sizing import CALL_CAP_S, MAX_GROWTH, START_BYTES, WINDOW_MS, scale_cases, scale_values
from verifier.task import TaskSpec, load_task_module, size_constants


class _Progress:
    def __init__(self, path: str):
        self.path = path

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def spec_at(spec: TaskSpec, factor: float) -> tuple[TaskSpec, dict[str, int]]:
    """The spec with every size scaled by ``factor`` (module sizes and case extents) and its overrides."""
    sizes = size_constants(spec.source)
    scaled = scale_values(sizes, factor) if sizes and factor != 1.0 else dict(sizes)
    overrides = {k: v for k, v in scaled.items() if v != sizes[k]}
    # cases listed in code (no case file) are described, not read by the task: they cannot be scaled
    cases = scale_cases(spec.cases, factor) if spec.cases and spec.case_file and factor != 1.0 else spec.cases
    return replace(spec, size_overrides=overrides, cases=cases), overrides


def _tensors(value: Any):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _nbytes(tensors) -> int:
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
            per_case = [_nbytes(_tensors(_case_inputs(module, k))) for k in range(max(1, len(spec.cases)))]
    except Exception:
        return None
    return state + max(per_case)


def _case_inputs(module, k: int | None):
    from verifier.cases import inputs_for

    return list(inputs_for(module.get_inputs, k if k else None)() if k else module.get_inputs())


def time_reference(spec: TaskSpec, threads: int, call_cap_s: float, trace: bool = False) -> dict:
    """Build the model once and time one forward per case (best of a few calls, fewer for slow ones):
    ``{"ms" (geometric mean over cases), "case_ms", "ops" (aten ops of the first case's forward)}``."""
    import torch

    torch.set_num_threads(threads)
    module = load_task_module(spec)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    if hasattr(model, "eval"):
        model.eval()
    case_ms, ops = [], {}
    for k in range(max(1, len(spec.cases))):
        torch.manual_seed(1 + k)
        inputs = _case_inputs(module, k)
        with torch.no_grad():
            t0 = time.perf_counter()
            model(*inputs)
            first = time.perf_counter() - t0
            times = [first]
            if first < call_cap_s:
                budget = time.perf_counter() + max(0.2, 3 * first)
                while len(times) < 11 and (time.perf_counter() < budget or len(times) < 3):
                    t0 = time.perf_counter()
                    model(*inputs)
                    times.append(time.perf_counter() - t0)
                times = times[1:]  # the first call warms caches and allocators
            if trace and k == 0:
                ops = trace_ops(model, inputs)
        # the best of a few calls: on a shared machine the median moves with whatever else runs
        case_ms.append(min(times) * 1e3)
    geo = math.exp(sum(math.log(max(t, 1e-6)) for t in case_ms) / len(case_ms))
    return {"ms": geo, "case_ms": case_ms, "ops": ops}


def trace_ops(model, inputs) -> dict[str, int]:
    """The aten operators one forward runs, with counts (a TorchDispatchMode sees them after
    decomposition of nothing: what PyTorch itself dispatches)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, int] = {}

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            seen[name] = seen.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Ops():
            model(*inputs)
    except Exception:
        pass
    return seen


def probe(job: dict, progress: _Progress) -> dict:
    spec = TaskSpec.from_dict(job["spec"])
    threads = int(job.get("threads", 1))
    lo, hi = job.get("window", WINDOW_MS)
    cap = int(job["bytes_cap"])
    call_cap = float(job.get("call_cap_s", CALL_CAP_S))
    auto = job.get("mode") == "auto"
    factor = float(job.get("factor", 1.0))
    notes: list[str] = []
    has_sizes = bool(size_constants(spec.source)) or bool(spec.cases)

    current, overrides = spec_at(spec, factor)
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
            got = meta_bytes(spec_at(spec, math.exp(mid))[0])
            if got is not None and got <= cap:
                a = mid
            else:
                b = mid
        factor = math.exp(a)
        current, overrides = spec_at(spec, factor)
        nbytes = meta_bytes(current)
        notes.append(f"shrunk to fit {cap / 2**30:.1f} GiB before timing")
        progress.write({"factor": factor, "bytes": nbytes})

    if auto and has_sizes and nbytes is not None and nbytes > START_BYTES:
        # start small and grow by measured time: a GPU-sized call can take seconds on a CPU
        a, b = math.log(1e-4), math.log(factor)
        for _ in range(20):
            mid = (a + b) / 2
            got = meta_bytes(spec_at(spec, math.exp(mid))[0])
            a, b = (mid, b) if got is not None and got <= START_BYTES else (a, mid)
        factor = math.exp(a)
        current, overrides = spec_at(spec, factor)
        nbytes = meta_bytes(current)

    previous: tuple[float, float] | None = None
    below: float | None = None     # the largest factor measured under the window
    above: float | None = None     # the smallest factor measured over it
    capped = False
    target = math.sqrt(lo * hi)
    inner = (lo * (hi / lo) ** 0.15, hi / (hi / lo) ** 0.15)  # 2-50 ms: about 3.2-31 ms
    tried: list[tuple[float, float, TaskSpec, dict, int | None, dict]] = []
    stuck = ""
    failures = 0
    for step in range(16):
        progress.write({"factor": factor, "bytes": nbytes, "started": True})
        try:
            result = time_reference(current, threads, call_cap, trace=False)
        except Exception as exc:
            # scaled too small for the operator (a pooling window longer than its input): grow back
            if not (auto and has_sizes and factor < 1 and failures < 3):
                raise
            failures += 1
            notes.append(f"at scale {factor:.3g} the reference failed ({type(exc).__name__}): grown back")
            below = factor if below is None else max(below, factor)
            factor = math.sqrt(factor * above) if above is not None else min(1.0, factor * 2)
            current, overrides = spec_at(spec, factor)
            nbytes = meta_bytes(current)
            continue
        ms = result["ms"]
        progress.write({"factor": factor, "bytes": nbytes, "ms": ms})
        tried.append((factor, ms, current, overrides, nbytes, result))
        if not auto or not has_sizes or inner[0] <= ms <= inner[1] or (lo <= ms <= hi and step >= 5):
            break  # (auto aims inside the window's middle, so a noisy re-measurement stays in it)
        if ms < lo:
            below = factor if below is None else max(below, factor)
        else:
            above = factor if above is None else min(above, factor)
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
        nxt, nxt_overrides = spec_at(spec, wanted)
        # sizes move in steps (powers of two, divisors): nudge until they do move
        for _ in range(10):
            if nxt.size_overrides != current.size_overrides or nxt.cases != current.cases:
                break
            wanted = wanted * 1.3 if ms < lo else wanted / 1.3
            if not 1e-4 <= wanted <= MAX_GROWTH or (below is not None and wanted <= below) or \
                    (above is not None and wanted >= above):
                break
            nxt, nxt_overrides = spec_at(spec, wanted)
        def seen(candidate: TaskSpec) -> bool:
            return any(t[2].size_overrides == candidate.size_overrides and t[2].cases == candidate.cases
                       for t in tried)

        if seen(nxt) and below is not None and above is not None:
            wanted = math.sqrt(below * above)  # a noisy estimate led back: bisect the bracket instead
            nxt, nxt_overrides = spec_at(spec, wanted)
        for _ in range(5):  # no bracket yet: step on by a fixed ratio past the sizes already tried
            if not seen(nxt) or (below is not None and above is not None):
                break
            wanted = wanted * (0.6 if ms > hi else 1.6)
            nxt, nxt_overrides = spec_at(spec, wanted)
        if seen(nxt):
            if below is not None and above is not None:
                under = max(t[1] for t in tried if t[1] < lo)
                over = min(t[1] for t in tried if t[1] > hi)
                stuck = (f"its time jumps from {under:.3g} to {over:.3g} ms between neighbouring sizes tried "
                         "(a performance cliff, or a busy machine)")
            else:
                stuck = "no untried size closer to the window" + (" (sizes at their floors?)" if ms > hi else "")
            break
        nb = meta_bytes(nxt)
        if nb is not None and nb > cap:
            if wanted < factor or capped:
                break
            # grow only as far as the memory cap allows: the largest factor whose tensors fit
            a, b = math.log(factor), math.log(wanted)
            for _ in range(14):
                mid = (a + b) / 2
                got = meta_bytes(spec_at(spec, math.exp(mid))[0])
                a, b = (mid, b) if got is not None and got <= cap else (a, mid)
            capped = True
            notes.append("growth stopped at the memory cap")
            wanted = math.exp(a)
            nxt, nxt_overrides = spec_at(spec, wanted)
            nb = meta_bytes(nxt)
            if nxt.size_overrides == current.size_overrides and nxt.cases == current.cases:
                break
        factor, current, overrides, nbytes = wanted, nxt, nxt_overrides, nb
    else:
        notes.append("stopped after 16 sizing steps")

    def distance(ms: float) -> float:  # how far outside the window, in log terms
        return 0.0 if lo <= ms <= hi else abs(math.log(ms / (lo if ms < lo else hi)))

    factor, ms, current, overrides, nbytes, result = min(
        tried, key=lambda t: (distance(t[1]), abs(math.log(max(t[1], 1e-9) / target))))
    out = {"ok": True, "loaded": True, "factor": factor, "overrides": overrides,
           "cases": list(current.cases) if spec.cases else None, "ms": ms, "case_ms": result.get("case_ms", []),
           "bytes": nbytes, "notes": notes}
    if job.get("trace", True):
        try:
            out["ops"] = time_reference(current, threads, call_cap, trace=True)["ops"] if ms and ms < 5000 else {}
        except Exception:
            out["ops"] = {}
    if ms is not None and not lo <= ms <= hi:
        why = ("no module-level sizes or cases to scale (literal shapes in get_inputs?)" if not has_sizes
               else f"larger sizes would pass the {cap / 2**20:.0f} MiB memory cap" if ms < lo and capped
               else stuck or "sizing stopped after 16 steps")
        out["problem"] = (f"{ms:.3g} ms is outside the {lo:g}-{hi:g} ms window" + (f": {why}" if auto else
                          ": use --size-scale auto"))
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
