"""What one timed sample of a window is: the timing method, ``[verifier] timing``.

A speed verdict is always the ratio of the reference's and the candidate's samples from one window
(``verifier.window.harness``: every side in its own process, alternating, the clock in the harness). The method
says what a sample is, and nothing else:

* ``evokernel`` (the default): one cold call, the caches evicted right before it (``[verifier] flush_cache``),
  after ``[verifier] warmup_calls`` warm-up calls. It measures what a kernel costs when its inputs are not
  already in the caches, which is how an operator runs inside a model (the layer before it has written
  other data), and it does not reward a kernel for finding the previous call's results still cached.
* ``multikernelbench``: MultiKernelBench's way (``utils/performance.py``, ``config.py``): 3 warm-up calls, each
  followed by a device synchronisation, then one event pair around each call, no flush.
* ``npukernelbench``: NPUKernelBench's way (``framework/batch_performance_eval.py``, ``base_config.yaml``
  ``eval.num_perf_trials``): 1 warm-up call, then one event pair around 100 back-to-back calls, their mean as
  the sample, no flush.

The two suites' methods are here so that a user can set a run to the method of the suite whose published speedups
they compare with; warm calls back to back (both, and NPUKernelBench's calls without a sync between them) let a
kernel's inputs stay in the L2 and overlap launch overhead, so their speedups are not ours.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingMethod:
    """How a window takes one sample."""

    name: str
    flush: bool              # evict the caches before every sample (as [verifier] flush_cache allows)
    calls: int               # calls inside one sample, back to back; the sample is their mean
    warmup: int | None       # warm-up calls of each side before the rounds; None: [verifier] warmup_calls
    source: str              # where the method is written down


METHODS = {
    "evokernel": TimingMethod("evokernel", flush=True, calls=1, warmup=None,
                              source="verifier/window/harness.py (one cold call per sample after a cache flush)"),
    "multikernelbench": TimingMethod("multikernelbench", flush=False, calls=1, warmup=3,
                                     source="MultiKernelBench utils/performance.py time_execution_event_template: "
                                            "num_warmup = 3 synchronised warm-ups, an event pair per trial "
                                            "(config.py), no flush"),
    "npukernelbench": TimingMethod("npukernelbench", flush=False, calls=100, warmup=1,
                                   source="NPUKernelBench framework/batch_performance_eval.py warmup_and_measure: one "
                                          "warm-up, an event pair around num_perf_trials = 100 calls "
                                          "(base_config.yaml), averaged, no flush"),
}
DEFAULT = "evokernel"


def timing_method(name: str) -> TimingMethod:
    """The method called ``name``; an unknown name lists the known ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown timing method {name!r}; choose one of: {', '.join(METHODS)}") from None
