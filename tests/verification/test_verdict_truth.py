"""The speed verdict tells the truth (issue #47): every side of a window goes the same path, the handshake is taken
out of every sample, a call too short to time is timed as several calls a sample (each on inputs of its own, each
checked) or left unjudged, and equal kernels read the same speed.

What was seen on main (a quiet machine, load under 1.5): an OpenMP relu equal to torch.relu in a plain process read
"2.13x slower" at 64x1024, "1.89x slower" at 64x16384 and "1.26x slower" at 64x131072, since the candidate's side paid
0.7-1.9 ms a call that the reference's did not (stopped and continued, its inputs in a file mapping, its outputs
spoiled from outside, its threads held), and every side paid the handshake. ``bench/verdict_truth.py`` holds each
ratio against a plain process's."""

from __future__ import annotations

from dataclasses import replace

import pytest

import candidates as C

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def window_verifier(tmp_path_factory, fast_config):
    """Without bubblewrap the jobs have host process ids; more rounds than the fast settings, so intervals judge."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"use_bwrap": False, "timing_calls": 20, "timing_budget_s": 0.5}),
                 cache_dir=tmp_path_factory.mktemp("truth-cache"))
    yield v
    v.close()


def _relu(suite, dim: int):
    return replace(suite.get("relu").spec(), size_overrides={"batch_size": 64, "dim": dim})


def test_a_call_too_short_to_time_is_timed_as_several_calls_each_on_fresh_inputs_and_each_checked(window_verifier,
                                                                                                    suite):
    """relu at 64x64 (16 KiB, a few microseconds a call, far below the handshake's jitter): each sample is several
    calls, each on an input set of its own drawn afresh (no call sees another's inputs: a kernel that replays a
    result gains nothing), every call's outputs read and compared. Before, one such call a sample was timed with the
    handshake in it (issue #47: multi-case tasks read 1.3-1.7 ms a call for cases of 2-100 us)."""
    import torch

    draws: list[torch.Tensor] = []

    def observe(event, what):
        if event == "inputs":
            draws.append(torch.frombuffer(bytearray(what), dtype=torch.float32).clone())

    window_verifier.window_observer = observe
    try:
        out = window_verifier.verify(_relu(suite, 64), C.elementwise(C.RELU), fresh=True)
    finally:
        window_verifier.window_observer = None
    assert out.feasible, out.message
    perf = out.gate("performance")
    sets = perf.details["calls_per_sample"]
    assert sets > 1, perf.details
    said = perf.message
    assert "calls a sample" in said or "below what the window can time" in said, said
    assert perf.details["sample"]["call_ms"] * sets >= perf.details["sample"]["timable_ms"] or \
        perf.details["sample"]["untimable"]
    unique = {d.numpy().tobytes() for d in draws}
    assert len(unique) == len(draws) >= sets * (out.timing_rounds + 2)


# Skips every other call in a window once past its warm-up and calibration (its outputs stay as the harness spoiled
# them): a sample of several calls must check every call, not only the last (static rules off to reach it).
SKIPS_CALLS_IN_A_SAMPLE = '''
#include <cstdint>
''' + C.WINDOW_PROBE + '''static int window = -1;
static long calls = 0;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (window < 0) window = window_probe();
    if (window && ++calls > 5 && (calls & 1)) return;
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("truth-unguarded-cache"))
    yield v
    v.close()


def test_a_kernel_that_skips_calls_inside_a_sample_of_several_is_caught(unguarded, suite):
    """relu at 64x16 (4 KiB: a few microseconds a call, so a sample is always several calls)."""
    out = unguarded.verify(_relu(suite, 16), C.elementwise(SKIPS_CALLS_IN_A_SAMPLE), fresh=True)
    assert out.failed_gate == "correctness", out.message         # failed at a timed call, in the window (the
    assert "timed call" in out.message and "taken the moment it reported done" in out.message, out.message
    assert out.gate("correctness").details["trials"]            # correctness job, where it skips nothing, passed


def test_the_trusted_reference_goes_the_same_path_as_the_candidate(window_verifier, suite):
    """Every side's inputs are a read-only mapping the harness wrote, every side's outputs are read and spoiled by the
    harness and every side is stopped between calls: the reference too (it used to call on its own writable draw,
    never stopped, its outputs never spoiled: a cost per call the candidate paid alone)."""
    from verifier.window import harness as window

    spoiled: list[str] = []
    read: list[str] = []
    spoil, read_outputs = window.Side.spoil_outputs, window.Side.read_outputs

    def recording_spoil(self, results, max_bytes):
        spoiled.append(self.name)
        return spoil(self, results, max_bytes)

    def recording_read(self, outputs, *args, **kwargs):
        read.append(self.name)
        return read_outputs(self, outputs, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window.Side, "spoil_outputs", recording_spoil)
        patch.setattr(window.Side, "read_outputs", recording_read)
        out = window_verifier.verify(_relu(suite, 4096), C.elementwise(C.RELU), fresh=True)
    assert out.feasible, out.message
    assert spoiled.count("reference") == spoiled.count("candidate") > 0
    assert read.count("reference") == read.count("candidate") > 0
    assert out.gate("performance").details["handshake_ms"] > 0


@pytest.mark.quiet
@pytest.mark.parametrize("dim", [1024, 16384, 131072])
def test_the_same_kernel_as_candidate_and_as_best_never_reads_a_difference(window_verifier, suite, dim):
    """The A/A test: relu against a second build of itself as the task's best, ten windows at each of three sizes
    (below, near and above a quarter millisecond a call). On a quiet machine every one reads "same"
    (the failing assertion lists the ten words); on a machine others load, a window may be too disturbed to
    judge ("noisy"), never "faster" nor "slower"."""
    spec = _relu(suite, dim)
    words = []
    for i in range(10):
        out = window_verifier.verify(spec, C.repeated_relu(1, f"a{i}"), best=C.repeated_relu(1, "b"), fresh=True)
        assert out.feasible and out.gain is not None, out.message
        words.append(out.vs_best)
    # Measured: alone on a quiet machine 30 of 30 windows "same" or "noisy"; in a fresh clone's quiet phase one window
    # of ten read a difference at two of the three sizes (issue #47 is open on this: a window's interval does not
    # cover what differs between windows). A window biased against either side reads a difference in most windows.
    differ = [w for w in words if w not in ("same", "noisy")]
    assert len(differ) <= 3 and "same" in words, words


@pytest.mark.quiet
@pytest.mark.parametrize("task, kernel", [("15_gt_like", "15_gt_tensor"), ("4_abs", "4_abs")])
def test_the_same_kernel_as_candidate_and_as_best_never_reads_a_difference_over_cases(window_verifier, task, kernel):
    """The A/A test over a multi-case task's cases (NPU-benchmark-like fixtures of our own: 13 dtypes, some broadcast,
    cases of microseconds; and 3 dtypes), each case in its window, its calls too short for one timed call. Neither the
    geometric mean nor any case reads "faster" or "slower" (the public tasks themselves: ``bench/verdict_truth.py``)."""
    from pathlib import Path

    from core.tasks import load_suite

    root = Path(__file__).parents[2]
    folder = root / "bench" / "npu_kernels" / kernel
    files = {name: (folder / name).read_text() for name in ("model.py", "kernel.cpp")}
    best = {**files, "kernel.cpp": files["kernel.cpp"] + '\nstatic const char* kTag = "best";\n'}
    spec = load_suite(root / "tests" / "fixtures" / "npu_like").get(task).spec()
    out = window_verifier.verify(spec, files, best=best, fresh=True)
    assert out.feasible and out.gain is not None, out.message
    cases = out.gate("performance").details["cases"]
    assert out.vs_best in ("same", "noisy"), out.message
    assert all(c["vs_best"] in ("same", "noisy") for c in cases), [(c["case"], c["gain"], c["gain_ci"]) for c in cases]
