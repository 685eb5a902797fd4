"""The job of ``doctor``'s device check (``verifier.harness.device_check``): the device runtime a candidate's job
uses, prepared as a candidate's job prepares it (``set_device`` on Ascend), then one ``torch.ones(1, device=...) +
1`` in the phase in which candidate code runs. What a candidate's job needs of the sandbox, with no candidate.

Writes ``result.json``: ``{"ok", "value", "stage", "error"}``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from verifier.backends import load_runtime
from verifier.sandbox.seccomp import enter_candidate_phase


def run_job(job_dir: Path) -> int:
    job = json.loads((Path(job_dir) / "job.json").read_text())
    # opened in the set-up: the candidate's phase opens no file
    fd = os.open(Path(job_dir) / "result.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    out: dict[str, object] = {"ok": False, "stage": "set-up (the device runtime's prepare: set_device)"}
    try:
        import torch

        runtime = load_runtime(str(job.get("runtime", "")))
        runtime.prepare()
        out["stage"] = "the candidate's phase (one device op)"
        problem = enter_candidate_phase()
        if problem:
            raise RuntimeError(f"the candidate phase's filter: {problem}")
        value = torch.ones(1, device=runtime.device) + 1
        runtime.synchronize()
        out["value"] = float(value.cpu()[0])
        out["ok"] = out["value"] == 2.0
    except Exception as exc:  # what failed, for doctor: never the job's crash
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    os.write(fd, json.dumps(out).encode())
    os.close(fd)
    return 0
