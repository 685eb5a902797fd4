"""Per-job quotas the sandbox enforces at run time (issue #35, the last "can still" rows): a job cannot start
threads without bound (so the fork server, the harness and later jobs can still start theirs), and cannot fill
the disk under its folder with many files each below the file-size limit (so a later job still has room).
The attackers here try four times their cap; the cap is set first, and each test ends every process it made."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from verifier.sandbox import lockdown
from verifier.sandbox.client import ForkServer, JobLimits

import candidates as C

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
    if not lockdown.pid_namespaces_work()[0]:
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
            assert lockdown.new_pid_namespace() is None
            if os.fork() != 0:               # the job is a child in the new namespaces, as in the server
                os.close(w)
                os.wait()
                code = 0
                return
            lockdown.cap_tasks(TASKS)
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


def test_a_job_cannot_fill_the_disk_with_many_files_and_the_next_job_runs(tmp_path):
    """Many files, each far below the file-size limit, four times the job's writable space in all: the job is
    refused (its outcome names the space), the next job runs normally."""
    server, jobs = _server(tmp_path)
    try:
        fill = _job(jobs, "fill", '{"files": 32, "file_kb": 1024}')
        ended = server.run(fill, _limits(disk_mb=8), 60)
        written = (fill / "written.txt").read_text() if (fill / "written.txt").exists() else "?"
        assert getattr(ended, "over_disk_mb", 0) > 8, (f"the job wrote {written} KiB under a cap of 8 MiB", ended)
        assert "space" in ended.describe() and not ended.tool, ended.describe()
        honest = _job(jobs, "honest", '{"files": 2, "file_kb": 1024}')
        after = server.run(honest, _limits(disk_mb=8), 60)
        assert after.status == "exited" and after.code == 0 and not after.over_disk_mb, after
        assert (honest / "written.txt").read_text() == "2048" and (honest / "ran.txt").exists()
    finally:
        server.close()


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    """Static rules off (they refuse load-time code, threads and files): what holds is the sandbox's. The
    output limit at its least (16 MiB) and no room for inputs, so the job's writable space is JOB_DISK_FILES x
    16 MiB."""
    from verifier.harness.verify import Verifier

    # no room for inputs: relu's are small, the attacker writes less; and the link check's load-time rule off (#48):
    # these attackers run at load time, before the candidate phase, as code that got past it would
    with pytest.MonkeyPatch.context() as patch, C.without_load_time_check():
        patch.setattr("verifier.sandbox.client.JOB_DISK_INPUTS_MB", 0)
        v = Verifier("cpu", fast_config.model_copy(update={"antihack": False, "max_output_mb": 16}),
                     cache_dir=tmp_path_factory.mktemp("quota-cache"))
        yield v
        v.close()


# At load time (before the candidate phase's filter), 4x the job's writable space in 1 MiB files, each far below
# the file-size limit; then a correct relu.
DISK_FILLER = r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
__attribute__((constructor)) static void at_load() {
    static char block[1 << 20];
    memset(block, 7, sizeof block);
    char name[64];
    for (int i = 0; i < FILES; ++i) {
        snprintf(name, sizeof name, "fill%d.bin", i);
        FILE* f = fopen(name, "wb");
        if (!f) break;
        size_t put = fwrite(block, 1, sizeof block, f);
        fclose(f);
        if (put != sizeof block) break;
    }
}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''

# At load time, 4x the job's cap on threads and processes, each parked for ever; then a correct relu.
THREAD_BOMB = r'''
#include <cstdint>
#include <pthread.h>
#include <unistd.h>
static void* park(void*) { for (;;) pause(); return nullptr; }
__attribute__((constructor)) static void at_load() {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16384);
    for (int i = 0; i < THREADS; ++i) {
        pthread_t t;
        if (pthread_create(&t, &attr, park, nullptr) != 0) break;
    }
    usleep(200000);
}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_candidate_filling_its_folder_with_files_is_refused_and_the_next_is_judged(unguarded, suite,
                                                                                   make_candidate):
    from verifier.sandbox.client import JOB_DISK_FILES

    files = 4 * JOB_DISK_FILES * 16
    out = unguarded.verify(suite.get("relu").spec(),
                           make_candidate(C.elementwise(DISK_FILLER.replace("FILES", str(files)))), fresh=True)
    assert not out.feasible and out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "writable space" in out.message and not out.not_judged, out.message
    honest = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.RELU)), fresh=True)
    assert honest.feasible, honest.message


@pytest.mark.slow
def test_a_candidate_starting_threads_without_bound_is_stopped_and_the_next_is_judged(unguarded, suite,
                                                                                      make_candidate):
    from verifier.sandbox.client import JOB_TASKS

    out = unguarded.verify(suite.get("relu").spec(),
                           make_candidate(C.elementwise(THREAD_BOMB.replace("THREADS", str(4 * JOB_TASKS)))),
                           fresh=True)
    if os.geteuid() == 0:     # root's tasks the kernel does not count: the server's watch kills the job
        assert not out.feasible and out.failed_gate == "correctness" and "threads" in out.message, out.message
    else:                     # its thread starts refused by the kernel past the cap (then it computes)
        assert out.feasible or (out.failed_gate == "correctness" and "threads" in out.message), out.message
    assert not out.not_judged, out.message
    honest = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.RELU)), fresh=True)
    assert honest.feasible, honest.message
