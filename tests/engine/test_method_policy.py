"""A method plugged in through core.methods' interface gets its own policy applied by the engine's one
commit, with no change to the engine: what its attempts are stored as, which values move, whether the
task's shared state (start points, best) keeps them. A scripted model and a canned verifier on a real
LMDB store (core.scripted): milliseconds, no builds."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import candidates as C
from openai_server import answer_with

SUITE = Path(__file__).parents[1] / "fixtures" / "suite"


def kernel(latency_ms: float, tag: int) -> dict[str, str]:
    files = C.elementwise(C.RELU)
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kTag{tag} = {tag};\n"
                                                          f"static const char* kCanned = \"{latency_ms}\";\n"}


def judge(task_id, files):
    from core.scripted import Canned

    return Canned(latency_ms=float(re.search(r'kCanned = "([^"]+)"', files["kernel.cpp"]).group(1)))


class Shown:
    """A method the engine has never heard of: it always drafts, shows the backend's first API items as
    its memory context, times each draft beside the run's best, and carries whatever teaching the test
    gives it."""

    def __init__(self, teaching):
        self.name = "shown"
        self.teaching = teaching

    def prepare(self, engine, run, task, iteration, rng):
        from core import prompts
        from core.methods import Attempt
        from core.seeds import api_items

        best_id = run.progress[task.id].best_id
        attempt = Attempt(task, iteration, "draft", best=engine.store.get(best_id) if best_id else None)
        attempt.context = api_items(engine.store, engine.backend)[:2]
        attempt.messages = prompts.draft_prompt(task, engine.backend, [], [], attempt.context, facts=engine.facts)
        return attempt


def run_with(tmp_path, monkeypatch, teaching):
    from core import events as ev
    from core import methods
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel
    from core.tasks import load_suite
    from store import Store

    monkeypatch.setitem(methods.METHODS, "shown", Shown(teaching))
    answers = [kernel(10.0, 1), kernel(5.0, 2)]
    store = Store.open(tmp_path / "memory.lmdb")
    seen: list = []
    bus = ev.EventBus()
    bus.subscribe(seen.append)
    config = Config()
    config.engine.final_window = False
    # the answers cite every item shown (an uncited item earns nothing, issue #36)
    engine = Engine(config, store, CannedVerifier(judge), ScriptedModel(lambda request, n: answer_with(
        answers[n], note="Change: canned", cite=re.findall(r"\[mem:(\w+)\]", request.messages[-1][1]))), bus)
    record = asyncio.run(engine.run([load_suite(SUITE).get("relu")], method="shown", iterations=2))
    return record, store, seen


@pytest.fixture
def opened():
    stores = []
    yield stores
    for s in stores:
        s.close()


def test_a_plugged_method_that_credits_but_keeps_its_best_to_itself(tmp_path, monkeypatch, opened):
    from core.methods import BASELINE_KIND, Teaching

    record, store, seen = run_with(tmp_path, monkeypatch, Teaching(stored_as=BASELINE_KIND, credits=True, shared=False))
    opened.append(store)
    first, second = store.get_many(record.progress["relu"].attempts)
    assert first.kind == second.kind == BASELINE_KIND          # stored as its policy says, never retrieved
    shown = first.extra["context"]
    assert len(shown) == 2
    assert all(store.get(i).n1 == 2 and store.get(i).q1 > 0 for i in shown)   # both drafts credited Q1 (cited)
    assert [type(e).__name__ for e in seen].count("ValuesUpdated") == 2
    state = store.get_task("relu")
    assert state is None or (not state.start_points and state.best_id is None)   # the task's state is left
    assert record.progress["relu"].best_id == second.id       # its own best: the faster second draft


def test_a_plugged_method_that_keeps_start_points_but_credits_nothing(tmp_path, monkeypatch, opened):
    from core.methods import Teaching

    record, store, seen = run_with(tmp_path, monkeypatch, Teaching(credits=False, shared=True))
    opened.append(store)
    first, second = store.get_many(record.progress["relu"].attempts)
    assert first.kind == second.kind == "draft_trace"
    assert all(store.get(i).n1 == 0 for i in first.extra["context"])    # no value moved
    assert "ValuesUpdated" not in [type(e).__name__ for e in seen]
    state = store.get_task("relu")
    assert state.start_points == [first.id, second.id] and state.best_id == second.id
    assert state.iterations_used == 2
