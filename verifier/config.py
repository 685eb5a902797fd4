"""Verifier settings: one pydantic model, every field documented, every default sane on a laptop."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class VerifyConfig(BaseModel):
    """How candidates are checked. The ``[verifier]`` table of ``evokernel.toml`` maps onto this."""

    model_config = ConfigDict(extra="forbid")

    trials: int = Field(5, ge=5, le=50)
    """Correctness trials at the task's own shape (different seeds and input distributions); at least 5."""

    second_shape: bool = True
    """Also check at a second, ragged shape when the task's sizes are module-level integers."""

    atol: float | None = Field(None, ge=0, allow_inf_nan=False)
    """Absolute tolerance; None takes the backend's default for the dtype (CPU fp32: 1e-4)."""

    rtol: float | None = Field(None, ge=0, allow_inf_nan=False)
    """Relative tolerance; None takes the backend's default for the dtype."""

    threads: int = Field(default_factory=default_threads, ge=1)
    """Threads for both reference and candidate (torch intra-op threads and OMP_NUM_THREADS)."""

    warmup_calls: int = Field(3, ge=1)
    """Untimed calls before timing (first call loads libraries and touches pages)."""

    timing_calls: int = Field(20, ge=3)
    """Timed rounds at most (each calls the reference, the candidate and the best once); fewer when
    ``timing_budget_s`` runs out (never fewer than 5)."""

    timing_budget_s: float = Field(1.0, gt=0)
    """Wall-clock budget for the timed calls of one side; a window with three sides gets three times it."""

    timed_cases: int = Field(8, ge=1)
    """A multi-case task's cases timed in one verification, at most, each in a window of its own: the
    largest case of each dtype first, then the largest others (``verifier.cases.timing_order``), the same
    cases for every candidate of the task. Every case is still checked for correctness; the speedup is
    the geometric mean over the cases timed, and the verdict names them."""

    cases_timing_budget_s: float = Field(20.0, gt=0)
    """Wall-clock budget of all a multi-case task's timing windows in one verification: each window's
    timed rounds get their share (a side at most ``min(timing_budget_s, this / (cases timed x sides))``,
    never fewer than 5 rounds). Every case ``timed_cases`` chooses is timed whatever the load (the set
    depends on the task's cases alone); a loaded machine makes the windows longer, never fewer. A window
    measured again gets it again."""

    timing_precision: float = Field(0.04, ge=0, lt=1)
    """The window stops before ``timing_calls`` once every ratio it reports (the reference's time over
    the candidate's, and the best's over the candidate's) has an interval within ±this share of the
    ratio, after 8 rounds at least (``verifier.window.harness.WindowSettings.settle_rounds``): more
    rounds would not change what the verdict says. 0 times every round. The interval's width decides,
    never its side of 1, so stopping early favours no verdict."""

    min_speed_change: float = Field(0.03, ge=0, lt=1)
    """A window says "faster" or "slower" only when its whole interval is past this change (``1 + x`` or
    ``1 / (1 + x)``): an interval that only excludes 1 is "same speed" within the noise limit, else "noisy"."""

    noise_limit: float = Field(0.15, gt=0)
    """A window whose speed interval reaches further than this fraction from equal speed (±15 %), without
    a change of ``min_speed_change`` beyond 1, is "noisy": too disturbed to tell, no verdict, measure again
    (see verifier.verdict.NOISE_LIMIT for the measurements behind the default)."""

    check_samples: int = Field(1024, ge=16)
    """Positions of every output compared with the reference's on every timed call."""

    flush_cache: bool = True
    """Overwrite a buffer before every timed call that evicts the timed cores' caches: twice their private
    caches plus a bounded share of the shared one, tens of MB (``verifier.machine.caches.flush_plan``)."""

    timing: Literal["evokernel", "multikernelbench", "npukernelbench"] = "evokernel"
    """What one timed sample is (``verifier.window.methods``): ``evokernel``, one cold call after a cache flush (the
    default: what an operator costs inside a model); ``multikernelbench``, 3 synced warm-ups then an event pair
    per call, no flush; ``npukernelbench``, 1 warm-up then one event pair around 100 back-to-back calls, no flush.
    Set one of the suites' to compare with its published speedups; the verdict is the paired ratio of one window
    either way."""

    implausible_speedup: float = Field(50.0, gt=1)
    """Speedups above this are flagged for review (and also any below the memory-bandwidth bound)."""

    build_timeout_s: float = Field(120.0, gt=0)
    """Wall-clock limit of one build."""

    project_build_timeout_s: float | None = Field(None, gt=0)
    """Wall-clock limit of each step of a build whose flow takes minutes, an Ascend custom-op project's
    (msopgen, build.sh, the package install, the binding's link); None: the backend's own floor (900 s for the
    custom-op project: see ``verifier.backends.ascend_project.BUILD_MIN_TIMEOUT_S`` for what it rests on)."""

    run_timeout_s: float = Field(60.0, gt=0)
    """Wall-clock limit of one sandboxed worker job (correctness or timing); the job is killed after."""

    reference_timeout_s: float = Field(300.0, gt=0)
    """Wall-clock limit of the reference job (outputs at every trial plus its timing)."""

    memory_limit_mb: int = Field(8192, ge=256)
    """Address-space limit of a candidate worker on the CPU backend (RLIMIT_AS), beyond the task's own tensors:
    a job's limit is this plus four times the reference's outputs at every trial."""

    max_output_mb: int = Field(1024, ge=16)
    """Largest file a worker may write (RLIMIT_FSIZE), or more where the task's own outputs need it (the
    reference's at every trial, with room for the file's records): a job that writes more than that fails."""

    antihack: bool = True
    """Run the static anti-hack rules (turn off only to test the sandbox itself)."""

    seccomp: bool = True
    """Install each job's seccomp filter (``verifier.sandbox.seccomp``: no new processes, exec, ptrace,
    foreign signals; the rest as the backend's runtime declares it needs). Off only to tell a sandbox
    failure from a kernel failure on a device runtime the filter has not met (``bench/npu_check.py`` runs
    each check both ways); a verdict without it says so."""

    use_bwrap: bool = True
    """Run workers under bubblewrap (no network, read-only system, hidden state) when it is installed."""
