"""EvoKernel against its baselines on one suite, at an equal budget, on your model and machine.

Each method (``evokernel``, ``refinement``, ``passk``) runs the same tasks for the same number of
verifier calls per task, in a fresh workspace of its own (so no method reads another's memory),
against the OpenAI-compatible endpoint in ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (or ``--base-url``)
with ``--model``. Then it prints the paper's table (CR, Acc, fast_1, best/first and best/ref as the
median over tasks with a 95 % bootstrap interval over the tasks; every per-task figure comes from the
verdicts of one timing window, see core.report) and writes the per-iteration curves as PNG.

    .venv/bin/python bench/methods.py --model qwen3-coder --tasks relu,softmax,gemm --iterations 10
    .venv/bin/python bench/methods.py --model m --n-context 2     # the memory section at half its size

``--n-context`` sets N, the memory items per prompt (4 by default): the way to measure whether the
memory section's size pays (prompt characters and tokens are reported per method).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METHODS = ("evokernel", "refinement", "passk")


def median_interval(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float] | None:
    """The median over tasks and its 95 % percentile-bootstrap interval over the tasks."""
    if not values:
        return None
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]


def _fmt(v: tuple[float, float, float] | None) -> str:
    return "-" if v is None else f"{v[0]:.2f}x [{v[1]:.2f}, {v[2]:.2f}]"


def _workspace_toml(args: argparse.Namespace) -> str:
    lines = [f'suite = "{args.suite}"', f'backend = "{args.backend}"']
    if args.scale:
        lines.append(f'size_scale = "{args.scale}"' if args.scale == "auto" else f"size_scale = {float(args.scale)}")
    lines += ["", "[llm]", f'model = "{args.model}"']
    if args.base_url:
        lines.append(f'base_url = "{args.base_url}"')
    lines += ["", "[engine]", f"n_context = {args.n_context}", f"iterations = {args.iterations}"]
    if args.threads:
        lines += ["", "[verifier]", f"threads = {args.threads}"]
    return "\n".join(lines) + "\n"


async def _run_method(root: Path, method: str, args: argparse.Namespace, tasks: list[str] | None) -> dict[str, Any]:
    from core.events import EventBus, PromptSent
    from core.report import run_metrics
    from core.session import Session
    from core.workspace import Workspace

    root.mkdir(parents=True, exist_ok=True)
    (root / "evokernel.toml").write_text(_workspace_toml(args))
    sizes: list[int] = []
    bus = EventBus()
    bus.subscribe(lambda e: sizes.append(e.chars) if isinstance(e, PromptSent) else None)
    session = Session(Workspace(root), bus=bus)
    try:
        record = await session.run(session.tasks(tasks), method=method, iterations=args.iterations, suite=None,
                                   scale=None, seed=args.seed)
        metrics = run_metrics(session.store, record)
    finally:
        await session.close_async()
    return {"metrics": metrics, "prompt_chars": sizes, "tokens_in": record.tokens_in, "tokens_out": record.tokens_out}


def table(results: dict[str, dict[str, Any]]) -> str:
    """The paper's table, one row per method."""
    head = ["method", "tasks", "CR", "Acc", "fast_1", "best/first", "best/ref", "apart", "prompt kB", "tokens in"]
    rows = [head]
    for method, r in results.items():
        m = r["metrics"]
        chars = r["prompt_chars"]
        rows.append([method, str(m.tasks), f"{100 * (m.cr or 0):.0f}%", f"{100 * (m.acc or 0):.0f}%", f"{100 * (m.fast_1 or 0):.0f}%",
                     _fmt(median_interval(m.speedup_over_first)), _fmt(median_interval(m.speedup_over_reference)),
                     str(m.not_measured_together),
                     f"{statistics.mean(chars) / 1000:.1f}" if chars else "-", f"{r['tokens_in']:,}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("EVOKERNEL_MODEL", ""), help="the endpoint's model name")
    parser.add_argument("--base-url", default="", help="default: OPENAI_BASE_URL")
    parser.add_argument("--suite", default="builtin", help="builtin or a folder of KernelBench-format files")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: the whole suite)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--iterations", type=int, default=10, help="verifier calls per task, the same for every method")
    parser.add_argument("--n-context", type=int, default=4, help="memory items per prompt (N)")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="verifier threads (default: the workspace's)")
    parser.add_argument("--scale", default="", help="size scale for CPU runs: a number or auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="", help="folder for the workspaces, plots and results.json (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    if not args.model:
        print("bench/methods.py: no model: pass --model (or set EVOKERNEL_MODEL)", file=sys.stderr)
        return 2
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"bench/methods.py: unknown method {', '.join(unknown)}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    if args.suite != "builtin":
        args.suite = str(Path(args.suite).expanduser().resolve())
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="evokernel-methods-"))
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] or None
    results = {m: asyncio.run(_run_method(out / m, m, args, tasks)) for m in methods}

    from core.report import plot

    pngs = plot([r["metrics"] for r in results.values()], out)
    data = {m: {**r["metrics"].to_dict(), "prompt_chars": r["prompt_chars"], "tokens_in": r["tokens_in"],
                "tokens_out": r["tokens_out"],
                "best_over_first_median_ci": median_interval(r["metrics"].speedup_over_first),
                "best_over_ref_median_ci": median_interval(r["metrics"].speedup_over_reference)}
            for m, r in results.items()}
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    if args.json:
        print(json.dumps(data, default=str))
    else:
        print(table(results))
        print(f"\n{args.iterations} verifier calls per task, N = {args.n_context} memory items; workspaces, "
              f"results.json and {', '.join(p.name for p in pngs)} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
