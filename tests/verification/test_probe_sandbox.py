"""The sizing probe runs the task's reference code, which may come from any suite: it runs confined as a
candidate's job does (``verifier.sizing.launch``: the verifier's fork server, bubblewrap, Landlock,
seccomp, a scrubbed environment), and a probe killed at its deadline still says how far it got."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from verifier.sandbox.isolation import bwrap_status, landlock_status, seccomp_status

pytestmark = pytest.mark.slow

# What the reference tries as it loads; each thing it manages is a line in the assertion the probe reports.
REACHES_OUT = '''
import os
import socket
import subprocess
import torch
import torch.nn as nn

COULD = []
try:
    COULD.append("read " + open({secret!r}).read().strip())
except OSError:
    pass
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    s.close()
    COULD.append("connect to 127.0.0.1:{port}")
except OSError:
    pass
try:
    subprocess.run(["true"], check=True)
    COULD.append("start a process")
except (OSError, subprocess.SubprocessError):
    pass
if "EVOKERNEL_TEST_API_KEY" in os.environ:
    COULD.append("see EVOKERNEL_TEST_API_KEY")
assert not COULD, "the reference could " + "; ".join(COULD)


class Model(nn.Module):
    def forward(self, x):
        return x + 1


N = 4096


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

HANGS_AFTER_A_STEP = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        while True:
            pass


N = 64


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def _spec(tmp_path: Path, source: str, name: str):
    from core.tasks import load_suite

    root = tmp_path / "suite" / "level1"
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.py").write_text(source)
    return load_suite(root.parent).get(name).spec()


def _job(spec) -> dict:
    return {"spec": spec.to_dict(), "mode": "fixed", "factor": 1.0, "threads": 1, "bytes_cap": 1 << 30,
            "window": [0.001, 10_000.0], "trace": False}


@pytest.mark.parametrize("use_bwrap", [True, False], ids=["bubblewrap", "landlock"])
def test_the_sizing_probe_runs_the_reference_confined(tmp_path, monkeypatch, use_bwrap):
    """A suite's reference reads a file outside its view, connects to a port on this machine, starts a
    process and looks for a credential in its environment: as a candidate could not, none of it works,
    with bubblewrap's view or (``[verifier] use_bwrap = false``) Landlock's."""
    from verifier.sizing.launch import run_probe

    view = bwrap_status() if use_bwrap else landlock_status()
    if not view[0] or not seccomp_status()[0]:
        pytest.skip(f"the sandbox's file view and seccomp filter are not both available here ({view[1]})")
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    monkeypatch.setenv("EVOKERNEL_TEST_API_KEY", "hunter2")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: [server.accept() for _ in range(4)], daemon=True).start()
    try:
        spec = _spec(tmp_path, REACHES_OUT.format(secret=str(secret), port=port), "reaches_out")
        probe = run_probe(_job(spec), timeout_s=120, use_bwrap=use_bwrap)
    finally:
        server.close()
    assert probe.ok, probe.problem
    assert probe.loaded and probe.ms is not None


def test_a_probe_killed_at_its_deadline_says_how_far_it_got(tmp_path):
    """The probe's job is killed whole at its deadline; its progress lines, written before, still say
    that the task loaded and at which scale it was being timed."""
    from verifier.sizing.launch import run_probe

    spec = _spec(tmp_path, HANGS_AFTER_A_STEP, "hangs")
    probe = run_probe(_job(spec), timeout_s=5)
    assert not probe.ok and probe.reason == "timeout" and probe.loaded, probe
    assert "did not finish within 5 s at scale 1" in probe.problem
