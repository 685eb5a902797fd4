"""Workbench fixtures: real workspaces on the small test suite, a fixed memory for screenshots, the
scripted loopback LLM of the engine tests, and a helper that waits for a condition."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # memory_content, waiting
SUITE = Path(__file__).parent.parent / "fixtures" / "suite"

WORKSPACE_TOML = f'''
suite = "{SUITE}"

[llm]
model = "scripted-coder"
timeout_s = 5.0
retries = 3
backoff_s = 0.05
concurrency = 4

[engine]
epsilon = 0.0
iterations = 2

[verifier]
trials = 5
timing_calls = 5
timing_budget_s = 0.2
warmup_calls = 1
run_timeout_s = 20
threads = 2
'''


@pytest.fixture(autouse=True)
def no_llm_from_the_environment(monkeypatch):
    """Tests choose their endpoint; none leaks in from the machine (screens must not depend on it)."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL", "EVOKERNEL_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EDITOR", "true")


@pytest.fixture
def workspace(tmp_path):
    from core.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    (root / "evokernel.toml").write_text(WORKSPACE_TOML)
    ws = Workspace(root)
    ws.init()
    return ws


@pytest.fixture
def filled_workspace(workspace):
    """The workspace with a fixed memory (ids, times and values set): what the screenshots show."""
    from store import Store

    import memory_content

    with Store.open(workspace.memory_path) as store:
        memory_content.fill(store)
    return workspace
