"""Round trips of every record type through real LMDB files, and what an experience id looks like."""

from __future__ import annotations

import random
import re

import pytest

from store import Experience, RunRecord, Store, StoreError, TaskState
from store.errors import InvalidRecord, ReadOnlyStore
from store.records import new_id


def test_experience_round_trip_keeps_every_field(store, store_path, make_exp):
    exp = make_exp(4, parent_id="01a2b3c4d5e6ffffffff", extra={"note": "hand tuned", "tags": ["a", "b"]},
                   q1=0.25, q2=-0.5, n1=3, n2=1, adoptions=1, adopted_by=["t9"], retrieved_by={"t9": 2},
                   q_history=[{"t": 1.0, "stage": "draft", "q": 0.25, "reward": 1.0, "task": "t9"}])
    exp_id, created = store.add_experience(exp)
    assert created and exp.id == exp_id
    store.close()

    with Store.open(store_path, readonly=True) as again:
        got = again.get(exp_id)
    assert got is not None
    assert got.to_dict() == exp.to_dict()


def test_ids_are_time_ordered_unique_and_hex():
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"[0-9a-f]{20}", i) for i in ids)


def test_insert_fills_id_and_timestamps(store, make_exp):
    exp = make_exp(1)
    assert exp.id == "" and exp.created_at == 0.0
    exp_id, _ = store.add_experience(exp)
    got = store.get(exp_id)
    assert got.created_at > 0 and got.updated_at == got.created_at
    assert store.get("nope") is None
    assert [e.id for e in store.get_many(["nope", exp_id])] == [exp_id]


def test_large_files_are_stored_once(store, make_exp):
    rng = random.Random(0)
    big = "// a large generated kernel\n" + "".join(f"w[{i}] = {rng.random()!r}f;\n" for i in range(10_000))
    first = make_exp(1, files={"kernel.cpp": big})
    store.add_experience(first)
    before = store.stats()["bytes"]["blob"]
    for i in range(2, 12):  # ten more experiences holding the same file, each with a distinct model.py
        store.add_experience(make_exp(i, files={"kernel.cpp": big, "model.py": f"# v{i}\nx = {i}\n"}))
    stats = store.stats()
    assert store.count() == 11
    assert stats["blobs"] == 1 + 10  # the big kernel once, ten model.py
    assert stats["bytes"]["blob"] - before < len(big) / 8  # no second copy of the kernel
    assert store.get(first.id).files["kernel.cpp"] == big


def test_task_state_round_trip(store, store_path):
    state = TaskState(task_id="19_ReLU", stage="refine", feasible=True, best_latency_ms=0.19, best_id="x1",
                      first_feasible_latency_ms=0.44, start_points=["x1", "x0"], iterations_used=12, budget=30,
                      extra={"speedup": 2.3})
    store.put_task(state)
    store.close()
    with Store.open(store_path, readonly=True) as again:
        got = again.get_task("19_ReLU")
        assert again.get_task("nope") is None
        assert [t.task_id for t in again.list_tasks()] == ["19_ReLU"]
    assert got == state and got.updated_at > 0


def test_run_round_trip_and_listing(store, store_path):
    run = RunRecord(id="run-2", method="evokernel", config={"alpha": 0.3, "model": "m"}, tasks=["a", "b"],
                    iteration=3, progress={"a": {"iterations_used": 3, "feasible": True, "best_ms": 0.5}},
                    tokens_in=1000, tokens_out=200, cost=0.01, extra={"seed": 1})
    store.put_run(run)
    earlier = RunRecord(id="run-1", method="pass@k", config={}, tasks=["a"], started_at=1.0)
    store.put_run(earlier)
    run.status, run.iteration = "finished", 30
    store.put_run(run)
    store.close()
    with Store.open(store_path, readonly=True) as again:
        assert again.get_run("run-2") == run
        assert again.get_run("nope") is None
        assert [r.id for r in again.list_runs()] == ["run-1", "run-2"]


