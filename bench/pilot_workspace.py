"""A fresh workbench workspace on the test suite, for the benchmarks that drive the real app with Textual's pilot
(`quit_latency.py`, `same_code_latency.py`). Importing it puts the project and the test helpers on the path."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fixtures"), str(ROOT / "tests" / "tui")]


def fresh_workspace(prefix: str, timing_calls: int, timing_budget_s: float) -> Path:
    """A new workspace (nothing cached) whose verifier checks fully and times with the given window."""
    from core.workspace import Workspace

    root = Path(tempfile.mkdtemp(prefix=prefix)) / "ws"
    root.mkdir()
    (root / "evokernel.toml").write_text(
        f'suite = "{ROOT / "tests" / "fixtures" / "suite"}"\n[verifier]\ntrials = 5\n'
        f"timing_calls = {timing_calls}\ntiming_budget_s = {timing_budget_s}\nwarmup_calls = 1\nthreads = 2\n")
    Workspace(root).init()
    return root
