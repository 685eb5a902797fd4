"""Hand-written kernels (our own) for multi-case tasks of the NPU benchmark, verified per case.

``bench/npu_kernels/<task>/`` holds a correct ``model.py`` and ``kernel.cpp`` for each of ``1_gelu``
(fp32/fp16/bf16, both approximations), ``4_abs`` (fp32 and one 16-bit launcher) and ``2_swi_glu``
(fp32/fp16/bf16, a chunk dimension that varies by case). The tasks themselves are public files and
are not in this repository: give the folder that holds them (the NPU benchmark's level 1).

    .venv/bin/python bench/npu_kernels.py SUITE_DIR [--tasks 1_gelu,4_abs,2_swi_glu]

Each runs ``evokernel verify --json`` (as written, the cases fitted to their memory budget) and prints
one line per task (feasible, cases correct, the speedup's geometric mean) and one per failing case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "bench" / "npu_kernels"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suite", help="the folder of the NPU benchmark's level-1 tasks")
    parser.add_argument("--tasks", default=",".join(sorted(p.name for p in KERNELS.iterdir() if p.is_dir())))
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for task in args.tasks.split(","):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "evotui.cli", "verify", str(KERNELS / task), "--task", task,
                               "--suite", args.suite, "--json"], capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - t0
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            print(f"{task}: no JSON ({proc.stderr.strip()[-300:]})")
            continue
        cases = out.get("cases") or []
        correct = sum(bool(c.get("correct")) for c in cases)
        speed = f", speedup {out['speedup']:.2f}x (geometric mean)" if out.get("speedup") else ""
        print(f"{task}: feasible={out.get('feasible')}, {correct} of {len(cases)} cases correct{speed}, "
              f"{seconds:.0f} s")
        for c in cases:
            if not c.get("correct"):
                print(f"  case {c['case'] + 1} ({c.get('inputs')}): {c.get('message', '')[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
