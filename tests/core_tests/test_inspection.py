"""A look inside a kernel (#51, 8): its hot loops' assembly, one chosen case checked and timed alone, the harness's
counters of each side's timed calls, two attempts side by side. The finding: no assembly view, no counters, no
timing of one chosen case, no side-by-side of two attempts (only a diff against the parent), no per-case "vs best"."""

from __future__ import annotations

import json
import shutil

import pytest

import candidates as C

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("g++") is None,
                                reason="needs g++ and objdump")


LEAKY = """
#include <cstdint>
extern "C" void leaky_f32(const float* x, float* out, int64_t n, float slope) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : slope * x[i];
}
"""
LEAKY_MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x, slope):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.leaky_f32(x, out, x.numel(), slope)
        return out
"""


def test_the_hot_loops_of_a_kernel_are_read_from_its_library(tmp_path):
    from core.inspection import assembly, hot_loops
    from core.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    ws.init()
    text = assembly(ws, "cpu", C.elementwise(C.RELU))
    assert text.startswith("the hot loops of libcandidate.so"), text[:300]
    assert "relu_forward._omp_fn.0: a loop of" in text and "vectors (" in text
    # the parser on its own: a backward jump is a loop, the innermost kept, the launcher's functions only
    dump = """
0000000000001000 <helper>:
    1000:\tjmp    1000 <helper>
0000000000001100 <relu_forward._omp_fn.0>:
    1100:\tvmovups (%rsi,%rax,4),%ymm0
    1105:\tvmaxps %ymm1,%ymm0,%ymm0
    110a:\tvmovups %ymm0,(%rdx,%rax,4)
    110f:\tadd    $0x8,%rax
    1113:\tcmp    %rax,%rcx
    1116:\tjne    1100 <relu_forward._omp_fn.0>
    1118:\tret
"""
    [loop] = hot_loops(dump, ["relu_forward"])
    assert (loop.function, loop.start, len(loop.instructions), loop.vector_bits, loop.vector_ops) == \
        ("relu_forward._omp_fn.0", 0x1100, 6, 256, 3)


def test_two_attempts_side_by_side():
    from core.inspection import side_by_side

    a = C.elementwise(C.RELU)
    b = {**a, "kernel.cpp": a["kernel.cpp"].replace("schedule(static)", "schedule(static, 4096)")}
    text = side_by_side(a, b, "#1", "#3", 160).splitlines()
    assert text[0].startswith("#1") and text[0].rstrip().endswith("| #3")
    changed = [line for line in text if " | " in line and "schedule(static, 4096)" in line]
    assert len(changed) == 1 and "schedule(static)" in changed[0].split(" | ")[0]
    assert any(line.startswith("== kernel.cpp") for line in text) and any("== model.py" in line for line in text)


def test_the_harness_counts_another_process_s_threads():
    """Software counters everywhere Linux counts them (a VM without a PMU has no hardware ones: said, not hidden)."""
    import subprocess
    import sys
    import time

    from verifier.machine.counters import Counters

    busy = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: sum(range(10000))"])
    try:
        counters = Counters(busy.pid)
        first = counters.read()
        time.sleep(0.3)
        second = counters.read()
        counters.close()
    finally:
        busy.kill()
        busy.wait()
    if "task_clock_ns" not in first:
        pytest.skip(f"perf_event_open is not allowed here: {counters.missing}")
    assert second["task_clock_ns"] > first["task_clock_ns"]            # it ran meanwhile (how much: the load)
    assert all(v for v in counters.missing.values())                    # what is not counted says why


@pytest.mark.slow
def test_one_case_alone_counted_and_timed_with_vs_best(tmp_path, capsys):
    """`verify --case N` checks and times case N alone; `inspect --counters` counts its timed calls per side."""
    import sys
    from pathlib import Path

    from evotui import cli

    sys.path.insert(0, str(Path(__file__).parent))
    from test_suites import multi_case_suite  # the suite's 7_LeakyRelu, three cases: float32, float16, bfloat16

    suite = multi_case_suite(tmp_path / "suite")
    folder = tmp_path / "7_LeakyRelu"
    folder.mkdir()
    (folder / "kernel.cpp").write_text(LEAKY)
    (folder / "model.py").write_text(LEAKY_MODEL)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "evokernel.toml").write_text(f'suite = "{suite}"\n[verifier]\nthreads = 2\ntiming_budget_s = 0.2\n')
    # case #1 is float32, which this kernel serves; #2 (float16) it would fail: alone, #1 passes and is timed
    assert cli.main(["--workspace", str(ws), "verify", str(folder), "--case", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["feasible"] and data["speedup"] is not None, data["message"]
    assert cli.main(["--workspace", str(ws), "inspect", str(folder), "--counters", "--case", "1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    counted = found["counters"]
    assert counted["case"] == 1 and counted["feasible"], counted
    if counted["per_call"]["candidate"]:
        assert counted["calls"]["candidate"] >= 3 and counted["calls"]["reference"] >= 3
        assert counted["per_call"]["candidate"]["task_clock_ns"] > 0 and "CPU time" in [r[0] for r in counted["rows"]]
    else:
        assert counted["problem"] or counted["missing"], counted
    assert "hot loops" in found["assembly"]
    assert cli.main(["--workspace", str(ws), "verify", str(folder), "--case", "9"]) == 2
    assert "has no case #9: its cases are #1-#3" in capsys.readouterr().err

