"""Issue #38: one process runner for every child the harness starts with a deadline, and one secret scrub.

Seen failing on the code before: a toolchain probe that timed out left its command's children running
(``subprocess.run`` kills the child alone), and the sizing probe's own scrub passed ``DB_PASSWORD`` and
``*_AUTH`` variables to the task's reference."""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie not yet reaped by its (dead) parent's reaper counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _grandchild_left(run, tmp_path: Path) -> bool:
    """Whether a command that started a child of its own and then hung left that child alive once ``run``
    (a runner, given the command and a deadline) returned."""
    pidfile = tmp_path / "pid"
    run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], 1.0)
    deadline = time.monotonic() + 5
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _alive(pid)
    if left:
        os.kill(pid, 9)
    return left


def test_the_runner_kills_the_whole_group_at_the_deadline(tmp_path):
    from verifier.processes import run_process

    got = {}

    def run(argv, timeout):
        got["result"] = run_process(argv, timeout=timeout)

    assert not _grandchild_left(run, tmp_path)
    assert got["result"].timed_out and not got["result"].ok


def test_a_toolchain_probe_that_hangs_leaves_nothing_running(tmp_path):
    from verifier.toolchain.probe import run

    got = {}

    def probe(argv, timeout):
        got["ran"] = run(argv, timeout=timeout)

    assert not _grandchild_left(probe, tmp_path)
    assert got["ran"].code is None and "did not answer within" in got["ran"].out


def test_the_output_kept_is_the_tail_and_a_missing_program_is_a_result(tmp_path):
    from verifier.processes import run_process

    ran = run_process(["sh", "-c", "seq 1 100000; echo last >&2; exit 3"], timeout=30, output_limit=100)
    assert ran.returncode == 3 and not ran.timed_out and ran.output.endswith("last\n") and len(ran.output) <= 100
    assert ran.describe() == "exited with status 3" and ran.last_line() == "last"
    missing = run_process([str(tmp_path / "no-such-tool")], timeout=5)
    assert not missing.started and not missing.ok and "could not start" in missing.output


