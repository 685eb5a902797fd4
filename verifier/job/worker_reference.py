"""The reference job of the worker (see verifier.worker): the reference's outputs at every trial,
run twice where that can show nondeterminism (reversed order-dependent writes, eval mode for
dropout), the widened trials it is defined on, the second shapes it accepts (its timing alone, shown and never divided
by, is ``verifier.window.in_process``'s). Runs in the trusted reference fork server, never beside a candidate."""

from __future__ import annotations

import copy
import math
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from verifier.backends import DeviceRuntime
from verifier.inputs import Trial, make_inputs
from verifier.job.candidate import _describe, _progress, _save
from verifier.job.tensors import _identical, _snapshot, _to_device, flatten
from verifier.jobs import ReferenceJob, ReferenceResult, ShapeSearch
from verifier.machine.lock import held
from verifier.task import LARGER_MAX_ELEMENTS, LARGER_MAX_RATIO, load_task_module

if TYPE_CHECKING:
    from torch._ops import OpOverload

UNDEFINED_LIMIT = 0.1


class TaskProblem(Exception):
    """The task's reference cannot judge a candidate (it is nondeterministic): the task's fault."""


# aten ops whose result depends on the order of writes when indices repeat (scatter with a source,
# index_put without accumulation, index_copy): which write wins is unspecified.
ORDERED_WRITES = frozenset({"scatter", "scatter_", "index_put", "index_put_", "_index_put_impl_",
                            "index_copy", "index_copy_"})


