"""Does the speed verdict tell the truth? The verifier's ratio beside the ratio a plain process measures the same
way, for a set of kernels and sizes, for each timing method (issue #47).

For every case (a task at a size, a candidate kernel) and every ``[verifier] timing`` method:

* **verifier**: ``Verifier(...).verify(task, candidate, fresh=True)`` through the public API, so it measures
  whatever the tree's timing window does: the speedup (PyTorch's time over the candidate's, the median of the
  window's paired ratios) with its interval and verdict word, and the roofline share shown to the model;
* **plain**: one plain process (no sandbox, no harness, no other process) with the jobs' settings (the thread
  count, passive OpenMP threads bound to cores, the jobs' allocator) timing the same two forwards the same way,
  interleaved in rounds, each sample by ``perf_counter`` around the forward: ``evokernel``, one cold call on
  fresh inputs after the verifier's cache flush; ``multikernelbench``, 3 synchronised warm-ups then one call a
  sample, no flush; ``npukernelbench``, 1 warm-up then the mean of 100 back-to-back calls, no flush. The plain
  ratio is the median of its rounds' paired ratios (the verifier's statistic); its roofline share is the floor
  over its candidate's median;
* **quotient** = verifier / plain: 1 when the verdict tells the truth (issue #47's target: 0.87-1.15 for every
  case at or above the timable size, on a quiet machine). Where the window timed several calls a sample (a call
  too short to time, "(xN a sample)"), the plain process times N calls a sample too, each on an input set of its
  own after one flush.

The cases: relu (one OpenMP loop, ``bench/relu_candidate.py``) against ``torch.relu`` at 64x1024, 64x16384 and
64x131072 (memory-bound, 256 KiB to 32 MiB in), a blocked OpenMP matmul against ``torch.matmul`` at 256x256x256
(compute-bound) and abs over the three cases of ``tests/fixtures/npu_like/4_abs`` (multi-case, fp32/fp16/bf16;
``bench/npu_kernels/4_abs``): there the ratios are geometric means over the cases the verifier timed.
Also printed: the runtime launcher's cost per call against a bare ctypes call (``verifier.runtime``).

Each row carries the machine's load (``os.getloadavg``) at its start: the figures need a quiet machine (load
under 1.5 on 2 cores); under load they are provisional. ``--unbound`` runs both the verifier's jobs and the plain
process with ``OMP_PROC_BIND=false`` (the jobs bind OpenMP's threads to cores: on a machine others load, a bound
thread waits for its own core, and a 0.6 ms relu took 4-6 ms a call in a plain process even at nice -20, unbound
0.7 ms): a measurement setting for a loaded machine, said in the output, never the product's.

    .venv/bin/python bench/verdict_truth.py [--methods evokernel,multikernelbench,npukernelbench]
        [--cases relu-s,relu-m,relu-l,matmul,abs-cases] [--rounds 60] [--threads 2] [--unbound]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from relu_candidate import KERNEL as RELU_KERNEL  # noqa: E402  (bench/ is the script's own folder)
from relu_candidate import MODEL as RELU_MODEL  # noqa: E402

MATMUL_KERNEL = """
#include <cstdint>
// C = A (M x K) @ B (K x N): rows of C in parallel, each a sum of rows of B scaled by A's entries
extern "C" void matmul_forward(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
        float* ci = c + i * n;
        for (int64_t j = 0; j < n; ++j) ci[j] = 0.f;
        for (int64_t p = 0; p < k; ++p) {
            const float aip = a[i * k + p];
            const float* bp = b + p * n;
            #pragma omp simd
            for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
        }
    }
}
"""

MATMUL_MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        lib.matmul_forward(a, b, c, a.shape[0], a.shape[1], b.shape[1])
        return c
"""

METHODS = ("evokernel", "multikernelbench", "npukernelbench")

