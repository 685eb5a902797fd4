"""Calls timed inside one job's process: the interleaved loop (``time_interleaved``, ``time_calls``), the
cache flush before a timed call (``CacheFlusher``, sized by ``verifier.machine.caches.flush_plan``), the
reference's own timing figure (``evokernel tasks --time``, measured inside the trusted reference job after its
outputs: shown beside a task, never divided by; ``time_reference_alone``) and the memory bandwidth behind the
plausibility flags.

Every speed verdict comes from a window in which the harness times the reference beside the candidate,
each in its own process (verifier.window.harness). On devices a call is timed by a pair of device events
on the current stream, with the wall clock of the same call kept beside it (work that escaped the stream
shows as a gap between the two)."""

from __future__ import annotations

import os
import random
import resource
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from verifier.backends import DeviceRuntime
from verifier.inputs import Trial, make_inputs
from verifier.job.candidate import _progress
from verifier.job.tensors import _to_device
from verifier.jobs import ReferenceJob, ReferenceResult
from verifier.machine.lock import held
from verifier.window.stats import Timing, Window


def clock(declared: str, device_runtime: DeviceRuntime) -> str:
    """How calls are timed: the backend's declared clock (``Backend.timer``), else device events where the device
    has them (the reference's own figure, whose settings name no clock)."""
    return declared or ("wall" if device_runtime.events() is None else "events")


def time_reference_alone(job: ReferenceJob, job_dir: Path, module: ModuleType, result: ReferenceResult,
                         device_runtime: DeviceRuntime) -> None:
    """The reference job's timing part, after its outputs (``verifier.job.worker_reference``): the reference alone
    (``job.want_timing``) and the memory bandwidth (``job.want_bandwidth``, on the CPU), under the machine lock's
    exclusive side (nothing of ours runs beside a timing); both go into ``result``."""
    device = device_runtime.device
    want_bandwidth = job.want_bandwidth and device == "cpu"
    if not (job.want_timing or want_bandwidth):
        return
    _progress(job_dir, "reference timing (waiting for the machine)")
    with held(job.machine_lock, "exclusive"):
        _progress(job_dir, "reference timing")
        if job.want_timing:
            # The reference alone: shown (``evokernel tasks --time``), never divided by; the performance gate
            # times the reference again beside each candidate.
            models = instances(module.Model, module, job.trials, device, bool(result.eval_mode))
            timing, input_bytes = time_reference(models, module, job.trials, job.timing, device_runtime)
            result.timing = {**timing.to_dict(), "input_bytes": input_bytes}
        if want_bandwidth:
            result.bandwidth_gbps = memory_bandwidth_gbps(device)


def instances(make: Any, module: Any, trials: list[Trial], device: str, eval_mode: bool = False) -> list[Any]:
    """One instance per timed trial, seeded like the reference's (``make(*init_inputs)``), in eval mode
    when the reference is compared in it."""
    out = []
    for trial in trials[:2]:
        torch.manual_seed(trial.model_seed)
        out.append(make(*module.get_init_inputs()).to(device))
        if eval_mode:
            out[-1].eval()
    return out


def time_reference(models: list[Any], module: Any, trials: list[Trial], timing: dict[str, Any],
                   device_runtime: DeviceRuntime) -> tuple[Timing, int]:
    """The reference alone, ``timing``'s warm-up and budget, on the two trials' inputs alternately (each
    call on fresh values: the trial's inputs scaled by a new factor just below 1, caches flushed before).
    Returns its timing and the bytes of one input set."""
    device = device_runtime.device
    sets = [_to_device(make_inputs(module.get_inputs, t), device) for t in trials[:2]]
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
    nbytes = int(timing.get("flush_bytes") or 0)
    flush = CacheFlusher(device_runtime.flush_bytes(nbytes), device) if nbytes else None
    rng = random.Random(os.urandom(16))
    current = {"k": 0}

    def before(i: int) -> None:
        k = (i if i >= 0 else -1 - i) % len(sets)
        current["k"] = k
        factor = 1.0 - rng.uniform(2.0 ** -12, 2.0 ** -7)
        for buf, new in zip(buffers, sets[k]):
            if isinstance(buf, torch.Tensor):
                buf.copy_(new)
                if buf.is_floating_point():
                    buf.mul_(factor)
        if flush is not None:
            flush()

    def call() -> Any:
        with torch.no_grad():
            return models[current["k"] % len(models)](*buffers)

    events = device_runtime.events() if clock(timing.get("timer", ""), device_runtime) == "events" else None
    result = time_calls(call, before, warmup=int(timing["warmup"]), max_calls=int(timing["max_calls"]),
                        budget_s=float(timing["budget_s"]), synchronize=device_runtime.synchronize, events=events)
    input_bytes = sum(x.numel() * x.element_size() for x in buffers if isinstance(x, torch.Tensor))
    return result, input_bytes


