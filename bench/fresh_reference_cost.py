"""What drawing fresh seeds for every verification costs: seconds per verification of one correct
candidate (a new build cache entry each time, sandbox warm) with a fresh reference (new seeds: what
the verifier does now) and with the previous verification's reference reused (what it did for up to
8 passing verifications of a task), alternating in one run, and the reference job alone.

    .venv/bin/python bench/fresh_reference_cost.py [--repeats 3]      (the builtin relu task)
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

from relu_candidate import KERNEL, MODEL  # noqa: E402  (bench/ is the script's own folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    task = load_suite("builtin").get("relu").spec()
    times: dict[str, list[float]] = {"fresh": [], "reused": [], "reference job": []}
    with tempfile.TemporaryDirectory() as cache, Verifier("cpu", cache_dir=cache) as verifier:
        fresh_reference = verifier._live_reference
        kept = fresh_reference(task)

        def verify(n: int) -> float:
            started = time.perf_counter()
            files = {"model.py": MODEL, "kernel.cpp": KERNEL + f"// {n}\n"}   # a new build, like a new candidate
            out = verifier.verify(task, files, fresh=True)
            assert out.feasible, out.message
            return time.perf_counter() - started

        verify(-1)  # warm: the sandbox, the roofline profile, the noise ratios
        for i in range(args.repeats):
            verifier._live_reference = fresh_reference                # type: ignore[method-assign]
            times["fresh"].append(verify(2 * i))
            verifier._live_reference = lambda _task: kept              # type: ignore[method-assign]
            times["reused"].append(verify(2 * i + 1))
            started = time.perf_counter()
            fresh_reference(task)
            times["reference job"].append(time.perf_counter() - started)
    print(f"relu, {args.repeats} each, alternating (seconds):")
    for name, values in times.items():
        print(f"  {name:14s} median {statistics.median(values):.2f}  [{', '.join(f'{v:.2f}' for v in values)}]")


if __name__ == "__main__":
    main()
