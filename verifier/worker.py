"""Jobs that run in a worker process: the reference (outputs at every trial, run twice where that
can show nondeterminism, the second shapes, timing) and the candidate (correctness trials, timing).
The candidate's jobs run in the sandbox and never see reference outputs; the harness compares
what each job wrote.

A job is a folder holding ``job.json`` (a ``verifier.jobs`` record; the timing job is still a plain
dict); the worker writes ``result.json`` (a ``JobStatus`` envelope and the job's result fields),
``outputs.pt`` (tensors, loaded by the harness with ``weights_only=True``) and ``progress.txt``
(the step in flight, so a crash can be located).

Run a job by hand: ``python -m verifier.worker JOB_DIR``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import math
import os
import random
import sys
import traceback
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from verifier import runtime
from verifier.inputs import Trial, make_inputs
from verifier.jobs import CandidateJob, CandidateResult, JobStatus, ReferenceJob, ReferenceResult, TrialReport, load_job
from verifier.machine_lock import held
from verifier.task import LARGER_MAX_ELEMENTS, LARGER_MAX_RATIO, TaskSpec, load_task_module
from verifier.timing import CacheFlusher, memory_bandwidth_gbps, time_interleaved

# aten ops a candidate's forward may run: allocation, views, copies and fills. Anything else is
# PyTorch doing the computation the kernel should do.
ALLOWED_OPS = frozenset(
    """empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
    new_ones full full_like new_full zero_ fill_ view _unsafe_view reshape _reshape_alias as_strided t
    transpose permute expand expand_as squeeze unsqueeze flatten unflatten select slice narrow split
    split_with_sizes chunk unbind detach alias clone contiguous copy_ _to_copy to lift_fresh
    lift_fresh_copy view_as resize_ diagonal unfold movedim _local_scalar_dense item sym_size sym_stride
    sym_numel sym_storage_offset is_contiguous set_ _has_compatible_shallow_copy_type""".split()
)


class CandidateFailure(Exception):
    """The candidate did something wrong at a known step; carries the stage and trial."""

    def __init__(self, stage: str, message: str, trial: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.trial = trial


class OpTrace(TorchDispatchMode):
    """Counts the aten ops run while active."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def forbidden(self) -> dict[str, int]:
        return {name: n for name, n in self.ops.items() if name not in ALLOWED_OPS}


# ----------------------------------------------------------------------------- helpers


def _progress(job_dir: Path, text: str) -> None:
    (job_dir / "progress.txt").write_text(text)


