"""Credit where it was earned (issue #36, finding 2): an item gained value by sitting uncited in prompts that
succeeded (a matmul's failed draft, reward -1, read Q +0.09 after 11 retrievals, with 22 of 24 answers citing
nothing: every item then got full credit), and the same few items filled every prompt."""

from __future__ import annotations

from canned_runs import canned_run, kernel


def failed_draft_of_another_task(store, shown: int = 0) -> str:
    from store import Experience

    import candidates as C

    exp_id, _ = store.add_experience(Experience(
        task_id="leaky_relu", kind="draft_trace", backend="cpu", stage="draft", title="leaky_relu draft: failed",
        files=C.elementwise(C.RELU + "\nstatic const int kLeaky = 1;\n"), reward=-1.0,
        outcome={"verified": True, "feasible": False, "failed_gate": "correctness",
                 "message": "correctness: output differs at 3 places"},
        signature={"ops": ["relu"], "category": "activation", "text": "leaky_relu activation relu"}))
    for _ in range(shown):
        store.record_retrieval("other", [exp_id])
    return exp_id


def working_kernel_of_another_task(store, shown: int) -> str:
    from store import Experience

    import candidates as C

    exp_id, _ = store.add_experience(Experience(
        task_id="gelu", kind="draft_trace", backend="cpu", stage="draft", title="gelu draft: feasible",
        files=C.elementwise(C.RELU + "\nstatic const int kGelu = 1;\n"), reward=1.0,
        outcome={"verified": True, "feasible": True, "latency_ms": 1.0},
        signature={"ops": ["gelu"], "category": "activation", "text": "gelu activation gelu relu"}))
    for _ in range(shown):
        store.record_retrieval("other", [exp_id])
    return exp_id


def test_an_uncited_item_earns_nothing_from_the_prompts_it_sat_in(tmp_path):
    from store import Store

    with Store.open(tmp_path / "memory.lmdb") as store:
        failed = failed_draft_of_another_task(store)
        _record, sent = canned_run(store, "evokernel", {"relu": [kernel("2.0", 1), kernel("1.5", 2),
                                                                 kernel("1.4", 3)]})
        assert all(f"[mem:{failed}]" in user for _s, user in sent["relu"][:1])    # shown (a lesson: same family)
        item = store.get(failed)
        assert item.n1 >= 1 and item.q1 == 0.0 and item.q2 == 0.0                 # cited by no answer: no value
        assert all(h.get("cited") is False and h["w"] == 0.0 for h in item.q_history)


def test_an_item_shown_often_and_never_cited_leaves_the_pool(tmp_path):
    from core.config import EngineConfig
    from store import Store

    limit = EngineConfig().uncited_limit
    with Store.open(tmp_path / "memory.lmdb") as store:
        passed_over = working_kernel_of_another_task(store, shown=limit)
        _record, sent = canned_run(store, "evokernel", {"relu": [kernel("2.0", 1)]})
        assert f"[mem:{passed_over}]" not in sent["relu"][0][1]
    with Store.open(tmp_path / "other.lmdb") as store:
        still = working_kernel_of_another_task(store, shown=limit - 1)
        _record, sent = canned_run(store, "evokernel", {"relu": [kernel("2.0", 1)]})
        assert f"[mem:{still}]" in sent["relu"][0][1]