SEES_SECRETS = '''
import os
import torch
import torch.nn as nn

SEEN = [k for k in ("DB_PASSWORD", "SERVICE_AUTH", "OPENAI_API_KEY", "MY_SESSION_COOKIE") if k in os.environ]
assert not SEEN, "the reference saw " + ", ".join(SEEN)


class Model(nn.Module):
    def forward(self, x):
        return x + 1


N = 64


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


SECRETS = ("DB_PASSWORD", "SERVICE_AUTH", "OPENAI_API_KEY", "MY_SESSION_COOKIE")


@pytest.mark.slow
def test_the_sizing_probe_scrubs_what_every_child_scrubs(tmp_path, monkeypatch):
    """The sizing probe runs the task's reference, as the verifier's reference jobs do: with the same
    scrubbed environment (``verifier.processes.scrubbed_env``)."""
    from core.tasks import load_suite
    from verifier.processes import scrubbed_env
    from verifier.sizing.launch import run_probe

    for name in SECRETS:
        monkeypatch.setenv(name, "hunter2")
    assert not set(SECRETS) & set(scrubbed_env())
    root = tmp_path / "suite" / "level1"
    root.mkdir(parents=True)
    (root / "sees.py").write_text(SEES_SECRETS)
    spec = load_suite(root.parent).get("sees").spec()
    probe = run_probe({"spec": spec.to_dict(), "mode": "fixed", "factor": 1.0, "threads": 1, "bytes_cap": 1 << 30,
                       "window": [2.0, 50.0], "trace": False}, timeout_s=120)
    assert probe.ok, probe.problem


# ----------------------------------------------------------------------------- another process's memory (#35)


def test_write_memory_fills_spans_and_refuses_a_read_only_mapping(tmp_path):
    """The harness spoils a stopped side's outputs with ``write_memory`` (process_vm_writev, one buffer written again
    and again); a read-only mapping refuses it (EFAULT), ``/proc/PID/mem`` writes a private one, and the file's
    mappings are found by device and inode."""
    import ctypes
    import errno

    from verifier.sandbox import procs

    pid = os.getpid()
    buf = ctypes.create_string_buffer(b"\x00" * ((3 << 20) + 5))
    base = ctypes.addressof(buf)
    procs.write_memory(pid, [(base + 3, 10), (base + 100, (3 << 20) - 100)], 0xFF)
    raw = buf.raw
    assert raw[:3] == b"\x00" * 3 and raw[3:13] == b"\xff" * 10 and raw[13:100] == b"\x00" * 87
    assert raw[100:3 << 20] == b"\xff" * ((3 << 20) - 100) and raw[3 << 20:(3 << 20) + 5] == b"\x00" * 5

    path = tmp_path / "inputs.bin"
    path.write_bytes(b"\x01" * 8192)
    fd = os.open(path, os.O_RDONLY)
    try:
        shared = mmap.mmap(fd, 8192, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        private = mmap.mmap(fd, 8192, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        st = os.fstat(fd)
        found = procs.file_mappings(pid, st.st_dev, st.st_ino)
        assert len(found) == 2 and all(end - start == 8192 for start, end in found), found
        for start, _ in found:
            with pytest.raises(OSError) as refused:
                procs.write_memory(pid, [(start, 16)], 0xFF)
            assert refused.value.errno == errno.EFAULT
        shared_start = _mapping_start(shared)
        private_start = _mapping_start(private)
        procs.force_write_memory(pid, [(private_start, 16)], 0xFF)
        assert private[:17] == b"\xff" * 16 + b"\x01"
        with pytest.raises(OSError):
            procs.force_write_memory(pid, [(shared_start, 16)], 0xFF)
        assert shared[:16] == b"\x01" * 16 and path.read_bytes()[:16] == b"\x01" * 16
        shared.close()
        private.close()
    finally:
        os.close(fd)


def _mapping_start(m: object) -> int:
    """Where a read-only ``mmap.mmap`` lies (numpy-free: a ctypes view of a read-only buffer is refused)."""
    import ctypes

    class _Buffer(ctypes.Structure):
        _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                    ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                    ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                    ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]

    view = _Buffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_Buffer), ctypes.c_int]
    assert get(m, ctypes.byref(view), 0) == 0
    try:
        return int(view.buf)
    finally:
        release = ctypes.pythonapi.PyBuffer_Release
        release.argtypes = [ctypes.POINTER(_Buffer)]
        release(ctypes.byref(view))


SPINNER = r'''
#include <pthread.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
static volatile long* count;
static void* spin(void* which) { for (;;) count[(long)which]++; return 0; }
int main(int argc, char** argv) {
    int fd = open(argv[1], O_RDWR);
    count = (volatile long*)mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    pthread_t t;
    for (long i = 1; i < 3; ++i) pthread_create(&t, 0, spin, (void*)i);
    for (;;) count[0]++;
}
'''


@contextlib.contextmanager
def _counting_program(tmp_path: Path, name: str, source: str) -> Iterator[tuple[Path, Path, mmap.mmap]]:
    """``source`` (C, threads counting into the file its command line names) built as ``name``, and that file's
    counters mapped read-only here: (the program, the counters' file, their mapping), closed after."""
    import subprocess

    (tmp_path / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-O1", "-pthread", str(tmp_path / f"{name}.c"), "-o", str(tmp_path / name)], check=True)
    counters = tmp_path / "counters"
    counters.write_bytes(b"\0" * 4096)
    fd = os.open(counters, os.O_RDONLY)
    seen = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    try:
        yield tmp_path / name, counters, seen
    finally:
        seen.close()
        os.close(fd)


def test_held_threads_stay_stopped_while_their_process_runs_and_rejoin_its_stop(tmp_path):
    """While a side settles the harness holds every thread of its process but the first (``procs.hold``: a ptrace
    stop, which SIGCONT does not end); stopped again, the threads let go (``procs.release``) rejoin the stop."""
    import signal
    import struct
    import subprocess

    from verifier.sandbox import procs

    with _counting_program(tmp_path, "spin", SPINNER) as (program, counters, seen):
        proc = subprocess.Popen([str(program), str(counters)], start_new_session=True)
        try:
            while len(procs.threads(proc.pid)) < 3 or 0 in struct.unpack("3q", seen[:24]):
                time.sleep(0.01)
            assert procs.stop(proc.pid, proc.pid)
            others = sorted(procs.threads(proc.pid) - {proc.pid})
            held = procs.hold(others)
            assert held == others
            with pytest.raises(OSError):       # held already: no second tracer
                procs.hold(others[:1])
            before = struct.unpack("3q", seen[:24])
            assert procs.resume(proc.pid)
            time.sleep(0.2)
            after = struct.unpack("3q", seen[:24])
            assert after[0] > before[0] and after[1:] == before[1:], (before, after)
            os.kill(proc.pid, signal.SIGSTOP)
            assert procs.stopped(proc.pid)
            procs.release(held)
            assert procs.stopped(proc.pid)
            states = {open(f"/proc/{proc.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                      for t in procs.threads(proc.pid)}
            assert states == {"T"}, states
            still = struct.unpack("3q", seen[:24])
            time.sleep(0.1)
            assert struct.unpack("3q", seen[:24]) == still
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.2)
            assert all(b > a for a, b in zip(still, struct.unpack("3q", seen[:24])))
        finally:
            proc.kill()
            proc.wait()


SETTLING_SIDE = r'''
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static volatile long* count;
static void* spin(void* which) { for (;;) count[(long)which]++; return 0; }
int main(int argc, char** argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ctl.out", argv[1]); int out = open(path, O_WRONLY);
    snprintf(path, sizeof path, "%s/ctl.in", argv[1]); int in = open(path, O_RDONLY);
    int fd = open(argv[2], O_RDWR);
    count = (volatile long*)mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    pthread_t t;
    pthread_create(&t, 0, spin, (void*)1);
    char line[256]; long n = 0;
    for (;;) {
        char c;
        if (read(in, &c, 1) != 1) return 0;
        if (c != '\n') { if (n < 255) line[n++] = c; continue; }
        line[n] = 0; n = 0;
        usleep(20000);                                  /* the settle's own work: the held thread must not run */
        if (!strcmp(argv[3], "spawn")) pthread_create(&t, 0, spin, (void*)2);
        if (!strcmp(argv[3], "die")) kill(getpid(), SIGKILL);   /* killed while settling (its job's deadline) */
        write(out, "ok\n", 3);
    }
}
'''


class _Handle:
    """A plain process standing for a side's job (``verifier.sandbox.client.JobHandle``'s part the window uses)."""

    def __init__(self, proc):
        self.proc = proc

    @property
    def done(self) -> bool:
        return self.proc.poll() is not None

    def host_pid(self) -> int:
        return self.proc.pid

    def pause(self, stop: bool) -> bool:
        from verifier.sandbox import procs

        return procs.stop(self.proc.pid, self.proc.pid) if stop else procs.resume(self.proc.pid)

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout=None):
        from verifier.sandbox.client import JobExit

        return JobExit("exited", code=self.proc.wait(timeout))


@pytest.mark.parametrize("mode", ["quiet", "spawn", "die"])
def test_a_side_settles_with_its_other_threads_held_and_fails_for_a_new_one(tmp_path, mode):
    """``Side.settle`` (the harness's, where it can reach the side): the side's own thread answers ``settle`` with
    its other thread held (it counts nothing meanwhile), every thread stopped after; a thread started meanwhile fails
    the side by name; a side killed while it settles (its held thread's end waits for the harness) is seen ended at
    once, with how it ended, not after the command's 30 s."""
    import struct
    import subprocess

    from verifier.sandbox import procs
    from verifier.window.harness import Side, SideFailed

    job = tmp_path / "job"
    job.mkdir()
    with _counting_program(tmp_path, "side", SETTLING_SIDE) as (program, counters, seen):
        side = Side("candidate", job, trusted=False)
        proc = subprocess.Popen([str(program), str(job), str(counters), mode], start_new_session=True)
        try:
            side.start(_Handle(proc))   # type: ignore[arg-type]
            while len(procs.threads(proc.pid)) < 2 or not struct.unpack("q", seen[8:16])[0]:
                time.sleep(0.01)
            side.pause(True)
            before = struct.unpack("3q", seen[:24])
            if mode == "die":
                started = time.monotonic()
                with pytest.raises(SideFailed, match="ended") as failed:
                    side.settle(spoil=False)
                assert failed.value.exit is not None and failed.value.exit.code == -9, failed.value.exit
                assert time.monotonic() - started < 5
                return
            if mode == "spawn":
                with pytest.raises(SideFailed, match=r"started 1 thread\(s\) while it settled"):
                    side.settle(spoil=False)
                return
            side.settle(spoil=False)
            assert side.stopped and procs.stopped(proc.pid, 0.0)
            assert struct.unpack("3q", seen[:24]) == before        # the held thread counted nothing
            side.pause(False)
            time.sleep(0.1)
            assert struct.unpack("q", seen[8:16])[0] > before[1]  # and runs again once the side is continued
        finally:
            proc.kill()
            proc.wait()
            side.close()
