"""``evokernel inspect CANDIDATE_DIR``: a look inside a kernel (``core.inspection``). Its hot loops' assembly; with
``--counters``, one case (``--case N``, else the first case a verification times) verified afresh and its timed
calls counted by the harness (``perf_event_open``), the kernel's beside PyTorch's; with ``--against DIR``, the two
candidates side by side and both their hot loops. The task is found as ``verify`` finds it (``--task``,
``--suite``, ``--size-scale``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("inspect", help="a look inside a kernel: hot-loop assembly, counters, two side by side")
    p.add_argument("candidate", help="folder with model.py and kernel sources")
    p.add_argument("--task", default=None, help="task id; default: the folder's name, as in kernels/<task>/")
    p.add_argument("--suite", default=None, help='"builtin" or a folder of KernelBench-format files')
    p.add_argument("--backend", default=None, help="cpu (default)")
    p.add_argument("--size-scale", default=None, help='scale module-level sizes: a factor in (0, 1] or "auto"')
    p.add_argument("--threads", type=int, default=None, help="threads for reference and candidate")
    p.add_argument("--case", type=int, default=None, metavar="N", help="the case to count (by its number)")
    p.add_argument("--counters", action="store_true",
                   help="verify one case afresh and count its timed calls (perf_event_open, in the harness)")
    p.add_argument("--against", default=None, metavar="DIR", help="another candidate of the task, side by side")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.inspection import assembly, side_by_side
    from core.workspace_files import read_candidate_files
    from evotui.cmd_verify import candidate_task

    chosen = args.case
    args.case = None   # the task whole first: the case to count is chosen below
    folder, ws, task, vconfig = candidate_task(args)
    backend = args.backend or ws.config().backend
    files = read_candidate_files(folder)
    data: dict[str, Any] = {"task": task.id, "assembly": assembly(ws, backend, files)}
    if args.against:
        other = read_candidate_files(Path(args.against))
        width = max(100, os.get_terminal_size(sys.stdout.fileno()).columns) if sys.stdout.isatty() else 160
        data["side_by_side"] = side_by_side(files, other, str(folder), str(args.against), width)
        data["against_assembly"] = assembly(ws, backend, other)
    if args.counters:
        data["counters"] = _count(ws, task, folder, vconfig, backend, chosen)
    if args.json:
        print(json.dumps(data, indent=1, default=str))
        return 0
    if "side_by_side" in data:
        print(data["side_by_side"])
        print()
        print(f"== {folder}")
    print(data["assembly"])
    if "against_assembly" in data:
        print()
        print(f"== {args.against}")
        print(data["against_assembly"])
    if "counters" in data:
        _print_counts(data["counters"])
    return 0


def _count(ws: Any, task: Any, folder: Path, vconfig: Any, backend: str, chosen: int | None) -> dict[str, Any]:
    from core.inspection import count_calls, counts_table, first_timed_case, one_case
    from core.workspace_verifier import open_verifier

    number = chosen if chosen is not None else first_timed_case(task)
    single = one_case(task, number)
    with open_verifier(ws, backend, vconfig) as verifier:
        found = count_calls(verifier, single, folder)
    out = found["outcome"]
    return {"case": number, "inputs": (out.cases[0].get("inputs") if out.cases else ""),
            "verdict": out.message, "feasible": out.feasible, "calls": found["calls"],
            "per_call": {"candidate": found["candidate"], "reference": found["reference"]},
            "rows": counts_table(found), "missing": found["missing"], "problem": found["problem"]}


def _print_counts(c: dict[str, Any]) -> None:
    from evotui.table_output import Column, print_table

    print()
    print(f"case #{c['case']} {c.get('inputs') or ''}, verified alone: {c['verdict']}")
    if not c["feasible"]:
        return
    calls = c["calls"]
    print_table([Column("per timed call"), Column("kernel", "right"), Column("PyTorch", "right")], c["rows"],
                title=f"counted by the harness (perf_event_open) over {calls.get('candidate', 0)} calls of the kernel "
                      f"and {calls.get('reference', 0)} of PyTorch")
    if c["missing"]:
        said = "; ".join(f"{k}: {v}" for k, v in sorted(c["missing"].items()))
        print(f"not counted here: {said}", file=sys.stderr)
    if c["problem"]:
        print(f"evokernel: {c['problem']}", file=sys.stderr)