def flatten(value: Any, copy: bool = True, cpu: bool = True) -> tuple[Any, list[torch.Tensor]]:
    """(structure, tensor leaves) of a forward's result; numbers become 0-d tensors. Leaves are copies
    unless ``copy`` is False (results nothing else writes to: the reference's own; a timed call's,
    read before the next call), moved to the CPU unless ``cpu`` is False as well."""
    leaves: list[torch.Tensor] = []

    def walk(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if not copy and not cpu:
                leaves.append(v.detach())
                return {"t": "tensor", "device": v.device.type}
            leaf = v.detach().to("cpu").contiguous()
            leaves.append(leaf.clone() if copy and leaf.data_ptr() == v.data_ptr() else leaf)
            return {"t": "tensor", "device": v.device.type}
        if isinstance(v, (tuple, list)):
            return {"t": type(v).__name__, "items": [walk(x) for x in v]}
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

    return walk(value), leaves


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


def _device_module(device: str):
    """``torch.cuda`` or ``torch.npu`` (None on the CPU)."""
    if device == "cuda":
        return torch.cuda
    if device == "npu":
        return torch.npu  # type: ignore[attr-defined]
    return None


def _synchronize(device: str):
    """Device-wide synchronisation (every stream)."""
    module = _device_module(device)
    return module.synchronize if module is not None else (lambda: None)


def _stream_synchronize(device: str):
    """Synchronisation with the current stream only: all a caller reading the outputs may rely on."""
    module = _device_module(device)
    return (lambda: module.current_stream().synchronize()) if module is not None else (lambda: None)


def _events(device: str):
    """A maker of (start, end) timing events on the device, or None on the CPU."""
    module = _device_module(device)
    if module is None:
        return None
    return lambda: (module.Event(enable_timing=True), module.Event(enable_timing=True))


def _timer(job: dict, device: str) -> str:
    """How calls are timed: the backend's declared method, else device events on devices."""
    return job.get("timer") or ("wall" if device == "cpu" else "events")


# Bytes to overwrite before each timed call on a device: twice its L2 (on the NPU as the Ascend
# backend reads it: torch_npu's L2_cache_size, else by SoC).


def _flush_bytes(device: str, requested: int) -> int:
    """The cache-flush buffer size: ``requested`` (twice the CPU's last-level cache) on the CPU, twice
    the device's L2 on a device."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        return 2 * l2 if l2 else 256 << 20
    if device == "npu":
        from verifier.backends.ascend import npu_l2_bytes

        return 2 * npu_l2_bytes()
    return requested


def _field(job: Any, name: str, default: Any = None) -> Any:
    """A job's field, whether the job is a dataclass (verifier.jobs) or a plain dict (the timing job)."""
    return job.get(name, default) if isinstance(job, dict) else getattr(job, name, default)


def _load_candidate(job: Any, job_dir: Path, module_name: str = "candidate_model"):
    device = _field(job, "device", "cpu")
    runtime.configure(str(job_dir / _field(job, "library")), _field(job, "signatures"), device,
                      runtime.current_stream(device))
    path = job_dir / (_field(job, "model") or "model.py")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise CandidateFailure("correctness", f"importing model.py failed: {_describe(exc)}") from exc
    if not hasattr(module, "ModelNew"):
        raise CandidateFailure("correctness", "model.py defines no ModelNew")
    return module.ModelNew


def _describe(exc: BaseException) -> str:
    """One line: exception type and message, plus where in the candidate's code it happened."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "candidate_model" in f.filename or f.filename.endswith("model.py")]
    where = f" (model.py line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}{where}"[:600]


def _save(job_dir: Path, payload: dict) -> None:
    tmp = job_dir / "outputs.pt.tmp"
    torch.save(payload, tmp)
    os.replace(tmp, job_dir / "outputs.pt")


def _setup(job: Any) -> None:
    threads = int(_field(job, "threads", 1))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    if _field(job, "device") == "npu":
        import torch_npu  # noqa: F401

        torch.npu.set_device(0)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- reference


# A widened trial is dropped when the reference is NaN or infinite at more than this share of an
# output's places: the operator is not defined on much of the widened range (log, sqrt: about half).
UNDEFINED_LIMIT = 0.1


class TaskProblem(Exception):
    """The task's reference cannot judge a candidate (it is nondeterministic): the task's fault."""


# aten ops whose result depends on the order of writes when indices repeat (scatter with a source,
# index_put without accumulation, index_copy): which write wins is unspecified.
ORDERED_WRITES = frozenset({"scatter", "scatter_", "index_put", "index_put_", "_index_put_impl_",
                            "index_copy", "index_copy_"})


class WriteOrder(TorchDispatchMode):
    """Records the order-dependent writes the reference makes and, with ``reverse``, makes them in
    the reverse order: an equally valid run in which, where indices repeat, another write wins."""

    def __init__(self, reverse: bool = False):
        super().__init__()
        self.reverse = reverse
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ORDERED_WRITES:
            self.seen[name] += 1
            if self.reverse:
                try:
                    args = _reversed_writes(name, tuple(args), kwargs)
                except Exception:  # a form we do not know how to reverse: run it as it is
                    pass
        return func(*args, **kwargs)


def _reversed_writes(name: str, args: tuple, kwargs: dict) -> tuple:
    if name.startswith("scatter"):
        if len(args) != 4 or not isinstance(args[3], torch.Tensor) or "reduce" in kwargs:
            return args
        target, dim, index, src = args
        src = src[tuple(slice(0, n) for n in index.shape)]
        return target, dim, index.flip(dim), src.flip(dim)
    if name.startswith("index_copy"):
        target, dim, index, source = args[:4]
        return (target, dim, index.flip(0), source.flip(dim), *args[4:])
    target, indices, values = args[:3]
    accumulate = bool(args[3]) if len(args) > 3 else bool(kwargs.get("accumulate", False))
    if accumulate or any(i is None or i.dtype not in (torch.int64, torch.int32) for i in indices):
        return args
    idx = torch.broadcast_tensors(*indices)
    rest = target.shape[len(indices):]
    vals = values.expand(*idx[0].shape, *rest).reshape(-1, *rest).flip(0)
    return (target, [i.reshape(-1).flip(0) for i in idx], vals, *args[3:])


def _differing(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """Per output: where two runs differ (NaN equal to NaN), or None where they agree."""
    out: list[torch.Tensor | None] = []
    for x, y in zip(a, b):
        if _identical(x, y):
            out.append(None)
        elif x.shape != y.shape or x.dtype != y.dtype:
            out.append(torch.ones(x.shape, dtype=torch.bool))
        else:
            diff = x != y
            if x.is_floating_point():
                diff &= ~(torch.isnan(x) & torch.isnan(y))
            out.append(diff)
    return out


def _training_modules(model: torch.nn.Module) -> list[str]:
    """Names of the layers that behave differently in training mode (dropout, batch norm)."""
    kinds = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)
    return sorted({type(m).__name__ for m in model.modules() if isinstance(m, kinds)})


def _reference(job: ReferenceJob, job_dir: Path) -> dict:
    spec, device = job.task, job.device
    result = ReferenceResult()
    module = load_task_module(spec)

    if job.want_outputs:
        with held(job.machine_lock, "shared"):  # computing: waits while something is timed
            payload = _reference_outputs(job_dir, job, module, result)
        _save(job_dir, payload)

    want_timing = job.want_timing
    want_bandwidth = job.want_bandwidth and device == "cpu"
    if want_timing or want_bandwidth:
        _progress(job_dir, "reference timing (waiting for the machine)")
        with held(job.machine_lock, "exclusive"):  # nothing of ours runs beside a timing
            _progress(job_dir, "reference timing")
            if want_timing:
                # The reference alone: shown (``evokernel tasks --time``), never divided by; the
                # performance gate times the reference again beside each candidate.
                sides = {"reference": _instances(module.Model, module, job.trials, device, bool(result.eval_mode))}
                window, _, _, input_bytes = _time_sides(sides, module, job.trials[:2], {"timing": job.timing},
                                                        device, checked=False)
                result.timing = {**window.timing("reference").to_dict(), "input_bytes": input_bytes}
            if want_bandwidth:
                result.bandwidth_gbps = memory_bandwidth_gbps(device)
    return result.to_dict()


def _reference_outputs(job_dir: Path, job: ReferenceJob, module, result: ReferenceResult) -> dict:
    """The reference's outputs at every trial it is defined on, then at the first smaller and the first
    larger second shape it accepts; run twice where that can show nondeterminism. Fills ``result``;
    returns the payload of ``outputs.pt``."""
    spec, device = job.task, job.device
    payload: dict[str, Any] = {"trials": [], "noise": [], "ignore": []}
    eval_mode = False
    causes: dict[int, str] = {}
    notes: dict[int, str] = {}
    spreads: dict[int, float] = {}

    def run(mod, trial: Trial, twice: bool):
        torch.manual_seed(trial.model_seed)
        model = mod.Model(*mod.get_init_inputs()).to(device)
        if eval_mode:
            model.eval()
        inputs = _to_device(make_inputs(mod.get_inputs, trial), device)
        pristine = _snapshot(inputs) if twice else None
        watch = WriteOrder()
        with torch.no_grad(), watch:
            out = model(*inputs)
        structure, leaves = flatten(out, copy=False)
        kept = inputs
        ignore: list[torch.Tensor | None] = [None] * len(leaves)
        if twice or watch.seen:  # again on the same inputs, with order-dependent writes reversed
            again = WriteOrder(reverse=True)
            with torch.no_grad(), again:
                again_inputs = pristine if pristine is not None else _to_device(make_inputs(mod.get_inputs, trial), device)
                structure2, leaves2 = flatten(model(*again_inputs), copy=False)
            if structure2 != structure or len(leaves2) != len(leaves):
                raise TaskProblem(f"the reference of task {spec.id} is nondeterministic: two runs on the same inputs "
                                  "return results of different structure; it cannot judge a candidate")
            ignore = _differing(leaves, leaves2)
            for k, mask in enumerate(ignore):
                if mask is not None:
                    spreads[k] = max(spreads.get(k, 0.0), _spread(leaves[k], leaves2[k], mask))
                if mask is not None and k not in causes:
                    ops = sorted(watch.seen)
                    causes[k] = (f"duplicate indices in {', '.join('aten.' + o for o in ops)}: which write wins is "
                                 "unspecified" if ops else "random or order-dependent computation")
        return model, kept, structure, leaves, ignore

    def keep(trial: Trial, kept: list, model, structure, leaves, ignore) -> None:
        result.trials.append(trial)
        payload["trials"].append({"structure": structure, "leaves": leaves})
        slot = f"{trial.distribution}|{trial.shape}"
        ratios = job.noise_ratios.get(slot)
        if ratios is not None and len(ratios) == len(leaves):   # measured before for this task: scale it
            noise = [r * _rms(leaf) for r, leaf in zip(ratios, leaves)]
        else:
            noise = _noise(model, kept, leaves)
            result.noise_ratios[slot] = [n / r if (r := _rms(leaf)) > 0 else 0.0 for n, leaf in zip(noise, leaves)]
        payload["noise"].append(noise)
        payload["ignore"].append(ignore)
        for k, mask in enumerate(ignore):
            if mask is None:
                continue
            n, total = int(mask.sum()), mask.numel()
            spread = spreads.get(k, 0.0)
            if n * 2 > total:
                raise TaskProblem(
                    f"the reference of task {spec.id} is nondeterministic: output {k} differs between two runs on the "
                    f"same inputs at {n} of {total} places (by up to {spread:.3g}; {causes.get(k)})"
                    + (" in training and in eval mode" if eval_mode else "")
                    + "; it cannot judge a candidate: make the reference deterministic")
            if k not in notes:
                notes[k] = (f"the reference is nondeterministic: output {k} differs between two runs on the same inputs "
                            f"at {n} of {total} places (by up to {spread:.3g}; {causes.get(k)}); those places are not "
                            f"compared")

    for i, trial in enumerate(job.trials):
        _progress(job_dir, f"reference trial {i}")
        if trial.widened:
            try:
                model, kept, structure, leaves, ignore = run(module, trial, twice=False)
            except TaskProblem:
                raise
            except Exception as exc:  # the operator is not defined there: the task's precondition
                result.dropped.append(f"{trial.describe(seed=False)}: dropped, the reference refuses them ({_describe(exc)})")
                continue
            undefined = _undefined_fraction(leaves)
            if undefined > UNDEFINED_LIMIT:
                result.dropped.append(f"{trial.describe(seed=False)}: dropped, the reference is NaN or infinite at "
                                      f"{undefined:.0%} of its output there (a precondition of the task)")
                continue
            keep(trial, kept, model, structure, leaves, ignore)
            continue
        model, kept, structure, leaves, ignore = run(module, trial, twice=i == 0)
        if i == 0 and any(m is not None for m in ignore):
            # Random in the mode it was built in (training): try eval mode, deterministic for dropout.
            eval_mode = True
            model_e, kept_e, structure_e, leaves_e, ignore_e = run(module, trial, twice=True)
            if all(m is None for m in ignore_e):
                layers = _training_modules(model_e)
                result.eval_mode = (f"compared in eval mode: in training mode the reference is random "
                                    f"({', '.join(layers) if layers else 'randomness tied to self.training'}); "
                                    "eval mode makes it deterministic")
                causes.clear()
                model, kept, structure, leaves, ignore = model_e, kept_e, structure_e, leaves_e, ignore_e
            else:
                eval_mode = False
        keep(trial, kept, model, structure, leaves, ignore)

    base_numel = _input_numel(module)
    for search in job.shapes:
        for overrides in search.candidates:
            _progress(job_dir, f"reference second shape ({search.kind}) {overrides}")
            try:
                alt_module = load_task_module(spec, overrides)
                if search.kind == "larger":
                    numel = _input_numel(alt_module)
                    limit = min(LARGER_MAX_RATIO * base_numel, LARGER_MAX_ELEMENTS) if base_numel else LARGER_MAX_ELEMENTS
                    if numel is not None and numel > limit:
                        result.alt_rejected.append(f"{overrides}: {numel} input elements, over the limit {int(limit)}")
                        continue
                trial = Trial(search.trial.seed, search.trial.distribution, tuple(sorted(overrides.items())),
                              search.trial.init_seed, search.kind)
                model, kept, structure, leaves, ignore = run(alt_module, trial, twice=False)
            except TaskProblem:
                raise
            except Exception as exc:  # the reference does not accept this shape: try the next
                result.alt_rejected.append(f"{overrides}: {_describe(exc)}")
                continue
            keep(trial, kept, model, structure, leaves, ignore)
            break
    result.nondeterministic = [notes[k] for k in sorted(notes)]
    return payload


def _spread(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """The largest difference between two runs' values at the places where they differ."""
    if a.shape != b.shape or not bool(mask.any()):
        return float("inf") if a.shape != b.shape else 0.0
    d = (a.double() - b.double()).abs()[mask]
    d = d[~torch.isnan(d)]
    return float(d.max()) if d.numel() else float("inf")


def _undefined_fraction(leaves: list[torch.Tensor]) -> float:
    """The largest share of NaN or infinite values over the floating outputs."""
    worst = 0.0
    for leaf in leaves:
        if leaf.is_floating_point() and leaf.numel() and not math.isfinite(float(leaf.sum(dtype=torch.float64))):
            worst = max(worst, float((~torch.isfinite(leaf)).sum()) / leaf.numel())
    return worst


def _input_numel(module) -> int | None:
    """Elements of ``get_inputs()``, worked out on PyTorch's meta device (None when that fails)."""
    try:
        with torch.device("meta"):
            inputs = module.get_inputs()
        return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))
    except Exception:
        return None


