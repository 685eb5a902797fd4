"""bench/methods.py: the three methods at an equal budget against a scripted OpenAI-compatible server,
the paper's table printed from the same metrics the report computes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import candidates as C
from openai_server import Reply, answer_with, task_of

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
SUITE = ROOT / "tests" / "fixtures" / "suite"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_methods", ROOT / "bench" / "methods.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_methods_run_at_an_equal_budget_and_print_the_papers_table(llm_env, tmp_path, capsys, monkeypatch):
    from tests.engine.conftest import WORKSPACE_TOML

    counter = iter(range(1000))

    def script(req, n):
        assert task_of(req) == "relu"
        return Reply(answer_with(C.elementwise(C.RELU + f"\nstatic const int kTag = {next(counter)};\n"),
                                 note="Change: a tagged copy"))

    server = llm_env(script)
    bench = _bench()
    # the engine tests' short timing and no final window (the bench's own settings are the product's: 66 s here)
    verifier = "\n[verifier]" + WORKSPACE_TOML.split("[verifier]", 1)[1]
    workspace_toml = bench._workspace_toml
    monkeypatch.setattr(bench, "_workspace_toml", lambda args: workspace_toml(args).replace(
        "[engine]\n", "[engine]\nfinal_window = false\n") + verifier)
    out = tmp_path / "bench"
    code = bench.main(["--model", "scripted-coder", "--suite", str(SUITE), "--tasks", "relu", "--iterations", "2",
                       "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert len(server.requests) == 6                       # 3 methods x 2 verifier calls, one task
    header, *rows = printed.splitlines()[:4]
    assert header.split()[:5] == ["method", "tasks", "CR", "Acc", "fast_1"]
    assert [r.split()[0] for r in rows] == ["evokernel", "refinement", "passk"]
    data = json.loads((out / "results.json").read_text())
    for method in ("evokernel", "refinement", "passk"):
        assert data[method]["acc"] == 1.0 and data[method]["iterations"] == 2
        assert len(data[method]["prompt_chars"]) == 2
    assert (out / "correctness_by_iteration.png").stat().st_size > 1000


def test_no_model_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("EVOKERNEL_MODEL", raising=False)
    assert _bench().main(["--tasks", "relu"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
