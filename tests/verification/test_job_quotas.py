"""Per-job quotas the sandbox enforces at run time (issue #35, the last "can still" rows): a job cannot start
threads without bound (so the fork server, the harness and later jobs can still start theirs), and cannot fill
the disk under its folder with many files each below the file-size limit (so a later job still has room).
The attackers here try four times their cap; the cap is set first, and each test ends every process it made."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from verifier.sandbox import forkserver
from verifier.sandbox.client import ForkServer, JobLimits

ATTACKER = '''
import json
import os
import pathlib
import threading


def run_job(job_dir):
    job = pathlib.Path(job_dir)
    plan = json.loads((job / "plan.json").read_text())
    threading.stack_size(64 << 10)
    hold = threading.Event()
    started = 0
    try:
        for _ in range(plan.get("threads", 0)):
            threading.Thread(target=hold.wait, args=(20,), daemon=True).start()
            started += 1
            (job / "started.txt").write_text(str(started))
    except RuntimeError as exc:                       # can't start new thread
        (job / "refused.txt").write_text(str(exc))
    written = 0
    try:
        for i in range(plan.get("files", 0)):
            with open(job / f"fill{i}.bin", "wb") as f:
                f.write(b"x" * (plan["file_kb"] << 10))
            written += plan["file_kb"]
    except OSError as exc:                            # no space left on the job's device
        (job / "refused.txt").write_text(str(exc))
    (job / "written.txt").write_text(str(written))
    if plan.get("hold") and not (job / "refused.txt").exists():
        hold.wait(20)                                  # the threads held alive: the server's watch sees them
    hold.set()
    (job / "ran.txt").write_text("ran")
    return 0
'''

TASKS = 16          # the cap these tests set (a real job's is JOB_TASKS, sized from the CPU count)


def _server(tmp_path: Path, confine: bool = True, use_bwrap: bool = False) -> tuple[ForkServer, Path]:
    helper = tmp_path / "helper"
    helper.mkdir()
    (helper / "quota_job.py").write_text(ATTACKER)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    root = Path(__file__).resolve().parents[2]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(root), str(helper)]),
           "HOME": str(jobs)}
    return ForkServer(jobs, env=env, preload=["quota_job"], use_bwrap=use_bwrap, hidden=[], devices=[],
                      confine=confine, entry="quota_job:run_job"), jobs


def _job(jobs: Path, name: str, plan: str) -> Path:
    folder = jobs / name
    folder.mkdir()
    (folder / "plan.json").write_text(plan)
    return folder


def _limits(**kw: int) -> JobLimits:
    limits = JobLimits(cpu_seconds=60, address_space_mb=None, file_size_mb=16)
    for key, value in kw.items():
        setattr(limits, key, value)
    return limits


@pytest.mark.parametrize("use_bwrap", [False, True], ids=["landlock", "bubblewrap"])
def test_a_job_cannot_start_threads_without_bound_and_the_next_job_runs(tmp_path, use_bwrap):
    from verifier.sandbox.isolation import bwrap_status

    if use_bwrap and not bwrap_status()[0]:
        pytest.skip(bwrap_status()[1])
    server, jobs = _server(tmp_path, use_bwrap=use_bwrap)
    try:
        bomb = _job(jobs, "bomb", f'{{"threads": {4 * TASKS}, "hold": true}}')
        ended = server.run(bomb, _limits(tasks=TASKS), 60)
        counted = (bomb / "started.txt").read_text() if (bomb / "started.txt").exists() else ""
        started = int(counted or 0)          # empty: killed while writing it
        # refused by the kernel (its thread start failed), or killed by the server's watch (root's jobs, which
        # the kernel does not count): the job's own outcome, never the tool's
        assert (started < TASKS and (bomb / "refused.txt").exists()) or ended.over_tasks > TASKS, \
            (f"the job started {started} threads under a cap of {TASKS}", ended)
        if ended.over_tasks:
            assert "threads" in ended.describe() and not ended.tool, ended.describe()
        honest = _job(jobs, "honest", '{"threads": 4}')
        after = server.run(honest, _limits(tasks=TASKS), 60)
        assert after.status == "exited" and after.code == 0, after
        assert (honest / "ran.txt").exists() and (honest / "started.txt").read_text() == "4"
    finally:
        server.close()


def test_the_kernel_counts_a_jobs_tasks_in_its_own_user_namespace():
    """The kernel's own cap (``cap_tasks``, RLIMIT_NPROC counted per user namespace and uid): a process as a
    user that is not root (root's tasks the kernel never counts: there the server's watch holds, above), in
    a user namespace of its own capped at TASKS, tries 4x as many threads; threads of other jobs of the same
    user, outside its namespace, do not count against it."""
    if not forkserver.pid_namespaces_work()[0]:
        pytest.skip("no user namespaces here")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
            assert forkserver.new_pid_namespace() is None
            if os.fork() != 0:               # the job is a child in the new namespaces, as in the server
                os.close(w)
                os.wait()
                code = 0
                return
            forkserver.cap_tasks(TASKS)
            threading.stack_size(64 << 10)
            hold = threading.Event()
            started = 0
            try:
                for _ in range(4 * TASKS):
                    threading.Thread(target=hold.wait, args=(10,), daemon=True).start()
                    started += 1
            except RuntimeError:
                pass
            hold.set()
            os.write(w, str(started).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    started = int(os.read(r, 64) or b"-1")
    os.close(r)
    os.waitpid(pid, 0)
    assert 0 < started < TASKS, f"{started} threads started under a cap of {TASKS}"
