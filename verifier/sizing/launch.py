"""Starting a probe: :func:`run_probe` runs the probe's job on a task and reads back what it found, from
its progress lines, however it ended (a task that hangs, exits or dies is a ``Probe`` with a one-line
problem, never the caller's crash)."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifier.sizing.limits import BYTES_CAP, PROBE_TIMEOUT_S
from verifier.sizing.record import Probe


def run_probe(job: dict[str, Any], timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Run the probe (``verifier.sizing.job_entry``) on ``job`` in a subprocess of its own (a new process
    group, killed whole on timeout): a task that hangs, exits or dies is a Probe with a one-line problem,
    never our crash.

    A probe sizes, it does not judge: it runs at lower CPU priority (``verifier.machine.priority``) and holds
    the machine lock shared, so it waits while any timing window runs and never runs beside one. It runs the
    task's reference, as the verifier's reference jobs do, with the same scrubbed environment (no credentials:
    ``verifier.processes.scrubbed_env``)."""
    from verifier.machine.lock import MachineLock, machine_lock_path
    from verifier.processes import run_process, scrubbed_env

    with tempfile.TemporaryDirectory(prefix="evokernel-probe-") as tmp, MachineLock(machine_lock_path()).shared():
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "progress.jsonl"
        job_path.write_text(json.dumps(job))
        env = scrubbed_env({"OMP_NUM_THREADS": str(job.get("threads", 1))}, home=tmp)
        proc = run_process([sys.executable, "-m", "verifier.sizing.job_entry", str(job_path), str(out_path)],
                           cwd=tmp, env=env, timeout=timeout_s, background=True, limits=_limits(job),
                           output_limit=4_000)
        timed_out = proc.timed_out
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
        last = proc.last_line(200)
        code = proc.returncode if proc.returncode is not None else 0
        how = proc.describe()
        if code == -signal.SIGKILL:
            how += " (memory or CPU-time limit)"
        problem = f"reference process {how}{where}" + (f": {last}" if last else "")
        if code < 0 or "MemoryError" in last:
            problem += "; try --size-scale auto or a smaller factor"
    return Probe(ok=False, loaded=any(r.get("loaded") for r in records), problem=problem,
                 reason="timeout" if timed_out else "failed",
                 steps=[r for r in records if "factor" in r])


def _limits(job: dict[str, Any]) -> Callable[[], None]:
    cap = int(job.get("bytes_cap", BYTES_CAP))

    def apply() -> None:
        import resource

        limit = cap * 6 + (4 << 30)  # tensors, a copy or two of them, and the interpreter with torch
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass

    return apply
