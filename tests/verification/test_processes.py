"""Issue #38: one process runner for every child the harness starts with a deadline, and one secret scrub.

Seen failing on the code before: a toolchain probe that timed out left its command's children running
(``subprocess.run`` kills the child alone), and the sizing probe's own scrub passed ``DB_PASSWORD`` and
``*_AUTH`` variables to the task's reference."""

from __future__ import annotations

import os
import time
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