# The plain process: the reference's and the candidate's forwards timed in one interleaved loop, the way the
# method says, with the jobs' settings. Prints one JSON object: per case, the paired ratios and both medians.
PLAIN = r'''
import json, math, os, random, statistics, subprocess, sys, tempfile, time
args = json.loads(sys.argv[1])
from verifier.job.allocator import warm_allocator
warm_allocator()
import torch
torch.set_num_threads(args["threads"])
from verifier import runtime
from verifier.backends.cpu import CpuBackend
from verifier.inputs import Trial, make_inputs
from verifier.window.in_process import CacheFlusher
from verifier.task import TaskSpec, load_task_module
from verifier.toolchain.cdecl import parse_extern_c
from verifier.window.stats import paired_ratio

spec = TaskSpec.from_dict(args["task"])
module = load_task_module(spec)
tmp = tempfile.mkdtemp(prefix="verdict-truth-")
open(tmp + "/kernel.cpp", "w").write(args["kernel"])
subprocess.run(["g++", *CpuBackend.flags, "-o", tmp + "/k.so", tmp + "/kernel.cpp"], check=True)
runtime.configure(tmp + "/k.so", [s.to_dict() for s in parse_extern_c(args["kernel"])])
ns = {"__name__": "candidate_model"}
exec(compile(args["model"], "model.py", "exec"), ns)
torch.manual_seed(1)
reference = module.Model(*module.get_init_inputs())
torch.manual_seed(1)
candidate = ns["ModelNew"](*module.get_init_inputs())
method = args["method"]
flush = CacheFlusher(args["flush_bytes"]) if method == "evokernel" else None
calls = 100 if method == "npukernelbench" else 1
warmup = {"evokernel": args["warmup"], "multikernelbench": 3, "npukernelbench": 1}[method]
rng = random.Random(os.urandom(16))
result = {}
for case in args["cases"]:
    # as many input sets as the verifier's window took calls a sample (a call too short to time: several calls a
    # sample, each on a set of its own, after one flush), else one
    sets = int(args["sets"].get(str(case), 1)) if calls == 1 else 1
    trial = lambda: Trial(rng.getrandbits(62), "normal", case=case)
    buffers = [[x.clone() if isinstance(x, torch.Tensor) else x for x in make_inputs(module.get_inputs, trial())]
               for _ in range(sets)]
    sides = {"reference": reference, "candidate": candidate}
    times = {name: [] for name in sides}
    def fresh():
        for one in buffers:
            for buf, new in zip(one, make_inputs(module.get_inputs, trial())):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(new)
    with torch.no_grad():
        for name in sides:
            for _ in range(warmup):
                out = sides[name](*buffers[0])
                del out
        for r in range(args["rounds"]):
            fresh()
            for name in rng.sample(list(sides), len(sides)):
                if flush is not None:
                    fresh()
                    flush()
                kept = []
                t0 = time.perf_counter_ns()
                if sets > 1:
                    for one in buffers:
                        kept.append(sides[name](*one))
                else:
                    for _ in range(calls):
                        out = sides[name](*buffers[0])
                    kept.append(out)
                    del out
                t1 = time.perf_counter_ns()
                del kept
                times[name].append((t1 - t0) / 1e6 / max(calls, sets))
    ratio = paired_ratio(times["reference"], times["candidate"])
    result[str(case)] = {"speedup": ratio.value, "low": ratio.low, "high": ratio.high,
                         "reference_ms": statistics.median(times["reference"]),
                         "candidate_ms": statistics.median(times["candidate"])}
print(json.dumps(result))
'''


