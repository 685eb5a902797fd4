"""Timed runs at normal priority whatever thread starts them; what is not timed runs lower
(verifier.priority). Real threads, real processes, the real fork server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from verifier import priority
from verifier.priority import BACKGROUND_NICENESS
from verifier.processes import run_process
from verifier.sandbox.client import ForkServer, JobLimits

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")

BASE = os.getpriority(os.PRIO_PROCESS, 0)  # the test process's (its main thread's) priority
NICED = min(BASE + 10, 19)

# The fork server's job entry here: every job reports the nice value it runs at instead of running.
REPORTER = textwrap.dedent("""
    import os
    from pathlib import Path

    def run_job(job_dir):
        Path(job_dir, "nice.txt").write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
        return 0
""")


def in_niced_thread(fn):
    """``fn()`` called from a fresh thread whose own nice value is ``NICED`` (as the workbench's engine
    thread once was), with its result."""
    box: dict = {}

    def main() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICED)
            box["nice"] = priority.thread_niceness()
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=main)
    t.start()
    t.join(300)
    if "error" in box:
        raise box["error"]
    assert box["nice"] == NICED
    return box["value"]


def _limits(nice: int) -> JobLimits:
    return JobLimits(cpu_seconds=60, address_space_mb=None, file_size_mb=16, nice=nice)


@pytest.mark.slow
def test_a_timing_job_runs_at_normal_priority_even_from_a_niced_thread_and_a_trial_lower(tmp_path):
    helper = tmp_path / "helper"
    helper.mkdir()
    (helper / "nice_reporter.py").write_text(REPORTER)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(ROOT), str(helper)]),
           "HOME": str(jobs)}
    server = ForkServer(jobs, env=env, preload=["nice_reporter"], use_bwrap=False, hidden=[], devices=[],
                        confine=False, entry="nice_reporter:run_job")

    def run_both() -> tuple[int, int]:
        seen = []
        for name, nice in (("timing", 0), ("trial", BACKGROUND_NICENESS)):
            job = jobs / name
            job.mkdir()
            exit_ = server.run(job, _limits(nice), 120)   # the first starts the server, from this thread
            assert exit_.status == "exited" and exit_.code == 0, (exit_, (jobs / "forkserver.stderr").read_text())
            seen.append(int((job / "nice.txt").read_text()))
        return seen[0], seen[1]

    try:
        timing, trial = in_niced_thread(run_both)
    finally:
        server.close()
    assert timing == BASE                                     # the fork server never inherited the thread's 10
    assert trial == min(BASE + BACKGROUND_NICENESS, 19) > BASE


def _nice_of_child(**kw) -> int:
    code = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    return int(run_process([sys.executable, "-c", code], timeout=60, **kw).output)


def test_processes_started_from_a_niced_thread_get_the_priority_asked_for(tmp_path):
    normal, background = in_niced_thread(lambda: (_nice_of_child(background=False), _nice_of_child(background=True)))
    assert normal == BASE and background == min(BASE + BACKGROUND_NICENESS, 19)


def test_a_build_command_runs_at_lower_priority(tmp_path):
    code = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    proc = run_process([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), timeout=60)
    assert proc.ok and int(proc.output.strip()) == min(BASE + BACKGROUND_NICENESS, 19)


def test_the_verifier_sets_the_priority_of_each_kind_of_job():
    from verifier.harness.job_runner import JobRunner
    from verifier.sandbox.seccomp import CPU_NEEDS

    limits = JobRunner.limits  # unbound: only its config, backend and runtime needs are read
    fake = type("V", (), {"config": __import__("verifier").VerifyConfig(), "needs": CPU_NEEDS,
                          "backend": type("B", (), {"memory_limit": lambda self: True})()})()
    assert limits(fake).nice == 0                                        # timing jobs
    assert limits(fake, background=True).nice == BACKGROUND_NICENESS     # correctness trials


def test_nothing_inside_a_job_starts_launcher_threads():
    """The fork server stays single-threaded: the worker's modules never import verifier.priority."""
    code = ("import sys, verifier.sandbox.forkserver, verifier.worker, verifier.job.worker_reference\n"
            "print('verifier.priority' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False"


def test_a_closed_verifier_s_name_stops_no_later_verifier(tmp_path):
    """A verifier that closes ends what its threads started and lets them start nothing more; its threads were
    named by the object's id, which Python hands to the next object made at the same address, so a verifier made
    right after another closed could start no process ("not started: verifier-7f8f..._0's owner is closing", seen in
    a run paused and resumed, and in test_one_tolerance, on a fresh clone). Names are a count now, and one owner's
    end matches its own threads only (``verifier-1_`` is not a prefix of ``verifier-10_0``)."""
    from verifier.harness.verify import Verifier

    first = Verifier("cpu", cache_dir=tmp_path / "cache")
    first.close()
    second = Verifier("cpu", cache_dir=tmp_path / "cache")
    try:
        assert first._owner != second._owner
        started = second._pool.submit(lambda: priority.popen(["true"], background=False).wait()).result(30)
        assert started == 0
    finally:
        second.close()
    priority.end_started_by("evokernel-test-1_")
    found: list[object] = []
    thread = threading.Thread(target=lambda: found.append(priority.popen(["true"], background=False).wait()),
                              name="evokernel-test-10_0")
    thread.start()
    thread.join(30)
    assert found == [0]
