"""How often does the speed verdict call two builds of one kernel different? The builtin relu candidate
verified afresh N times against a second build of itself as the task's best (same code, a different
constant: a different library), quiet and then with a CPU hog beside it (one busy process on this
machine's cores), in one run.

Printed per window: the gain over the best with its interval and the verdict; then, per condition,
how many windows said "same", "noisy", "faster" and "slower". "faster" or "slower" here is a wrong
verdict; a 95 % interval allows about 2.5 % of each on identical kernels.

    .venv/bin/python bench/identical_verdicts.py [--windows 8] [--no-hog]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relu_candidate import candidate  # noqa: E402  (bench/ is the script's own folder)


def windows(v, spec, best: dict[str, str], n: int, tag: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for i in range(n):
        out = v.verify(spec, candidate(f"{tag}-{i}"), best=best, fresh=True)
        if not out.feasible or out.gain is None:
            print(f"  {tag} {i + 1}: not timed ({out.message.splitlines()[0][:120]})", flush=True)
            counts["not timed"] += 1
            continue
        low, high = out.gain_ci
        print(f"  {tag} {i + 1}: {out.gain:.3f}x [{low:.3f}, {high:.3f}] {out.vs_best} ({out.timing_rounds} rounds)",
              flush=True)
        counts[out.vs_best] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8, help="verifications per condition")
    parser.add_argument("--no-hog", action="store_true", help="only the quiet condition")
    args = parser.parse_args()

    from core.tasks import load_suite
    from verifier.harness.verify import Verifier

    spec = load_suite("builtin").get("relu").spec()
    results: dict[str, collections.Counter[str]] = {}
    with tempfile.TemporaryDirectory() as cache, Verifier("cpu", cache_dir=cache) as v:
        best = candidate("best")
        first = v.verify(spec, best)
        if not first.feasible:
            print(f"the candidate failed: {first.message}")
            return 1
        print("quiet:")
        results["quiet"] = windows(v, spec, best, args.windows, "quiet")
        if not args.no_hog:
            print("one CPU hog beside:")
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                results["hog"] = windows(v, spec, best, args.windows, "hog")
            finally:
                hog.kill()
                hog.wait()
    for name, counts in results.items():
        wrong = counts["faster"] + counts["slower"]
        told = ", ".join(f"{k} {counts[k]}" for k in ("same", "noisy", "faster", "slower", "not timed") if counts[k])
        print(f"{name}: {told}; wrong verdicts {wrong} of {sum(counts.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