def cases() -> dict[str, dict[str, Any]]:
    from core.tasks import load_suite

    builtin = load_suite("builtin")
    relu = builtin.get("relu").spec()
    kernels = ROOT / "bench" / "npu_kernels" / "4_abs"
    return {
        "relu-s": {"spec": replace(relu, size_overrides={"batch_size": 64, "dim": 1024}),
                   "files": {"model.py": RELU_MODEL, "kernel.cpp": RELU_KERNEL}, "what": "relu 64x1024"},
        "relu-m": {"spec": replace(relu, size_overrides={"batch_size": 64, "dim": 16384}),
                   "files": {"model.py": RELU_MODEL, "kernel.cpp": RELU_KERNEL}, "what": "relu 64x16384"},
        "relu-l": {"spec": replace(relu, size_overrides={"batch_size": 64, "dim": 131072}),
                   "files": {"model.py": RELU_MODEL, "kernel.cpp": RELU_KERNEL}, "what": "relu 64x131072"},
        "matmul": {"spec": replace(builtin.get("matmul").spec(), size_overrides={"M": 256, "K": 256, "N": 256}),
                   "files": {"model.py": MATMUL_MODEL, "kernel.cpp": MATMUL_KERNEL}, "what": "matmul 256^3"},
        "abs-cases": {"suite": ROOT / "tests" / "fixtures" / "npu_like", "task": "4_abs",
                      "files": {"model.py": (kernels / "model.py").read_text(),
                                "kernel.cpp": (kernels / "kernel.cpp").read_text()},
                      "what": "abs, 3 cases"},
    }