class CacheFlusher:
    """Overwrites a buffer (twice the last-level cache by default), evicting inputs and outputs."""

    def __init__(self, nbytes: int, device: str = "cpu"):
        import torch

        self._buf = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        self._value = 0.0

    def __call__(self) -> None:
        self._value += 1.0
        self._buf.fill_(self._value)


def time_interleaved(
    calls: dict[str, Callable[[], Any]],
    before: Callable[[int, str], None],
    *,
    warmup: int,
    max_rounds: int,
    budget_s: float,
    synchronize: Callable[[], None] = lambda: None,
    after: Callable[[int, str, Any], None] | None = None,
    min_rounds: int = 5,
    events: Callable[[], tuple[Any, Any]] | None = None,
    rng: random.Random | None = None,
) -> Window:
    """Time every side of ``calls`` in rounds: each round calls each side once, in a random order.

    ``before(i, side)`` runs untimed before each call (copy inputs, flush caches; warm-up rounds have
    ``i = -1, -2, ...``); ``after(i, side, result)`` runs untimed after each call, warm-up included
    (checks, and clearing the result).
    ``events()`` returns a fresh (start, end) pair of device events; given, they time each call.
    ``budget_s`` is the wall-clock budget of one side: the window stops after ``min_rounds`` once
    ``budget_s * len(calls)`` has passed, or at ``max_rounds``. Rounds in which a call was preempted
    (involuntary context switches of this process) are marked."""
    rng = rng or random.Random(os.urandom(16))
    sides = list(calls)
    for i in range(warmup):
        for side in rng.sample(sides, len(sides)):
            before(-1 - i, side)
            result = calls[side]()
            synchronize()
            if after is not None:
                after(-1 - i, side, result)
            del result
    samples: dict[str, list[float]] = {s: [] for s in sides}
    wall: dict[str, list[float]] = {s: [] for s in sides}
    order: list[list[str]] = []
    preempted: list[bool] = []
    started = time.perf_counter()
    budget = budget_s * len(sides)
    i = 0
    while i < max_rounds and (i < min_rounds or time.perf_counter() - started < budget):
        this_round = rng.sample(sides, len(sides))
        switched = False
        for side in this_round:
            before(i, side)
            synchronize()
            pair = events() if events is not None else None
            switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
            t0 = time.perf_counter_ns()
            if pair is not None:
                pair[0].record()
            result = calls[side]()
            if pair is not None:
                pair[1].record()
            synchronize()
            t1 = time.perf_counter_ns()
            switched |= resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw != switches
            wall[side].append((t1 - t0) / 1e6)
            samples[side].append(float(pair[0].elapsed_time(pair[1])) if pair is not None else wall[side][-1])
            if after is not None:
                after(i, side, result)
            del result
        order.append(this_round)
        preempted.append(switched)
        i += 1
    return Window(sides, samples, wall, order, clock="events" if events is not None else "wall", preempted=preempted)


def time_calls(
    call: Callable[[], Any],
    before: Callable[[int], None],
    *,
    warmup: int,
    max_calls: int,
    budget_s: float,
    synchronize: Callable[[], None] = lambda: None,
    after: Callable[[int, Any], None] | None = None,
    min_calls: int = 5,
    events: Callable[[], tuple[Any, Any]] | None = None,
) -> Timing:
    """One side alone (the reference's figure for ``evokernel tasks --time``): ``time_interleaved``
    with a single side."""
    window = time_interleaved({"only": call}, lambda i, _s: before(i), warmup=warmup, max_rounds=max_calls,
                              budget_s=budget_s, synchronize=synchronize, min_rounds=min_calls, events=events,
                              after=(lambda i, _s, r: after(i, r)) if after is not None else None)
    return window.timing("only")


def memory_bandwidth_gbps(device: str = "cpu") -> float:
    """Sustained copy bandwidth (read + write bytes per second), for plausibility checks."""
    import torch

    a = torch.ones(32 << 20, dtype=torch.float32, device=device)  # 128 MiB each way
    b = torch.empty_like(a)
    b.copy_(a)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() * 4 / best / 1e9
