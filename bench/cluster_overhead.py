"""What dispatch through Ray costs per verification: the in-process ``Verifier`` against a
``ClusterVerifier`` on a local one-node Ray (its actor holds the same kind of ``Verifier``), side by
side in one run, on this machine.

Each round makes a new correct candidate (so nothing is cached: a real build, every trial, timing)
and verifies it both ways, in alternating order; after one warm-up each (sandbox start, reference run
and timing). A second, tiny case shows the fixed cost alone: a candidate that fails the format gate
(no work on either side but the round trip).

    .venv/bin/python bench/cluster_overhead.py [--task relu] [--rounds 6]

Prints the median wall time per verification each way and the overhead as a share of a local
verification's wall time (the target is at most 10 %).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relu_candidate import MODEL, candidate  # noqa: E402  (bench/ is the script's own folder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="relu")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        print("needs Ray: pip install 'evokernel[cluster]'", file=sys.stderr)
        return 2
    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.cluster import ClusterVerifier
    from verifier.harness.verify import Verifier

    task = load_suite("builtin").get(args.task).spec()
    config = VerifyConfig()
    with tempfile.TemporaryDirectory() as local_cache, tempfile.TemporaryDirectory() as node_cache:
        local = Verifier("cpu", config, cache_dir=local_cache)
        cluster = ClusterVerifier("local", "cpu", config, node_cache_dir=node_cache, local_cpus=1)
        try:
            cluster.refresh()
            sides = {"in-process": local, "ray": cluster}
            seconds: dict[str, list[float]] = {name: [] for name in sides}
            fixed: dict[str, list[float]] = {name: [] for name in sides}
            for n in range(args.rounds + 1):
                order = list(sides) if n % 2 == 0 else list(reversed(sides))
                for name in order:
                    files = candidate(str(n * 2 + (name == "ray")))
                    t0 = time.perf_counter()
                    out = sides[name].verify(task, files, fresh=True)
                    wall = time.perf_counter() - t0
                    if not out.feasible:
                        print(f"{name}: the candidate failed: {out.message}", file=sys.stderr)
                        return 1
                    if n:  # round 0 warms each side up
                        seconds[name].append(wall)
                    t0 = time.perf_counter()
                    sides[name].verify(task, {"model.py": MODEL}, fresh=True)   # no kernel: fails at format
                    fixed[name].append(time.perf_counter() - t0)
        finally:
            cluster.close()
            local.close()
    med = {name: statistics.median(v) for name, v in seconds.items()}
    med_fixed = {name: statistics.median(v[1:]) for name, v in fixed.items()}
    overhead = med["ray"] - med["in-process"]
    print(f"task {args.task}, {args.rounds} rounds, new candidate each (build, {config.trials} trials, timing)")
    for name in sides:
        print(f"  {name:<11} median {med[name]:.3f} s per verification"
              f"  (round trip alone: {med_fixed[name] * 1e3:.1f} ms)")
    print(f"ray / in-process: {med['ray'] / med['in-process']:.3f}x; overhead {overhead * 1e3:+.0f} ms = "
          f"{overhead / med['in-process'] * 100:+.1f} % of a verification (target <= 10 %); "
          f"fixed dispatch cost {(med_fixed['ray'] - med_fixed['in-process']) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