def plain(spec: Any, files: dict[str, str], method: str, case_ids: list[int | None], rounds: int, threads: int,
          warmup: int, sets: dict[str, int] | None = None) -> dict[str, Any]:
    from verifier.harness.job_runner import omp_env
    from verifier.machine.caches import flush_bytes

    args = {"task": spec.to_dict(), "kernel": files["kernel.cpp"], "model": files["model.py"], "method": method,
            "cases": case_ids, "rounds": rounds, "threads": threads, "flush_bytes": flush_bytes(threads),
            "warmup": warmup, "sets": sets or {}}
    env = {**os.environ, **omp_env(threads), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", PLAIN, json.dumps(args)], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the plain process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def launcher_cost() -> tuple[float, float]:
    """(the runtime launcher's us per call, a bare ctypes call's), each the least of 50 samples of 2000 calls."""
    import ctypes

    import torch

    from verifier.backends.cpu import CpuBackend
    from verifier.runtime import KernelLibrary
    from verifier.toolchain.cdecl import parse_extern_c

    tmp = tempfile.mkdtemp(prefix="verdict-truth-launcher-")
    Path(tmp, "k.cpp").write_text(RELU_KERNEL)
    subprocess.run(["g++", *CpuBackend.flags, "-o", f"{tmp}/k.so", f"{tmp}/k.cpp"], check=True)
    lib = KernelLibrary(f"{tmp}/k.so", [s.to_dict() for s in parse_extern_c(RELU_KERNEL)])
    bare = ctypes.CDLL(f"{tmp}/k.so").relu_forward
    bare.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    x = torch.randn(16)
    out = torch.empty_like(x)
    n = x.numel()
    launch = lib.relu_forward

    def least(fn: Any) -> float:
        samples = []
        for _ in range(50):
            t0 = time.perf_counter_ns()
            for _ in range(2000):
                fn()
            samples.append((time.perf_counter_ns() - t0) / 2000 / 1e3)
        return min(samples)

    return least(lambda: launch(x, out, n)), least(lambda: bare(x.data_ptr(), out.data_ptr(), n))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--cases", default="relu-s,relu-m,relu-l,matmul,abs-cases")
    parser.add_argument("--rounds", type=int, default=60, help="the plain process's rounds per case (default 60)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", metavar="FILE", help="also write every row to FILE")
    parser.add_argument("--unbound", action="store_true", help="OMP_PROC_BIND=false for the jobs and the plain process "
                        "(a measurement setting for a loaded machine)")
    args = parser.parse_args()
    if args.unbound:
        import verifier.harness.job_runner as job_runner
        import verifier.harness.verify as verify

        bound = job_runner.omp_env
        job_runner.omp_env = verify.omp_env = lambda threads: {**bound(threads), "OMP_PROC_BIND": "false"}
        print("OMP_PROC_BIND=false for the verifier's jobs and the plain process (--unbound)")

    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    table = cases()
    launch, bare = launcher_cost()
    print(f"launcher: {launch:.2f} us per call through verifier.runtime, {bare:.2f} us bare ctypes "
          f"(the least of 50 samples of 2000 calls)")
    print(f"{'method':17s} {'case':15s} {'load':>5s} | {'verifier':>24s} {'verdict':10s} | {'plain':>19s} | "
          f"{'quotient':>8s} | {'ref ms v/p':>15s} {'cand ms v/p':>15s} | roofline v/p")
    rows = []
    with tempfile.TemporaryDirectory(prefix="verdict-truth-") as tmp:
        for method in args.methods.split(","):
            config = VerifyConfig(threads=args.threads, timing=method)
            with Verifier("cpu", config, cache_dir=Path(tmp) / method) as v:
                for name in args.cases.split(","):
                    case = table[name]
                    spec = case.get("spec") or load_suite(case["suite"]).get(case["task"]).spec()
                    load = os.getloadavg()[0]
                    out = v.verify(spec, case["files"], fresh=True)
                    if not out.feasible:
                        print(f"{method:17s} {name:15s} {load:5.1f} | not feasible: {out.message[:200]}")
                        continue
                    perf = out.gate("performance").details
                    per_case = perf.get("cases") or []
                    timed = [int(c["case"]) for c in per_case] or [None]
                    sets = ({str(c["case"]): int(c.get("calls_per_sample") or 1) for c in per_case} if per_case
                            else {"None": int(perf.get("calls_per_sample") or 1)})
                    got = plain(spec, case["files"], method, timed, args.rounds, args.threads, config.warmup_calls, sets)
                    speed = math.exp(sum(math.log(g["speedup"]) for g in got.values()) / len(got))
                    ref_ms = math.exp(sum(math.log(g["reference_ms"]) for g in got.values()) / len(got))
                    cand_ms = math.exp(sum(math.log(g["candidate_ms"]) for g in got.values()) / len(got))
                    roof = out.roofline or {}
                    floor = float(roof.get("floor_ms") or 0.0)
                    share = f"{100 * float(roof.get('fraction') or 0):.0f}%/{100 * floor / cand_ms:.0f}%" if floor else "-"
                    ci = out.speedup_ci or [float("nan")] * 2
                    quotient = float(out.speedup or 0.0) / speed
                    n = int(perf.get("calls_per_sample") or 1)
                    print(f"{method:17s} {name:15s} {load:5.1f} | {out.speedup:6.3f}x [{ci[0]:.3f}, {ci[1]:.3f}] "
                          f"{out.vs_reference:10s} | {speed:6.3f}x {f'(x{n} a sample)' if n > 1 else '':12s} | "
                          f"{quotient:8.3f} | "
                          f"{out.reference_ms:7.3f}/{ref_ms:<7.3f} {out.latency_ms:7.3f}/{cand_ms:<7.3f} | {share}")
                    for c in per_case:
                        g = got.get(str(c["case"]))
                        k = int(c.get("calls_per_sample") or 1)
                        if g:
                            print(f"{'':17s}   case {int(c['case']) + 1:<8d} | {c['speedup']:6.3f}x {'':28s} | "
                                  f"{g['speedup']:6.3f}x {f'(x{k} a sample)' if k > 1 else '':12s} | "
                                  f"{c['speedup'] / g['speedup']:8.3f} | "
                                  f"{c['reference_ms']:7.3f}/{g['reference_ms']:<7.3f} "
                                  f"{c['latency_ms']:7.3f}/{g['candidate_ms']:<7.3f}")
                    rows.append({"method": method, "case": name, "what": case["what"], "load": load,
                                 "verifier": out.speedup, "ci": out.speedup_ci, "verdict": out.vs_reference,
                                 "plain": speed, "quotient": quotient, "reference_ms": [out.reference_ms, ref_ms],
                                 "candidate_ms": [out.latency_ms, cand_ms], "roofline": roof.get("fraction"),
                                 "plain_roofline": floor / cand_ms if floor else None, "cases": per_case,
                                 "plain_cases": got})
    print(f"load at the end: {os.getloadavg()[0]:.1f} (1-minute average; quiet: under 1.5 on 2 cores)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
