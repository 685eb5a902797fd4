"""``doctor``'s device check: one ``torch.ones(1, device=...) + 1`` in a candidate's confined job (the fork server
started as for candidates: every layer of the sandbox, the device nodes and their group, the backend's seccomp needs,
a fresh process per job) rather than in a plain process, so a device that works for the trusted reference and not
for candidates (root's jobs without the nodes' group, issue #50) is found before a run, not by every candidate
failing at ``set_device``. The job is ``verifier.job.device_op``."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from verifier.backends import runtime_class, runtime_target
from verifier.errors import SandboxError
from verifier.processes import scrubbed_env
from verifier.sandbox.client import ForkServer, JobLimits

ENTRY = "verifier.job.device_op:run_job"


def confined_device_op(backend: Any, *, use_bwrap: bool = True, seccomp: bool = True,
                       timeout: float = 180.0) -> tuple[bool, str]:
    """(whether the op gave 2, what happened in words) for ``backend``'s device in a confined candidate's job."""
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="evokernel-device-check-", dir=shm if shm.is_dir() else None))
    modules = list(runtime_class(backend).modules)
    server = ForkServer(root, entry=ENTRY, env=scrubbed_env(backend.worker_env(), home=str(root)), preload=[],
                        use_bwrap=use_bwrap, hidden=[], devices=backend.sandbox_devices(), spawn=True,
                        job_preload=modules, confine=True, needs=backend.runtime_needs,
                        seccomp=seccomp)
    try:
        job = Path(tempfile.mkdtemp(prefix="job-", dir=root))
        (job / "job.json").write_text(json.dumps({"runtime": runtime_target(backend)}))
        try:
            limits = JobLimits(cpu_seconds=None, address_space_mb=None, file_size_mb=16, open_files=1024)
            ended, refused = server.run_candidate(job, limits, timeout)
        except SandboxError as exc:
            return False, f"the sandbox did not start for a candidate's job: {exc}"
        if refused and refused != "ended":
            return False, f"a candidate's confined job was refused at its candidate phase: it {refused}"
        try:
            result = json.loads((job / "result.json").read_text())
        except (OSError, ValueError):
            lines = ((job / "stderr.txt").read_text(errors="replace").strip().splitlines()
                     if (job / "stderr.txt").exists() else [])
            tail = lines[-1][-400:] if lines else ""
            return False, (f"the confined job {ended.describe()} before it reported (in its trusted imports or the "
                           "device runtime's set-up)" + (f": {tail}" if tail else ""))
        if result.get("ok"):
            return True, (f"torch.ones(1, device={runtime_class(backend).device!r}) + 1 gave 2 in a candidate's "
                          f"confined job ({server.isolation})")
        said = result.get("error") or f"gave {result.get('value')}, not 2"
        return False, f"a device op in a candidate's confined job failed in {result.get('stage')}: {said}"
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
