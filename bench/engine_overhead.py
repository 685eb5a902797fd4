"""Engine time per iteration (retrieval, prompts, parsing, value updates, store commits), excluding
LLM latency and verification, against the verification time itself, at 50 tasks.

The LLM is an in-process client that answers at once (a distinct elementwise kernel per request, so
every verification really compiles); verification is the real sandboxed verifier; the memory is a
real LMDB store pre-filled with synthetic experiences so retrieval works on a realistic size.

    .venv/bin/python bench/engine_overhead.py [--tasks 50] [--iterations 2] [--memory 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KERNEL = """#include <cstdint>
extern "C" void copy_forward(const float* x, float* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;  // variant %d
}
"""
MODEL = """import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x, *rest):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.copy_forward(x, out, x.numel())
        return out
"""


class InstantLLM:
    """Answers every request at once with a distinct candidate (no network, no waiting)."""

    def __init__(self):
        from core.llm import Usage

        self.model = "instant"
        self.usage = Usage()
        self._n = itertools.count()

    async def complete(self, request):
        from core.llm import ChatAnswer

        n = next(self._n)
        text = f"```cpp file=kernel.cpp\n{KERNEL % n}```\n```python file=model.py\n{MODEL}```\nMEMORY USED: none\n"
        return ChatAnswer(text=text, tokens_in=request.chars() // 4, tokens_out=len(text) // 4)

    async def close(self):
        pass


def fill_memory(store, n: int, task_ids: list[str]) -> None:
    from store import Experience

    rng = random.Random(0)
    words = "row col block tile simd omp parallel reduce sum max exp log vector cache stride tail fuse".split()
    batch = []
    for i in range(n):
        task = rng.choice(task_ids)
        code = "\n".join(f"for (int64_t i = 0; i < n; ++i) out[i] = {rng.choice(words)}_{i}(x[i]);" for _ in range(12))
        feasible = rng.random() < 0.4
        batch.append(Experience(
            task_id=task, kind=rng.choice(["draft_trace", "refine_trace"]), backend="cpu", stage="draft",
            title=f"{task} attempt {i}", text=" ".join(rng.choices(words, k=30)),
            files={"kernel.cpp": code, "model.py": MODEL}, outcome={"feasible": feasible, "latency_ms": 1.0},
            reward=1.0 if feasible else -1.0, q1=rng.uniform(-1, 1), signature={"text": f"{task} {' '.join(rng.choices(words, k=8))}"}))
        if len(batch) == 1000:
            store.add_experiences(batch)
            batch = []
    if batch:
        store.add_experiences(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--memory", type=int, default=5000)
    parser.add_argument("--scale", default="0.25", help="size scale of the built-in tasks")
    args = parser.parse_args()

    from core.config import Config
    from core.engine import Engine
    from core.events import EventBus
    from core.tasks import load_suite, scale_task
    from store import Store
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    with tempfile.TemporaryDirectory() as tmp:
        tasks = [scale_task(t, float(args.scale)) for t in load_suite("builtin").tasks[: args.tasks]]
        config = Config()
        config.verifier = VerifyConfig(timing_calls=5, timing_budget_s=0.2, warmup_calls=1)
        store = Store.open(Path(tmp) / "memory.lmdb")
        t = time.perf_counter()
        fill_memory(store, args.memory, [x.id for x in tasks])
        print(f"memory pre-filled with {args.memory} experiences in {time.perf_counter() - t:.1f} s")
        verifier = Verifier("cpu", config.verifier, cache_dir=Path(tmp) / "cache")
        iteration_wall: list[float] = []
        marks: dict[int, float] = {}
        bus = EventBus()

        def on_event(event):
            if type(event).__name__ == "IterationStarted":
                marks[event.iteration] = time.perf_counter()

        bus.subscribe(on_event)
        engine = Engine(config, store, verifier, InstantLLM(), bus)
        store.retrieve("warm up the index", k=1)
        started = time.perf_counter()
        record = asyncio.run(engine.run(tasks, iterations=args.iterations))
        total = time.perf_counter() - started
        ends = [marks[i] for i in sorted(marks)][1:] + [started + total]
        iteration_wall = [end - marks[i] for i, end in zip(sorted(marks), ends)]
        verifier.close()
        store.close()

    t = engine.timings
    per_iter_engine = t["engine"] / args.iterations
    per_iter_wall = total / args.iterations
    print(f"{len(tasks)} tasks x {args.iterations} iterations, run {record.status}; "
          f"{sum(len(p.attempts) for p in record.progress.values())} attempts")
    print(f"  wall time per iteration                 {per_iter_wall:8.2f} s  ({', '.join(f'{w:.1f}' for w in iteration_wall)})")
    print(f"  verification, summed per iteration      {t['verify'] / args.iterations:8.2f} s  "
          f"({config.engine.parallel_builds} at a time)")
    print(f"  LLM (instant client) per iteration      {t['llm'] / args.iterations:8.3f} s")
    print(f"  engine (retrieval, prompts, commits)    {per_iter_engine:8.3f} s  "
          f"= {1000 * per_iter_engine / len(tasks):.1f} ms per task")
    print(f"overhead / iteration wall time            {100 * per_iter_engine / per_iter_wall:8.2f} %   (target <= 5 %)")
    print(f"overhead / verification time              {100 * t['engine'] / t['verify']:8.2f} %")


if __name__ == "__main__":
    main()
