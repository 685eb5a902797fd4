"""How stable is the speed signal? One correct candidate verified afresh several times, while a
second workspace, in another process, verifies a candidate of its own in a loop beside it.

Printed: each verification's latency, its reference in the same window and the speedup with its
interval, then the spread (max/min) of the speedups and of the latencies. The baseline, measured in
the same run: the speedup the old way, the fresh latency over a reference time cached once at the
start (what the verifier divided by before the paired window).

    .venv/bin/python bench/timing_stability.py [--task relu] [--repeats 5] [--no-neighbour]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relu_candidate import candidate  # noqa: E402  (bench/ is the script's own folder)


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


def spread(values: list[float]) -> float:
    return max(values) / min(values) if values and min(values) > 0 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="relu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-neighbour", action="store_true", help="without the second workspace")
    parser.add_argument("--neighbour", metavar="CACHE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.neighbour:
        neighbour(args.neighbour, args.task)
        return 0

    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    spec = load_suite("builtin").get(args.task).spec()
    with tempfile.TemporaryDirectory(prefix="evokernel-stability-") as tmp:
        ws_a, ws_b = Path(tmp) / "a", Path(tmp) / "b"
        with Verifier("cpu", cache_dir=ws_a) as v:
            print(f"task {args.task} · {v.config.threads} threads · "
                  f"lock {v._lock.path}")
            first = v.verify(spec, candidate("main"), fresh=True)        # build, reference outputs, sandbox start
            if not first.feasible:
                print(f"the candidate is not feasible: {first.message}")
                return 1
            cached_ref = v.reference(spec).timing["median_ms"]         # the old way's divisor, cached once
            proc = None
            if not args.no_neighbour:
                proc = subprocess.Popen([sys.executable, __file__, "--neighbour", str(ws_b), "--task", args.task],
                                        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(8.0)                                         # let it get going (sandbox, reference)
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
