"""What a timing window measured and what it comes to: every side's per-call times, round by round
(``Window``), one side's summary (``Timing``, ``summarize``), and the paired ratios of two sides with
their bootstrap intervals (``paired_ratio``, ``geomean_ratio``, each a ``verifier.verdict.Ratio``): a speedup is the
median of the per-round ratios from one window. What a ratio says ("faster", "same speed", "noisy"...) is
``verifier.verdict``'s one rule; how a window is run, ``verifier.window.harness`` (every side in a process
of its own, the clock in the harness); calls timed inside one process, ``verifier.window.in_process``.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from verifier.verdict import Ratio

# The two-sided confidence of the intervals, and the bootstrap resamples behind them (a few ms).
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


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


def summarize(samples: Sequence[float], clock: str = "wall", wall: Sequence[float] | None = None) -> Timing:
    """Median, quartiles, min and mean of per-call times (ms)."""
    samples = list(samples)
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else samples * 3
    return Timing(median_ms=statistics.median(samples), p25_ms=q[0], p75_ms=q[2], min_ms=min(samples),
                  mean_ms=statistics.fmean(samples), calls=len(samples), clock=clock,
                  wall_median_ms=statistics.median(wall) if clock == "events" and wall else None)


@dataclass
class Window:
    """Per-call times of every side, round by round, from one interleaved window."""

    sides: list[str]
    samples: dict[str, list[float]]       # side -> ms per round (events on devices)
    wall: dict[str, list[float]]          # side -> wall-clock ms per round
    order: list[list[str]]                # the order the sides ran in, per round
    clock: str = "wall"
    preempted: list[bool] | None = None   # per round: a call was preempted (another process took a core);
                                          # reported, not filtered on (on a saturated machine every round is)

    @property
    def rounds(self) -> int:
        return len(self.order)

    def timing(self, side: str) -> Timing:
        return summarize(self.samples[side], self.clock, self.wall[side])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- ratios


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float], *,
                 confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int | None = None) -> Ratio:
    """The median over rounds of ``numerator[i] / denominator[i]`` (two calls of one round, adjacent in
    time, share whatever load the machine had then), with a percentile-bootstrap interval over the
    rounds. With the reference as numerator and the candidate as denominator this is the speedup.

    Measured with ``bench/timing_stability.py`` on a shared 2-core machine, this paired statistic
    spread 1.16x over six verifications of one candidate where the ratio of the two medians spread
    1.35x (and the ratio of lower quartiles 1.34x) on the same windows."""
    import numpy as np

    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("paired samples of equal, non-zero length are needed")
    ratios = a / np.maximum(b, 1e-12)
    value = float(np.median(ratios))
    of_medians = float(np.median(a)) / max(float(np.median(b)), 1e-12)
    if a.size < 3:
        return Ratio(value, 0.0, math.inf, of_medians)   # too few rounds to say anything: never significant
    gen = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
    idx = gen.integers(0, a.size, size=(resamples, a.size))
    boot = np.median(ratios[idx], axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return Ratio(value, float(min(low, value)), float(max(high, value)), of_medians)


def geomean_ratio(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *,
                  confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int | None = None) -> Ratio:
    """The geometric mean over cases of each case's paired ratio (``paired_ratio``'s median over the
    rounds of one window per case), with a percentile-bootstrap interval that resamples every case's
    rounds independently. One case gives ``paired_ratio``'s value."""
    import numpy as np

    if not pairs:
        raise ValueError("at least one case is needed")
    ratios = []
    for numerator, denominator in pairs:
        a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
        if a.shape != b.shape or a.size == 0:
            raise ValueError("paired samples of equal, non-zero length are needed")
        ratios.append(a / np.maximum(b, 1e-12))
    value = float(np.exp(np.mean([np.log(max(float(np.median(r)), 1e-300)) for r in ratios])))
    of_medians = float(np.exp(np.mean([np.log(max(float(np.median(a)), 1e-300) / max(float(np.median(b)), 1e-300))
                                       for a, b in pairs])))
    if any(r.size < 3 for r in ratios):
        return Ratio(value, 0.0, math.inf, of_medians)   # too few rounds in some case: never significant
    gen = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
    logs = np.zeros(resamples)
    for r in ratios:
        idx = gen.integers(0, r.size, size=(resamples, r.size))
        logs += np.log(np.maximum(np.median(r[idx], axis=1), 1e-300))
    boot = np.exp(logs / len(ratios))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return Ratio(value, float(min(low, value)), float(max(high, value)), of_medians)
