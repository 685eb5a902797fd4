"""One timing lock per machine and user: verifiers of two workspaces, in two processes, share it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
