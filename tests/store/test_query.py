"""Listing, filtering, sorting and walking the attempt tree."""

from __future__ import annotations

import pytest

from store.errors import InvalidRecord, UnknownExperience


@pytest.fixture
def filled(store, make_exp):
    ids = []
    for i in range(30):
        exp_id, _ = store.add_experience(make_exp(i, created_at=1000.0 + i, q1=i / 30, q2=-i / 30))
        ids.append(exp_id)
    return store, ids


def test_filters_and_counts(filled, make_exp):
    store, ids = filled
    assert store.count() == 30
    for field, value in [("kind", "failure"), ("stage", "draft"), ("backend", "cuda"), ("source", "human"),
                         ("task", "3_layer_norm")]:
        want = [make_exp(i) for i in range(30)]
        want = [i for i, e in zip(ids, want) if getattr(e, "task_id" if field == "task" else field) == value]
        got = store.query(**{field: value})
        assert sorted(e.id for e in got) == sorted(want) and want
        assert store.count(**{field: value}) == len(want)
    both = store.query(kind="failure", backend="cuda")
    assert both and all(e.kind == "failure" and e.backend == "cuda" for e in both)
    with pytest.raises(InvalidRecord, match="unknown filter colour"):
        store.count(colour="red")


def test_sorting_and_paging(filled):
    store, ids = filled
    assert [e.id for e in store.query()] == ids[::-1]  # newest first
    assert [e.id for e in store.query(descending=False, limit=3)] == ids[:3]
    assert [e.id for e in store.query(sort="q1", limit=2)] == [ids[29], ids[28]]
    assert [e.id for e in store.query(sort="q2", limit=2)] == [ids[0], ids[1]]
    assert [e.id for e in store.query(offset=5, limit=5)] == ids[::-1][5:10]
    rewards = [e.reward for e in store.query(sort="reward")]
    assert rewards == sorted(rewards, reverse=True)
    with pytest.raises(InvalidRecord, match="unknown sort"):
        store.query(sort="size")


def test_rewardless_items_sort_last(store, make_exp):
    store.add_experience(make_exp(1, reward=None))
    store.add_experience(make_exp(2, reward=0.5))
    store.add_experience(make_exp(3, reward=-0.5))
    for descending in (True, False):
        assert store.query(sort="reward", descending=descending)[-1].reward is None


def test_a_value_never_updated_sorts_after_earned_ones(store, make_exp):
    # a typo's Q2 is the prior 0, never updated: it must not rank above a working kernel whose Q2 fell
    typo, _ = store.add_experience(make_exp(1, q2=0.0, n2=0))
    working, _ = store.add_experience(make_exp(2, q2=-0.3, n2=2))
    better, _ = store.add_experience(make_exp(3, q2=0.2, n2=1))
    assert [e.id for e in store.query(sort="q2")] == [better, working, typo]
    assert [e.id for e in store.query(sort="q2", descending=False)] == [working, better, typo]


def test_attempt_tree_and_children(store, make_exp):
    root, _ = store.add_experience(make_exp(0, task_id="softmax"))
    a, _ = store.add_experience(make_exp(1, task_id="softmax", parent_id=root))
    b, _ = store.add_experience(make_exp(2, task_id="softmax", parent_id=root))
    c, _ = store.add_experience(make_exp(3, task_id="softmax", parent_id=a))
    store.add_experience(make_exp(4, task_id="relu"))
    assert store.attempt_tree("softmax") == [(root, None), (a, root), (b, root), (c, a)]
    assert [e.id for e in store.children(root)] == [a, b]
    assert store.children(c) == [] and store.attempt_tree("nope") == []


def test_id_prefixes_resolve(filled):
    store, ids = filled
    assert store.resolve_id(ids[3]) == ids[3]
    unique = next(ids[i][:k] for i in range(30) for k in range(8, 21)
                  if sum(x.startswith(ids[i][:k]) for x in ids) == 1)
    assert store.resolve_id(unique) in ids
    with pytest.raises(UnknownExperience, match="several"):
        store.resolve_id(ids[0][:4])
    with pytest.raises(UnknownExperience, match="no experience with id 'zz'"):
        store.resolve_id("zz")


def test_iter_experiences_walks_in_insertion_order_with_filters(filled):
    store, ids = filled
    assert [e.id for e in store.iter_experiences()] == ids
    assert all(e.kind == "failure" for e in store.iter_experiences(kind="failure"))


def test_update_extra_merges(store, make_exp):
    a, _ = store.add_experience(make_exp(1, extra={"x": 1}))
    store.update_extra(a, {"y": 2})
    assert store.get(a).extra == {"x": 1, "y": 2}
    with pytest.raises(UnknownExperience):
        store.update_extra("missing", {})
