"""The values API the engine uses: Q updates in one transaction, use counts, reward statistics."""

from __future__ import annotations

import numpy as np
import pytest

from store import Store


def test_update_values_moves_the_stage_value_toward_the_reward(store, make_exp):
    a, _ = store.add_experience(make_exp(1, q1=0.0, q2=0.5))
    b, _ = store.add_experience(make_exp(2, q1=-0.2))
    got = store.update_values([a, b, "missing"], stage="draft", reward=1.0, alpha=0.3, task_id="19_ReLU",
                              weights={b: 0.5})
    assert got == pytest.approx({a: 0.3, b: -0.2 + 0.3 * 0.5 * 1.2})
    ea, eb = store.get_many([a, b])
    assert (ea.q1, ea.n1, ea.q2, ea.n2) == (pytest.approx(0.3), 1, 0.5, 0)
    assert ea.q_history[-1] == {"t": ea.updated_at, "stage": "draft", "q": pytest.approx(0.3), "reward": 1.0,
                                "task": "19_ReLU", "w": 1.0}
    got = store.update_values([a], stage="refine", reward=-1.0, alpha=0.5)
    assert got == {a: pytest.approx(0.5 + 0.5 * (-1.5))}
    assert store.get(a).n2 == 1


def test_repeated_updates_converge_and_history_is_capped(store, make_exp):
    a, _ = store.add_experience(make_exp(1))
    for _ in range(100):
        store.update_values([a], stage="refine", reward=0.8, alpha=0.3)
    exp = store.get(a)
    assert exp.q2 == pytest.approx(0.8, abs=1e-6) and exp.n2 == 100
    assert len(exp.q_history) == 32 and exp.q_history[-1]["q"] == exp.q2


def test_unknown_stage_is_a_programming_error(store, make_exp):
    a, _ = store.add_experience(make_exp(1))
    with pytest.raises(ValueError, match="draft"):
        store.update_values([a], stage="polish", reward=1.0, alpha=0.3)
    with pytest.raises(ValueError, match="finite"):
        store.update_values([a], stage="draft", reward=float("nan"), alpha=0.3)


def test_retrievals_and_adoptions_are_counted(store, make_exp):
    a, _ = store.add_experience(make_exp(1))
    store.record_retrieval("t1", [a, a, "missing"])
    store.record_retrieval("t1", [a])
    store.record_retrieval("t2", [a])
    store.record_adoption("t1", [a])
    store.record_adoption("t1", [a])  # the same task adopting twice counts once
    store.record_adoption("t2", [a, "missing"])
    exp = store.get(a)
    assert exp.retrieved_by == {"t1": 2, "t2": 1}
    assert exp.adopted_by == ["t1", "t2"] and exp.adoptions == 2
    assert [e.id for e in store.query(sort="adoptions")][0] == a


def test_reward_statistics_match_numpy(store):
    rng = np.random.default_rng(0)
    values = rng.normal(0.3, 2.0, 500)
    for v in values:
        last = store.update_reward_stats("refine", float(v))
    assert last["count"] == 500
    assert last["mean"] == pytest.approx(values.mean())
    assert last["var"] == pytest.approx(values.var())
    assert last["std"] == pytest.approx(values.std())
    assert store.reward_stats("other")["count"] == 0
    assert store.stats()["reward_stats"]["refine"]["count"] == 500


def test_values_survive_reopening(store_path, make_exp):
    with Store.open(store_path) as s:
        a, _ = s.add_experience(make_exp(1))
        s.update_values([a], stage="draft", reward=1.0, alpha=0.3)
    with Store.open(store_path, readonly=True) as s:
        assert s.get(a).q1 == pytest.approx(0.3)


def test_near_duplicates_are_not_stored_twice(store, make_exp):
    first, created = store.add_experience(make_exp(1))
    assert created
    code = make_exp(1).files["kernel.cpp"]
    reformatted = "/* same kernel, new comment */\n" + code.replace("  ", "    ").replace("\n", "\n\n") + "// end\n"
    again = make_exp(1, title="another title", files={**make_exp(1).files, "kernel.cpp": reformatted})
    assert store.add_experience(again) == (first, False)
    assert again.id == ""  # a skipped duplicate is not given an id
    # a real change of code, another backend or another kind is a new experience
    assert store.add_experience(make_exp(1, files={"kernel.cpp": code.replace("* 1", "* 2")}))[1]
    assert store.add_experience(make_exp(1, backend="ascend"))[1]
    assert store.add_experience(make_exp(1, kind="human_edit"))[1]
    # lessons without code are compared by their text
    rule = dict(task_id="*", kind="rule", backend="", files={})
    assert store.add_experience(make_exp(0, text="Keep  the accumulator\nin a register.", **rule))[1]
    assert not store.add_experience(make_exp(0, text="keep the accumulator in a register.", **rule))[1]
    # the same id twice is the same experience
    assert store.add_experience(make_exp(5, id=first, files={"x.cpp": "different"})) == (first, False)
    assert store.count() == 5


def test_pragmas_are_code_not_comments(store, make_exp):
    base = "void f(float* x) {\n  #pragma omp parallel for\n  for (int i = 0; i < 8; ++i) x[i] = 0;\n}\n"
    assert store.add_experience(make_exp(1, files={"kernel.cpp": base}))[1]
    assert store.add_experience(make_exp(1, files={"kernel.cpp": base.replace("  #pragma omp parallel for\n", "")}))[1]


def test_how_a_value_was_earned_is_kept(store, make_exp):
    """Issue #36: the memory browser shows how each value was earned. Every update keeps its weight and whether
    the answer cited the item; every citation is counted per task (``cited_by``), beside the showings
    (``retrieved_by``)."""
    a, _ = store.add_experience(make_exp(1))
    b, _ = store.add_experience(make_exp(2))
    store.update_values([a, b], stage="draft", reward=1.0, alpha=0.3, task_id="t1", weights={a: 1.0, b: 0.0},
                        cited=[a])
    store.record_retrieval("t1", [a, b])
    store.record_adoption("t1", [a])
    store.record_adoption("t1", [a])
    ea, eb = store.get_many([a, b])
    assert ea.q_history[-1]["w"] == 1.0 and ea.q_history[-1]["cited"] is True
    assert eb.q_history[-1]["w"] == 0.0 and eb.q_history[-1]["cited"] is False and eb.q1 == 0.0
    assert ea.cited_by == {"t1": 2} and eb.cited_by == {} and ea.adopted_by == ["t1"]


def test_the_browser_says_how_a_value_was_earned(store, make_exp):
    from core.memory import earned

    a, _ = store.add_experience(make_exp(1))
    store.update_values([a], stage="draft", reward=1.0, alpha=0.3, task_id="relu", weights={a: 1.0}, cited=[a])
    store.update_values([a], stage="draft", reward=-1.0, alpha=0.3, task_id="gelu", weights={a: 0.0}, cited=[])
    store.record_retrieval("relu", [a])
    store.record_retrieval("gelu", [a])
    store.record_retrieval("gelu", [a])
    store.record_adoption("relu", [a])
    line = earned(store.get(a))
    assert line == "shown 3 times (gelu 2, relu 1); cited 1 (relu 1); Q1 from +1.00 cited, -1.00 uncited w 0"
