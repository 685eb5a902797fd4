"""The engine's loop with the in-package scripted model and canned verifier (core.scripted): what the
loop decides (stages, start points, rewards, values, the best, each method's strategy) in
milliseconds, on a real LMDB store. The real model client, verifier and end-to-end runs are tested
elsewhere (test_engine_runs.py, test_speed_signal.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import candidates as C
from openai_server import answer_with

SUITE = Path(__file__).parents[1] / "fixtures" / "suite"


def kernel(latency_ms: float | None, tag: int, fail: str = "") -> dict[str, str]:
    """The relu kernel with a distinct constant (different code) and its canned verdict in the source."""
    files = C.elementwise(C.RELU)
    verdict = f"static const char* kCanned = \"{fail or latency_ms}\";"
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kTag{tag} = {tag};\n{verdict}\n"}


def judge(task_id: str, files: dict[str, str]):
    from core.scripted import Canned

    said = re.search(r'kCanned = "([^"]+)"', files.get("kernel.cpp", "")).group(1)
    if said == "lost":     # the verifier lost its nodes: no verdict on the kernel
        return Canned(failed_gate="build", message="verification lost with 3 nodes", internal=True)
    if said.startswith("noisy:"):   # timed in a window disturbed by other load
        return Canned(latency_ms=float(said.split(":")[1]), noisy=True)
    if said.startswith("flagged:"):   # a verdict the harness could not fully check
        return Canned(latency_ms=float(said.split(":")[1]), flags=("the harness could not read the candidate's "
                                                                   "memory: review before trusting",))
    try:
        return Canned(latency_ms=float(said))
    except ValueError:
        return Canned(failed_gate=said, message=f"canned {said} failure")


@pytest.fixture
def loop(tmp_path):
    """run(tasks, answers, method) -> (record, store, verifier, events); answers: task -> list of files."""
    from core import events as ev
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel
    from core.tasks import load_suite
    from store import Store

    suite = load_suite(SUITE)
    store = Store.open(tmp_path / "memory.lmdb")
    verifier = CannedVerifier(judge)
    seen: list = []

    def run(ids, answers, method="evokernel", iterations=4):
        queues = {t: list(a) for t, a in answers.items()}

        def script(request, n):
            task = request.sample.split(":")[-2]        # "<run>:<task>:<iteration>"
            return answer_with(queues[task].pop(0), note="Change: canned")

        config = Config()
        config.engine.epsilon = 0.0
        bus = ev.EventBus()
        bus.subscribe(seen.append)
        engine = Engine(config, store, verifier, ScriptedModel(script), bus)
        record = asyncio.run(engine.run([suite.get(t) for t in ids], method=method, iterations=iterations))
        return record, store, verifier, seen

    yield run
    store.close()


def _attempts(store, record, task):
    return store.get_many(record.progress[task].attempts)


def test_rewards_values_and_the_best_follow_true_speeds(loop):
    answers = {"relu": [kernel(10.0, 1), kernel(12.0, 2), kernel(5.0, 3), kernel(5.05, 4)]}
    record, store, verifier, events = loop(["relu"], answers)
    draft, slower, faster, same = _attempts(store, record, "relu")
    assert [e.stage for e in (draft, slower, faster, same)] == ["draft", "refine", "refine", "refine"]
    assert draft.reward == 1.0
    assert -1.0 < slower.reward < 0.0 < faster.reward and same.reward == 0.0   # same speed: no change
    state = store.get_task("relu")
    assert state.best_id == faster.id and record.progress["relu"].best_id == faster.id
    # every refine attempt was timed beside the task's best (the draft, then the 5 ms kernel); at the end
    # the best was timed beside the first feasible kernel once more (the report's final window)
    assert verifier.calls == [("relu", False), ("relu", True), ("relu", True), ("relu", True), ("relu", True)]
    assert slower.parent_id == faster.parent_id == draft.id and same.parent_id == faster.id
    # Q2 of the start points ordered as their true speeds: the fast one above the draft above the slow one
    q2 = {e.id: store.get(e.id).q2 for e in (draft, slower, faster)}
    assert q2[faster.id] > q2[draft.id] > q2[slower.id]
    recorded = [e for e in events if type(e).__name__ == "AttemptRecorded"]
    assert [e.new_best for e in recorded] == [True, False, True, False]


def test_a_failing_answer_is_recorded_and_the_task_keeps_its_stage(loop):
    answers = {"relu": [kernel(None, 1, fail="correctness"), kernel(8.0, 2), kernel(None, 3, fail="build")]}
    record, store, _, _ = loop(["relu"], answers, iterations=3)
    failed, ok, broken = _attempts(store, record, "relu")
    assert failed.stage == "draft" and failed.reward == -1.0 and failed.outcome["failed_gate"] == "correctness"
    assert ok.stage == "draft" and ok.reward == 1.0
    assert broken.stage == "refine" and broken.reward == -1.0 and broken.parent_id == ok.id
    assert record.progress["relu"].feasible and record.progress["relu"].best_id == ok.id


def test_a_verification_the_verifier_lost_teaches_nothing(loop):
    answers = {"relu": [kernel(10.0, 1), kernel(None, 2, fail="lost"), kernel(None, 3, fail="correctness")]}
    record, store, verifier, events = loop(["relu"], answers, iterations=3)
    draft, lost, wrong = _attempts(store, record, "relu")
    # verified again (the tool's failure), then recorded as not judged: no reward, not the kernel's
    assert lost.outcome["failed_gate"] == "build" and lost.reward is None and lost.kind == "not_judged"
    # the draft, the lost one twice, the wrong one, and the final window measuring the best afresh
    assert verifier.calls == [("relu", False), ("relu", True), ("relu", True), ("relu", True), ("relu", False)]
    assert "not judged" in lost.title
    assert wrong.reward == -1.0
    # the start point's Q2 moved once (the wrong kernel's -1), not for the lost verification
    updates = [e for e in events if type(e).__name__ == "ValuesUpdated" and e.stage == "refine"]
    assert len(updates) == 1 and updates[0].reward == -1.0


@pytest.mark.parametrize("method", ["passk", "refinement"])
def test_baselines_run_through_their_own_strategy_and_teach_nothing(loop, method):
    answers = {"relu": [kernel(10.0, 1), kernel(6.0, 2), kernel(7.0, 3)]}
    record, store, verifier, _ = loop(["relu"], answers, method=method, iterations=3)
    attempts = _attempts(store, record, "relu")
    assert [e.kind for e in attempts] == ["baseline_trace"] * 3
    assert all(e.q1 == 0.0 and e.q2 == 0.0 for e in attempts)          # no value learned from a baseline
    assert store.get_task("relu") is None or not store.get_task("relu").start_points   # P(x) untouched
    assert record.progress["relu"].best_id == attempts[1].id
    stages = [e.stage for e in attempts]
    assert stages == (["draft"] * 3 if method == "passk" else ["draft", "refine", "refine"])


def test_a_noisy_window_earns_nothing_and_never_makes_a_new_best(loop):
    """1.25x faster than the best as far as a disturbed window can tell ([0.78, 2.0]): no verdict, reward 0,
    the best stays; a clean 2x afterwards is the new best."""
    answers = {"relu": [kernel(10.0, 1), kernel("noisy:8.0", 2), kernel(5.0, 3)]}
    record, store, _verifier, events = loop(["relu"], answers, iterations=3)
    from core.attempts import outcome_of

    draft, noisy, faster = _attempts(store, record, "relu")
    assert outcome_of(noisy).vs_best == "noisy" and noisy.reward == 0.0 and faster.reward > 0.0
    recorded = [e for e in events if type(e).__name__ == "AttemptRecorded"]
    assert [e.new_best for e in recorded] == [True, False, True] and recorded[1].outcome.vs_best == "noisy"
    assert faster.parent_id == draft.id                   # the noisy one never became a start point above it


@pytest.mark.parametrize("said, fast", [("8.0", 1.0), ("noisy:8.0", 0.0)])
def test_fast_1_never_counts_a_speedup_a_noisy_window_gave(loop, said, fast):
    from core.report import run_metrics

    record, store, _verifier, _events = loop(["relu"], {"relu": [kernel(said, 1)]}, iterations=1)
    metrics = run_metrics(store, record)
    assert metrics.per_task["relu"]["speedup"] == pytest.approx(1.25) and metrics.fast_1 == fast


def test_a_flagged_verdict_is_no_verdict(loop):
    """#48: a review flag that nothing downstream read let a forged "2.04x faster" through. A verdict the harness could
    not fully check is not judged: verified again, then recorded with no reward, never the best, a parent or a start
    point, nor counted by the report; the prompts say that such a verdict counts for nothing."""
    from core.report import run_metrics

    answers = {"relu": [kernel("flagged:2.0", 1), kernel(10.0, 2), kernel(8.0, 3)]}
    record, store, verifier, events = loop(["relu"], answers, iterations=3)
    flagged, draft, refined = _attempts(store, record, "relu")
    assert flagged.kind == "not_judged" and flagged.reward is None and "not judged" in flagged.title
    assert verifier.calls[:2] == [("relu", False), ("relu", False)]      # verified twice: flagged both times
    assert draft.stage == "draft" and draft.reward == 1.0                # the task was still drafting
    assert store.get_task("relu").best_id == refined.id and refined.parent_id == draft.id
    assert flagged.id not in store.get_task("relu").start_points
    recorded = [e for e in events if type(e).__name__ == "AttemptRecorded"]
    assert recorded[0].not_judged and not recorded[0].new_best
    assert "could not fully check" in recorded[0].not_judged
    # what a prompt says of it, and the legend every prompt that compares kernels carries
    from core.attempts import outcome_of
    from core.prompts import verdict, windows

    assert "not judged: the harness could not fully check" in verdict(outcome_of(flagged))
    assert "could not fully check" in windows("x") and "counts for nothing" in windows("x")
    metrics = run_metrics(store, record)
    assert metrics.per_task["relu"]["feasible_at"] == 1                  # the flagged one was not the first feasible