def _rms(leaf: torch.Tensor) -> float:
    """Root mean square of a floating output's finite values (0 for other outputs)."""
    if not leaf.is_floating_point() or not leaf.numel():
        return 0.0
    x = leaf.float()
    value = float(torch.linalg.vector_norm(x)) / math.sqrt(x.numel())
    if math.isfinite(value):
        return value
    x = x[torch.isfinite(x)]
    return float(torch.linalg.vector_norm(x.double())) / math.sqrt(x.numel()) if x.numel() else 0.0


def _noise(model: torch.nn.Module, inputs: list[Any], leaves: list[torch.Tensor]) -> list[float]:
    """RMS difference between the float32 reference and the same model in float64, per output leaf:
    the rounding noise a correct reordering of the computation may also show."""
    if not any(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in inputs):
        return [0.0] * len(leaves)
    try:
        model64 = copy.deepcopy(model).double()
        inputs64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            _, leaves64 = flatten(model64(*inputs64))
    except Exception:
        return [0.0] * len(leaves)
    out = []
    for a, b in zip(leaves, leaves64):
        if a.is_floating_point() and a.shape == b.shape and a.numel():
            d = b.neg_().add_(a)             # a - b, in float64, in place
            value = float(torch.linalg.vector_norm(d)) / math.sqrt(d.numel())
            if not math.isfinite(value):     # NaN or infinities: over the finite differences only
                d = d[torch.isfinite(d)]
                value = float(d.pow(2).mean().sqrt()) if d.numel() else 0.0
            out.append(value)
        else:
            out.append(0.0)
    return out


