"""The roofline: each task's minimum bytes and FLOPs (checked by hand for an elementwise op, a
reduction and a matmul, counted in a real subprocess), this machine's ceilings (a real g++ build of
the triad/FMA probe), the pure arithmetic of ``assess``, and what ``verify`` and ``doctor`` print."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.machine.roofline import assess, describe_profile

RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


rows = 96
cols = 1000


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

ROW_SUM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


b = 8
m = 300
n = 50


def get_inputs():
    return [torch.randn(b, m, n)]


def get_init_inputs():
    return [1]
'''

MATMUL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


M = 120
K = 70
N = 33


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''

LINEAR_RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = nn.Linear(i, o)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 32]
'''


def spec(task_id: str, source: str):
    from verifier.task import TaskSpec

    return TaskSpec(id=task_id, source=source)


def test_the_floor_flag_and_the_roofline_line_are_one_computation():
    """#37 finding 8: "memory-bound: 100 % of the 29.4 GB/s triad ceiling (floor 2.286 ms)" beside the flag
    "2.295 ms is below the memory-bandwidth floor 5.639 ms for writing the outputs": two floors from two
    bandwidths. The flag is made from the roofline point itself, and the performance gate holds no other."""
    import types

    import torch

    from verifier.gates.performance import flag
    from verifier.machine.roofline import below_floor
    from verifier.outcome import Outcome

    ceilings = {"triad_gbps": 20.0, "fma_gflops": 100.0}
    profile = {"bytes": 80_000_000, "flops": 20_000_000}       # a 4 ms floor
    fast = assess(profile, 1.5, ceilings)
    said = below_floor(fast)
    assert "floor 4.000 ms" in said and "floor 4.000 ms; under half of it: flagged" in fast["summary"] and "20.0 GB/s" in said
    assert below_floor(assess(profile, 2.5, ceilings)) == ""     # above half the floor: cache, not flagged
    assert below_floor(assess({"bytes": 1, "flops": 2_000_000_000}, 1.0, ceilings)) == ""   # compute-bound
    # the gate's flags no longer carry a floor of their own (from the reference's bandwidth and its outputs)
    out = Outcome(feasible=True, latency_ms=1.5, speedup=2.0)
    ref = types.SimpleNamespace(bandwidth_gbps=5.0, outputs=[{"leaves": [torch.empty(10_000_000)]}])
    flag(ref, out, input_bytes=40_000_000)
    assert not [f for f in out.flags if "floor" in f], out.flags


@pytest.mark.slow
@pytest.mark.parametrize("task_id, source, nbytes, flops", [
    # relu over 96 x 1000 floats: read x, write out; one FLOP per element
    ("relu", RELU, 4 * (96 * 1000 + 96 * 1000), 96 * 1000),
    # sum over dim 1 of (8, 300, 50): read 120 000 floats, write 8 x 1 x 50; one add per element read
    ("row_sum", ROW_SUM, 4 * (8 * 300 * 50 + 8 * 50), 8 * 300 * 50),
    # (120 x 70) @ (70 x 33): read both, write 120 x 33; 2 M N K
    ("matmul", MATMUL, 4 * (120 * 70 + 70 * 33 + 120 * 33), 2 * 120 * 33 * 70),
    # Linear(64 -> 32) + ReLU on (16, 64): weights 32 x 64 + bias 32 count as bytes; addmm 2 M N K
    # (the flop counter leaves the bias add out), then relu's 16 x 32
    ("linear_relu", LINEAR_RELU, 4 * (16 * 64 + 32 * 64 + 32 + 16 * 32), 2 * 16 * 32 * 64 + 16 * 32),
])
def test_task_profiles_match_hand_counts(task_id, source, nbytes, flops):
    from verifier.machine.roofline import profile_task

    profile = profile_task(spec(task_id, source))
    assert profile["bytes"] == nbytes
    assert profile["flops"] == flops
    assert profile["device"] == "meta"          # counted without allocating or computing anything


def test_assess_is_plain_roofline_arithmetic():
    ceilings = {"triad_gbps": 20.0, "fma_gflops": 100.0}
    # memory-bound: 80 MB at 20 GB/s = 4 ms floor; taking 10 ms is 40 % of the roofline, 8 GB/s
    point = assess({"bytes": 80_000_000, "flops": 20_000_000}, 10.0, ceilings)
    assert point["bound"] == "memory"
    assert point["floor_ms"] == pytest.approx(4.0)
    assert point["fraction"] == pytest.approx(0.4)
    assert point["achieved_gbps"] == pytest.approx(8.0)
    assert point["achieved_gflops"] == pytest.approx(2.0)
    assert point["intensity"] == pytest.approx(0.25)
    assert point["summary"].startswith("memory-bound: 40 % of the 20.0 GB/s triad ceiling")
    # compute-bound: 2 GFLOP at 100 GFLOP/s = 20 ms floor; 12.6 MB would take 0.63 ms; 50 ms is 40 %
    point = assess({"bytes": 12_582_912, "flops": 2_000_000_000}, 50.0, ceilings)
    assert point["bound"] == "compute" and point["fraction"] == pytest.approx(0.4)
    assert point["summary"].startswith("compute-bound: 40 % of the 100 GFLOP/s FMA ceiling")
    # above the DRAM roofline (the data stayed in cache) is said so
    assert "stays in cache" in assess({"bytes": 80_000_000, "flops": 1}, 2.0, ceilings)["summary"]
    # no ceilings (a device backend): achieved rates only; nothing without a time or a profile
    bare = assess({"bytes": 1_000_000, "flops": 0}, 1.0, None)
    assert bare["achieved_gbps"] == pytest.approx(1.0) and "fraction" not in bare
    assert assess(None, 1.0, ceilings) is None and assess({"bytes": 1, "flops": 1}, None, ceilings) is None
    assert "memory-bound on this machine, roofline floor 4.000 ms" in describe_profile(
        {"bytes": 80_000_000, "flops": 20_000_000, "input_bytes": 40_000_000, "output_bytes": 40_000_000}, ceilings)


@pytest.mark.slow
def test_ceilings_are_measured_with_the_backend_flags_and_threads():
    from verifier.backends.cpu import CpuBackend
    from verifier.machine.roofline import measure_ceilings

    found = measure_ceilings("g++", CpuBackend.flags, 2, 4 << 20)
    assert found["threads"] == 2 and found["triad_gbps"] > 0 and found["fma_gflops"] > 0
    assert "-march=native" in found["flags"] and "-fopenmp" in found["flags"] and "-shared" not in found["flags"]


@pytest.mark.slow
def test_a_feasible_outcome_carries_its_roofline(verifier, suite, make_candidate):
    import candidates as C

    task = suite.get("relu").spec()
    out = verifier.verify(task, make_candidate(C.elementwise(C.RELU)), fresh=True)
    assert out.feasible, out.message
    roof = out.roofline
    assert roof["bytes"] == 2 * 64 * 4096 * 4 and roof["flops"] == 64 * 4096
    assert roof["achieved_gbps"] == pytest.approx(roof["bytes"] / (out.latency_ms / 1e3) / 1e9)
    assert roof["bound"] == "memory" and roof["ceiling_gbps"] > 0
    assert roof["fraction"] == pytest.approx(roof["floor_ms"] / out.latency_ms)
    assert roof["summary"] in out.gate("performance").message
    # a failed candidate has none
    failed = verifier.verify(task, make_candidate(C.elementwise(C.IDENTITY)))
    assert not failed.feasible and failed.roofline is None


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evotui.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "XDG_CACHE_HOME": str(cwd / "xdg")})


@pytest.mark.slow
def test_verify_and_doctor_print_the_roofline(tmp_path, make_candidate):
    import candidates as C

    folder = make_candidate(C.elementwise(C.RELU))
    suite = Path(__file__).parents[1] / "fixtures" / "suite"
    proc = _cli("verify", str(folder), "--task", "relu", "--suite", str(suite), "--threads", "2", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    text = " ".join(proc.stdout.split())
    assert re.search(r"memory-bound: \d+ % of the [\d.]+ GB/s triad ceiling \([\d.]+ [KMG]?B moved at [\d.]+ GB/s", text)
    proc = _cli("doctor", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    text = " ".join(proc.stdout.split())
    assert re.search(r"ceilings \(\d+ threads\): memory [\d.]+ GB/s \(STREAM triad\), compute [\d.]+ GFLOP/s fp32 \(FMA\)",
                     text)
    data = json.loads(_cli("doctor", "--json", "--backend", "cpu", cwd=tmp_path).stdout)
    assert data["machine"]["ceilings"]["triad_gbps"] > 0 and data["machine"]["ceilings_cached"]


BROKEN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise ValueError("this reference cannot run")


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_a_task_that_cannot_be_counted_gives_no_roofline_and_a_reason(tmp_path):
    from verifier.backends import get_backend
    from verifier.machine.roofline import RooflineMeter

    meter = RooflineMeter(tmp_path, get_backend("cpu"), 2)
    assert meter.point(spec("broken", BROKEN), 1.0) is None
    assert "this reference cannot run" in meter.problems[0]
    assert meter.profile(spec("broken", BROKEN)) is None and len(meter.problems) == 1   # not counted again
