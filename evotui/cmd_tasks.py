"""``evokernel tasks``: list a suite's tasks (id, level, category, sizes), optionally timing references."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="list the tasks of a suite")
    p.add_argument("--suite", default=None, help='"builtin" (default) or a folder of KernelBench-format files')
    p.add_argument("--level", type=int, default=None, help="only this level")
    p.add_argument("--size-scale", default=None, help='scale module-level sizes: a factor in (0, 1] or "auto"')
    p.add_argument("--time", action="store_true", help="run and time every reference (cached per machine)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.tasks import load_suite, scale_task
    from core.workspace import Workspace

    ws = Workspace.at(args.workspace)
    config = ws.config()
    suite = load_suite(args.suite or config.suite)
    scale = args.size_scale if args.size_scale is not None else config.size_scale
    tasks = [scale_task(t, scale) for t in suite.select(level=args.level)]
    timings: dict[str, dict] = {}
    if args.time:
        timings = _time_references(ws, tasks, quiet=args.json)
    rows = []
    for t in tasks:
        row = {"id": t.id, "level": t.level, "category": t.category, "path": str(t.path), "sizes": t.sizes,
               "description": t.description}
        if t.size_overrides:
            row["scaled"] = t.scale_note()
        if t.id in timings:
            row.update(timings[t.id])
        rows.append(row)
    for err in suite.errors:
        print(f"evokernel: skipped {err}", file=sys.stderr)
    if args.json:
        print(json.dumps({"suite": suite.name, "tasks": rows, "errors": suite.errors}, indent=1))
        return 0
    from evotui.table_output import Column, print_table, to_terminal

    columns = [Column("id"), Column("lvl", "right"), Column("category"), Column("sizes"),
               *([Column("ref ms", "right")] if args.time else []), Column("description", cut=True)]
    table = []
    for r in rows:
        sizes = " ".join(f"{k}={v}" for k, v in r["sizes"].items())
        extra = [f"{r['reference_ms']:.3f}" if "reference_ms" in r else r.get("reference_error", "-")] if args.time else []
        table.append([r["id"], r["level"], r["category"], sizes, *extra, r["description"]])
    if to_terminal():
        print(f"{suite.name}: {len(rows)} tasks")
    print_table(columns, table)
    for r in rows:
        if "scaled" in r:
            print(f"{r['id']}: {r['scaled']}")
    return 0


def _time_references(ws, tasks, quiet: bool) -> dict[str, dict]:
    from core.verification import time_references

    def progress(i: int, n: int, task_id: str, result: dict) -> None:
        said = f"{result['reference_ms']:.3f} ms" if "reference_ms" in result else result.get("reference_error")
        print(f"[{i}/{n}] {task_id}: {said}", file=sys.stderr)

    return time_references(ws, tasks, None if quiet else progress)
