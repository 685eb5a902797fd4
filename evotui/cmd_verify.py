"""``evokernel verify CANDIDATE_DIR [--task ID]``: the verdict, gate by gate. Without ``--task`` the
task is the folder's name (``kernels/<task>/``, or its ``best/``).

A verdict the workbench recorded for the same files is given at once: a refinement was timed beside
the best it was made against, so that best is passed again and the verifier's record of that window
is found (``--fresh`` measures again).

Exit 0 whenever verification ran, whatever the verdict; 2 for usage errors (unknown task, missing
folder, broken reference).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.table import Table

    from core.tasks import Suite

MARKS = {"passed": "[green]✓[/]", "failed": "[red]✗[/]", "skipped": "[dim]·[/]"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("verify", help="verify a candidate folder against a task, gate by gate")
    p.add_argument("candidate", help="folder with model.py and kernel sources")
    p.add_argument("--task", default=None,
                   help="task id (see `evokernel tasks`); default: the folder's name, as in kernels/<task>/")
    p.add_argument("--suite", default=None, help='"builtin" (default) or a folder of KernelBench-format files')
    p.add_argument("--backend", default=None, help="cpu (default), cuda or ascend")
    p.add_argument("--size-scale", default=None, help='scale module-level sizes: a factor in (0, 1] or "auto"')
    p.add_argument("--threads", type=int, default=None, help="threads for reference and candidate")
    p.add_argument("--fresh", action="store_true",
                   help="verify again even if this exact candidate was verified before (new timing)")
    p.add_argument("--case", type=int, default=None, metavar="N",
                   help="check and time only case N of a multi-case task (by its number, as the tables show it)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verify; with ``--json`` a failure before a verdict (an unknown task, a reference that cannot run or
    be sized) is a JSON outcome too (``"feasible": false, "error": ...``), on stdout, with the same exit
    status the plain command gives."""
    if not args.json:
        return _verify(args)
    from core.errors import user_errors

    def failed(message: str) -> None:
        print(json.dumps({"task": args.task, "feasible": False, "error": message, "message": message,
                          "gates": [], "scaled": None}, indent=1))

    try:
        return _verify(args)
    except user_errors() as exc:
        failed(str(exc))
        return 2
    except OSError as exc:
        failed(f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}")
        return 1
    except Exception as exc:  # our own bug: a JSON outcome here, the traceback still kept by the CLI
        failed(f"internal error ({type(exc).__name__}: {exc})")
        raise


def _verify(args: argparse.Namespace) -> int:
    from core.workspace_verifier import open_verifier, verify_folder

    folder, ws, task, vconfig = candidate_task(args)
    with open_verifier(ws, args.backend, vconfig) as verifier:
        outcome, not_reused = verify_folder(ws, task, folder, verifier, fresh=args.fresh, on_gate=_say_waits)
        isolation = verifier.isolation
    if args.case is not None:
        not_reused = ""   # one case alone is another verification than the workbench's of the whole task
    return _said(args, task, outcome, not_reused, isolation)


def candidate_task(args: argparse.Namespace) -> tuple[Path, Any, Any, Any]:
    """(the candidate's folder, the workspace, its task sized as this workspace sizes it, the verifier's settings)
    from the command line (``--task`` or the folder's name, ``--suite``, ``--size-scale``, ``--threads``,
    ``--case``): what ``verify`` and ``inspect`` verify."""
    from core.errors import WorkspaceError
    from core.identity import keyed, workspace_keys
    from core.tasks import ProbeOptions, load_suite, scale_task
    from core.workspace import Workspace

    folder = Path(args.candidate)
    if not folder.is_dir():
        what = "is a file: give the folder that holds model.py and the kernel" if folder.exists() else "does not exist"
        raise WorkspaceError(f"candidate folder {folder} {what}")
    ws = Workspace.at(args.workspace)
    config = ws.config()
    suite = load_suite(args.suite or config.suite)
    scale = args.size_scale if args.size_scale is not None else config.size_scale
    if args.threads is not None and not 1 <= args.threads <= (os.cpu_count() or 1) * 4:
        from core.errors import ConfigError

        raise ConfigError(f"--threads must be between 1 and {(os.cpu_count() or 1) * 4} (got {args.threads})")
    vconfig = config.verifier.model_copy(update={"threads": args.threads} if args.threads else {})
    probe: ProbeOptions = {"threads": vconfig.threads, "cache_dir": ws.cache_dir if ws.exists() else None,
                           "use_bwrap": vconfig.use_bwrap, "seccomp": vconfig.seccomp} if scale == "auto" else {}
    keys = workspace_keys(ws.memory_path, suite.label, suite.tasks)
    names = {key: name for name, key in keys.items()}   # kernels/relu@mysuite/ is mysuite's relu
    wanted = args.task or task_of_folder(folder, suite, set(names), where_else(ws, folder))
    [task] = keyed([scale_task(suite.get(names.get(wanted, wanted)), scale, **probe)], keys)
    if getattr(args, "case", None) is not None:   # one case, alone: checked and timed in a window of its own
        from core.inspection import one_case

        task = one_case(task, args.case)
    return folder, ws, task, vconfig


