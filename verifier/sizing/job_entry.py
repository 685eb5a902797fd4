"""What runs inside the probe's job: read the job, run :func:`verifier.sizing.driver.probe`, and end the
progress file with the final record (``"final": true``), a failure of the task's own code in one line.

``run_job``: the entry the probe's fork server calls in each job's process (``verifier.sizing.launch``),
with the job's folder: ``job.json`` in it, ``progress.jsonl`` written there. ``python -m
verifier.sizing.job_entry JOB.json PROGRESS.jsonl`` runs the same outside any sandbox (a developer's look
at one task)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from verifier.sizing.driver import probe
from verifier.sizing.record import Progress


def run(job: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """The final record of the probe of ``job`` (written to ``progress`` too): what it found, or the
    task's failure in one line."""
    try:
        out = probe(job, progress)
    except MemoryError:
        out = {"ok": False, "problem": "out of memory building or running the reference: try --size-scale auto"}
    except BaseException as exc:  # the task's own code: any failure is the task's, in one line
        from verifier.npu_source import NpuOnly

        if isinstance(exc, NpuOnly):
            out = {"ok": False, "problem": f"refused: {exc}"}
        else:
            text = " ".join(str(exc).split())[:300]
            out = {"ok": False, "problem": f"reference failed: {type(exc).__name__}: {text}"}
    out["final"] = True
    progress.write(out)
    return out


def run_job(job_dir: Path) -> int:
    """The probe of the job in ``job_dir`` (the fork server's job entry): its exit code, 0 once the final
    record is written."""
    job = json.loads((job_dir / "job.json").read_text())
    run(job, Progress(str(job_dir / "progress.jsonl")))
    return 0


def main(argv: list[str]) -> int:
    job_path, progress_path = argv
    with open(job_path) as f:
        job = json.load(f)
    run(job, Progress(progress_path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