# torch's TorchDispatchMode has no annotations (its __init_subclass__ and __init__ are untyped calls)
class WriteOrder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records the order-dependent writes the reference makes and, with ``reverse``, makes them in
    the reverse order: an equally valid run in which, where indices repeat, another write wins."""

    def __init__(self, reverse: bool = False):
        super().__init__()  # type: ignore[no-untyped-call]
        self.reverse = reverse
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
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


def _reversed_writes(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
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
    idx = torch.broadcast_tensors(*indices)  # type: ignore[no-untyped-call]   # unannotated in torch
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


def reference_outputs(job: ReferenceJob, job_dir: Path, device_runtime: DeviceRuntime
                      ) -> tuple[ReferenceResult, ModuleType]:
    """The reference job's outputs part (``job.want_outputs``), under the machine lock's shared side (computing:
    it waits while something is timed): ``outputs.pt`` written, the result and the task's module returned for the
    timing part (``verifier.window.in_process.time_reference_alone``, which the entry point runs next)."""
    result = ReferenceResult()
    module = load_task_module(job.task)
    if job.want_outputs:
        with held(job.machine_lock, "shared"):
            payload = _reference_outputs(job_dir, job, module, result, device_runtime.device)
        _save(job_dir, payload)
    return result, module


def _reference_outputs(job_dir: Path, job: ReferenceJob, module: ModuleType, result: ReferenceResult, device: str
                       ) -> dict[str, Any]:
    """The reference's outputs at every trial it is defined on, then at the first smaller and the first
    larger second shape it accepts; run twice where that can show nondeterminism. Fills ``result``;
    returns the payload of ``outputs.pt``."""
    outputs = _Outputs(job_dir, job, result, device)
    for i, trial in enumerate(job.trials):
        _progress(job_dir, f"reference trial {i}")
        if trial.widened:
            outputs.widened(module, trial)
        else:
            outputs.own_range(module, trial, first=i == 0)
    base_numel = _input_numel(module)
    for search in job.shapes:
        outputs.second_shape(search, base_numel)
    result.nondeterministic = [outputs.notes[k] for k in sorted(outputs.notes)]
    return outputs.payload


_Run = tuple[torch.nn.Module, list[Any], Any, list[torch.Tensor], list[torch.Tensor | None]]
"""One run of the reference at a trial: the model, its inputs, the result's structure and leaves, and per leaf
the places two runs differ (None: none)."""


class _Outputs:
    """The reference job's outputs as they are gathered: the payload of ``outputs.pt``, and what two runs of the
    reference on the same inputs showed (which outputs differ where, why, by how much)."""

    def __init__(self, job_dir: Path, job: ReferenceJob, result: ReferenceResult, device: str):
        self.job_dir, self.job, self.result, self.device = job_dir, job, result, device
        self.payload: dict[str, Any] = {"trials": [], "noise": [], "ignore": []}
        self.eval_mode = False
        self.causes: dict[int, str] = {}
        self.notes: dict[int, str] = {}
        self.spreads: dict[int, float] = {}

    def run(self, mod: ModuleType, trial: Trial, twice: bool) -> _Run:
        """The reference at ``trial``; run again on the same inputs (order-dependent writes reversed) when
        ``twice`` or when it wrote through duplicate indices."""
        torch.manual_seed(trial.model_seed)
        model = mod.Model(*mod.get_init_inputs()).to(self.device)
        if self.eval_mode:
            model.eval()
        inputs = _to_device(make_inputs(mod.get_inputs, trial), self.device)
        pristine = _snapshot(inputs) if twice else None
        watch = WriteOrder()
        with torch.no_grad(), watch:
            out = model(*inputs)
        structure, leaves = flatten(out, copy=False)
        ignore: list[torch.Tensor | None] = [None] * len(leaves)
        if twice or watch.seen:  # again on the same inputs, with order-dependent writes reversed
            again = WriteOrder(reverse=True)
            with torch.no_grad(), again:
                again_inputs = (pristine if pristine is not None
                                else _to_device(make_inputs(mod.get_inputs, trial), self.device))
                structure2, leaves2 = flatten(model(*again_inputs), copy=False)
            if structure2 != structure or len(leaves2) != len(leaves):
                raise TaskProblem(f"the reference of task {self.job.task.id} is nondeterministic: two runs on the "
                                  "same inputs return results of different structure; it cannot judge a candidate")
            ignore = _differing(leaves, leaves2)
            self._note_causes(ignore, leaves, leaves2, sorted(watch.seen))
        return model, inputs, structure, leaves, ignore

    def _note_causes(self, ignore: list[torch.Tensor | None], leaves: list[torch.Tensor],
                     leaves2: list[torch.Tensor], ops: list[str]) -> None:
        for k, mask in enumerate(ignore):
            if mask is not None:
                self.spreads[k] = max(self.spreads.get(k, 0.0), _spread(leaves[k], leaves2[k], mask))
            if mask is not None and k not in self.causes:
                self.causes[k] = (f"duplicate indices in {', '.join('aten.' + o for o in ops)}: which write wins is "
                                  "unspecified" if ops else "random or order-dependent computation")

    def keep(self, trial: Trial, run: _Run) -> None:
        """A trial's outputs into the payload, with their rounding noise (measured, or scaled from the ratios
        measured before) and the places not compared; a reference that differs at most places fails the task."""
        model, kept, structure, leaves, ignore = run
        self.result.trials.append(trial)
        self.payload["trials"].append({"structure": structure, "leaves": leaves})
        slot = f"{trial.distribution}|{trial.shape}|{trial.case}"   # a multi-case task's cases differ
        ratios = self.job.noise_ratios.get(slot)
        if ratios is not None and len(ratios) == len(leaves):   # measured before for this task: scale it
            noise = [r * _rms(leaf) for r, leaf in zip(ratios, leaves)]
        else:
            noise = _noise(model, kept, leaves)
            self.result.noise_ratios[slot] = [n / r if (r := _rms(leaf)) > 0 else 0.0
                                              for n, leaf in zip(noise, leaves)]
        self.payload["noise"].append(noise)
        self.payload["ignore"].append(ignore)
        for k, mask in enumerate(ignore):
            if mask is not None:
                self._note_differing(k, int(mask.sum()), mask.numel())

    def _note_differing(self, k: int, n: int, total: int) -> None:
        spread = self.spreads.get(k, 0.0)
        if n * 2 > total:
            raise TaskProblem(
                f"the reference of task {self.job.task.id} is nondeterministic: output {k} differs between two runs "
                f"on the same inputs at {n} of {total} places (by up to {spread:.3g}; {self.causes.get(k)})"
                + (" in training and in eval mode" if self.eval_mode else "")
                + "; it cannot judge a candidate: make the reference deterministic")
        if k not in self.notes:
            self.notes[k] = (f"the reference is nondeterministic: output {k} differs between two runs on the same "
                             f"inputs at {n} of {total} places (by up to {spread:.3g}; {self.causes.get(k)}); "
                             "those places are not compared")

    def widened(self, module: ModuleType, trial: Trial) -> None:
        """A widened trial, kept unless the reference refuses it or is undefined at most of its output there."""
        try:
            run = self.run(module, trial, twice=False)
        except TaskProblem:
            raise
        except Exception as exc:  # the operator is not defined there: the task's precondition
            self.result.dropped.append(f"{_named(trial, self.job.task.cases)}: dropped, the reference refuses them "
                                       f"({_describe(exc)})")
            return
        undefined = _undefined_fraction(run[3])
        if undefined > UNDEFINED_LIMIT:
            self.result.dropped.append(f"{_named(trial, self.job.task.cases)}: dropped, the reference is NaN or "
                                       "infinite at "
                                       f"{undefined:.0%} of its output there (a precondition of the task)")
            return
        self.keep(trial, run)

    def own_range(self, module: ModuleType, trial: Trial, first: bool) -> None:
        """A trial over the task's own range; the first runs twice, and a reference random in training mode
        (dropout) is compared in eval mode from then on when that makes it deterministic."""
        run = self.run(module, trial, twice=first)
        if first and any(m is not None for m in run[4]):
            # Random in the mode it was built in (training): try eval mode, deterministic for dropout.
            self.eval_mode = True
            in_eval = self.run(module, trial, twice=True)
            if all(m is None for m in in_eval[4]):
                layers = _training_modules(in_eval[0])
                self.result.eval_mode = (f"compared in eval mode: in training mode the reference is random "
                                         f"({', '.join(layers) if layers else 'randomness tied to self.training'}); "
                                         "eval mode makes it deterministic")
                self.causes.clear()
                run = in_eval
            else:
                self.eval_mode = False
        self.keep(trial, run)

    def second_shape(self, search: ShapeSearch, base_numel: int | None) -> None:
        """The first of ``search``'s candidate sizes the reference accepts (within the larger shape's limit, and
        judging at most of its places), kept; the others said why not."""
        for overrides in search.candidates:
            _progress(self.job_dir, f"reference second shape ({search.kind}) {overrides}")
            try:
                alt_module = load_task_module(self.job.task, overrides)
                if search.kind == "larger":
                    numel = _input_numel(alt_module)
                    limit = (min(LARGER_MAX_RATIO * base_numel, LARGER_MAX_ELEMENTS) if base_numel
                             else LARGER_MAX_ELEMENTS)
                    if numel is not None and numel > limit:
                        self.result.alt_rejected.append(f"{overrides}: {numel} input elements, over the limit "
                                                        f"{int(limit)}")
                        continue
                trial = Trial(search.trial.seed, search.trial.distribution, tuple(sorted(overrides.items())),
                              search.trial.init_seed, search.kind)
                run = self.run(alt_module, trial, twice=False)
            except TaskProblem:
                raise
            except Exception as exc:  # the reference does not accept this shape: try the next
                self.result.alt_rejected.append(f"{overrides}: {_describe(exc)}")
                continue
            if any(mask is not None and int(mask.sum()) * 2 > mask.numel() for mask in run[4]):
                # a few places at a tiny shape, most of them written twice by a duplicate-index scatter: the
                # reference cannot judge there (at the task's own shape it can), so try the next
                self.result.alt_rejected.append(f"{overrides}: two runs of the reference differ at most places")
                continue
            self.keep(trial, run)
            return


def _named(trial: Trial, cases: tuple[dict[str, Any], ...]) -> str:
    """A trial in words, its case named by its number (``verifier.cases.case_number``)."""
    from verifier.cases import case_number

    text = trial.describe(seed=False, case=False)
    return text + (f", case {case_number(cases, trial.case)}" if trial.case is not None else "")


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


def _input_numel(module: ModuleType) -> int | None:
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
