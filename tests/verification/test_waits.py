"""Waits said, and nothing left behind (#51, 7): a wait for the machine's timing lock is said with who holds it,
and no scratch folder of ours stays in /dev/shm after any exit (a close, ``leave``'s ``os._exit``, a kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _holder(lock: Path, mode: str = "exclusive") -> subprocess.Popen:
    """A separate process holding ``lock`` (as another workspace's timing would) until it is killed."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from verifier.machine.lock import MachineLock
        with MachineLock({str(lock)!r}).{mode}():
            print("held", flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_wait_for_the_timing_lock_says_who_holds_it(tmp_path):
    """The finding: a verification waiting on the machine's timing lock showed "edit build" for up to 24 s."""
    import threading

    from verifier.machine.lock import MachineLock

    lock = tmp_path / "timing.lock"
    holder = _holder(lock)
    told: list[str] = []
    try:
        done = threading.Event()

        def build() -> None:
            with MachineLock(lock).shared(told.append):
                done.set()

        t = threading.Thread(target=build, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
        assert told and f"(pid {holder.pid}" in told[0], told
        assert not done.is_set()
    finally:
        holder.kill()
        holder.wait()
    t.join(30)
    assert done.is_set() and len(told) == 1   # said once, then it ran


@pytest.mark.slow
def test_a_verification_tells_its_listener_it_waits_and_for_whom(tmp_path, monkeypatch, make_candidate, suite):
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier
    from verifier.machine.lock import machine_lock_path

    import candidates as C

    monkeypatch.setenv("EVOKERNEL_LOCK_DIR", str(tmp_path / "locks"))
    config = VerifyConfig(trials=5, timing_calls=5, timing_budget_s=0.2, warmup_calls=1, run_timeout_s=20, threads=2)
    with Verifier("cpu", config, cache_dir=tmp_path / "cache") as verifier:
        verifier.warm_up()
        holder = _holder(machine_lock_path())
        heard: list = []
        try:
            import threading

            out: list = []
            t = threading.Thread(target=lambda: out.append(verifier.verify(
                suite.get("relu").spec(), make_candidate(C.elementwise(C.RELU)), heard.append)), daemon=True)
            t.start()
            deadline = time.monotonic() + 60
            while not any(g.status == "waiting" for g in heard) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            holder.kill()
            holder.wait()
        t.join(300)
    waits = [g for g in heard if g.status == "waiting"]
    assert waits and waits[0].name in ("build", "correctness"), [(g.name, g.status) for g in heard]
    assert "held by " in waits[0].message and f"pid {holder.pid}" in waits[0].message
    assert out and out[0].feasible and all(g.status != "waiting" for g in out[0].gates)


def test_leave_removes_the_scratch_folders_os_exit_would_leave(tmp_path):
    """The finding: a /dev/shm/evokernel-probes-* folder stayed after quitting during sizing (the workbench ends
    with os._exit: no exit handler runs)."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from verifier.sizing.launch import ProbeSandbox
        box = ProbeSandbox(1)
        print(box.jobs_root, flush=True)
        from core.session import leave
        leave(0)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip().splitlines()[0])
    assert folder.name.startswith("evokernel-probes-") and not folder.exists()


def test_a_killed_process_s_scratch_folder_is_removed_by_the_next(tmp_path):
    from verifier.scratch import scratch_dir, sweep

    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from verifier.scratch import scratch_dir
        print(scratch_dir("jobs"), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    folder = Path(done.stdout.strip())
    assert folder.exists()                      # a kill runs nothing of ours
    mine = scratch_dir("jobs")                  # the next one's first act: the dead process's folders go
    try:
        assert not folder.exists() and mine.exists()
        assert folder not in sweep()            # and a live process's folder is never swept
        assert mine.exists() and str(os.getpid()) in mine.name
    finally:
        from verifier.scratch import release

        release(mine)
