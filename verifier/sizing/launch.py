"""Starting a probe: :func:`run_probe` runs the probe's job (``verifier.sizing.job_entry``) on a task in the
verifier's sandbox and reads back what it found from its progress lines, however it ended (a task that
hangs, exits or dies is a ``Probe`` with a one-line problem, never the caller's crash).

A probe runs the task's reference code, and a suite may come from anywhere (a KernelBench checkout, a
folder someone sent): so it runs as a confined job of a fork server of its own (``ProbeSandbox``), as a
candidate's does (``verifier.sandbox``): bubblewrap's allow-list view of the filesystem and no network
where bubblewrap works, a PID namespace and a Landlock domain of its own, the jobs' seccomp filter (no
fork, exec or internet sockets), an environment scrubbed of secrets, resource limits, and a wall-clock
timeout that kills it whole. No CPU-time limit: an RLIMIT_CPU arms the process's CPU-time timer, and the
probe's own clock (``time.process_time``, the CPU time of a call) then moves in whole ticks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifier.scratch import release, scratch_dir
from verifier.sizing.limits import BYTES_CAP, PROBE_TIMEOUT_S
from verifier.sizing.record import Probe

if TYPE_CHECKING:
    from verifier.sandbox.client import JobExit

# The job code the probe's fork server runs, named rather than imported (see verifier.sandbox.forkserver).
JOB_ENTRY = "verifier.sizing.job_entry:run_job"
FILE_SIZE_MB = 64   # what a probe writes: its job and progress lines (and whatever the reference prints)


class ProbeSandbox:
    """A fork server for probes (``verifier.sandbox.client.ForkServer``, candidates' confinement) with
    PyTorch imported, so each probe is a forked job that starts in milliseconds. Started on the first probe,
    under the machine lock held shared (it imports torch: never beside a timing); close it (or use ``with``)
    to stop it and every job it runs. One per thread count (``OMP_NUM_THREADS`` is the server's).
    ``use_bwrap``, ``seccomp``: the verifier's settings (``[verifier] use_bwrap``, ``seccomp``)."""

    def __init__(self, threads: int = 1, *, use_bwrap: bool = True, seccomp: bool = True):
        from verifier.processes import scrubbed_env
        from verifier.sandbox.client import ForkServer

        self.threads = threads
        self.jobs_root = scratch_dir("probes")   # in memory where the machine has it; never left after any exit
        env = scrubbed_env({"OMP_NUM_THREADS": str(threads)}, home=str(self.jobs_root))
        self.server = ForkServer(self.jobs_root, entry=JOB_ENTRY, env=env,
                                 preload=["torch", JOB_ENTRY.partition(":")[0]], use_bwrap=use_bwrap,
                                 hidden=[], devices=[], confine=True, seccomp=seccomp)

    @property
    def isolation(self) -> str:
        """How a probe is isolated here, in words (``ForkServer.isolation``)."""
        return self.server.isolation

    def close(self) -> None:
        self.server.close()
        release(self.jobs_root)

    def __enter__(self) -> ProbeSandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, job: dict[str, Any], timeout_s: float) -> Probe:
        """Run the probe of ``job`` as one job of this sandbox (see :func:`run_probe`)."""
        from verifier.errors import SandboxError
        from verifier.priority import BACKGROUND_NICENESS
        from verifier.sandbox.client import JobLimits, plain_files_only
        from verifier.sandbox.seccomp import CPU_NEEDS

        cap = int(job.get("bytes_cap", BYTES_CAP))
        # memory: the tensors, a copy or two of them, and the interpreter with torch; no CPU-time limit (see
        # above); lower priority: a probe sizes, it is not timed (verifier.priority)
        limits = JobLimits(cpu_seconds=None, address_space_mb=(cap * 6 + (4 << 30)) >> 20, file_size_mb=FILE_SIZE_MB,
                           open_files=CPU_NEEDS.open_files, nice=BACKGROUND_NICENESS)
        try:
            self.server.start()
        except SandboxError as exc:
            return Probe(ok=False, problem=f"the probe's sandbox did not start: {exc}", reason="failed")
        job_dir = Path(tempfile.mkdtemp(prefix="probe-", dir=self.jobs_root))
        try:
            (job_dir / "job.json").write_text(json.dumps(job))
            ended = self.server.run(job_dir, limits, timeout_s)
            plain_files_only(job_dir)   # a link the job left in its folder is never followed
            records = _records(job_dir / "progress.jsonl")
            stderr = _last_line(job_dir / "stderr.txt")
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        return _probe(records, ended, stderr, timeout_s)


def run_probe(job: dict[str, Any], timeout_s: float = PROBE_TIMEOUT_S, *, sandbox: ProbeSandbox | None = None,
              use_bwrap: bool = True, seccomp: bool = True) -> Probe:
    """Run the probe's job on ``job`` in ``sandbox`` (a new one, closed after, when None: then ``use_bwrap``
    and ``seccomp`` are its settings), killed whole at ``timeout_s``: a task that hangs, exits or dies is a
    Probe with a one-line problem, never our crash; a probe killed for time still says how far it got.

    A probe sizes, it does not judge: it runs at lower CPU priority (``verifier.priority``) and holds
    the machine lock shared, so it waits while any timing window runs and never runs beside one."""
    from verifier.machine.lock import MachineLock, machine_lock_path

    with MachineLock(machine_lock_path()).shared():
        if sandbox is not None:
            return sandbox.run(job, timeout_s)
        with ProbeSandbox(int(job.get("threads", 1)), use_bwrap=use_bwrap, seccomp=seccomp) as own:
            return own.run(job, timeout_s)


def _records(path: Path) -> list[dict[str, Any]]:
    """The progress lines a probe wrote (a line cut short by a kill, or not a record, left out)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _last_line(path: Path, limit: int = 200) -> str:
    """The last non-empty line of what the job wrote to ``path`` (its end only is read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4_000))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def _probe(records: list[dict[str, Any]], ended: JobExit, stderr: str, timeout_s: float) -> Probe:
    """The Probe its progress lines say, or how it ended (``ended``: the job's ``JobExit``) where they
    have no final record."""
    final = next((r for r in reversed(records) if r.get("final")), None)
    if final is not None:
        final.setdefault("loaded", any(r.get("loaded") for r in records))
        final["steps"] = [r for r in records if "factor" in r and not r.get("final")]
        return Probe.from_dict(final)
    last = next((r for r in reversed(records) if "factor" in r), None)
    where = f" at scale {last['factor']:.3g}" if last else ""
    timed_out = ended.status == "timeout"
    if timed_out:
        problem = f"reference did not finish within {timeout_s:.0f} s{where}"
        if last and last.get("ms"):
            problem += f" (last call {last['ms']:.0f} ms)"
    elif ended.tool:
        problem = f"the probe did not finish: {ended.tool}{where}"
    else:
        killed = ended.status == "signaled" and ended.signal is not None
        how = f"killed by signal {ended.signal}" if killed else f"exited with status {ended.code}"
        if killed and ended.signal == signal.SIGKILL:
            how += " (memory limit)"
        elif killed and ended.signal == signal.SIGSYS:
            how += " (a system call the sandbox refuses)"
        problem = f"reference process {how}{where}" + (f": {stderr}" if stderr else "")
        if killed or "MemoryError" in stderr:
            problem += "; try --size-scale auto or a smaller factor"
    return Probe(ok=False, loaded=any(r.get("loaded") for r in records), problem=problem,
                 reason="timeout" if timed_out else "failed",
                 steps=[r for r in records if "factor" in r])
