"""The Outcome in one shape from the verifier to the store to the screen: the store keeps the verifier's
``Outcome.to_dict()`` as plain data, core reads it back as the same Outcome (records of earlier
versions too), and the engine's AttemptRecorded event carries that Outcome, never copies of some of
its fields. Real LMDB stores; the loop with core.scripted's model and canned verifier (no builds)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import candidates as C
from openai_server import answer_with

SUITE = Path(__file__).parents[1] / "fixtures" / "suite"


def _full_outcome():
    """An outcome with every field away from its default, so that a field lost on the way shows."""
    from verifier.outcome import Outcome

    out = Outcome.start("relu", "cpu")
    for g in out.gates:
        out.pass_gate(g.name, f"{g.name} ok", 0.25, note=g.name)
    values = {"max_abs_error": 1e-6, "max_rel_error": 2e-6, "latency_ms": 1.5, "latency_spread_ms": 0.1,
              "reference_ms": 3.0, "speedup": 2.0, "speedup_ci": [1.9, 2.1], "vs_reference": "faster",
              "best_ms": 1.8, "gain": 1.2, "gain_ci": [1.1, 1.3], "vs_best": "faster", "best_hash": "b" * 8,
              "timing_rounds": 7, "flags": ["implausible?"], "candidate_hash": "c" * 8, "build_cached": True,
              "size_overrides": {"N": 64}, "threads": 2, "roofline": {"fraction": 0.4, "bound": "memory"},
              "seconds": 2.5, "created_at": 1.0e9, "from_cache": True, "node": {"id": "n1"},
              "cases": [{"case": 0, "correct": True, "latency_ms": 1.5, "speedup": 2.0}]}
    for name, value in values.items():
        setattr(out, name, value)
    out.finish()
    plain = {f.name for f in dataclasses.fields(out)} - {"listener", "verified", "gates", "failed_gate"}   # feasible
    left = [n for n in plain if getattr(out, n) == getattr(Outcome(), n)]
    assert not left, f"give these fields a value here too: {left}"
    return out


def test_what_core_reads_of_a_stored_attempt_is_every_field_the_verifier_wrote(tmp_path):
    from core.attempts import outcome_of
    from store import Experience, Store

    out = _full_outcome()
    with Store.open(tmp_path / "memory.lmdb") as store:
        exp_id, _ = store.add_experience(Experience(task_id="relu", kind="draft_trace", backend="cpu", stage="draft",
                                                    files={"kernel.cpp": "int x;"}, outcome=out.to_dict()))
    with Store.open(tmp_path / "memory.lmdb", readonly=True) as store:
        read = outcome_of(store.get(exp_id))
    for f in dataclasses.fields(out):
        if f.name != "listener":
            assert getattr(read, f.name) == getattr(out, f.name), f.name
    assert read.verified and read.gate("build").details == {"note": "build"}
    assert read.not_judged == out.not_judged and not read.timed     # flagged: no verdict, as written (#48)


def test_records_of_an_earlier_version_read_back_and_nothing_reads_as_unverified():
    from core.attempts import Outcome

    # as the previous version stored it: fewer fields, a gate without details, a key this version dropped
    older = {"task": "relu", "backend": "cpu", "feasible": False, "failed_gate": "build", "message": "build: error",
             "latency_ms": None, "retired_field": 3,
             "gates": [{"name": "format", "status": "passed", "message": "", "seconds": 0.1},
                       {"name": "build", "status": "failed", "message": "g++: error", "details": {"log": "..."}}]}
    r = Outcome.from_dict(older)
    assert r.verified and not r.feasible and r.failed_gate == "build" and not r.timed
    assert [(g.name, g.status, g.message) for g in r.gates] == [("format", "passed", ""), ("build", "failed", "g++: error")]
    assert r.gate_or_none("build").details == {"log": "..."} and r.gate_or_none("performance") is None
    assert r.timing_rounds == 0 and r.vs_best == ""                       # fields it lacks take their defaults
    assert not Outcome.from_dict(None).verified and not Outcome.from_dict({}).verified
    assert Outcome.from_dict({"feasible": True, "verified": False}).verified   # only what was stored says
    assert not Outcome.from_dict({"feasible": True}).timed                    # feasible but never timed
    assert "verified" not in _full_outcome().to_dict() and "listener" not in _full_outcome().to_dict()


def test_the_event_of_an_attempt_carries_the_outcome_the_store_keeps(tmp_path):
    from core import events as ev
    from core.attempts import outcome_of
    from core.config import Config
    from core.engine import Engine
    from core.scripted import Canned, CannedVerifier, ScriptedModel
    from core.tasks import load_suite
    from store import Store

    def kernel(said, tag):
        files = C.elementwise(C.RELU)
        return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kTag{tag} = {tag};\n"
                                                              f"static const char* kCanned = \"{said}\";\n"}

    def judge(task_id, files):
        said = re.search(r'kCanned = "([^"]+)"', files["kernel.cpp"]).group(1)
        return Canned(failed_gate="correctness", message="values differ") if said == "wrong" \
            else Canned(latency_ms=float(said))

    answers = [kernel(10.0, 1), kernel("wrong", 2), kernel(5.0, 3)]
    seen: list = []
    bus = ev.EventBus()
    bus.subscribe(seen.append)
    config = Config()
    config.engine.final_window = False
    with Store.open(tmp_path / "memory.lmdb") as store:
        engine = Engine(config, store, CannedVerifier(judge),
                        ScriptedModel(lambda request, n: answer_with(answers[n], note="Change: canned")), bus)
        asyncio.run(engine.run([load_suite(SUITE).get("relu")], iterations=3))
        recorded = [e for e in seen if isinstance(e, ev.AttemptRecorded)]
        assert [e.outcome.feasible for e in recorded] == [True, False, True]
        for e in recorded:
            assert e.outcome.to_dict() == store.get(e.experience_id).outcome
            assert e.outcome == outcome_of(store.get(e.experience_id))
        assert recorded[1].outcome.failed_gate == "correctness" and recorded[2].outcome.vs_best == "faster"
        assert "outcome" in recorded[0].to_dict() and recorded[0].to_dict()["outcome"]["latency_ms"] == 10.0