def test_llm_cache_round_trip(store):
    key = "sha256:" + "ab" * 32
    value = {"choices": [{"message": {"content": "```cpp file=kernel.cpp\n...\n```"}}], "usage": {"total": 9}}
    assert store.cache_get(key) is None
    store.cache_put(key, value)
    assert store.cache_get(key) == value
    long_key = "x" * 2000  # hashed internally: LMDB keys are at most 511 bytes
    store.cache_put(long_key, {"v": 1})
    assert store.cache_get(long_key) == {"v": 1}


def test_reward_stats_round_trip(store):
    assert store.reward_stats("refine/19_ReLU") == {"count": 0, "mean": 0.0, "var": 0.0, "std": 0.0}
    store.update_reward_stats("refine/19_ReLU", 0.5)
    got = store.update_reward_stats("refine/19_ReLU", -0.5)
    assert got == store.reward_stats("refine/19_ReLU")
    assert got["count"] == 2 and got["mean"] == pytest.approx(0.0) and got["var"] == pytest.approx(0.25)


def test_records_ignore_unknown_keys():
    data = Experience(task_id="t", kind="rule", backend="").to_dict() | {"from_the_future": 1}
    assert Experience.from_dict(data).task_id == "t"
    assert TaskState.from_dict({"task_id": "t", "new": 1}) == TaskState(task_id="t")


@pytest.mark.parametrize(
    "override, words",
    [
        ({"kind": "guess"}, "unknown experience kind"),
        ({"stage": "polish"}, "unknown stage"),
        ({"source": "robot"}, "unknown source"),
        ({"task_id": ""}, "task id"),
        ({"id": "has space"}, "experience id"),
        ({"files": {"a": 1}}, "files"),
        ({"q1": "high"}, "must be numbers"),
    ],
)
def test_invalid_records_are_refused_with_a_clear_line(store, make_exp, override, words):
    with pytest.raises(InvalidRecord, match=words) as info:
        store.add_experience(make_exp(1, **override))
    assert "\n" not in str(info.value)
    assert store.count() == 0


def test_readonly_store_refuses_writes(store, store_path, make_exp):
    store.add_experience(make_exp(1))
    with Store.open(store_path, readonly=True) as ro:
        with pytest.raises(ReadOnlyStore, match="read-only"):
            ro.add_experience(make_exp(2))
        assert isinstance(ReadOnlyStore("x"), StoreError)


def test_a_reader_and_a_writer_in_one_process_share_the_memory(store_path, make_exp):
    Store.open(store_path).close()
    reader = Store.open(store_path, readonly=True)  # e.g. the TUI, opened first
    writer = Store.open(store_path)  # the engine
    exp_id, _ = writer.add_experience(make_exp(1))
    assert reader.get(exp_id) is not None
    reader.close()
    writer.add_experience(make_exp(2))
    writer.close()
    with Store.open(store_path, readonly=True) as again:
        assert again.count() == 2


def test_run_progress_is_typed_and_reads_runs_stored_as_plain_dicts(store, store_path):
    from store import TaskProgress

    # a run as stored before TaskProgress (a plain dict per task, a reason string or nothing when broken)
    run = RunRecord.from_dict({"id": "old", "method": "evokernel", "config": {}, "tasks": ["a", "b"],
                               "progress": {"a": {"iterations_used": 2, "feasible": True, "attempts": ["x", "y"],
                                                  "best_id": "y", "someday": 1},
                                            "b": {"iterations_used": 1, "broken": None}}})
    assert isinstance(run.progress["a"], TaskProgress)
    assert run.progress["a"].attempts == ["x", "y"] and run.progress["a"].best_id == "y"
    assert run.progress["b"].broken == "" and run.progress["b"].feasible is False
    store.put_run(run)
    store.close()
    with Store.open(store_path, readonly=True) as again:
        assert again.get_run("old").progress == run.progress
