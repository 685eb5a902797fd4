"""The run's final window measures now (issue #36, finding 5): it timed the best beside the first feasible
kernel with the very files of the verification that made the best, and the verifier handed back that
verification's recorded verdict (selu and 7_sum repeated their iteration-2 figures, a wide [1.29, 1.77]
included); ``report --retime`` did the same. The canned verifier keeps verdicts as the real one does
(``fresh`` measures again), and the load of each window differs, so a recorded verdict shows."""

from __future__ import annotations

import asyncio

from canned_runs import SUITE, judge, kernel

from openai_server import answer_with


def run_with_final_window(tmp_path, answers, load):
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel
    from core.tasks import load_suite
    from store import Store

    queue = list(answers)
    config = Config()
    config.engine.epsilon = 0.0
    config.engine.final_window = True
    verifier = CannedVerifier(judge, load=list(load), keeps_verdicts=True)
    store = Store.open(tmp_path / "memory.lmdb")
    engine = Engine(config, store, verifier,
                    ScriptedModel(lambda request, n: answer_with(queue.pop(0), note=f"Change: idea {n}")))
    record = asyncio.run(engine.run([load_suite(SUITE).get("relu")], method="evokernel", iterations=len(answers)))
    return record, store, verifier, engine


def test_the_final_window_times_best_first_and_pytorch_now(tmp_path):
    # the first (10 ms) in a quiet window; the best (8 ms) beside it in a window 1.2x loaded; the final window
    # runs at 1.5x load: its times are that window's, never the ones the best's verification recorded
    record, store, verifier, engine = run_with_final_window(
        tmp_path, [kernel("10.0", 1), kernel("8.0", 2)], load=[1.0, 1.2, 1.5, 0.9])
    final = record.progress["relu"].extra["final"]
    assert verifier.calls[-1] == ("relu", True) and verifier.fresh[-1]
    assert final["latency_ms"] == 8.0 * 1.5 and final["first_ms"] == 10.0 * 1.5
    # report --retime: the same window again, now
    asyncio.run(engine.final_windows(record, [t for t in engine_tasks()], again=True))
    final = record.progress["relu"].extra["final"]
    assert final["latency_ms"] == 8.0 * 0.9 and verifier.fresh[-1]
    store.close()


def test_a_best_that_is_the_first_is_timed_beside_pytorch_in_the_final_window(tmp_path):
    record, store, verifier, _ = run_with_final_window(
        tmp_path, [kernel("10.0", 1), kernel("10.1", 2)], load=[1.0, 1.0, 0.5])
    final = record.progress["relu"].extra["final"]
    assert final["best"] == final["first"] and final["latency_ms"] == 10.0 * 0.5
    assert final["gain"] == 1.0 and final["speedup"] == 10.0 / (10.0 * 0.5)
    store.close()


def engine_tasks():
    from core.tasks import load_suite

    return [load_suite(SUITE).get("relu")]
