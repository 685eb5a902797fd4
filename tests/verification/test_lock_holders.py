"""Nothing of ours computes beside a timing window (verifier.machine.lock): real threads, real processes.

A build-like holder (shared) blocks while a timing holds the lock; a timing waits for the shared holders
it finds, and once it waits, new shared holders queue behind it. Then the holders that once never took
the lock: the sizing probes, the roofline's counting and the fork server's start-up."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from verifier.machine.lock import MachineLock

ROOT = Path(__file__).resolve().parents[2]


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self._guard = threading.Lock()

    def __call__(self, what: str) -> None:
        with self._guard:
            self.events.append(what)


def _thread(fn, *args) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def _wait_until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_build_waits_while_a_timing_holds_the_lock_across_threads(tmp_path):
    lock, log, release = MachineLock(tmp_path / "timing.lock"), Log(), threading.Event()

    def timing() -> None:
        with lock.exclusive():
            log("timing in")
            release.wait(30)
            log("timing out")

    def build() -> None:
        with lock.shared():
            log("build in")

    t = _thread(timing)
    _wait_until(lambda: "timing in" in log.events)
    b = _thread(build)
    time.sleep(0.3)
    assert log.events == ["timing in"]                    # the build is held at the door
    release.set()
    for x in (t, b):
        x.join(30)
    assert log.events == ["timing in", "timing out", "build in"]


HOLDER = textwrap.dedent("""
    import sys
    from verifier.machine.lock import MachineLock
    lock = MachineLock(sys.argv[1])
    with getattr(lock, sys.argv[2])():
        print("in", flush=True)
        sys.stdin.readline()
    print("out", flush=True)
""")


def _holder(path: Path, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return proc


def _let_go(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(30)


def test_a_waiting_timing_drains_the_builds_it_found_and_new_ones_queue_behind_it(tmp_path):
    """A build in another process holds the lock; a timing (a thread here) waits for it; a second build
    arriving after the timing began to wait goes after the timing, not beside the first build."""
    path = tmp_path / "timing.lock"
    lock, log, release = MachineLock(path), Log(), threading.Event()
    first = _holder(path, "shared")
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "in"

        def timing() -> None:
            with lock.exclusive():
                log("timing in")
                release.wait(30)
                log("timing out")

        def build() -> None:
            with lock.shared():
                log("second build in")

        t = _thread(timing)
        time.sleep(0.3)                                    # the timing now waits for the first build
        b = _thread(build)
        time.sleep(0.3)
        assert log.events == []                            # neither the timing nor the second build runs
        _let_go(first)
        _wait_until(lambda: "timing in" in log.events)
        time.sleep(0.2)
        assert log.events == ["timing in"]                 # the second build queued behind the timing
        release.set()
        for x in (t, b):
            x.join(30)
        assert log.events == ["timing in", "timing out", "second build in"]
    finally:
        if first.poll() is None:
            first.kill()


@pytest.fixture
def lock_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "locks"
    monkeypatch.setenv("EVOKERNEL_LOCK_DIR", str(folder))
    return folder


def _held_while(lock: MachineLock, work) -> tuple[float, float]:
    """Run ``work()`` in a thread while a timing holds ``lock`` for a second: (when the timing let go,
    when the work finished), both monotonic."""
    holding, released = threading.Event(), {}

    def timing() -> None:
        with lock.exclusive():
            holding.set()
            time.sleep(1.0)
            released["at"] = time.monotonic()

    t = _thread(timing)
    holding.wait(30)
    work()
    finished = time.monotonic()
    t.join(30)
    return released["at"], finished


def test_a_sizing_probe_waits_for_a_timing(lock_dir, tmp_path):
    from verifier.machine.lock import machine_lock_path
    from verifier.sizing.launch import run_probe

    job = {"spec": {"id": "nothing"}, "mode": "fixed", "factor": 1.0, "threads": 1}   # fails at once
    released, finished = _held_while(MachineLock(machine_lock_path()), lambda: run_probe(job, timeout_s=60))
    assert finished >= released


def test_the_roofline_counting_waits_for_a_timing(lock_dir, monkeypatch):
    from verifier.machine import roofline

    lock = MachineLock(lock_dir / "timing.lock")
    meter = roofline.RooflineMeter(lock_dir / "cache", type("B", (), {"name": "cpu", "device": "cpu"})(), 1, lock)
    counted: list[float] = []
    monkeypatch.setattr(roofline, "profile_task", lambda spec: counted.append(time.monotonic()) or {"bytes": 1})
    monkeypatch.setattr(meter, "_profile_key", lambda spec: "k")
    released, _ = _held_while(lock, lambda: meter.profile(object()))
    assert counted and counted[0] >= released


@pytest.mark.slow
def test_the_sandbox_starts_only_when_no_timing_runs(lock_dir, tmp_path):
    """The fork server imports torch as it starts: never beside a timing."""
    from verifier.harness.verify import Verifier

    with Verifier("cpu", cache_dir=tmp_path / "cache") as v:
        started: list[float] = []
        real_start = v.server.start
        v.server.start = lambda: (started.append(time.monotonic()), real_start())[1]  # type: ignore[method-assign]

        def start() -> None:
            v.warm_up()
            assert v._warm is not None
            v._warm.result(120)
        released, _ = _held_while(v._lock, start)
        assert started and started[0] >= released and v.server._info.get("ready")
