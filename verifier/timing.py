"""Timing one side (reference or candidate) the same way: warm-up, then individually timed calls
with fresh input values copied in and the caches flushed before each, median and spread.

On the CPU a call is timed by the wall clock around the call and a synchronisation. On devices each
call is timed by a pair of device events (CUDA or NPU) on the current stream, followed by a
device-wide synchronisation; the wall-clock time of the same calls is kept too, so work that
escaped the current stream (a side stream the events do not see) shows as a gap between the two."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass
class Timing:
    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    mean_ms: float
    calls: int
    clock: str = "wall"                  # "wall" or "events"
    wall_median_ms: float | None = None  # with events: the wall-clock median of the same calls

    @property
    def spread_ms(self) -> float:
        """Interquartile range."""
        return self.p75_ms - self.p25_ms

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "spread_ms": self.spread_ms}


class CacheFlusher:
    """Overwrites a buffer (twice the last-level cache by default), evicting inputs and outputs."""

    def __init__(self, nbytes: int, device: str = "cpu"):
        import torch

        self._buf = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        self._value = 0.0

    def __call__(self) -> None:
        self._value += 1.0
        self._buf.fill_(self._value)


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
    """Time ``call`` repeatedly. ``before(i)`` runs untimed before call ``i`` (copy inputs, flush; the
    warm-up calls are ``i = -1, -2, ...``);
    ``after(i, result)`` runs untimed after it (spot checks). ``events()`` returns a fresh (start, end)
    pair of device events with ``record()`` and ``elapsed_time()``; given, they time each call."""
    for i in range(warmup):
        before(-1 - i)  # warm-up calls have negative indices
        call()
        synchronize()
    samples: list[float] = []
    wall: list[float] = []
    started = time.perf_counter()
    i = 0
    while i < max_calls and (i < min_calls or time.perf_counter() - started < budget_s):
        before(i)
        synchronize()
        pair = events() if events is not None else None
        t0 = time.perf_counter_ns()
        if pair is not None:
            pair[0].record()
        result = call()
        if pair is not None:
            pair[1].record()
        synchronize()
        t1 = time.perf_counter_ns()
        wall.append((t1 - t0) / 1e6)
        samples.append(float(pair[0].elapsed_time(pair[1])) if pair is not None else wall[-1])
        if after is not None:
            after(i, result)
        i += 1
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else samples * 3
    return Timing(
        median_ms=statistics.median(samples),
        p25_ms=q[0],
        p75_ms=q[2],
        min_ms=min(samples),
        mean_ms=statistics.fmean(samples),
        calls=len(samples),
        clock="events" if events is not None else "wall",
        wall_median_ms=statistics.median(wall) if events is not None else None,
    )


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
