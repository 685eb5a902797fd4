"""The timing window of the worker (see verifier.worker and verifier.gates.performance): the
reference, the candidate and the task's best called in turn, round by round, on the same fresh
inputs, every timed call's output sampled for the harness to check, then the re-checks."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime
from verifier.inputs import Trial, make_inputs
from verifier.job.common import (
    CandidateFailure,
    OpTrace,
    _describe,
    _load_candidate,
    _save,
    _timer,
    _to_device,
    flatten,
)
from verifier.task import TaskSpec, load_task_module
from verifier.timing import CacheFlusher, time_interleaved


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


def _perf(job: dict, job_dir: Path, device_runtime: DeviceRuntime) -> dict:
    """The performance job: the reference, the candidate and (when given) the task's best, timed
    interleaved in one window on the same inputs, every timed call's output checked against the
    reference's on the same inputs (a random sample of positions), then the re-checks."""
    spec = TaskSpec.from_dict(job["task"])
    device = device_runtime.device
    trials = [Trial.from_dict(t) for t in job["trials"]]
    module = load_task_module(spec)
    eval_mode = bool(job.get("eval_mode"))  # the mode the reference is compared in
    sides: dict[str, list] = {"reference": _instances(module.Model, module, trials, device, eval_mode)}
    result: dict[str, Any] = {}
    if job.get("best"):
        # The task's best is loaded first: its model.py binds its own library at import time.
        try:
            BestNew = _load_candidate({**job, **job["best"]}, job_dir, device_runtime, module_name="best_model")
            sides["best"] = _instances(BestNew, module, trials, device, eval_mode)
        except Exception as exc:  # the best no longer loads here: time without it, and say so
            result["best_error"] = str(exc)[:300] if isinstance(exc, CandidateFailure) else _describe(exc)
    ModelNew = _load_candidate(job, job_dir, device_runtime)
    try:
        sides["candidate"] = _instances(ModelNew, module, trials, device, eval_mode)
    except Exception as exc:
        raise CandidateFailure("performance", f"ModelNew(*get_init_inputs()) failed: {_describe(exc)}") from exc
    runtime.reset_calls()
    try:
        window, checks, recheck, input_bytes = _time_sides(sides, module, trials, job, device_runtime,
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


def _time_sides(sides: dict[str, list], module, trials: list[Trial], job: dict, device_runtime: DeviceRuntime, *,
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
    device = device_runtime.device
    sets = [_to_device(make_inputs(module.get_inputs, tr), device) for tr in trials]
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
    flush = CacheFlusher(device_runtime.flush_bytes(int(t["flush_bytes"])), device) if t.get("flush_bytes") else None
    sync = device_runtime.synchronize
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

    events = device_runtime.events() if _timer(job, device_runtime) == "events" else None
    window = time_interleaved({side: make_call(side) for side in sides}, before, warmup=int(t["warmup"]),
                              max_rounds=int(t["max_calls"]), budget_s=float(t["budget_s"]), synchronize=sync,
                              after=after, events=events, rng=rng)
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
            everything: list[torch.Tensor | None] = [None] * len(expected[1])
            captured.append(({"round": index, "trial": k_inputs, "what": what},
                             _pick(expected, everything), _pick(got, everything)))
            return {"calls": runtime.call_counts(), "forbidden_ops": trace.forbidden()} if traced else None

        k1 = min(1, len(sets) - 1)
        both(k1, k1, "a call after timing", n)                        # the second instance again
        recheck = both(len(sets) - 1, 0, "a call after timing on new inputs", n + 1, traced=True)
    input_bytes = sum(x.numel() * x.element_size() for x in buffers if isinstance(x, torch.Tensor))
    return window, captured, recheck, input_bytes


# ----------------------------------------------------------------------------- entry points
