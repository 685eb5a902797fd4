"""``evokernel tasks``: list a suite's tasks (id, level, category, sizes), optionally timing references."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.tasks import ProbeOptions


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tasks", help="list the tasks of a suite")
    p.add_argument("--suite", default=None, help='"builtin" (default) or a folder of KernelBench-format files')
    p.add_argument("--level", type=int, default=None, help="only this level")
    p.add_argument("--size-scale", default=None, help='scale module-level sizes: a factor in (0, 1] or "auto"')
    p.add_argument("--time", action="store_true", help="run and time every reference (cached per machine)")
    p.add_argument("--check", action="store_true",
                   help="vet the suite: load, size and run each reference once (one sandboxed job each)")
    p.add_argument("--timeout", type=float, default=None, help="--check/auto: seconds per task (default 120)")
    p.add_argument("--resize", action="store_true",
                   help="with --check and --size-scale auto: decide the sizes again (they are recorded once)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.errors import TaskError
    from core.identity import workspace_keys
    from core.tasks import load_suite, scale_task
    from core.workspace import Workspace

    ws = Workspace.at(args.workspace)
    config = ws.config()
    suite = load_suite(args.suite or config.suite)
    scale = args.size_scale if args.size_scale is not None else config.size_scale
    probe_options: ProbeOptions = {"threads": config.verifier.threads,
                                   "cache_dir": ws.cache_dir if ws.exists() else None,
                                   # the probe runs the task's reference confined as a job: the verifier's settings
                                   "use_bwrap": config.verifier.use_bwrap, "seccomp": config.verifier.seccomp}
    if args.timeout is not None:
        probe_options["timeout_s"] = args.timeout
    if args.resize:
        if not (args.check and scale == "auto"):
            raise TaskError("--resize decides sizes again: use it with --check and --size-scale auto")
        probe_options["resize"] = True
    if args.check:
        return _check(args, suite, scale, probe_options)
    tasks, failed, unsized = [], [], []
    # a suite whose every file was refused (NPUKernelBench's level 4: torch_npu's own operators) lists none
    # and says why each was refused, never "no task at level None"
    refused = [f"{where}: {why}" for where, _, why in suite.refusals(args.level)]
    for t in suite.select(level=args.level, refusals_ok=True):
        if scale == "auto":  # from the files and the recorded sizes alone: the probe runs in --check
            sized, problem = _recorded(t, probe_options.get("cache_dir"))
            if problem:
                failed.append(problem)
            elif sized is None:
                unsized.append(t.id)
                tasks.append(scale_task(t, None))  # as written (its cases within their budget)
            else:
                tasks.append(sized)
            continue
        try:  # one task that cannot be sized is one line, not the end of the listing
            tasks.append(_as_checked(scale_task(t, scale), t, scale, probe_options))
        except TaskError as exc:
            failed.append(str(exc))
    if unsized:
        where = ("this workspace" if ws.exists() else
                 "no workspace here (`evokernel` here opens the workbench and makes one to record sizes in)")
        names = ", ".join(unsized[:5]) + (", ..." if len(unsized) > 5 else "")
        print(f"evokernel: {len(unsized)} task{'s' * (len(unsized) > 1)} not sized yet in {where} ({names}), listed as "
              "written: `evokernel tasks --check --size-scale auto` sizes them once and records the sizes",
              file=sys.stderr)
    timings: dict[str, dict[str, Any]] = {}
    if args.time:
        timings = _time_references(ws, tasks, quiet=args.json)
    # the key this workspace knows each task by (``relu@mysuite`` where another suite's relu holds ``relu``):
    # the name to give `run --tasks`, `memory list --task` and the one its kernels folder has
    keys = workspace_keys(ws.memory_path, suite.label, tasks) if ws.exists() else {}
    rows = []
    for t in tasks:
        row: dict[str, Any] = {"id": t.id, "key": keys.get(t.name, t.id), "level": t.level, "category": t.category,
                               "path": str(t.path),
                               "sizes": t.sizes, "description": t.description}
        if t.cases:
            row["cases"] = len(t.cases)
        if t.scale_note():
            row["scaled"] = t.scale_note()
        if t.id in timings:
            row.update(timings[t.id])
        rows.append(row)
    for err in [*refused, *failed]:
        print(f"evokernel: skipped {err}", file=sys.stderr)
    if args.json:
        print(json.dumps({"suite": suite.name, "tasks": rows, "errors": [*refused, *failed]}, indent=1))
        return 0
    from evotui.table_output import Column, print_table, to_terminal

    columns = [Column("id"), Column("lvl", "right"), Column("category"), Column("sizes"),
               *([Column("ref ms", "right")] if args.time else []), Column("description", cut=True)]
    table = []
    for r in rows:
        sizes = " ".join(f"{k}={v}" for k, v in r["sizes"].items()) or (f"{r['cases']} cases" if "cases" in r else "")
        reference = f"{r['reference_ms']:.3f}" if "reference_ms" in r else r.get("reference_error", "-")
        extra = [reference] if args.time else []
        table.append([r["key"], r["level"], r["category"], sizes, *extra, r["description"]])
    if to_terminal() or not rows:
        print(f"{suite.name}: {len(rows)} tasks" + (f", {len(refused) + len(failed)} files skipped (above)"
                                                    if refused or failed else ""),
              file=sys.stdout if rows else sys.stderr)
    if rows:
        print_table(columns, table)
    for r in rows:   # notes, never in the table's lines (piped, the table is TSV)
        if "scaled" in r:
            print(f"{r['id']}: {r['scaled']}", file=sys.stderr)
    return 0


def _as_checked(sized: Any, task: Any, scale: Any, options: ProbeOptions) -> Any:
    """``sized`` with its category from the operators ``tasks --check`` traced, when it recorded them here (one
    record for both: the listing never says "activation" where the check said "elementwise")."""
    from core.tasks import checked_probe, with_traced_category

    probe = checked_probe(task, scale, threads=options.get("threads") or 1, cache_dir=options.get("cache_dir"))
    return with_traced_category(sized, probe.ops) if probe is not None and probe.ok else sized


def _recorded(task: Any, cache_dir: Any) -> tuple[Any, str]:
    """``(task at its recorded sizes, "")``, ``(None, why the recorded sizing failed)`` or ``(None, "")``
    when this workspace has not sized it yet."""
    from core.tasks import apply_probe, recorded_sizes

    probe = recorded_sizes(task, cache_dir)
    if probe is None:
        return None, ""
    if not probe.ok:
        return None, f"task {task.id}: --size-scale auto could not size it: {probe.problem}"
    return apply_probe(task, probe), ""


def _time_references(ws: Any, tasks: Any, quiet: bool) -> dict[str, dict[str, Any]]:
    from core.workspace_verifier import time_references

    def progress(i: int, n: int, task_id: str, result: dict[str, Any]) -> None:
        said = f"{result['reference_ms']:.3f} ms" if "reference_ms" in result else result.get("reference_error")
        print(f"[{i}/{n}] {task_id}: {said}", file=sys.stderr)

    return time_references(ws, tasks, None if quiet else progress)


def _check(args: argparse.Namespace, suite: Any, scale: Any, probe_options: ProbeOptions) -> int:
    """``--check``: one row per task file (loaded / sized / time / problems) and a summary line."""
    from core.suite_check import check_tasks

    tasks = suite.select(level=args.level, refusals_ok=True)

    def progress(i: int, n: int, row: dict[str, Any]) -> None:
        said = f"{row['ms']:.3g} ms" if row["ms"] is not None else "-"
        print(f"[{i}/{n}] {row['id']}: {said}{'; ' + row['problems'][0] if row['problems'] else ''}", file=sys.stderr)

    report = check_tasks(suite, tasks, scale, progress=None if args.json else progress, level=args.level,
                         **probe_options)
    if args.json:
        print(json.dumps({"suite": suite.name, **report}, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{suite.name}: check", box=None, header_style="bold")
    # problems: what keeps a task from running or from its window; notes: what sizing did on purpose (a
    # shrink to the memory cap, a case fitted to its time limit, the sizes scaled), which is no problem
    for col in ("id", "lvl", "category", "loaded", "sized", "ref ms", "problems", "notes"):
        table.add_column(col, overflow="fold")
    for r in report["rows"]:
        ms = f"{r['ms']:.3g}" if r["ms"] is not None else "-"
        notes = [*([f"sized by {r['sized_by']}"] if r.get("sized_by") else []), *r["notes"],
                 *([r["scaled"]] if r.get("scaled") else [])]
        level = "-" if r["level"] is None else str(r["level"])   # level 0 is a level (NPUKernelBench's)
        # without auto a task is not sized into the window but run at the sizes given (the summary says so)
        sized = ("yes" if r["sized"] else "no") if scale == "auto" else "as given" if r["loaded"] else "no"
        table.add_row(r["id"], level, r["category"] or "-", "yes" if r["loaded"] else "no",
                      sized, ms, "; ".join(r["problems"]), "; ".join(notes))
    Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None).print(table)
    print(report["line"])
    print(report["ms_meaning"])
    return 0
