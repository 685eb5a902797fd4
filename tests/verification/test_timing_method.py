"""``[verifier] timing``: what one timed sample of a window is (``verifier.window.methods``). Ours by default (a cold
call after a cache flush); MultiKernelBench's (3 warm-ups, a sample per call, no flush) and NPUKernelBench's (1
warm-up, 100 back-to-back calls per sample, no flush) so that a user can compare with their published speedups.
The window consults the method; the verdict stays the paired ratio of one window."""

from __future__ import annotations

import pytest

import candidates as C

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method, warmups, calls, flushed", [
    ("evokernel", 1, 1, True),            # fast_config's warmup_calls = 1
    ("multikernelbench", 3, 1, False),
    ("npukernelbench", 1, 100, False),
])
def test_the_timing_method_decides_what_a_sample_is(tmp_path, suite, fast_config, monkeypatch, method, warmups, calls,
                                                    flushed):
    from verifier.harness.verify import Verifier
    from verifier.window import harness as window

    windows: list[list[int]] = []      # per window, the calls of each of the candidate's samples
    flushes: list[str] = []
    go, flush, run_window = window.Side.go, window.Side.flush, window.run_window

    def recording_window(sides, settings, *args, **kwargs):
        windows.append([])
        return run_window(sides, settings, *args, **kwargs)

    def recording_go(self, instance, calls=1):
        if self.name == "candidate":
            windows[-1].append(calls)
        return go(self, instance, calls)

    def recording_flush(self):
        flushes.append(self.name)
        return flush(self)

    monkeypatch.setattr(window, "run_window", recording_window)
    monkeypatch.setattr(window.Side, "go", recording_go)
    monkeypatch.setattr(window.Side, "flush", recording_flush)
    config = fast_config.model_copy(update={"timing": method})
    with Verifier("cpu", config, cache_dir=tmp_path) as verifier:
        out = verifier.verify(suite.get("relu").spec(), C.elementwise(C.RELU), fresh=True)
    assert out.feasible and out.speedup is not None, out.message
    rounds = fast_config.timing_calls           # its budget is short: every window takes exactly this many
    assert windows
    for samples in windows:
        # the warm-ups, one call each; the timed rounds, the method's calls each; two calls after the window
        assert samples == [1] * warmups + [calls] * rounds + [1, 1], samples
    assert bool(flushes) is flushed


def test_an_unknown_method_is_refused_in_one_line():
    from pydantic import ValidationError

    from verifier import VerifyConfig
    from verifier.window.methods import timing_method

    with pytest.raises(ValidationError):
        VerifyConfig(timing="fast")
    with pytest.raises(ValueError, match="choose one of: evokernel, multikernelbench, npukernelbench"):
        timing_method("fast")
    assert VerifyConfig().timing == "evokernel"
