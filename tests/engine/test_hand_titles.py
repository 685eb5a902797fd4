"""Issue 27, item 6 (titles): a hand edit's title says what changed (the first changed line of its
diff against its parent), not only "relu hand edit: feasible" for every save."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("commit_path", Path(__file__).with_name("test_commit_path.py"))
commit_path = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(commit_path)
files = commit_path.files


def test_a_hand_edits_title_names_its_change(tmp_path, suite):
    from core.config import Config
    from core.engine import Engine
    from store import Store

    store = Store.open(tmp_path / "memory.lmdb")
    engine = Engine(Config(), store, commit_path.CannedVerifier(), llm=None)
    task = suite.get("relu")

    async def go():
        first, _ = await engine.record_human(task, files("first GAIN=1 VS=same"), None)
        before = files("first GAIN=1 VS=same")
        edited = {**before, "kernel.cpp": before["kernel.cpp"] + "#pragma omp simd\n"}
        second, _ = await engine.record_human(task, edited, first.id)
        return first, second

    try:
        first, second = asyncio.run(go())
    finally:
        store.close()
    assert first.title == "relu hand edit: feasible"     # a root: nothing to compare with
    assert second.title == "relu hand edit: feasible · kernel.cpp: + #pragma omp simd", second.title


def test_a_models_attempt_carries_no_second_number(tmp_path, suite):
    """The workbench numbers a task's attempts #n (the tree, the memory browser, `memory list`); a title
    that also said "draft #4" (the run's iteration) gave the same attempt two numbers."""
    from core.config import Config
    from core.engine import Engine
    from core.methods import Attempt
    from store import Store

    store = Store.open(tmp_path / "memory.lmdb")
    verifier = commit_path.CannedVerifier()
    engine = Engine(Config(), store, verifier, llm=None)
    task = suite.get("relu")
    attempt = Attempt(task=task, iteration=3, stage="draft", files=files("x GAIN=1 VS=same"),
                      change="omp simd on the outer loop")
    attempt.outcome = verifier.verify(task.spec(), attempt.files)
    try:
        exp, _, _ = engine._commit(None, attempt)
    finally:
        store.close()
    assert exp.title == "relu draft: feasible · omp simd on the outer loop", exp.title


def test_each_recorded_attempt_says_its_number_in_the_tree(tmp_path, suite):
    """The log and the task status name an attempt by the number the tree gives it; the event carries
    it (a repeat: the number of the attempt it repeats)."""
    from core import events as ev
    from core.attempts import attempt_lines
    from core.config import Config
    from core.engine import Engine
    from store import Store

    store = Store.open(tmp_path / "memory.lmdb")
    bus = ev.EventBus()
    seen: list = []
    bus.subscribe(lambda e: seen.append(e) if isinstance(e, ev.AttemptRecorded) else None)
    engine = Engine(Config(), store, commit_path.CannedVerifier(), llm=None, bus=bus)
    task = suite.get("relu")

    async def go():
        first, _ = await engine.record_human(task, files("first GAIN=1 VS=same"), None)
        await engine.record_human(task, files("second GAIN=1 VS=same"), first.id)
        await engine.record_human(task, files("first GAIN=1 VS=same"), first.id)    # the first again

    try:
        asyncio.run(go())
        tree = {line.id: line.index for line in attempt_lines(store, "relu")}
    finally:
        store.close()
    assert [e.number for e in seen] == [1, 2, 1]
    assert all(tree[e.experience_id] == e.number for e in seen)
