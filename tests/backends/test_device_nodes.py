"""Candidates reach the device as root (issue #50, finding 1). Ascend's device nodes are ``HwHiAiUser:HwHiAiUser
0660`` (vllm-project/vllm-ascend#9490); the fork server drops every capability for candidate jobs, so root's job,
with no ``CAP_DAC_OVERRIDE``, could not open them ("Can't get ascend_hal device count",
Project-HAMi/ascend-device-plugin#139) while the trusted reference could: every candidate would fail at
``set_device``. A confined job is given the device nodes' group instead; where it cannot be, the sandbox refuses at
start and names the group to join.

The stand-in device node is a plain file owned by another uid and group, mode 0660: the kernel's permission check
is the same for a character device (what the driver does after ``open`` is not tested here)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from verifier.errors import SandboxError
from verifier.sandbox.client import ForkServer, JobLimits
from verifier.sandbox.isolation import bwrap_status, device_groups, device_refusal

OWNER = 1000        # HwHiAiUser's uid and gid on a typical install: any id but root's will do

OPENER = '''
import os
import pathlib


def run_job(job_dir):
    job = pathlib.Path(job_dir)
    node = (job / "node.txt").read_text()
    try:
        os.close(os.open(node, os.O_RDWR))
        (job / "opened.txt").write_text("opened")
    except OSError as exc:
        (job / "opened.txt").write_text(f"refused: {exc}")
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    (job / "walls.txt").write_text(" ".join(status[k].strip() for k in ("CapEff", "CapBnd", "Seccomp")))
    return 0
'''


@pytest.fixture
def node():
    """A stand-in device node outside /tmp (bubblewrap's /tmp is private), owned by uid and gid ``OWNER``, 0660."""
    if os.geteuid() != 0:
        pytest.skip("the stand-in node belongs to another uid: only root can make it (and only root lacks it)")
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix="i50-davinci-", dir=base))
    path = folder / "davinci0"
    path.write_text("")
    os.chown(path, OWNER, OWNER)
    os.chmod(path, 0o660)
    yield str(path)
    shutil.rmtree(folder, ignore_errors=True)


def _server(tmp_path: Path, devices: list[str], use_bwrap: bool) -> tuple[ForkServer, Path]:
    helper = tmp_path / "helper"
    helper.mkdir()
    (helper / "device_job.py").write_text(OPENER)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    root = Path(__file__).resolve().parents[2]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(root), str(helper)]),
           "HOME": str(jobs)}
    return ForkServer(jobs, env=env, preload=["device_job"], use_bwrap=use_bwrap, hidden=[], devices=devices,
                      confine=True, entry="device_job:run_job"), jobs


@pytest.mark.parametrize("use_bwrap", [False, True], ids=["landlock", "bubblewrap"])
def test_a_confined_job_run_as_root_opens_a_device_node_of_another_user(tmp_path, node, use_bwrap):
    if use_bwrap and not bwrap_status()[0]:
        pytest.skip(bwrap_status()[1])
    server, jobs = _server(tmp_path, [node], use_bwrap)
    try:
        job = jobs / "job"
        job.mkdir()
        (job / "node.txt").write_text(node)
        ended = server.run(job, JobLimits(cpu_seconds=30, address_space_mb=None, file_size_mb=16), 60)
        assert ended.status == "exited" and ended.code == 0, ended
        assert (job / "opened.txt").read_text() == "opened"
        # every other wall still stands: no capability (effective or bounding), the seccomp filter, a PID namespace
        cap_eff, cap_bnd, seccomp = (job / "walls.txt").read_text().split()
        assert int(cap_eff, 16) == 0 and int(cap_bnd, 16) == 0 and seccomp == "2"
        assert f"group {OWNER} given to jobs" in server.isolation, server.isolation
    finally:
        server.close()


def test_the_groups_a_confined_job_is_given_are_the_nodes_it_could_not_open(node):
    assert device_groups([node], uid=0, groups=[0]) == [OWNER]
    assert device_groups([node], uid=0, groups=[0, OWNER]) == []     # already a member
    assert device_groups([node], uid=OWNER, groups=[5]) == []        # the owner itself
    assert device_groups(["/dev/null"], uid=0, groups=[0]) == []     # world-writable


def test_without_the_group_the_sandbox_refuses_at_start_naming_it(tmp_path, node, monkeypatch):
    """A user who is not root and not in the nodes' group (here: root's group change forbidden): a refusal at start
    that names the node, its owner and mode and the group to join, before any candidate fails at set_device."""
    assert "gid 1000" in device_refusal([node], uid=4242, groups=[4242])
    assert device_refusal([node], uid=4242, groups=[4242, OWNER]) == ""
    monkeypatch.setattr("verifier.sandbox.client.can_join_groups", lambda: False)
    server, _ = _server(tmp_path, [node], use_bwrap=False)
    try:
        with pytest.raises(SandboxError) as info:
            server.start()
        assert node in str(info.value) and "0660" in str(info.value) and "usermod -aG" in str(info.value)
    finally:
        server.close()
