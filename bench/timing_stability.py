"""How stable and how faithful is the speed signal? One correct candidate verified afresh several times,
while a second workspace, in another process, verifies a candidate of its own in a loop beside it.

Fidelity, measured in the same run through the public API only (``Verifier(...).verify``), so it
measures whatever timing the tree has: the candidate and a copy doing exactly twice the work verified
alternately (the ratio of their speedups should be about 0.5; a constant cost added to every timed
call pulls it towards 1); the candidate's latency in the verifier over the same kernel timed the same
way in a plain process (single calls after the verifier's cache flush, interleaved with the
verifications; target <= 1.3x); and the speedup spread with this tool's own run beside it (a second
Verifier in this process building and checking other candidates).

Printed: each verification's latency, its reference in the same window and the speedup with its
interval, then the spread (max/min) of the speedups and of the latencies. The baseline, measured in
the same run: the speedup the old way, the fresh latency over a reference time cached once at the
start (what the verifier divided by before the paired window).

    .venv/bin/python bench/timing_stability.py [--task relu] [--repeats 5] [--no-neighbour] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relu_candidate import KERNEL, candidate, candidate_twice  # noqa: E402  (bench/ is the script's own folder)


def neighbour(cache_dir: str, task_id: str) -> None:
    """The other workspace: verify afresh in a loop until killed."""
    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    spec = load_suite("builtin").get(task_id).spec()
    with Verifier("cpu", cache_dir=cache_dir) as v:
        n = 0
        while True:
            v.verify(spec, candidate(f"neighbour-{n % 3}"), fresh=True)
            n += 1


def plain_time(task_id: str, threads: int, rounds: int, warm: bool = True, flush_mb: int | None = None,
               rotate: int = 0) -> float:
    """The candidate's kernel timed in a plain process the way the verifier times a call (inputs copied,
    the verifier's cache flush, then ``torch.empty_like`` + the kernel, single calls): the median ms.
    ``warm``: with the allocator settings every job has (``verifier.job.allocator.warm_allocator``); else
    glibc's defaults, under which an output of 32 MiB or more faults in fresh pages on every call.
    ``flush_mb``: a flush of that size instead of the verifier's bounded one (1024: the inputs, the
    output and their page tables evicted from the host's large shared cache too). ``rotate``: the
    outputs written to that many buffers in turn, so no call writes the memory the call before it wrote
    (a window's side never does: the other sides' calls, copies and flushes run between two of its
    calls); 0: ``torch.empty_like`` every call, which glibc hands the block the last call freed."""
    code = f"""
import ctypes, json, os, statistics, subprocess, sys, tempfile, time
import torch
if {warm!r}:
    from verifier.job.allocator import warm_allocator
    warm_allocator()
