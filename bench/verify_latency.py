"""Seconds per verification of one correct level-1 candidate: our path against a
``torch.utils.cpp_extension.load_inline`` path, side by side in one run.

Our path, five ways:
  fresh      a new candidate (build not cached), sandbox warm, after a pause standing for the model's
             turn (--model-s): the engine's usual case; this task's reference (fresh seeds, used by this
             verification alone) was made during the pause (``verifier.harness.reference_cache.Spares``)
  back to back  another new candidate at once: its reference is made while it builds
  cold       a new verifier and empty caches: sandbox start, reference run and timing, build, all gates
  cached     the same candidate again: its recorded verdict (every gate is deterministic; the timing
             was measured on this machine with the same settings)
  rerun      the same candidate verified again from scratch (--fresh): build and reference cached

The baseline does what KernelBench-style harnesses do, in a fresh process per candidate: compile the
same kernel with ``load_inline`` (a Python extension, no cache reuse), then the same number of
correctness trials and timed calls, in-process.

    .venv/bin/python bench/verify_latency.py [--task relu] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relu_candidate import KERNEL, candidate  # noqa: E402  (bench/ is the script's own folder)

BASELINE = r'''
import sys, time, torch, importlib.util
from torch.utils.cpp_extension import load_inline
task_path, tag, build_dir, trials, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
spec = importlib.util.spec_from_file_location("task", task_path)
task = importlib.util.module_from_spec(spec); spec.loader.exec_module(task)
src = """
#include <torch/extension.h>
KERNEL
torch::Tensor relu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    relu_forward(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
""" + "// " + tag
ext = load_inline(name="relu_" + tag, cpp_sources=[src], functions=["relu"], build_directory=build_dir,
                  extra_cflags=["-O3", "-march=native", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)
model = task.Model(*task.get_init_inputs())
for seed in range(trials + 1):
    torch.manual_seed(seed)
    x = task.get_inputs()[0]
    assert torch.allclose(ext.relu(x), model(x), atol=1e-4, rtol=1e-4)
x = task.get_inputs()[0]
for fn in (lambda: model(x), lambda: ext.relu(x)):
    for _ in range(calls):
        t = time.perf_counter(); fn(); time.perf_counter() - t
print("ok")
'''.replace("KERNEL", KERNEL.replace('extern "C" ', ""))


def run_baseline(task_path: str, tag: str, trials: int, calls: int) -> float:
    with tempfile.TemporaryDirectory() as build_dir:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", BASELINE, task_path, tag, build_dir, str(trials), str(calls)],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t
    if "ok" not in proc.stdout:
        raise SystemExit(f"baseline failed:\n{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="relu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-s", type=float, default=3.0,
                        help="the pause before a fresh candidate, standing for the model's turn (default 3 s)")
    args = parser.parse_args()

    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    task = load_suite("builtin").get(args.task)
    spec = task.spec()
    config = VerifyConfig()
    cand = candidate   # each tag in the code itself: a comment alone is the same code (its recorded verdict)
    results: dict[str, list[float]] = {"fresh": [], "back_to_back": [], "cold": [], "cached": [], "rerun": [],
                                       "load_inline": []}
    stamp = str(time.time_ns())
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            # cold: everything from nothing
            with Verifier("cpu", config, cache_dir=cache) as verifier:
                t = time.perf_counter()
                out = verifier.verify(spec, cand(f"cold-{stamp}-{r}"))
                results["cold"].append(time.perf_counter() - t)
                assert out.feasible, out.message
                # fresh: a new candidate, warm sandbox, after the model's turn (this task's next reference
                # made ahead meanwhile: verifier.harness.reference_cache.Spares)
                time.sleep(args.model_s)
                files = cand(f"fresh-{stamp}-{r}")
                t = time.perf_counter()
                out = verifier.verify(spec, files)
                results["fresh"].append(time.perf_counter() - t)
                assert out.feasible, out.message
                # back to back: another new candidate at once (its reference still being made)
                t = time.perf_counter()
                out = verifier.verify(spec, cand(f"next-{stamp}-{r}"))
                results["back_to_back"].append(time.perf_counter() - t)
                assert out.feasible, out.message
                # cached: the same candidate again (its recorded verdict)
                t = time.perf_counter()
                out = verifier.verify(spec, files)
                results["cached"].append(time.perf_counter() - t)
                assert out.feasible and out.from_cache, out.message
                # rerun: the same candidate from scratch, with the build and reference caches
                t = time.perf_counter()
                out = verifier.verify(spec, files, fresh=True)
                results["rerun"].append(time.perf_counter() - t)
                assert out.feasible and out.build_cached and not out.from_cache, out.message
        results["load_inline"].append(run_baseline(str(task.path), f"{stamp}_{r}", config.trials, config.timing_calls))
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in results.items()),
              flush=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    print()
    print(textwrap.dedent(f"""\
        task {task.id} ({task.scale_note() or 'built-in sizes'}), {config.trials} trials + second shape, {config.timing_calls} timed calls, {config.threads} threads
        median seconds per verification over {args.repeats} repeats:
          evokernel fresh candidate (warm sandbox)   {med['fresh']:7.2f} s  (after a {args.model_s:.0f} s model turn)
          evokernel fresh, back to back              {med['back_to_back']:7.2f} s  (no pause: the reference made then)
          evokernel cold (new verifier, no caches)   {med['cold']:7.2f} s
          evokernel cached re-verification           {med['cached']:7.2f} s  (recorded verdict)
          evokernel re-run of the same candidate     {med['rerun']:7.2f} s  (--fresh: build and reference cached)
          load_inline baseline (fresh process)       {med['load_inline']:7.2f} s
        fresh candidate             {med['fresh']:6.2f} s  (target <= 3 s)
        cached re-verification      {med['cached']:6.2f} s  (target <= 0.5 s)
        ratio load_inline / fresh   {med['load_inline'] / med['fresh']:6.1f}x
        ratio load_inline / cold    {med['load_inline'] / med['cold']:6.1f}x"""))


if __name__ == "__main__":
    main()
