"""Device backends run each sandboxed job in a fresh interpreter (fork + exec from a server that never
imports torch), so no device runtime is inherited through fork and a device error dies with its
process. The same path, run here with the CPU toolchain, must keep every sandbox guarantee."""

from __future__ import annotations

import pytest

from verifier.backends.cpu import CpuBackend

import candidates as C


class SpawningCpu(CpuBackend):
    """The CPU backend with a device backend's process model."""

    process_model = "spawn"

    def explain(self, text: str) -> str:
        return "meaning: the kernel wrote out of bounds" if "SIGSEGV" in text else ""


@pytest.fixture(scope="module")
def spawning(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier(SpawningCpu(), fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("spawn-cache"))
    yield v
    v.close()


def verify(verifier, suite, task_id, files, make_candidate):
    return verifier.verify(suite.get(task_id).spec(), make_candidate(files))


@pytest.mark.slow
def test_correct_and_incorrect_candidates(spawning, suite, make_candidate):
    good = verify(spawning, suite, "relu", C.elementwise(C.RELU), make_candidate)
    assert good.feasible, good.message
    assert good.speedup is not None and good.latency_ms > 0
    bad = verify(spawning, suite, "relu", C.elementwise(C.IDENTITY), make_candidate)
    assert bad.failed_gate == "correctness"


@pytest.mark.slow
def test_the_server_itself_stays_light(spawning):
    spawning.server.start()
    assert spawning.server._info["threads"] == 1       # no torch in the server (importing torch starts a thread)
    assert "a fresh process per job" in spawning.isolation


@pytest.mark.slow
def test_a_crash_is_an_outcome_with_the_backends_explanation(spawning, suite, make_candidate):
    out = verify(spawning, suite, "relu", C.elementwise(C.SEGFAULT), make_candidate)
    assert out.failed_gate == "correctness"
    assert "SIGSEGV" in out.message and "meaning: the kernel wrote out of bounds" in out.message


@pytest.mark.slow
def test_seccomp_covers_every_thread_of_a_spawned_job(spawning, suite, make_candidate):
    """torch starts threads before the filter goes in; the filter is synchronised onto all of them."""
    out = verify(spawning, suite, "relu", C.elementwise(C.FORK_BOMB_EVASIVE), make_candidate)
    assert out.failed_gate == "correctness"
    assert "got 0, expected" in out.message


@pytest.mark.slow
def test_spawned_jobs_see_no_secrets(spawning, suite, make_candidate, monkeypatch):
    secret = "sk-test-" + "s3cr3t" * 4
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    spawning.server.close(restartable=True)  # restart so the fork server is spawned from this environment
    out = verify(spawning, suite, "relu", C.elementwise(C.LEAK_SECRET), make_candidate)
    assert "stolen key: (none)" in out.message and secret not in out.message
