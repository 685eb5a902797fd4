"""A task's identity is its suite and its reference (core.identity): two suites' ``relu`` are two tasks in
one workspace, with their own memory records, kernels folders, attempt numbers, bests and history; a
memory written before tasks had a suite is carried over (tests/fixtures/memory_v1)."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

import candidates as C
from openai_server import answer_with

V1_MEMORY = Path(__file__).parents[1] / "fixtures" / "memory_v1" / "memory.lmdb"


def test_suite_labels():
    from core.identity import qualified, suite_label

    assert suite_label("builtin") == "builtin"
    assert suite_label("/data/suites/mysuite/") == "mysuite"
    assert suite_label("/data/KernelBench/level1") == "KernelBench/level1"
    assert suite_label("../npu/npukernelbench_level2") == "npu/npukernelbench_level2"
    assert qualified("relu", "KernelBench/level1") == "relu@KernelBench-level1"


def test_the_first_suite_keeps_the_id_and_a_second_gets_its_name_beside_it(tmp_path):
    from core.identity import task_keys
    from store import Store

    with Store.open(tmp_path / "memory.lmdb") as store:
        assert task_keys(store, "builtin", ["relu", "softmax"]) == {"relu": "relu", "softmax": "softmax"}
        assert task_keys(store, "mysuite", ["relu", "4_abs"]) == {"relu": "relu@mysuite", "4_abs": "4_abs"}
        # stable: asked again (or by another process, or before the first suite) the keys are the same
        assert task_keys(store, "mysuite", ["4_abs", "relu"]) == {"relu": "relu@mysuite", "4_abs": "4_abs"}
        assert task_keys(store, "builtin", ["relu"]) == {"relu": "relu"}
        # a read-only look-up says what a claim would give, and claims nothing
        assert task_keys(store, "other", ["relu"], claim=False) == {"relu": "relu@other"}
        assert "relu@other" not in store.task_claims()


def _judge(task_id, files):
    from core.scripted import Canned

    found = re.search(r"kMs = ([0-9.]+)", files.get("kernel.cpp", ""))
    return Canned(latency_ms=float(found.group(1)))


def _answer(tag: str, ms: float) -> str:
    files = C.elementwise(C.RELU)
    return answer_with({**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int k{tag} = 1;\n"
                                                                      f"static const double kMs = {ms};\n"})


def test_a_second_suites_relu_starts_from_nothing_of_the_first(workspace, tmp_path, capsys):
    """The finding: a headless run on a second suite whose relu has another size sent a refine prompt whose
    start point was the first suite's best, and its attempt numbers continued the first suite's."""
    from core.attempts import attempt_numbers
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel
    from core.session import Session

    workspace.init()
    other = tmp_path / "mysuite"
    other.mkdir()
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "suite" / "level1" / "relu.py", other / "relu.py")
    (other / "relu.py").write_text((other / "relu.py").read_text().replace("dim = 4096", "dim = 1000"))
    with Session(workspace) as session:
        config = Config()
        config.engine.final_window = False
        config.engine.epsilon = 0.0

        def run(task, tag):
            model = ScriptedModel(lambda request, n: _answer(f"{tag}{n}", 10.0 - n))
            engine = Engine(config, session.store, CannedVerifier(_judge), model, kernels_dir=workspace.kernels_dir)
            record = asyncio.run(engine.run([task], iterations=2))
            return record, model

        [first] = session.tasks(["relu"])                   # the workspace's suite (tests/fixtures/suite)
        run(first, "a")
        [second] = session.tasks(["relu"], suite=str(other))
        assert (first.id, first.name) == ("relu", "relu") and (second.id, second.name) == ("relu@mysuite", "relu")
        assert second.spec().id == "relu" and "dim = 1000" in second.source
        record, model = run(second, "b")
        assert "## Start point" not in model.requests[0].messages[-1][1]    # a draft: nothing to refine yet
        attempts = session.store.get_many(record.progress["relu@mysuite"].attempts)
        assert {e.task_id for e in attempts} == {"relu@mysuite"}
        assert sorted(attempt_numbers(session.store, ["relu@mysuite"]).values()) == [1, 2]
        assert session.store.get_task("relu").best_id != session.store.get_task("relu@mysuite").best_id
        assert (workspace.kernels_dir / "relu@mysuite" / "best").is_dir() and (workspace.kernels_dir / "relu").is_dir()
        # the run's task list names keys: a resume finds the same task by its key
        assert record.tasks == ["relu@mysuite"]
        assert [t.id for t in session.tasks(record.tasks, suite=str(other))] == ["relu@mysuite"]
    # `tasks` names each task by the key the other commands take (found in the #37 walk-through: it said relu)
    import json

    from evotui import cli

    cli.main(["--workspace", str(workspace.root), "tasks", "--suite", str(other), "--json"])
    [row] = json.loads(capsys.readouterr().out)["tasks"]
    assert (row["id"], row["key"]) == ("relu", "relu@mysuite")


@pytest.mark.parametrize("suite_name, expected", [("builtin", "relu"), ("mysuite", "relu@mysuite")])
def test_a_schema_1_memory_gives_its_records_to_the_suite_that_made_them(tmp_path, suite_name, expected):
    """The legacy ids of tests/fixtures/memory_v1 go to the suite of the earliest run that listed them (the
    built-in one); a folder suite with a relu of its own gets its own key, its records starting empty."""
    from core.identity import task_keys
    from store import Store

    path = tmp_path / "memory.lmdb"
    shutil.copytree(V1_MEMORY, path)
    with Store.open(path) as store:
        before = len(store.attempt_tree("relu"))
        keys = task_keys(store, suite_name, ["relu"])
        assert keys == {"relu": expected}
        assert len(store.attempt_tree("relu")) == before and before > 3
        assert store.task_claims()["relu"] == ({"suite": "builtin", "name": "relu"} if suite_name == "builtin"
                                              else {"legacy": True, "suite_spec": "builtin"})
