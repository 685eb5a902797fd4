"""One timing lock per machine and user: verifiers of two workspaces, in two processes, share it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent("""
    import sys
    from verifier.harness.verify import Verifier
    v = Verifier("cpu", cache_dir=sys.argv[1])
    with v._lock.exclusive():            # a timing in progress in workspace A
        print(v._lock.path, flush=True)
        sys.stdin.readline()             # until the test says so
    v.close()
""")

PROBE = textwrap.dedent("""
    import fcntl, sys
    from verifier.harness.verify import Verifier
    v = Verifier("cpu", cache_dir=sys.argv[1])
    with open(v._lock.path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)   # what a build in workspace B would take
            print("free", v._lock.path)
        except BlockingIOError:
            print("busy", v._lock.path)
    v.close()
""")


def _python(code: str, *args: str, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_the_timing_lock_is_shared_by_two_workspaces_in_two_processes(tmp_path):
    env = {**os.environ, "EVOKERNEL_LOCK_DIR": str(tmp_path / "locks")}
    ws_a, ws_b = tmp_path / "a" / ".evokernel" / "cache", tmp_path / "b" / ".evokernel" / "cache"
    holder = _python(HOLDER, str(ws_a), env=env, stdin=subprocess.PIPE)
    try:
        held_path = holder.stdout.readline().strip()
        assert held_path, holder.stderr.read()
        probe = _python(PROBE, str(ws_b), env=env)
        out, err = probe.communicate(timeout=120)
        state, path = out.split()
        assert path == held_path                          # the same file, whatever the workspace
        assert state == "busy", err                       # workspace B waits for A's timing
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    out, _ = _python(PROBE, str(ws_b), env=env).communicate(timeout=120)
    assert out.split()[0] == "free"                       # and goes on once it is over


def test_the_default_lock_is_per_user_and_outside_any_workspace(tmp_path):
    from verifier.machine.lock import lock_dir, machine_lock_path

    default = machine_lock_path({})
    assert str(os.getuid()) in str(default.parent) or default.parent == Path.home() / ".cache" / "evokernel"
    assert machine_lock_path({"XDG_RUNTIME_DIR": str(tmp_path)}).parent == default.parent or \
        not Path("/dev/shm").is_dir()
    assert lock_dir({"EVOKERNEL_LOCK_DIR": str(tmp_path / "x")}) == tmp_path / "x"


def test_an_abandoned_lock_ends_every_wait_on_it(tmp_path):
    """#37 finding 5: quitting the workbench waited on its verifier's threads, which waited on the timing lock
    another process held (15 s measured on a fresh cache). A closing verifier abandons its lock: every wait
    through it ends with LockAbandoned, the holder elsewhere undisturbed."""
    import threading

    from verifier.machine.lock import LockAbandoned, MachineLock

    path = tmp_path / "timing.lock"
    other, mine = MachineLock(path), MachineLock(path)      # another process's timing, and this verifier's
    ended: list[BaseException | None] = []
    holding = threading.Event()
    release = threading.Event()

    def timing():
        with other.exclusive():
            holding.set()
            release.wait(30)

    def waiter():
        try:
            with mine.shared():
                ended.append(None)
        except BaseException as exc:   # noqa: BLE001 - what ended the wait is the assertion
            ended.append(exc)

    holder = threading.Thread(target=timing)
    holder.start()
    assert holding.wait(10)
    waiting = threading.Thread(target=waiter)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and not ended               # it waits while the timing holds the lock
    mine.abandon()
    waiting.join(10)
    assert not waiting.is_alive() and isinstance(ended[0], LockAbandoned)
    with pytest.raises(LockAbandoned):
        with mine.exclusive():
            pass
    release.set()
    holder.join(10)
    with MachineLock(path).shared():                      # the lock itself is free again for everyone
        pass
