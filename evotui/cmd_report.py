"""``evokernel report [RUN ...]``: the paper's metrics as a table, and PNG curves."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.report import RunMetrics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="metrics of runs (CR, Acc, fast_1, speedups) and PNG curves")
    p.add_argument("runs", nargs="*", help="run ids (default: every run in the workspace)")
    p.add_argument("--out", default=None, help="folder for the PNG files (default: .evokernel/reports/)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--tasks", action="store_true", help="also list every task of each run")
    p.add_argument("--cases", action="store_true",
                   help="also list every case of each multi-case task (its best kernel, or its closest attempt)")
    p.add_argument("--retime", action="store_true",
                   help="first time each task's best beside its first kernel and PyTorch in one window, now")
    p.set_defaults(func=run)


def _over_first(m: Any) -> str:
    """best/first over the tasks whose best was timed beside their first kernel, and how many were not."""
    apart = f" ({m.not_measured_together} not measured together)" if m.not_measured_together else ""
    return _fmt(m.median_iqr(m.speedup_over_first)) + apart


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    med, lo, hi = v
    return f"{med:.2f}x ({lo:.2f}-{hi:.2f})"


def _share(value: float | None) -> str:
    """A share as a percentage, or n/a (a run that recorded no attempt measured nothing)."""
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _failures(m: Any) -> str:
    """Why a run's attempts failed: "format 5, build 2", and how many tasks ended early."""
    said = ", ".join(f"{why} {n}" for why, n in m.failures.items())
    early = f"{len(m.ended_early)} ended early" if m.ended_early else ""
    return "; ".join(w for w in (said, early) if w) or "-"


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{s:02d}s" if minutes else f"{s}s"


def _roof(v: Any) -> str:
    """Median share of the roofline the best kernels reach (#12)."""
    return "-" if v is None else f"{100 * v[0]:.0f}% ({100 * v[1]:.0f}-{100 * v[2]:.0f})"


def _roof_task(r: dict[str, Any] | None) -> str:
    if not r or r.get("fraction") is None:
        return "-"
    rate = f"{r['achieved_gbps']:.1f} GB/s" if r.get("bound") == "memory" else f"{r['achieved_gflops']:.1f} GFLOP/s"
    return f"{100 * r['fraction']:.0f}% {r['bound']} ({rate})"


def run(args: argparse.Namespace) -> int:
    from core.errors import WorkspaceError
    from core.report import hand_rows, load_metrics, plot
    from core.workspace import Workspace

    ws = Workspace.at(args.workspace)
    hand = {} if args.runs else hand_rows(ws)     # named runs: those only
    try:
        metrics = load_metrics(ws, args.runs)
    except WorkspaceError:
        if args.runs or not hand:
            raise
        metrics = []   # no run yet, but hand edits: their rows alone
    if args.retime:
        from core.report import retime

        for problem in retime(ws, args.runs) if metrics else []:
            print(problem, file=sys.stderr)
        if not metrics:   # never silently ignored
            print("report --retime: no run in this workspace to time again (it times each run's best beside its "
                  "first kernel and PyTorch in one window); a hand edit is timed again with `evokernel verify --fresh "
                  "kernels/<task>`", file=sys.stderr)
    if not metrics and args.tasks:
        print("report --tasks: no run in this workspace, so no per-run task table; the hand edits' table below has a "
              "row per task", file=sys.stderr)
    out_dir = Path(args.out) if args.out else ws.state_dir / "reports"
    pngs = plot(metrics, out_dir) if metrics else []
    if args.json:
        print(json.dumps({"runs": [m.to_dict() for m in metrics], "hand": hand, "plots": [str(p) for p in pngs]},
                         indent=1))
        return 0
    from evotui.table_output import to_terminal

    if metrics:
        _print_runs(metrics, args.tasks)
        if args.cases:
            _print_cases([(m.run_id, task, r.get("cases")) for m in metrics for task, r in m.per_task.items()])
    if hand:
        if metrics:
            print()
        _print_hand(hand)
        if args.cases:
            _print_cases([("hand", task, r.get("cases")) for task, r in hand.items()])
    if args.cases and not any(r.get("cases") for m in metrics for r in m.per_task.values()) and \
            not any(r.get("cases") for r in hand.values()):
        print("report --cases: no multi-case task here has a verdict per case (a task of one case has no "
              "per-case table)", file=sys.stderr)
    for p in pngs:
        print(f"wrote {p}", file=sys.stdout if to_terminal() else sys.stderr)
    return 0


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _said(value: float | None, verdict: str | None, ci: list[float] | None = None) -> str:
    """A speedup with its window's word (``verifier.verdict.word``): "1.83x faster", "0.87x too noisy" (a figure
    that judged nothing is never shown bare)."""
    from core.policy import verdict_word as word

    said = word(str(verdict or ""), ci)
    return f"{value:.2f}x {said}" if value and said else _x(value)


