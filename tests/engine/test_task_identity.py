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


def _npu_like_suite(tmp_path) -> tuple[Path, Path]:
    """MultiKernelBench's layout in small: ``reference/npukernelbench_level0/10_relu.py`` (the fixture relu)."""
    root = tmp_path / "mkb" / "reference"
    level0 = root / "npukernelbench_level0"
    level0.mkdir(parents=True)
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "suite" / "level1" / "relu.py", level0 / "10_relu.py")
    return root, level0


def _human_edit(task_id: str, tag: str, ms: float):
    from store import Experience

    return Experience(task_id=task_id, kind="human_edit", backend="cpu", stage="draft", source="human",
                      title=f"edit {tag}", files={"kernel.cpp": f"// {tag}\n"}, reward=1.0,
                      outcome={"feasible": True, "latency_ms": ms, "task": task_id})


def test_one_task_file_seen_through_two_folders_is_one_task(workspace, tmp_path):
    """The finding (#51, 2): after `--suite <MKB>/reference`, `--suite <MKB>/reference/npukernelbench_level0`
    listed `10_relu@reference-npukernelbench_level0`: no history, no best, a fresh verification of a kernel
    already verified. The key follows the file, whichever folder above it was named, and in both orders."""
    from core.session import Session
    from store import TaskState

    root, level0 = _npu_like_suite(tmp_path)
    workspace.init()
    with Session(workspace) as session:
        [whole] = session.tasks(["10_relu"], suite=str(root))
        [exp] = [session.store.add_experience(_human_edit(whole.id, "a", 5.0))[0]]
        session.store.put_task(TaskState(whole.id, stage="refine", feasible=True, best_latency_ms=5.0, best_id=exp))
    with Session(workspace) as session:     # the next opening names the level's folder
        [part] = session.tasks(suite=str(level0))
        assert (whole.id, part.id) == ("10_relu", "10_relu")
        assert session.store.get_task(part.id).best_id == exp
        assert [i for i, _ in session.store.attempt_tree(part.id)] == [exp]
    # the other order, in a workspace of its own: the level first, then the folder above it
    other = type(workspace)(tmp_path / "ws2")
    other.init()
    with Session(other) as session:
        [first] = session.tasks(suite=str(level0))
        [then] = session.tasks(["10_relu"], suite=str(root))
        assert first.id == then.id == "10_relu"
    # what `tasks` lists and `verify --task` takes, read-only: the same key
    from core.identity import workspace_keys
    from core.tasks import load_suite

    suite = load_suite(str(level0))
    assert workspace_keys(workspace.memory_path, suite.label, suite.tasks) == {"10_relu": "10_relu"}


def test_a_history_an_earlier_evokernel_split_in_two_is_merged_into_one(workspace, tmp_path):
    """A memory written before keys followed the file holds one task under two keys (the claims an earlier
    EvoKernel made, each with its own attempts and best): the next opening of either folder merges them into
    the bare id's history (the faster best stays the best), moves the kernels folder, and says so; the
    qualified key stands for the bare one from then on."""
    from core import events as ev
    from core.session import Session
    from store import Store, TaskState

    root, level0 = _npu_like_suite(tmp_path)
    workspace.init()
    split = "10_relu@reference-npukernelbench_level0"
    with Store.open(workspace.memory_path) as store:      # what main's task_keys wrote for the two folders
        store.claim_task("10_relu", {"suite": "reference", "name": "10_relu"})
        store.claim_task(split, {"suite": "reference/npukernelbench_level0", "name": "10_relu"})
        a, _ = store.add_experience(_human_edit("10_relu", "a", 5.0))
        b, _ = store.add_experience(_human_edit(split, "b", 4.0))
        store.put_task(TaskState("10_relu", stage="refine", feasible=True, best_latency_ms=5.0, best_id=a))
        store.put_task(TaskState(split, stage="refine", feasible=True, best_latency_ms=4.0, best_id=b))
    (workspace.kernels_dir / split).mkdir(parents=True)
    (workspace.kernels_dir / split / "kernel.cpp").write_text("// b\n")
    bus = ev.EventBus()
    said: list = []
    bus.subscribe(said.append)
    with Session(workspace, bus=bus) as session:
        [task] = session.tasks(suite=str(level0))
        assert task.id == "10_relu"
        assert sorted(i for i, _ in session.store.attempt_tree("10_relu")) == sorted([a, b])
        assert session.store.attempt_tree(split) == [] and session.store.get_task(split) is None
        assert session.store.get_task("10_relu").best_id == b                    # the faster of the two bests
        assert session.store.get(b).task_id == "10_relu"
        assert session.store.task_claims()[split]["merged_into"] == "10_relu"
        assert session.tasks([split], suite=str(level0))[0].id == "10_relu"    # the old key still finds it
    assert (workspace.kernels_dir / "10_relu" / "kernel.cpp").read_text() == "// b\n"
    notes = [e.message for e in said if isinstance(e, ev.Notice)]
    assert any(split in n and "joined 10_relu's history" in n for n in notes), notes
    # the other folder opened next finds the one history too, and merges nothing more
    with Session(workspace) as session:
        assert session.tasks(["10_relu"], suite=str(root))[0].id == "10_relu"
        assert len(session.store.attempt_tree("10_relu")) == 2
