"""Trying EvoKernel without an LLM endpoint (#37, finding 7): ``run --replay`` needs neither an endpoint nor a
model name (the recorded run's is used), and ``run --model demo`` runs the shipped canned model, labelled as a
demo wherever its name shows. On the real model client against a loopback server, a canned verifier."""

from __future__ import annotations

import asyncio
import re

import candidates as C
from openai_server import Reply, answer_with


def _judge(task_id, files):
    from core.scripted import Canned

    found = re.search(r"kMs = ([0-9.]+)", files.get("kernel.cpp", ""))
    return Canned(latency_ms=float(found.group(1)) if found else 5.0)


def _script(request, n):
    files = C.elementwise(C.RELU)
    return answer_with({**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const double kMs = {9 - n};\n"})


def test_a_recorded_run_replays_with_no_endpoint_and_no_model_configured(workspace, llm_env, monkeypatch):
    from core.scripted import CannedVerifier
    from core.session import Session

    toml = workspace.config_path.read_text().replace('model = "scripted-coder"\n', "")
    workspace.config_path.write_text(toml)
    workspace.init()
    llm_env(lambda request, n: Reply(_script(request, n)))
    monkeypatch.setenv("EVOKERNEL_MODEL", "scripted-coder")
    with Session(workspace) as session:
        session._verifier = CannedVerifier(_judge)
        recorded = asyncio.run(session.run(session.tasks(["relu"]), method="evokernel", iterations=2, suite=None,
                                           scale=None))
    assert recorded.status == "finished"
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL"):   # a newcomer's shell: nothing set
        monkeypatch.delenv(name, raising=False)
    with Session(workspace, replay=True) as session:
        session._verifier = CannedVerifier(_judge)
        again = asyncio.run(session.replay(session.find_run(recorded.id)))
    assert again.status == "finished" and again.config["replay_of"] == recorded.id
    assert again.config["model"] == "scripted-coder" and again.progress["relu"].iterations_used == 2


def test_the_demo_model_runs_with_no_endpoint_and_says_it_is_a_demo(workspace, monkeypatch):
    from core.demo import DEMO_MODEL
    from core.scripted import CannedVerifier
    from core.session import Session

    workspace.init()
    with Session(workspace, model="demo") as session:
        assert session.llm_problem() is None
        session._verifier = CannedVerifier(_judge)
        [relu] = session.tasks(["relu"], suite="builtin")
        record = asyncio.run(session.run([relu], method="evokernel", iterations=3, suite="builtin", scale=None))
        attempts = session.store.get_many(record.progress["relu"].attempts)
    assert record.status == "finished" and record.config["model"] == DEMO_MODEL and "demo" in DEMO_MODEL
    assert attempts and all(e.model == DEMO_MODEL for e in attempts)
    assert attempts[0].outcome["feasible"] and attempts[0].stage == "draft" and attempts[1].stage == "refine"
    assert "a canned demo answer" in attempts[1].title


def test_the_demo_model_refuses_a_task_it_has_no_answer_for(capsys):
    import pytest

    from core.errors import ConfigError
    from core.tasks import load_suite
    from evotui.cmd_run import _demo_tasks

    suite = load_suite("builtin")
    with pytest.raises(ConfigError, match="no canned answers for matmul"):
        _demo_tasks([suite.get("relu"), suite.get("matmul")], named=True)
    chosen = _demo_tasks(suite.tasks, named=False)
    assert {t.id for t in chosen} >= {"relu", "sigmoid"} and "matmul" not in {t.id for t in chosen}
    assert "demo: canned answers, not an LLM" in capsys.readouterr().err


def test_a_demo_run_replays_with_no_endpoint(workspace, monkeypatch):
    """A newcomer's two commands without an endpoint: `run --model demo`, then `run --replay` (the latest run).
    Found in the walk-through: the demo's answers are canned, never in the response cache, so the replay stopped
    at its first request ("replay: this request is not in the response cache (the run diverged ...)")."""
    from core.demo import DEMO_MODEL
    from core.scripted import CannedVerifier
    from core.session import Session

    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL"):
        monkeypatch.delenv(name, raising=False)
    workspace.init()
    with Session(workspace, model="demo") as session:
        session._verifier = CannedVerifier(_judge)
        [relu] = session.tasks(["relu"], suite="builtin")
        recorded = asyncio.run(session.run([relu], method="evokernel", iterations=2, suite="builtin", scale=None))
        first = [e.files for e in session.store.get_many(recorded.progress["relu"].attempts)]
    assert recorded.status == "finished"
    with Session(workspace, replay=True) as session:
        session._verifier = CannedVerifier(_judge)
        again = asyncio.run(session.replay(session.find_run(None)))
        attempts = session.store.get_many(again.progress["relu"].attempts)
    assert again.status == "finished" and again.config["replay_of"] == recorded.id, again.status
    assert again.config["model"] == DEMO_MODEL and again.progress["relu"].iterations_used == 2
    assert attempts and all(e.model == DEMO_MODEL for e in attempts)
    assert [e.files for e in attempts] == first   # the same canned answers, in the same order
