"""A run over multi-case tasks with a model played through the loopback server: a task whose reference
cannot run is found before any model call (no answer is asked for it), and a good multi-case task
reaches a verdict with every case checked."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest

import candidates as C
from openai_server import Reply, answer_with, task_of

pytestmark = pytest.mark.slow

RELU_CASES = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        {body}

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "{name}.json")) as f:
        return [[torch.randn(json.loads(line)["inputs"][0]["shape"])] for line in f if line.strip()]

def get_init_inputs():
    return []
'''

CASES = [{"inputs": [{"name": "x", "dtype": "float32", "shape": s}]} for s in ([64, 33], [1000], [5, 7, 48])]


def test_a_broken_reference_is_found_before_any_model_call_and_a_multi_case_task_reaches_a_verdict(tmp_path, llm_env):
    from core.events import EventBus
    from core.session import Session
    from core.workspace import Workspace
    from tests.engine.conftest import WORKSPACE_TOML

    suite = tmp_path / "suite"
    suite.mkdir()
    for name, body in [("relu_cases", "return torch.relu(x)"),
                       ("broken_cases", "raise RuntimeError('this reference cannot run here')")]:
        (suite / f"{name}.py").write_text(RELU_CASES.replace("{body}", body).replace("{name}", name))
        (suite / f"{name}.json").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "evokernel.toml").write_text(WORKSPACE_TOML.replace(
        next(line for line in WORKSPACE_TOML.splitlines() if line.startswith("suite")), f'suite = "{suite}"'))
    asked = collections.Counter()

    def script(req, n):
        asked[task_of(req)] += 1
        return Reply(answer_with(C.elementwise(C.RELU)))

    llm_env(script)
    events: list = []
    bus = EventBus()
    bus.subscribe(events.append)
    session = Session(Workspace(root), bus=bus)

    async def go():
        try:
            return await session.run(session.tasks(["relu_cases", "broken_cases"]), method="evokernel", iterations=1,
                                     suite=None, scale=None)
        finally:
            await session.close_async()

    record = asyncio.run(go())
    assert asked["broken_cases"] == 0 and asked["relu_cases"] == 1
    assert "this reference cannot run here" in record.progress["broken_cases"].broken
    assert record.progress["relu_cases"].feasible
    perf = [e.message for e in events if type(e).__name__ == "GateChecked" and e.task == "relu_cases"
            and e.gate == "performance" and e.status == "passed"]
    assert perf and "3 cases" in perf[0], [(type(e).__name__, getattr(e, "message", "")) for e in events]
    problems = [e for e in events if type(e).__name__ == "EngineProblem" and e.task == "broken_cases"]
    prompts = [e for e in events if type(e).__name__ == "PromptSent"]
    assert problems and events.index(problems[0]) < events.index(prompts[0])   # found before any model call