def _said(args: argparse.Namespace, task: Any, outcome: Any, not_reused: str, isolation: str) -> int:
    """The verdict printed: one JSON object with ``--json``, else the gates, the cases and the verdict."""
    from core.attempts import outcome_json

    data = outcome_json(outcome)   # every case by its number, as the text says it
    if args.json:
        data["scaled"] = task.scale_note() or None
        print(json.dumps(data, indent=1))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if task.size_overrides:
        console.print(f"[yellow]{escape(task.scale_note())}[/]")
    if not_reused:
        console.print(f"[dim]{escape(not_reused)}[/]")
    table = Table(box=None, show_header=False)
    table.add_column("mark")
    table.add_column("gate")
    table.add_column("s", justify="right")
    table.add_column("message", overflow="fold")
    for g in outcome.gates:
        table.add_row(MARKS[g.status], g.name, f"{g.seconds:.2f}" if g.status != "skipped" else "", escape(g.message))
    cached = " · [dim]recorded verdict (same files verified before; --fresh to re-run)[/]" if outcome.from_cache else ""
    console.print(f"[bold]{escape(task.id)}[/] · {outcome.backend} · {outcome.threads} threads{cached}")
    console.print(table)
    if outcome.cases:
        console.print(case_table(outcome.cases))
    verdict = "[green]✓[/]" if outcome.feasible else "[red]✗[/]"
    console.print(f"{verdict} {escape(outcome.message)}")
    for flag in outcome.flags:
        console.print(f"[yellow]flag:[/] {escape(flag)}")
    if outcome.feasible and outcome.not_judged:   # a flag is no verdict: never a best, a reward or a parent
        console.print("[yellow]not judged:[/] the harness could not fully check this verdict; the workbench and runs "
                      "give it no reward and never make it a best or a start point")
    console.print(f"[dim]sandbox: {escape(isolation)}[/]")
    return 0


CASE_COLUMNS_MEANING = (
    "ms, ref ms: the median call of each side in the case's own window; speedup: the median over the window's "
    "rounds of the paired ratio (reference / kernel, both timed in one round), with its verdict: it need not "
    "equal ref ms / ms")
"""What a case row's figures are, said under the table (#51: 4.961 ms beside 16.041 ms read "2.36x")."""


def _say_waits(gate: Any) -> None:
    """A gate waiting for the machine's timing lock says so on stderr, with who holds it (nothing else is said
    while verifying: the verdict follows)."""
    import sys

    if gate.status == "waiting":
        print(f"evokernel: {gate.name}: {gate.message}", file=sys.stderr, flush=True)


def case_table(cases: list[dict[str, Any]]) -> Table:
    """A multi-case task's verdict per case: its number, its inputs, correct or not (with the largest error or the
    first failure), and once timed its time, the reference's in the same window and the speedup with its verdict
    ("not timed": a case beyond the cases a verification times, [verifier] timed_cases)."""
    from rich.markup import escape
    from rich.table import Table

    from core.policy import verdict_word as word

    table = Table(title="per case", box=None, title_justify="left", caption=CASE_COLUMNS_MEANING,
                  caption_justify="left")
    against_best = any(c.get("gain") is not None for c in cases)   # timed beside the best: each case's gain too
    for name, justify in (("case", "right"), ("inputs", "left"), ("correct", "left"), ("ms", "right"),
                          ("ref ms", "right"), ("speedup", "right"), ("verdict", "left"),
                          *((("vs best", "right"),) if against_best else ())):
        table.add_column(name, justify=justify, overflow="fold")
    for c in cases:
        correct = c.get("correct")
        mark = ("[green]✓[/]" + (f" {c['max_abs_error']:.1e}" if c.get("max_abs_error") is not None else "")
                if correct else "[red]✗[/] " + escape(str(c.get("message", ""))[:160]) if correct is False else "")
        ms, ref, speed = c.get("latency_ms"), c.get("reference_ms"), c.get("speedup")
        number = c.get("number") or int(c.get("case", 0)) + 1
        table.add_row(str(number), escape(str(c.get("inputs", ""))), mark,
                      f"{ms:.3f}" if ms is not None else "[dim]not timed[/]" if c.get("timed") is False else "",
                      f"{ref:.3f}" if ref is not None else "",
                      f"{speed:.2f}x" if speed is not None else "",
                      word(str(c.get("vs_reference") or ""), c.get("speedup_ci")) if speed is not None else "",
                      *(((f"{c['gain']:.2f}x {word(str(c.get('vs_best') or ''), c.get('gain_ci'))}".strip()
                          if c.get("gain") is not None else ""),) if against_best else ()))
    return table


def task_of_folder(folder: Path, suite: Suite, keys: Iterable[str] = (), elsewhere: str = "") -> str:
    """The task a candidate folder is for, from its name: ``kernels/<task>/`` or ``kernels/<task>/best/``
    (a task's id in the suite, or one of ``keys``, its key in the workspace). Otherwise the error names the fix:
    ``--suite`` where the workspace knows the folder as another suite's task (``elsewhere``: that suite's spec),
    else ``--task`` or ``--suite``."""
    from core.errors import TaskError

    path = folder.resolve()
    ids = {t.id for t in suite.tasks} | set(keys)
    for name in (path.name, path.parent.name if path.name == "best" else ""):
        if name in ids:
            return name
    if elsewhere:
        raise TaskError(f"{path.name!r} is a task of suite {elsewhere}, not of suite {suite.name}: give --suite "
                        f"{elsewhere}")
    raise TaskError(f"the folder name {path.name!r} is not a task of suite {suite.name}: give --suite DIR when it is "
                    "another suite's task, or --task ID (`evokernel tasks [--suite DIR]` lists them)")


def where_else(ws: Any, folder: Path) -> str:
    """The suite (what loads it: ``builtin`` or its folder) of the workspace's task whose key is the folder's name
    (or its parent's, for ``best/``), "" when the workspace knows none."""
    from core.identity import suite_of_key

    path = folder.resolve()
    name = path.parent.name if path.name == "best" else path.name
    return suite_of_key(ws.memory_path, name) if ws.exists() else ""
