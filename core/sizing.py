"""Sizing a task by work: scale every size it has so its reference takes a target time here.

GPU-sized suites (KernelBench's 19_ReLU is 6.4 GB) must shrink for a CPU, and tiny tasks should grow
until launch overhead stops dominating. Counting input elements misses the work (a GEMM's 32000x32000
weight is a parameter, not an input; a conv's work grows with the cube of its sizes), so ``auto`` runs
the reference and measures: each task is probed in its own subprocess (``core.probe``) under a time
and memory cap, which first shrinks it on the meta device until its tensors fit the memory cap (a
parameter never allocated at full size), then times it and rescales until one call lands in the window.

Scaling keeps what the task declares between its sizes: equal sizes stay equal, and a size that
divides another still divides it (``block_len`` into ``seq_length``).
A task that cannot be brought into the window is reported with the reason, never timed for minutes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from math import lcm
from pathlib import Path

from verifier.task import MIN_SIZE

WINDOW_MS = (2.0, 50.0)       # the reference time "auto" aims for, on this machine
BYTES_CAP = 1 << 30           # parameters + one case's inputs, at most (the memory cap per task)
CALL_CAP_S = 2.0              # one reference call longer than this is not repeated: shrink first
PROBE_TIMEOUT_S = 120.0       # a probe (sizing + timing one task) is killed after this
MAX_GROWTH = 64.0             # "auto" grows a small task by at most this factor per size
MAX_STEPS = 20               # "auto" measures at most this many times (a size near the window is measured twice)
START_BYTES = 32 << 20        # "auto" times a large task first at this size, then grows it by measured time


def scale_values(values: dict[str, int], factor: float, floor: int = MIN_SIZE) -> dict[str, int]:
    """``values`` scaled by ``factor``: equal values stay equal, a value that divides another still
    divides it (the larger is rounded to a multiple of the smaller), and none goes below
    ``min(value, floor)``. Sizes are not kept powers of two: all of a task's sizes doubling at once
    would change its time 30-fold in one step, past the whole window."""
    distinct = sorted(set(values.values()))
    scaled: dict[int, int] = {}
    for v in distinct:  # ascending, so every divisor of v is already scaled
        lo = min(v, floor)
        r = max(lo, round(v * factor))
        divisors = [scaled[d] for d in distinct if d < v and v % d == 0 and d >= floor]
        step = 1
        for d in divisors:
            step = lcm(step, d)
        if step > 1:
            if step > max(r, lo) * 4:   # incompatible divisors after scaling: keep the largest one only
                step = max(divisors)
            r = max(step, round(r / step) * step)
        scaled[v] = int(r)
    return {k: scaled[v] for k, v in values.items()}


def case_sizes(cases: tuple[dict, ...]) -> dict[str, int]:
    """The scalable extents of a multi-case task's cases, keyed ``case/input/dim``."""
    out = {}
    for c, case in enumerate(cases):
        for i, entry in enumerate(case.get("inputs", [])):
            if "value" in entry or not isinstance(entry.get("shape"), list):
                continue
            for d, n in enumerate(entry["shape"]):
                if isinstance(n, int) and n >= MIN_SIZE:
                    out[f"{c}/{i}/{d}"] = n
    return out


def scale_cases(cases: tuple[dict, ...], factor: float) -> tuple[dict, ...]:
    """The cases with every tensor extent scaled by ``factor`` (per case, so a case's matching extents,
    like a matmul's inner dimensions, stay matching)."""
    out = []
    for c, case in enumerate(cases):
        sizes = {k: v for k, v in case_sizes((case,)).items()}
        new = scale_values(sizes, factor) if sizes else {}
        inputs = []
        for i, entry in enumerate(case.get("inputs", [])):
            entry = dict(entry)
            if isinstance(entry.get("shape"), list) and "value" not in entry:
                entry["shape"] = [new.get(f"0/{i}/{d}", n) for d, n in enumerate(entry["shape"])]
            inputs.append(entry)
        out.append({**case, "inputs": inputs})
    return tuple(out)


@dataclass
class Probe:
    """What a probe of a task's reference found (all fields optional but ``ok``)."""

    ok: bool
    loaded: bool = False
    factor: float = 1.0
    overrides: dict[str, int] = field(default_factory=dict)
    cases: list[dict] | None = None
    ms: float | None = None
    case_ms: list[float] = field(default_factory=list)
    bytes: int | None = None
    ops: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    reason: str = ""        # why it is outside the window: at_floor, no_sizes, memory_cap, cliff, no_closer_size, steps
    steps: list[dict] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "Probe":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def run_probe(job: dict, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Run ``core.probe`` on ``job`` in a subprocess of its own (a new process group, killed whole on
    timeout): a task that hangs, exits or dies is a Probe with a one-line problem, never our crash."""
    with tempfile.TemporaryDirectory(prefix="evokernel-probe-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "progress.jsonl"
        job_path.write_text(json.dumps(job))
        env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))}
        env["OMP_NUM_THREADS"] = str(job.get("threads", 1))
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen([sys.executable, "-m", "core.probe", str(job_path), str(out_path)], cwd=tmp, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=_limits(job))
        try:
            _, err = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            timed_out = True
        lines = out_path.read_text().splitlines() if out_path.exists() else []
        records = [json.loads(line) for line in lines if line.strip()]
    final = next((r for r in reversed(records) if r.get("final")), None)
    if final is not None:
        final.setdefault("loaded", any(r.get("loaded") for r in records))
        final["steps"] = [r for r in records if "factor" in r and not r.get("final")]
        return Probe.from_dict(final)
    last = next((r for r in reversed(records) if "factor" in r), None)
    where = f" at scale {last['factor']:.3g}" if last else ""
    if timed_out:
        problem = f"reference did not finish within {timeout_s:.0f} s{where}"
        if last and last.get("ms"):
            problem += f" (last call {last['ms']:.0f} ms)"
    else:
        tail = (err or b"").decode(errors="replace").strip().splitlines()
        code = proc.returncode
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        if code == -signal.SIGKILL:
            how += " (memory or CPU-time limit)"
        problem = f"reference process {how}{where}" + (f": {tail[-1][:200]}" if tail else "")
        if code < 0 or "MemoryError" in (tail[-1] if tail else ""):
            problem += "; try --size-scale auto or a smaller factor"
    return Probe(ok=False, loaded=any(r.get("loaded") for r in records), problem=problem,
                 reason="timeout" if timed_out else "failed",
                 steps=[r for r in records if "factor" in r])


def _limits(job: dict):
    cap = int(job.get("bytes_cap", BYTES_CAP))

    def apply() -> None:
        import resource

        limit = cap * 6 + (4 << 30)  # tensors, a copy or two of them, and the interpreter with torch
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass

    return apply
