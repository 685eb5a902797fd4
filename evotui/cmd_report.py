"""``evokernel report [RUN ...]``: the paper's metrics as a table, and PNG curves."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="metrics of runs (CR, Acc, fast_1, speedups) and PNG curves")
    p.add_argument("runs", nargs="*", help="run ids (default: every run in the workspace)")
    p.add_argument("--out", default=None, help="folder for the PNG files (default: .evokernel/reports/)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--tasks", action="store_true", help="also list every task of each run")
    p.set_defaults(func=run)


def _fmt(v) -> str:
    if v is None:
        return "-"
    med, lo, hi = v
    return f"{med:.2f}x ({lo:.2f}-{hi:.2f})"


def _roof(v) -> str:
    """Median share of the roofline the best kernels reach (#12)."""
    return "-" if v is None else f"{100 * v[0]:.0f}% ({100 * v[1]:.0f}-{100 * v[2]:.0f})"


def _roof_task(r: dict | None) -> str:
    if not r or r.get("fraction") is None:
        return "-"
    rate = f"{r['achieved_gbps']:.1f} GB/s" if r.get("bound") == "memory" else f"{r['achieved_gflops']:.1f} GFLOP/s"
    return f"{100 * r['fraction']:.0f}% {r['bound']} ({rate})"


def run(args: argparse.Namespace) -> int:
    from core.report import load_metrics, plot
    from core.workspace import Workspace

    ws = Workspace.at(args.workspace)
    metrics = load_metrics(ws, args.runs)
    out_dir = Path(args.out) if args.out else ws.state_dir / "reports"
    pngs = plot(metrics, out_dir)
    if args.json:
        print(json.dumps({"runs": [m.to_dict() for m in metrics], "plots": [str(p) for p in pngs]}, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", title="runs")
    for col in ("run", "status", "method", "model", "tasks", "iters", "CR", "Acc", "fast_1", "best/first", "best/ref",
                "roofline"):
        table.add_column(col)
    for m in metrics:
        table.add_row(m.run_id, m.status, m.method, m.model, str(m.tasks), str(m.iterations), f"{100 * m.cr:.0f}%",
                      f"{100 * m.acc:.0f}%", f"{100 * m.fast_1:.0f}%", _fmt(m.median_iqr(m.speedup_over_first)),
                      _fmt(m.median_iqr(m.speedup_over_reference)), _roof(m.median_iqr(m.roofline_fraction)))
    console = Console()
    console.print(table)
    if args.tasks:
        for m in metrics:
            t = Table(box=None, header_style="bold", title=f"{m.run_id} by task")
            for col in ("task", "attempts", "feasible at", "first ms", "best ms", "speedup", "roofline"):
                t.add_column(col)
            for task, r in m.per_task.items():
                t.add_row(task, str(r["attempts"]), str(r["feasible_at"] + 1) if r["feasible_at"] is not None else "-",
                          f"{r['first_ms']:.3f}" if r["first_ms"] else "-", f"{r['best_ms']:.3f}" if r["best_ms"] else "-",
                          f"{r['speedup']:.2f}x" if r.get("speedup") else "-", _roof_task(r.get("roofline")))
            console.print(t)
    for p in pngs:
        console.print(f"wrote {p}")
    return 0