def _print_hand(hand: dict[str, Any]) -> None:
    """One row per task a person edited: edits (typos among them), the first correct and the best."""
    from evotui.table_output import Column, print_table

    columns = [Column("task"), *(Column(c, "right") for c in ("edits", "typos", "first ms", "first", "best ms",
                                                               "best", "best/first"))]
    print_table(columns, [[task, r["edits"], r["typos"], f"{r['first_ms']:.3f}" if r["first_ms"] else "-",
                           _said(r["first_speedup"], r.get("first_vs_reference"), r.get("first_speedup_ci")),
                           f"{r['best_ms']:.3f}" if r["best_ms"] else "-",
                           _said(r["best_speedup"], r.get("best_vs_reference"), r.get("best_speedup_ci")),
                           _x(r["best_over_first"]) if r["best_over_first"] else (r.get("over_first") or "-")]
                          for task, r in hand.items()],
                title="hand edits (speedups over PyTorch, each from its own window)")


def _cases_cells(cases: dict[str, Any] | None) -> list[str]:
    """A multi-case task's cases in two cells: passed of all (for its best kernel, or its closest attempt
    when none was feasible; how many were timed when not all), and its first failing case with its inputs."""
    if not cases:
        return ["-", ""]
    closest = " (closest attempt)" if cases["of"] == "closest" else ""
    if cases["of"] == "best" and 0 < cases.get("timed", 0) < cases["total"]:
        closest = f", {cases['timed']} timed"
    failing = cases["failing"]
    first = f"case {failing[0]['case']}: {failing[0]['inputs']}" if failing else ""   # its number
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    return [f"{cases['passed']}/{cases['total']}{closest}", first + more]


def _print_cases(tables: list[tuple[str, str, dict[str, Any] | None]]) -> None:
    """Every case of every multi-case task (``tables``: (run id or "hand", task, its case summary)): its number,
    inputs, correct or not, and when timed its time, the reference's in the same window and the speedup with its
    interval and verdict (each case's own window)."""
    from core.policy import verdict_word as word
    from evotui.table_output import Column, print_table, to_terminal

    terminal = to_terminal()
    columns = [Column("case", "right"), Column("inputs"), Column("correct", cut=True),
               *(Column(c, "right") for c in ("ms", "ref ms", "speedup")), Column("verdict")]
    every = []
    for run_id, task, cases in tables:
        if not cases:
            continue
        rows = []
        for c in cases["per_case"]:
            ok = c.get("correct")
            ms, ref, speed = c.get("latency_ms"), c.get("reference_ms"), c.get("speedup")
            ci = c.get("speedup_ci")
            rows.append([c.get("case", 0), c.get("inputs", ""),
                         "yes" if ok else f"no: {c.get('message', '')}" if ok is False else "-",
                         f"{ms:.3f}" if ms is not None else "not timed", f"{ref:.3f}" if ref is not None else "",
                         (f"{speed:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and len(ci) == 2 else ""))
                         if speed is not None else "", word(str(c.get("vs_reference") or ""), ci) if speed else ""])
        if terminal:
            which = "best kernel" if cases["of"] == "best" else "closest attempt, not feasible"
            print()
            print_table(columns, rows, title=f"{run_id} {task}: {cases['passed']} of {cases['total']} cases "
                                             f"correct ({which})")
        else:
            every += [[run_id, task, *row] for row in rows]
    if not terminal and every:
        print()
        print_table([Column("run"), Column("task"), *columns], every)


def _print_runs(metrics: list[RunMetrics], with_tasks: bool) -> None:
    from evotui.table_output import Column, print_table, to_terminal

    columns = [Column(c, "left" if c in ("run", "status", "method", "model", "failures") else "right",
                      cut=c == "failures")
               for c in ("run", "status", "method", "model", "tasks", "iters", "CR", "Acc", "fast_1", "best/first",
                         "best/ref", "roofline", "tokens", "time", "failures")]
    print_table(columns, [[m.run_id, m.status, m.method, m.model, m.tasks, f"{m.done}/{m.iterations}",
                           _share(m.cr), _share(m.acc), _share(m.fast_1), _over_first(m),
                           _fmt(m.median_iqr(m.speedup_over_reference)), _roof(m.median_iqr(m.roofline_fraction)),
                           f"{m.tokens:,}", _duration(m.seconds), _failures(m)]
                          for m in metrics], title="runs")
    if with_tasks:
        terminal = to_terminal()
        by_task = [Column("task"), *(Column(c, "right") for c in ("attempts", "feasible at", "first ms", "best ms",
                                                                  "speedup", "roofline", "cases")),
                   Column("failing", cut=True)]
        every = []
        for m in metrics:
            rows = [[task, r["attempts"], str(r["feasible_at"] + 1) if r["feasible_at"] is not None else "-",
                     f"{r['first_ms']:.3f}" if r["first_ms"] else "-", f"{r['best_ms']:.3f}" if r["best_ms"] else "-",
                     _said(r.get("speedup"), r.get("vs_reference"), r.get("speedup_ci")), _roof_task(r.get("roofline")),
                     *_cases_cells(r.get("cases"))]
                    for task, r in m.per_task.items()]
            if terminal:
                print_table(by_task, rows, title=f"{m.run_id} by task")
            else:
                every += [[m.run_id, *row] for row in rows]
        if not terminal:   # one TSV table, a run column first
            print()
            print_table([Column("run"), *by_task], every)