# ----------------------------------------------------------------------------- candidate


def _candidate(job: CandidateJob, job_dir: Path) -> dict:
    spec, device = job.task, job.device
    ModelNew = _load_candidate(job, job_dir)
    sync = _synchronize(device)
    stream_sync = _stream_synchronize(device)
    reports: list[TrialReport] = []
    saved = []
    buffers: list[Any] | None = None
    modules: dict[tuple, Any] = {}
    for i, trial in enumerate(job.trials):
        _progress(job_dir, f"trial {i}: {trial.describe()}")
        key = trial.overrides
        if key not in modules:
            modules[key] = load_task_module(spec, dict(trial.overrides))
        module = modules[key]
        fresh = _to_device(make_inputs(module.get_inputs, trial), device)
        # Reuse the previous trial's buffers when shapes match, so results keyed by pointer go stale.
        if buffers is not None and _same_layout(buffers, fresh):
            for buf, new in zip(buffers, fresh):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(new)
            inputs = buffers
        else:
            inputs = buffers = fresh
        init_inputs = module.get_init_inputs()
        torch.manual_seed(trial.model_seed)
        try:
            model = ModelNew(*init_inputs).to(device)
            if job.eval_mode:
                model.eval()
        except Exception as exc:
            raise CandidateFailure("correctness", f"ModelNew(*get_init_inputs()) failed: {_describe(exc)}", i) from exc
        before = _snapshot(inputs)
        runtime.reset_calls()
        trace = OpTrace()
        try:
            with torch.no_grad(), trace:
                out = model(*inputs)
            stream_sync()
        except Exception as exc:
            raise CandidateFailure("correctness", f"forward raised {_describe(exc)}", i) from exc
        # Read the outputs once the current stream is done (what any caller may rely on) and, on a
        # device, again after a device-wide sync: a difference is work that escaped the stream.
        structure, leaves = flatten(out)
        escaped: list[int] = []
        if device != "cpu":
            try:
                sync()
            except Exception as exc:
                raise CandidateFailure("correctness", f"the device failed after forward: {_describe(exc)}", i) from exc
            _, settled = flatten(out)
            escaped = [k for k, (a, b) in enumerate(zip(leaves, settled)) if not _identical(a, b)]
        saved.append({"structure": structure, "leaves": leaves})
        reports.append(TrialReport(calls=runtime.call_counts(), forbidden_ops=trace.forbidden(),
                                   inputs_changed=_changed(before, inputs), escaped_stream=escaped))
    _save(job_dir, {"trials": saved})
    return CandidateResult(reports).to_dict()


