"""The reference's own timing figure (``evokernel tasks --time``), measured inside the trusted reference
job: shown beside a task, never divided by. Every speed verdict comes from a window in which the harness
times the reference beside the candidate, each in its own process (verifier.harness.window)."""

from __future__ import annotations

import os
import random
from typing import Any

import torch

from verifier.backends import DeviceRuntime
from verifier.inputs import Trial, make_inputs
from verifier.job.common import _timer, _to_device
from verifier.timing import CacheFlusher, Timing, time_calls


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

    events = device_runtime.events() if _timer({"timer": timing.get("timer", "")}, device_runtime) == "events" else None
    result = time_calls(call, before, warmup=int(timing["warmup"]), max_calls=int(timing["max_calls"]),
                        budget_s=float(timing["budget_s"]), synchronize=device_runtime.synchronize, events=events)
    input_bytes = sum(x.numel() * x.element_size() for x in buffers if isinstance(x, torch.Tensor))
    return result, input_bytes
