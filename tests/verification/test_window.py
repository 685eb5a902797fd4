"""The timing window from the harness (verifier.window.harness), with real sandboxed side processes:
what every call sees, who is stopped while another side is timed, and answers a kernel could forge."""

from __future__ import annotations

import itertools

import pytest

import candidates as C

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plain(tmp_path_factory, fast_config):
    """Without bubblewrap the fork server's jobs have host process ids: their states can be read here."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"use_bwrap": False}),
                 cache_dir=tmp_path_factory.mktemp("window-cache"))
    yield v
    v.close()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


def test_every_draw_is_fresh_and_unrelated_to_every_other(plain, suite):
    """Every round draws new values element by element: no two draws of a window are equal or
    multiples of one another (a kernel that recognised a direction and replayed a scaled result,
    C(fA, fB) = f^2 C(A, B), earned 8.7x when every round rescaled one of two fixed sets)."""
    import torch

    draws: list[torch.Tensor] = []

    def observe(event, what):
        if event == "inputs":
            draws.append(torch.frombuffer(bytearray(what), dtype=torch.float32).clone())

    plain.window_observer = observe
    try:
        out = plain.verify(suite.get("relu").spec(), C.elementwise(C.RELU), fresh=True)
    finally:
        plain.window_observer = None
    assert out.feasible, out.message
    assert len(draws) >= 1 + out.timing_rounds + 2        # warm-up, every round, the two calls after
    for a, b in itertools.combinations(draws, 2):
        cos = float(torch.dot(a.double(), b.double()) / (a.double().norm() * b.double().norm()))
        assert abs(cos) < 0.5, cos                        # independent draws: |cos| ~ 1/sqrt(n)


def test_untrusted_sides_are_stopped_while_another_side_is_timed(plain, suite):
    """A candidate's timers, handlers or threads cannot take a core from the reference or the best: every
    untrusted side other than the one being timed is stopped (every thread), the reference never is."""
    seen: list[tuple[str, dict[str, str]]] = []

    def observe(event, what):
        if event == "timed":
            name, sides = what
            seen.append((name, {other: _state(side.handle._pending.pid) for other, side in sides.items()
                                if other != name}))

    plain.window_observer = observe
    try:
        out = plain.verify(suite.get("relu").spec(), C.repeated_relu(2, "a"), best=C.repeated_relu(1, "b"), fresh=True)
    finally:
        plain.window_observer = None
    assert out.feasible and out.best_ms is not None, out.message
    timed = {name for name, _ in seen}
    assert timed == {"reference", "candidate", "best"}
    for name, others in seen:
        for other, state in others.items():
            if other == "reference":
                assert state != "T", (name, others)       # trusted, waiting for its next command
            else:
                assert state == "T", (name, others)


# Answers "done" on every descriptor a side could hold before doing any work: the harness's clock must
# not stop on a forged answer (static rules off to reach it).
FORGES_DONE = '''
#include <cstdint>
extern "C" long write(int, const void*, unsigned long);
static int calls = 0;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (++calls > 3) {
        static const char line[] = "done 0000000000000000 - 0\\n";
        for (int fd = 3; fd < 64; ++fd) write(fd, line, sizeof line - 1);
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("window-unguarded-cache"))
    yield v
    v.close()


def test_a_forged_done_answer_fails_the_window(unguarded, suite):
    out = unguarded.verify(suite.get("relu").spec(), C.elementwise(FORGES_DONE), fresh=True)
    assert out.gate("correctness").status == "passed", out.message   # nine calls: the trials are over
    assert out.failed_gate == "performance", out.message
    assert "to a timed call" in out.message or "answered" in out.message


# PyTorch compute on calls past the correctness trials, in the timing window only: every call there is
# traced, not only a re-check (static rules off to reach it).
TORCH_IN_TIMING_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        if self.n > 4:   # past the correctness job's calls of an instance (at most 4): the window's fifth
            return torch.relu(x)
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel())
        return out
'''


def test_pytorch_compute_on_any_timed_call_is_caught(unguarded, suite):
    out = unguarded.verify(suite.get("relu").spec(), {"model.py": TORCH_IN_TIMING_MODEL, "kernel.cpp": C.RELU},
                           fresh=True)
    assert out.failed_gate == "anti_hack", out.message
    assert "calls in the timing window" in out.message and "aten.relu" in out.message


def test_a_kernel_above_the_compute_ceiling_is_measured_again_and_not_trusted(plain, suite, monkeypatch):
    """Above the machine's FMA ceiling (318 % for a matmul that replayed scaled results) only skipped work
    can be: the ceilings and the window are measured again, and a kernel still above is flagged with no
    verdict ("implausible": no reward, never a new best). A ceiling far too low stands in for the skip."""
    asked: list[bool] = []

    def ceilings(remeasure: bool = False) -> dict:
        asked.append(remeasure)
        return {"triad_gbps": 1e6, "fma_gflops": 1e-6}

    monkeypatch.setattr(plain.roofline, "ceilings", ceilings)
    out = plain.verify(suite.get("relu").spec(), C.elementwise(C.RELU), fresh=True)
    assert out.feasible, out.message
    assert True in asked                                               # the ceilings measured again
    perf = out.gate("performance")
    assert "measured twice" in perf.message and "FMA ceiling" in perf.message
    assert out.vs_reference == "implausible"
    assert any("impossible without skipping work" in f for f in out.flags), out.flags


def test_a_triad_ceiling_pytorch_or_the_kernel_beat_is_measured_again(plain, suite, monkeypatch):
    """A memory-bound kernel, or PyTorch beside it, faster than the roofline's floor: the first suspect is
    a triad measured under load (the loopback run's prompts said "1.07x slower than PyTorch" beside "101 %
    of the triad ceiling"), so the ceilings are measured again and the point is recomputed with them; not
    flagged (data kept in a large cache can beat the DRAM floor), and never past
    ``MAX_CEILING_MEASUREMENTS``."""
    from verifier.machine.roofline import MAX_CEILING_MEASUREMENTS

    state = {"triad_gbps": 1e-3, "fma_gflops": 1e9, "measurements": 1}
    asked: list[bool] = []

    def ceilings(remeasure: bool = False) -> dict:
        asked.append(remeasure)
        if remeasure:
            state.update(triad_gbps=1e6, measurements=state["measurements"] + 1)
        return dict(state)

    monkeypatch.setattr(plain.roofline, "ceilings", ceilings)
    monkeypatch.setattr(plain.roofline, "cached_ceilings", lambda: dict(state))
    out = plain.verify(suite.get("relu").spec(), C.elementwise(C.RELU), fresh=True)
    assert out.feasible, out.message
    assert asked.count(True) == 1, asked                   # measured again, once
    assert out.roofline and out.roofline["bound"] == "memory"
    assert out.roofline["ceiling_gbps"] == 1e6 and out.roofline["fraction"] < 1.0
    assert out.vs_reference != "implausible" and not any("ceiling" in f for f in out.flags), out.flags

    asked.clear()
    state.update(triad_gbps=1e-3, measurements=MAX_CEILING_MEASUREMENTS)   # measured enough: believed
    out = plain.verify(suite.get("relu").spec(), C.elementwise(C.RELU + "\n// again\n"), fresh=True)
    assert out.feasible, out.message
    assert True not in asked and out.roofline and out.roofline["fraction"] > 1.0


# Installs a SIGALRM handler from an instance's fifth call on: the correctness job calls an instance at most
# four times, the timing window calls two instances many times (static rules off to reach it). The side
# compares its signal dispositions after every call of the window too.
HANDLER_IN_TIMING = '''
#include <csignal>
#include <cstdint>
static void on_signal(int) {}
extern "C" void relu_forward(const float* x, float* out, int64_t n, int64_t call) {
    if (call > 4) {   // past the correctness job's calls of an instance (at most 4)
        struct sigaction sa = {};
        sa.sa_handler = on_signal;
        sigaction(SIGALRM, &sa, nullptr);
    }
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''

COUNTING_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel(), self.n)
        return out
'''


def test_a_signal_handler_installed_in_the_timing_window_fails_anti_hack(unguarded, suite):
    files = {"model.py": COUNTING_MODEL, "kernel.cpp": HANDLER_IN_TIMING}
    out = unguarded.verify(suite.get("relu").spec(), files, fresh=True)
    assert out.gate("correctness").status == "passed", out.message
    assert out.failed_gate == "anti_hack", out.message
    assert "in the timing window" in out.message and "SIGALRM now caught" in out.message