def _same_layout(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        (not isinstance(x, torch.Tensor) and x == y)
        or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        for x, y in zip(a, b)
    )


def _instances(make, module, trials: list[Trial], device: str, eval_mode: bool = False) -> list:
    """One instance per timed trial, seeded like the reference's (``make(*init_inputs)``), in eval mode
    when the reference is compared in it (see _reference_outputs)."""
    out = []
    for trial in trials[:2]:
        torch.manual_seed(trial.model_seed)
        out.append(make(*module.get_init_inputs()).to(device))
        if eval_mode:
            out[-1].eval()
    return out


def _perf(job: dict, job_dir: Path) -> dict:
    """The performance job: the reference, the candidate and (when given) the task's best, timed
    interleaved in one window on the same inputs, every timed call's output checked against the
    reference's on the same inputs (a random sample of positions), then the re-checks."""
    spec = TaskSpec.from_dict(job["task"])
    device = job.get("device", "cpu")
    trials = [Trial.from_dict(t) for t in job["trials"]]
    module = load_task_module(spec)
    eval_mode = bool(job.get("eval_mode"))  # the mode the reference is compared in
    sides: dict[str, list] = {"reference": _instances(module.Model, module, trials, device, eval_mode)}
    result: dict[str, Any] = {}
    if job.get("best"):
        # The task's best is loaded first: its model.py binds its own library at import time.
        try:
            BestNew = _load_candidate({**job, **job["best"]}, job_dir, module_name="best_model")
            sides["best"] = _instances(BestNew, module, trials, device, eval_mode)
        except Exception as exc:  # the best no longer loads here: time without it, and say so
            result["best_error"] = str(exc)[:300] if isinstance(exc, CandidateFailure) else _describe(exc)
    ModelNew = _load_candidate(job, job_dir)
    try:
        sides["candidate"] = _instances(ModelNew, module, trials, device, eval_mode)
    except Exception as exc:
        raise CandidateFailure("performance", f"ModelNew(*get_init_inputs()) failed: {_describe(exc)}") from exc
    runtime.reset_calls()
    try:
        window, checks, recheck, input_bytes = _time_sides(sides, module, trials, job, device,
                                                           samples=int(job.get("check_samples", 1024)))
    except CandidateFailure:
        raise
    except Exception as exc:
        raise CandidateFailure("performance", f"a timed call raised {_describe(exc)}") from exc
    _save(job_dir, {"checks": [{"expected": e, "got": g} for _, e, g in checks]})
    result.update(window=window.to_dict(), checks=[meta for meta, _, _ in checks], recheck=recheck,
                  input_bytes=input_bytes)
    return result


