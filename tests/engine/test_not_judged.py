"""Only the kernel's own failures are the kernel's (#37, finding 1): a verification the tool failed (here: the
sandbox worker that runs the candidate's side of the timing window, killed in the middle of the window) is
verified again; when it fails again it is recorded as not judged, with no reward, no value moved, never a
parent, a start point or the verdict of a later save of the same code. Real builds, real sandbox, real kill."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import candidates as C

pytestmark = pytest.mark.slow


@pytest.fixture
def engine_parts(tmp_path, fast_config, suite):
    from core import events as ev
    from core.config import Config
    from core.engine import Engine
    from store import Store
    from verifier.harness.verify import Verifier

    verifier = Verifier("cpu", fast_config, cache_dir=tmp_path / "cache")
    store = Store.open(tmp_path / "memory.lmdb")
    seen: list = []
    bus = ev.EventBus()
    bus.subscribe(seen.append)
    config = Config()
    config.engine.final_window = False
    engine = Engine(config, store, verifier, None, bus)
    yield engine, verifier, store, seen, suite.get("relu")
    store.close()
    verifier.close()


def kill_mid_window(verifier, times: int) -> list[int]:
    """Kill the candidate's fork server alone (SIGKILL, its jobs left to die with it: #35) at its first timed
    call, in ``times`` windows."""
    killed: list[int] = []

    def observe(event, what):
        if event == "timed" and what[0] == "candidate" and len(killed) < times:
            pid = verifier.server.host_pid()
            if pid is not None and pid not in killed:
                killed.append(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    verifier.window_observer = observe
    return killed


def test_a_timing_process_lost_mid_window_is_verified_again_and_judged(engine_parts):
    engine, verifier, store, seen, relu = engine_parts
    killed = kill_mid_window(verifier, times=1)
    exp, out = asyncio.run(engine.record_human(relu, C.elementwise(C.RELU), None))
    assert len(killed) == 1
    assert out.feasible and not out.not_judged, out.message
    assert exp.kind == "human_edit" and exp.reward == 1.0
    problems = [e.message for e in seen if type(e).__name__ == "EngineProblem"]
    assert any("verifying again" in p and "lost" in p for p in problems), problems


def test_a_tool_failure_twice_is_recorded_as_not_judged_and_teaches_nothing(engine_parts):
    from core.attempts import attempt_lines

    engine, verifier, store, seen, relu = engine_parts
    good, _ = asyncio.run(engine.record_human(relu, C.elementwise(C.RELU), None))   # a working version first
    state = store.get_task(relu.id)
    q2, n2 = store.get(good.id).q2, store.get(good.id).n2
    variant = C.elementwise(C.RELU.replace("schedule(static)", "schedule(static, 4096)"))
    killed = kill_mid_window(verifier, times=2)
    exp, out = asyncio.run(engine.record_human(relu, variant, good.id))
    assert len(killed) == 2
    assert out.not_judged and "lost" in out.not_judged, out.message
    assert exp.kind == "not_judged" and exp.reward is None and exp.parent_id == good.id
    assert "not judged" in exp.title
    recorded = [e for e in seen if type(e).__name__ == "AttemptRecorded"][-1]
    assert recorded.not_judged and not recorded.new_best
    after = store.get(good.id)
    assert (after.q2, after.n2) == (q2, n2)                       # no value moved
    assert store.get_task(relu.id).start_points == state.start_points and store.get_task(relu.id).best_id == good.id
    [line] = [x for x in attempt_lines(store, relu.id) if x.id == exp.id]
    assert line.not_judged and line.reward is None
    # the same code saved again is verified (a not-judged record is no verdict to repeat), and now judged
    verifier.window_observer = None
    again, out = asyncio.run(engine.record_human(relu, variant, good.id))
    assert out.feasible and again.id != exp.id and again.kind == "human_edit", out.message
