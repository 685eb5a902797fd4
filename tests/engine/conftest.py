"""Engine fixtures: a workspace on the small test suite, a scripted loopback LLM, a session."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

SUITE = Path(__file__).parent.parent / "fixtures" / "suite"

WORKSPACE_TOML = f'''
suite = "{SUITE}"

[llm]
model = "scripted-coder"
timeout_s = 2.0
retries = 3
backoff_s = 0.05
concurrency = 4

[engine]
epsilon = 0.0
final_window = false

[verifier]
trials = 5
timing_calls = 5
timing_budget_s = 0.2
warmup_calls = 1
run_timeout_s = 20
threads = 2
'''


@pytest.fixture
def workspace(tmp_path):
    from core.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    (root / "evokernel.toml").write_text(WORKSPACE_TOML)
    return Workspace(root)


@pytest.fixture
def unique():
    """A counter for making answers distinct (the store drops exact repeats)."""
    counter = itertools.count()
    return lambda: next(counter)