def _pick(structure_leaves: tuple[Any, list[torch.Tensor]], picks: list[torch.Tensor | None]) -> dict:
    """A result reduced to the positions ``picks`` (one index tensor per leaf, None = every position),
    with each leaf's full shape kept beside."""
    structure, leaves = structure_leaves
    sampled = []
    for leaf, idx in zip(leaves, picks):
        if idx is None or leaf.numel() <= idx.numel():
            sampled.append(leaf.to("cpu").contiguous().clone())
        else:
            sampled.append(leaf.reshape(-1)[(idx % max(leaf.numel(), 1)).to(leaf.device)].to("cpu"))
    return {"structure": structure, "leaves": sampled, "shapes": [list(leaf.shape) for leaf in leaves]}


def _storages(*things: Any) -> set[int]:
    """Data pointers of the storages of tensors in ``things`` (tensors, lists of them, modules with
    their parameters, buffers and tensor attributes): memory ``_poison`` must never overwrite."""
    ptrs: set[int] = set()

    def add(t: torch.Tensor) -> None:
        try:
            ptrs.add(t.untyped_storage().data_ptr())
        except Exception:  # a tensor without storage (meta, sparse): nothing to protect
            pass

    for thing in things:
        if isinstance(thing, torch.Tensor):
            add(thing)
        elif isinstance(thing, (list, tuple)):
            ptrs |= _storages(*thing)
        elif isinstance(thing, torch.nn.Module):
            for t in thing.state_dict(keep_vars=True).values():
                add(t)
            for m in thing.modules():
                for v in vars(m).values():
                    if isinstance(v, torch.Tensor):
                        add(v)
    return ptrs


