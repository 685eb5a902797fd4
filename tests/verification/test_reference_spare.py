"""The reference made ahead (verifier.harness.reference_cache: ``Spares``): after a verification of a
task its next reference is made in the background, while the engine waits on the model, so a fresh
candidate does not wait for the reference's run. Every verification still checks against seeds no other
verification saw (issue #24: nothing one candidate learnt can be replayed by the next)."""

from __future__ import annotations

import pytest

import candidates as C

pytestmark = pytest.mark.slow


@pytest.fixture()
def spied(tmp_path, fast_config, monkeypatch):
    """A verifier that records the seeds of the reference each verification's correctness gate checks."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config, cache_dir=tmp_path / "cache")
    seen: list[list[int]] = []
    correctness = v._correctness

    def spy(task, files, build, ref, out):
        seen.append([t.seed for t in ref.trials])
        return correctness(task, files, build, ref, out)

    monkeypatch.setattr(v, "_correctness", spy)
    yield v, seen
    v.close()


def test_the_next_reference_is_made_ahead_and_handed_out_once(spied, suite):
    v, seen = spied
    spec = suite.get("relu").spec()
    first = v.verify(spec, C.elementwise(C.RELU + "\n// first\n"), fresh=True)
    assert first.feasible, first.message
    spare = v.spares.get(spec.key)
    assert spare is not None                       # made after the window, for the next verification
    made = spare.result(timeout=300)
    second = v.verify(spec, C.elementwise(C.RELU + "\n// second\n"), fresh=True)
    assert second.feasible, second.message
    assert seen[1] == [t.seed for t in made.trials]           # the second checked against the spare
    assert not set(seen[0]) & set(seen[1])                     # with seeds the first never saw
    assert v.spares.get(spec.key) is not spare                # handed out once; the next one is new
    third = v.verify(spec, C.elementwise(C.RELU + "\n// third\n"), fresh=True)
    assert third.feasible, third.message
    assert len({s for seeds in seen for s in seeds}) == sum(len(s) for s in seen)   # no seed twice


def test_a_reference_no_job_used_is_kept_for_the_next_verification(spied, suite):
    """A build that fails never starts a job: the reference made for it is the next one's."""
    v, seen = spied
    spec = suite.get("relu").spec()
    broken = v.verify(spec, C.elementwise(C.COMPILE_ERROR), fresh=True)
    assert broken.failed_gate == "build", broken.message
    kept = v.spares.get(spec.key)
    assert kept is not None
    made = kept.result(timeout=300)
    out = v.verify(spec, C.elementwise(C.RELU + "\n// after\n"), fresh=True)
    assert out.feasible, out.message
    assert seen == [[t.seed for t in made.trials]]


def test_no_reference_is_made_ahead_past_the_memory_budget(spied, suite, monkeypatch):
    """Spares hold their outputs in memory: past ``MAX_SPARE_BYTES`` in all, none is made."""
    import verifier.harness.reference_cache as reference

    v, seen = spied
    monkeypatch.setattr(reference, "MAX_SPARE_BYTES", 1)
    spec = suite.get("relu").spec()
    out = v.verify(spec, C.elementwise(C.RELU + "\n// over the budget\n"), fresh=True)
    assert out.feasible, out.message
    assert spec.key not in v.spares
