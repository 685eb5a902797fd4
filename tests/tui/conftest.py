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


class CannedWorkbench:
    """What ``canned_app`` built: the app, and the canned verifier and scripted model its session uses."""

    def __init__(self, app, verifier, model):
        self.app, self.verifier, self.model = app, verifier, model


@pytest.fixture
def canned_app():
    """The workbench on the shipped canned parts (``core.scripted``): no fork server, compiler or HTTP server.

    ``canned_app(workspace, script=None, judge=None, **make_app_args) -> CannedWorkbench``. ``script`` is a
    loopback script (``openai_server``: ``(request dict, n) -> Reply``) answered by a ``ScriptedModel``, or
    None for the shipped demo model (``core.demo``); ``judge(task_id, files) -> Canned`` gives each kernel's
    verdict (default: every kernel passes, 8 ms against the reference's 10 ms). Everything else is real: the
    workspace, the LMDB store, the engine, the edit watcher, the screens. A few end-to-end tests stay on the
    real verifier and the loopback server (test_runs, test_edit_chain, test_typo_rule)."""
    from core.demo import demo_model
    from core.scripted import Canned, CannedVerifier, ScriptedModel
    from core.session import Session
    from evotui.app import make_app

    def build(workspace, script=None, judge=None, **kwargs) -> CannedWorkbench:
        verifier = CannedVerifier(judge or (lambda task_id, files: Canned(latency_ms=8.0)))
        model = demo_model() if script is None else ScriptedModel(_answers(script), model="scripted-coder")

        def session(ws, config, bus):
            return Session(ws, config, bus=bus, verifier=verifier, llm=model)

        return CannedWorkbench(make_app(workspace.root, session_factory=session, **kwargs), verifier, model)

    return build


def _answers(script):
    """A loopback script (request dict -> Reply) as a ScriptedModel's script (ChatRequest -> text)."""
    def answer(request, n):
        reply = script({"model": request.model, "messages": [{"role": r, "content": c} for r, c in request.messages]},
                       n)
        assert reply.status == 200 and reply.raw is None, "a canned model answers with text only"
        return reply.text
    return answer