def _poison(value: Any, protected: set[int]) -> None:
    """Overwrite a call's outputs once they have been read (NaN, or every bit flipped), so the
    allocator never hands a later call memory that still holds a result: a kernel that writes
    nothing into ``torch.empty_like`` would otherwise pass on the reference's output of the round
    before. Memory in ``protected`` (inputs, parameters) is left alone."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        try:
            if t.numel() == 0 or t.untyped_storage().data_ptr() in protected:
                return
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.logical_not_()
            else:
                t.bitwise_not_()
        except Exception:  # a read-only or exotic tensor: leave it
            pass
    elif isinstance(value, (list, tuple)):
        for v in value:
            _poison(v, protected)
    elif isinstance(value, dict):
        for v in value.values():
            _poison(v, protected)


def _time_sides(sides: dict[str, list], module, trials: list[Trial], job: dict, device: str, *,
                samples: int | None = 1024, checked: bool = True):
    """Time each side (``sides[name][k]`` runs on trial ``k``'s inputs) interleaved in one window.

    Every round draws a fresh factor just below 1 and a trial (alternating); every side in the round
    gets that trial's inputs scaled by the factor, copied into the same buffers, caches flushed, before
    its call. So no two rounds see the same values (nothing cached by pointer or content is reused),
    and every call is alike: there are no exact, recognisable "checked" inputs. With ``checked``,
    every timed round's candidate output is compared (by the harness) with the reference's output in
    the same round at ``samples`` random positions per output, drawn after both calls; then the
    re-checks: the second instance once more on fresh inputs of its own trial (a kernel that stops
    working after a few calls), and the timed first instance on the third trial's inputs, never seen
    in the timing (it has the first one's parameters; a result computed once and replayed cannot
    match), under the op trace and the call count.

    Returns (the window, [(meta, expected, got)], the re-check report, the bytes of one input set)."""
    t = job["timing"]
    sets = [_to_device(make_inputs(module.get_inputs, tr), device) for tr in trials]
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
    flush = CacheFlusher(_flush_bytes(device, int(t["flush_bytes"])), device) if t.get("flush_bytes") else None
    sync = _synchronize(device)
    rng = random.Random(os.urandom(16))
    rounds: dict[int, tuple[int, float]] = {}
    current = {"trial": 0}
    pending: dict[int, dict[str, tuple[Any, list[torch.Tensor]]]] = {}
    captured: list[tuple[dict, dict, dict]] = []

    def round_inputs(i: int) -> tuple[int, float]:
        if i not in rounds:
            rounds[i] = ((i if i >= 0 else -1 - i) % min(2, len(sets)), 1.0 - rng.uniform(2.0 ** -12, 2.0 ** -7))
        return rounds[i]

    def load(k: int, factor: float) -> None:
        current["trial"] = k
        for buf, new in zip(buffers, sets[k]):
            if isinstance(buf, torch.Tensor):
                buf.copy_(new)
                if buf.is_floating_point():
                    buf.mul_(factor)
        if flush is not None:
            flush()

    def before(i: int, side: str) -> None:
        load(*round_inputs(i))

    def make_call(side: str):
        def call():
            with torch.no_grad():
                return sides[side][current["trial"]](*buffers)
        return call

    def picks_for(leaves: list[torch.Tensor], limit: int | None) -> list[torch.Tensor | None]:
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        return [None if limit is None or leaf.numel() <= limit else torch.randint(leaf.numel(), (limit,), generator=gen)
                for leaf in leaves]

    protected = _storages(buffers, *sets, *(m for instances in sides.values() for m in instances))

    def after(i: int, side: str, out: Any) -> None:
        if checked and side != "best" and i >= 0:
            # Kept as it is (no copy) until both sides of the round have run: memory still held
            # cannot be handed to the other side's call.
            got = pending.setdefault(i, {})
            got[side] = (flatten(out, copy=False, cpu=False), out)
            if len(got) < 2:
                return
            k, _ = rounds[i]            # both the reference and the candidate ran on this round's inputs
            picks = picks_for(got["reference"][0][1], samples)
            captured.append(({"round": i, "trial": k, "what": f"timed call {i + 1}"},
                             _pick(got["reference"][0], picks), _pick(got["candidate"][0], picks)))
            for _, raw in pending.pop(i).values():
                _poison(raw, protected)
            return
        _poison(out, protected)

    window = time_interleaved({side: make_call(side) for side in sides}, before, warmup=int(t["warmup"]),
                              max_rounds=int(t["max_calls"]), budget_s=float(t["budget_s"]), synchronize=sync,
                              after=after, events=_events(device) if _timer(job, device) == "events" else None,
                              rng=rng)
    recheck = None
    if checked and "candidate" in sides:
        n = window.rounds

        def both(k_inputs: int, k_model: int, what: str, index: int, traced: bool = False) -> dict | None:
            """The reference's and the candidate's instance ``k_model`` on fresh values of trial
            ``k_inputs``: compared at every position."""
            factor = 1.0 - rng.uniform(2.0 ** -12, 2.0 ** -7)
            load(k_inputs, factor)
            with torch.no_grad():
                ref_out = sides["reference"][k_model](*buffers)
            sync()
            expected = flatten(ref_out)
            _poison(ref_out, protected)
            del ref_out
            load(k_inputs, factor)
            runtime.reset_calls()
            trace = OpTrace()
            with torch.no_grad(), (trace if traced else contextlib.nullcontext()):
                out = sides["candidate"][k_model](*buffers)
            sync()
            got = flatten(out)
            _poison(out, protected)
            everything = [None] * len(expected[1])
            captured.append(({"round": index, "trial": k_inputs, "what": what},
                             _pick(expected, everything), _pick(got, everything)))
            return {"calls": runtime.call_counts(), "forbidden_ops": trace.forbidden()} if traced else None

        k1 = min(1, len(sets) - 1)
        both(k1, k1, "a call after timing", n)                        # the second instance again
        recheck = both(len(sets) - 1, 0, "a call after timing on new inputs", n + 1, traced=True)
    input_bytes = sum(x.numel() * x.element_size() for x in buffers if isinstance(x, torch.Tensor))
    return window, captured, recheck, input_bytes


# ----------------------------------------------------------------------------- entry points

HANDLERS = {"reference": _reference, "candidate": _candidate, "perf": _perf}


def run_job(job_dir: Path) -> int:
    """Run the job in ``job_dir``; always writes result.json unless the process itself dies."""
    job = load_job(job_dir)
    random.seed(0)
    status = JobStatus()
    fields: dict[str, Any] = {}
    try:
        _setup(job)
        fields = HANDLERS[_field(job, "kind")](job, job_dir)
        status.ok = True
    except CandidateFailure as exc:
        status.stage, status.error, status.trial = exc.stage, str(exc), exc.trial
    except TaskProblem as exc:
        status.stage, status.error = "task", str(exc)
    except Exception as exc:  # the task or the candidate raised somewhere we did not expect
        status.stage, status.error, status.traceback = "worker", _describe(exc), traceback.format_exc()[-4000:]
    tmp = job_dir / "result.json.tmp"
    tmp.write_text(json.dumps({**fields, **asdict(status)}))
    os.replace(tmp, job_dir / "result.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m verifier.worker JOB_DIR", file=sys.stderr)
        return 2
    return run_job(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
