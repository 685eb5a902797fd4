"""The memory map grows on demand instead of failing; grouped transactions land whole or not at all."""

from __future__ import annotations

import threading

import pytest

from store import Store
from store.errors import TransactionTooLarge

SMALL = 256 << 10  # 256 KiB: a few experiences fill it


def test_map_grows_past_the_initial_size(store_path, make_exp):
    with Store.open(store_path, map_size=SMALL) as s:
        start = s.stats()["map_size"]
        for i in range(300):
            s.add_experience(make_exp(i, files={"kernel.cpp": f"// {i}\n" + "x" * 20_000 + str(i)}))
        stats = s.stats()
        assert stats["experiences"] == 300
        assert stats["map_size"] > start and stats["used_bytes"] > SMALL
    # reopening with the small default still reads everything
    with Store.open(store_path, map_size=SMALL) as s:
        assert s.count() == 300
        assert s.get_many([e.id for e in s.query(limit=5)])[0].files["kernel.cpp"].startswith("// ")


def test_one_large_write_grows_the_map_and_is_retried_whole(store_path, make_exp):
    with Store.open(store_path, map_size=SMALL) as s:
        exps = [make_exp(i, files={"kernel.cpp": f"{i}" + "k" * 50_000}) for i in range(60)]
        results = s.add_experiences(exps)  # ~3 MB in one transaction, twelve times the map
        assert all(created for _, created in results)
        assert s.count() == 60


def test_grouped_transaction_lands_whole_or_not_at_all(store, make_exp):
    with store.transaction():
        first, _ = store.add_experience(make_exp(1))
        store.add_experience(make_exp(2))
        assert store.count() == 2  # the group sees its own writes
    assert store.count() == 2
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add_experience(make_exp(3))
            store.update_values([first], stage="draft", reward=1.0, alpha=0.5)
            raise RuntimeError("engine step failed")
    assert store.count() == 2
    assert all(e.n1 == 0 for e in store.query())


def test_grouped_transaction_that_outgrows_the_map_rolls_back_and_can_be_rerun(store_path, make_exp):
    with Store.open(store_path, map_size=SMALL) as s:
        def step():
            with s.transaction():
                for i in range(40):
                    s.add_experience(make_exp(i, files={"kernel.cpp": f"{i}" + "q" * 40_000}))

        for _ in range(6):
            try:
                step()
                break
            except TransactionTooLarge as exc:
                assert "run it again" in str(exc)
                assert s.count() == 0  # nothing of the failed group landed
        assert s.count() == 40


def test_threads_writing_and_reading_while_the_map_grows(store_path, make_exp):
    errors: list[BaseException] = []
    with Store.open(store_path, map_size=SMALL) as s:
        def writer(base: int) -> None:
            try:
                for i in range(base, base + 60):
                    exp_id, _ = s.add_experience(make_exp(i, files={"kernel.cpp": f"{i}" + "w" * 8000}))
                    s.update_values([exp_id], stage="refine", reward=0.5, alpha=0.3)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def reader() -> None:
            try:
                for _ in range(200):
                    for exp in s.query(limit=20):
                        assert exp.files["kernel.cpp"].endswith("w" * 10)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(b,)) for b in (0, 1000, 2000)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert s.count() == 180
        assert all(e.n2 == 1 for e in s.query())
        assert s.stats()["map_size"] > SMALL
