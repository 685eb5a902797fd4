"""One commit path for the model's attempts and a person's edits: the same reward, value updates and
records (a real LMDB store, a canned verifier: no builds, milliseconds)."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

import pytest

from verifier import Outcome


class CannedVerifier:
    """Answers from a marker in model.py: ``GAIN=1.8 VS=faster`` (feasible) or ``BROKEN``."""

    backend = SimpleNamespace(name="cpu")

    def __init__(self):
        self.bests: list[dict | None] = []

    def verify(self, spec, files, on_gate=None, *, best=None):
        self.bests.append(best)
        out = Outcome.start(spec.id, "cpu")
        text = files["model.py"]
        if "BROKEN" in text:
            return out.fail("correctness", "values differ").finish()
        for g in out.gates:
            out.pass_gate(g.name)
        out.latency_ms, out.reference_ms, out.speedup, out.speedup_ci = 1.0, 2.0, 2.0, [1.9, 2.1]
        m = re.search(r"GAIN=([0-9.]+) VS=(\w+)", text)
        if m and best is not None:
            out.gain, out.vs_best, out.gain_ci = float(m.group(1)), m.group(2), [float(m.group(1)) * 0.95, float(m.group(1)) * 1.05]
            out.best_ms = out.gain
        return out.finish()

    def tolerance_for(self, spec):   # the verifier protocol's: a real verifier's with default settings
        from verifier import VerifyConfig
        from verifier.backends import get_backend
        from verifier.tolerance import tolerance_for

        return tolerance_for(spec, VerifyConfig(), get_backend("cpu"))


@pytest.fixture
def engine(tmp_path, suite):
    from core.config import Config
    from core.engine import Engine
    from store import Store

    store = Store.open(tmp_path / "memory.lmdb")
    eng = Engine(Config(), store, CannedVerifier(), llm=None)
    yield eng
    store.close()


def files(marker: str) -> dict[str, str]:
    return {"model.py": f"MARK = {marker!r}\n", "kernel.cpp": f"const char* kMark = \"{marker}\";\n"}


def test_a_hand_edit_is_committed_like_an_attempt(engine, suite):
    task = suite.get("relu")
    store = engine.store

    async def go():
        first, _ = await engine.record_human(task, files("first GAIN=1 VS=same"), None)
        faster, out = await engine.record_human(task, files("edit GAIN=1.8 VS=faster"), first.id)
        same, _ = await engine.record_human(task, files("again GAIN=1.01 VS=same"), faster.id)
        slower, _ = await engine.record_human(task, files("worse GAIN=0.5 VS=slower"), faster.id)
        broken, _ = await engine.record_human(task, files("BROKEN"), faster.id)
        return first, faster, same, slower, broken

    first, faster, same, slower, broken = asyncio.run(go())
    # the first feasible edit is a draft and the best; later ones refine, timed beside the best
    assert first.stage == "draft" and first.reward == 1.0
    assert engine.verifier.bests[0] is None and engine.verifier.bests[1] == first.files
    assert faster.stage == "refine" and faster.kind == "human_edit" and faster.source == "human"
    assert faster.parent_id == first.id and faster.extra["best"] == first.id
    # the same rewards as the model's attempts: sign of the paired gain, zero in the noise, -1 broken
    assert faster.reward > 0 and same.reward == 0.0 and slower.reward < 0 and broken.reward == -1.0
    # the same value updates: the parent's Q2 moved, the variant's own Q2 starts at its reward
    assert store.get(first.id).n2 == 1 and store.get(first.id).q2 > 0
    assert store.get(faster.id).q_history[0]["q"] == pytest.approx(faster.reward)      # its own reward first
    assert store.get(faster.id).n2 == 4                     # then its three children's
    assert store.get(slower.id).q2 == pytest.approx(slower.reward)
    # the same records: a significantly faster edit is the new best; same speed or slower is not
    state = store.get_task("relu")
    assert state.best_id == faster.id and set(state.start_points) == {first.id, faster.id, same.id, slower.id}
    assert state.iterations_used == 0                      # a person's edit spends no budget