from core.tasks import load_suite
from verifier.backends.cpu import CpuBackend
from verifier.machine.caches import flush_bytes
spec = load_suite("builtin").get({task_id!r}).spec()
ns = {{}}
exec(compile(spec.source, "task.py", "exec"), ns)
torch.manual_seed(0)
x0 = ns["get_inputs"]()[0]
tmp = tempfile.mkdtemp()
open(tmp + "/k.cpp", "w").write({KERNEL!r})
subprocess.run(["g++", *CpuBackend.flags, "-o", tmp + "/k.so", tmp + "/k.cpp"], check=True)
lib = ctypes.CDLL(tmp + "/k.so")
lib.relu_forward.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
torch.set_num_threads({threads})
buf = x0.clone()
flush = torch.empty(({flush_mb!r} << 18) if {flush_mb!r} else flush_bytes({threads}) // 4)
times = []
outs = [torch.full_like(buf, float("nan")) for _ in range({rotate})]
for i in range({rounds} + 3):
    buf.copy_(x0); buf.mul_(0.999); flush.fill_(i)
    t0 = time.perf_counter_ns()
    out = outs[i % len(outs)] if outs else torch.empty_like(buf)
    lib.relu_forward(buf.data_ptr(), out.data_ptr(), buf.numel())
    t1 = time.perf_counter_ns()
    out.fill_(float("nan")); del out
    if i >= 3: times.append((t1 - t0) / 1e6)
print(json.dumps(statistics.median(times)))
"""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def own_run(cache_dir: str, task_id: str, stop: threading.Event) -> None:
    """This tool's own other work: a second Verifier in this process building and checking candidates."""
    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    spec = load_suite("builtin").get(task_id).spec()
    with Verifier("cpu", cache_dir=cache_dir) as v:
        n = 0
        while not stop.is_set():
            v.verify(spec, candidate(f"own-{n}"), fresh=True)
            n += 1


def spread(values: list[float]) -> float:
    return max(values) / min(values) if values and min(values) > 0 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="relu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-neighbour", action="store_true", help="without the second workspace")
    parser.add_argument("--quick", action="store_true", help="a short run: 2 repeats of each part")
    parser.add_argument("--neighbour", metavar="CACHE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.neighbour:
        neighbour(args.neighbour, args.task)
        return 0

    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    if args.quick:
        args.repeats = min(args.repeats, 2)
    spec = load_suite("builtin").get(args.task).spec()
    with tempfile.TemporaryDirectory(prefix="evokernel-stability-") as tmp:
        ws_a, ws_b, ws_c = Path(tmp) / "a", Path(tmp) / "b", Path(tmp) / "c"
        with Verifier("cpu", cache_dir=ws_a) as v:
            print(f"task {args.task} · {v.config.threads} threads · "
                  f"lock {v._lock.path}")
            first = v.verify(spec, candidate("main"), fresh=True)        # build, reference outputs, sandbox start
            if not first.feasible:
                print(f"the candidate is not feasible: {first.message}")
                return 1
            cached_ref = v.reference(spec).timing["median_ms"]         # the old way's divisor, cached once

            # Fidelity, quiet: the plain and the twice-the-work kernel, and the plain process, interleaved.
            print("fidelity (no neighbour): plain kernel, twice the work, the same kernel in a plain process")
            ratios, overheads, evicted_ratios, rotating_ratios = [], [], [], []
            for i in range(args.repeats):
                one = v.verify(spec, candidate(f"one-{i}"), fresh=True)
                two = v.verify(spec, candidate_twice(f"two-{i}"), fresh=True)
                plain = plain_time(args.task, v.config.threads, 20)
                cold = plain_time(args.task, v.config.threads, 20, warm=False)
                evicted = plain_time(args.task, v.config.threads, 20, flush_mb=1024)
                rotating = plain_time(args.task, v.config.threads, 20, rotate=4)
                if not (one.feasible and two.feasible):
                    print(f"  {i + 1}: not feasible: {one.message if not one.feasible else two.message}")
                    continue
                ratios.append(two.speedup / one.speedup)
                overheads.append(one.latency_ms / plain)
                evicted_ratios.append(one.latency_ms / evicted)
                rotating_ratios.append(one.latency_ms / rotating)
                print(f"  {i + 1}: plain {one.latency_ms:7.3f} ms ({one.speedup:.2f}x)  twice {two.latency_ms:7.3f} ms "
                      f"({two.speedup:.2f}x)  speedup ratio {ratios[-1]:.2f}  plain process {plain:7.3f} ms "
                      f"({cold:.3f} ms with glibc's default allocator, {evicted:.3f} ms after a 1 GiB flush, "
                      f"{rotating:.3f} ms writing 4 outputs in turn)  verifier/plain {overheads[-1]:.2f}x, "
                      f"/evicted {evicted_ratios[-1]:.2f}x, /rotating {rotating_ratios[-1]:.2f}x")
            if ratios:
                print(f"twice-the-work speedup ratio: median {statistics.median(ratios):.2f} "
                      f"[{min(ratios):.2f} .. {max(ratios):.2f}]  (target 0.45-0.6)")
                print(f"verifier latency / plain process: median {statistics.median(overheads):.2f}x "
                      f"[{min(overheads):.2f} .. {max(overheads):.2f}]  (target <= 1.3x)")
                print(f"verifier latency / plain process after a 1 GiB flush: median "
                      f"{statistics.median(evicted_ratios):.2f}x [{min(evicted_ratios):.2f} .. {max(evicted_ratios):.2f}]"
                      "  (the window's calls meet caches as cold as that: see docs/verifier.md's timing method)")
                print(f"verifier latency / plain process writing its outputs to 4 buffers in turn: median "
                      f"{statistics.median(rotating_ratios):.2f}x [{min(rotating_ratios):.2f} .. "
                      f"{max(rotating_ratios):.2f}]  (the memory regime a window's call is in: no call writes "
                      "what the call before it wrote)")
            proc = None
            if not args.no_neighbour:
                proc = subprocess.Popen([sys.executable, __file__, "--neighbour", str(ws_b), "--task", args.task],
                                        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(4.0 if args.quick else 8.0)                  # let it get going (sandbox, reference)
            rows = []
            try:
                for i in range(args.repeats):
                    out = v.verify(spec, candidate("main"), fresh=True)
                    rows.append(out)
                    ci = out.speedup_ci or [float("nan")] * 2
                    print(f"  {i + 1}: {out.latency_ms:8.3f} ms  reference {out.reference_ms:8.3f} ms  "
                          f"speedup {out.speedup:5.2f}x [{ci[0]:.2f}, {ci[1]:.2f}] ({out.vs_reference})  "
                          f"old way {cached_ref / out.latency_ms:5.2f}x")
            finally:
                if proc is not None:
                    proc.kill()
                    proc.wait()
            # With this tool's own run beside it: a second Verifier in this process checking other candidates.
            stop = threading.Event()
            worker = threading.Thread(target=own_run, args=(str(ws_c), args.task, stop), daemon=True)
            worker.start()
            time.sleep(4.0 if args.quick else 8.0)
            own = []
            try:
                for i in range(args.repeats):
                    out = v.verify(spec, candidate("main"), fresh=True)
                    own.append(out.speedup)
                    print(f"  own run beside, {i + 1}: {out.latency_ms:8.3f} ms  speedup {out.speedup:5.2f}x")
            finally:
                stop.set()
                worker.join()
            print(f"speedup spread with this tool's own run beside it: {spread(own):.2f}x  (target <= 1.3x)")
        speedups = [o.speedup for o in rows]
        latencies = [o.latency_ms for o in rows]
        old = [cached_ref / o.latency_ms for o in rows]
        print(f"speedup spread (max/min): {spread(speedups):.2f}x  "
              f"[{min(speedups):.2f}x .. {max(speedups):.2f}x]  (target <= 1.3x)")
        print(f"latency spread (max/min): {spread(latencies):.2f}x  [{min(latencies):.3f} .. {max(latencies):.3f} ms]")
        print(f"baseline, fresh latency over a reference cached once ({cached_ref:.3f} ms): "
              f"spread {spread(old):.2f}x  [{min(old):.2f}x .. {max(old):.2f}x]")
        print(f"neighbour: {'a second workspace verifying in a loop' if not args.no_neighbour else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
