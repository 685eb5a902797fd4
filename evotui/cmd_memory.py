"""``evokernel memory stats|list|show ID|export FILE|import FILE``: browse and move the memory.

Every action takes ``--json``; ``list`` and ``export`` take the filters ``--task --kind --stage
--backend --source``, and ``list`` sorts by ``--sort {recency,q1,q2,reward,adoptions}``. The memory is
``<workspace>/.evokernel/memory.lmdb``; a workspace without one gets a one-line message, exit 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from core.memory import KINDS, SORTS, SOURCES, STAGES

    p = sub.add_parser("memory", help="browse, export and import the memory of experiences")
    actions = p.add_subparsers(dest="memory_action", metavar="ACTION", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--task", default=None, help="only this task id")
    filters.add_argument("--kind", default=None, choices=KINDS, metavar="KIND", help=", ".join(KINDS))
    filters.add_argument("--stage", default=None, choices=STAGES, help="the stage it was made in")
    filters.add_argument("--backend", default=None, help="cpu, cuda, ascend (an empty string: backend-agnostic)")
    filters.add_argument("--source", default=None, choices=SOURCES, help="where it came from")

    a = actions.add_parser("stats", parents=[common], help="counts by kind, stage, backend and source")
    a.set_defaults(func=run_stats)

    a = actions.add_parser("list", parents=[common, filters], help="list experiences, filtered and sorted")
    a.add_argument("--sort", choices=SORTS, default="recency", help="order (default: recency, newest first)")
    a.add_argument("--asc", action="store_true", help="ascending order instead of descending")
    a.add_argument("--limit", type=int, default=50, help="at most this many (0: all; default 50)")
    a.add_argument("--offset", type=int, default=0, help="skip this many first")
    a.set_defaults(func=run_list)

    a = actions.add_parser("show", parents=[common], help="one experience: outcome, values, history, files")
    a.add_argument("id", help="experience id (or a unique prefix of it)")
    a.set_defaults(func=run_show)

    a = actions.add_parser("export", parents=[common, filters], help="write experiences to a JSON Lines file")
    a.add_argument("file", help="the .jsonl file to write")
    a.set_defaults(func=run_export)

    a = actions.add_parser("import", parents=[common], help="add the experiences of a JSON Lines export")
    a.add_argument("file", help="a file written by `evokernel memory export`")
    a.set_defaults(func=run_import)


def _memory_path(args: argparse.Namespace) -> Path:
    from core.workspace import Workspace

    return Workspace.at(args.workspace).memory_path


def _filters(args: argparse.Namespace) -> dict[str, str | None]:
    return {k: getattr(args, k, None) for k in ("task", "kind", "stage", "backend", "source")}


def _num(value: float | None, fmt: str = "{:+.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "–"


def run_stats(args: argparse.Namespace) -> int:
    from core.memory import memory_stats

    data = memory_stats(_memory_path(args))
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{data['experiences']:,}[/] experiences over {data['tasks_with_experiences']:,} tasks · "
                  f"mean Q1 {data['mean_q1']:+.3f} · mean Q2 {data['mean_q2']:+.3f}")
    for field in ("kind", "stage", "backend", "source"):
        counts = data[f"by_{field}"]
        if counts:
            line = "  ".join(f"{k or '(any)'} [bold]{v:,}[/]" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
            console.print(f"  {field:<8} {line}", soft_wrap=True)
    table = Table(box=None, show_header=False)
    table.add_column("what", style="dim")
    table.add_column("value")
    table.add_row("task states", f"{data['task_states']:,}")
    table.add_row("runs", f"{data['runs']:,}")
    table.add_row("LLM cache", f"{data['cache_entries']:,} responses")
    table.add_row("files", f"{data['blobs']:,} distinct, {sum(data['bytes'].values()) / 2**20:.1f} MiB in all tables")
    table.add_row("map", f"{data['used_bytes'] / 2**20:.1f} of {data['map_size'] / 2**20:.0f} MiB used "
                         "(grows on demand)")
    for key, st in sorted(data["reward_stats"].items()):
        table.add_row(f"reward {key}", f"n={st['count']:,} mean={st['mean']:+.3f} std={st['std']:.3f}")
    table.add_row("path", data["path"])
    console.print(table)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from core.memory import list_experiences

    if args.offset < 0:
        from core.errors import ConfigError

        raise ConfigError(f"--offset must be 0 or more (got {args.offset})")
    limit = None if args.limit <= 0 else args.limit
    data = list_experiences(_memory_path(args), filters=_filters(args), sort=args.sort, descending=not args.asc,
                            limit=limit, offset=args.offset)
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    from evotui.table_output import Column, print_table, to_terminal

    items = data["items"]
    terminal = to_terminal()
    wide = not terminal or shutil.get_terminal_size().columns >= 140   # a pipe gets every column
    cols = [Column("id"), Column("#", "right"), Column("task"), Column("kind"), Column("backend"),
            Column("reward", "right"), Column("Q1", "right"), Column("Q2", "right")]
    if wide:
        cols[4:4] = [Column("stage")]
        cols += [Column("src"), Column("n", "right"), Column("adopt", "right"), Column("created")]
    cols.append(Column("title", cut=True, min_width=10))
    rows = []
    for it in items:
        row = [it["id"], _number(it), it["task"], it["kind"], it["backend"] or "(any)", _num(it["reward"]),
               _num(it["q1"]), _num(it["q2"])]
        if wide:
            row[4:4] = [it["stage"] or "–"]
            row += [it["source"], str(it["n1"] + it["n2"]), str(it["adoptions"]), _when(it["created_at"])]
        rows.append([*row, it["title"]])
    title = (f"{len(items)} of {data['total']:,} experience{'' if data['total'] == 1 else 's'} by {args.sort}"
             f"{' ascending' if args.asc else ''}")
    if not terminal:
        print(f"evokernel: {title}", file=sys.stderr)
    print_table(cols, rows, title=title)
    return 0


def _number(item: dict[str, Any]) -> str:
    """An attempt's ``#n`` among its task's attempts, as the workbench's tree shows it ("" for knowledge)."""
    return f"#{item['number']}" if item.get("number") is not None else ""


def run_show(args: argparse.Namespace) -> int:
    from core.memory import show_experience

    if not args.id.strip():
        from core.errors import ConfigError

        raise ConfigError("give the id (or a unique prefix) of an experience: `evokernel memory list` shows them")
    data = show_experience(_memory_path(args), args.id)
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.syntax import Syntax
    from rich.table import Table

    from core.policy import verdict_note

    console = Console()
    number = f"{_number(data)} · " if data["number"] else ""
    console.print(f"[bold]{number}{data['id']}[/] · {escape(data['task_id'])} · {data['kind']} · "
                  f"{data['stage'] or 'seed'} · {data['backend'] or 'any backend'} · {data['source']}"
                  f"{' · ' + escape(data['model']) if data['model'] else ''} · {_when(data['created_at'])}")
    if data["title"]:
        console.print(f"[bold]{escape(data['title'])}[/]")
    console.print(f"reward {_num(data['reward'])} · Q1 {data['q1']:+.3f} (n={data['n1']}) · "
                  f"Q2 {data['q2']:+.3f} (n={data['n2']}) · adopted by {data['adoptions']} tasks · "
                  f"retrieved {sum(data['retrieved_by'].values())} times")
    console.print(f"earned: {escape(data['earned'])}")
    if data["text"]:
        console.print(escape(data["text"]))
    if data["outcome"]:
        out = data["outcome"]
        console.print(
            f"outcome: {'[green]feasible[/]' if out.get('feasible') else '[red]infeasible[/]'}"
            + (f" · failed at {escape(str(out['failed_gate']))}" if out.get("failed_gate") else "")
            + (f" · {out['latency_ms']:.3f} ms" if isinstance(out.get("latency_ms"), (int, float)) else "")
            + (f" · {out['speedup']:.2f}×" if isinstance(out.get("speedup"), (int, float)) else "")
            + "".join(f" · {said}" for said in dict.fromkeys(verdict_note(str(out.get(k) or ""))
                                                              for k in ("vs_reference", "vs_best")) if said)
        )
        if out.get("message"):
            console.print(f"  {escape(str(out['message']))}")
    if data["parent"]:
        parent = data["parent"]
        console.print(f"parent: {_number(parent) or '–':>4} {parent['id']} {escape(parent['title'])}")
    for child in data["children"]:
        console.print(f"child:  {_number(child) or '–':>4} {child['id']} reward {_num(child['reward'])} "
                      f"{escape(child['title'])}")
    for said in data.get("decisions") or []:   # what was decided about it, and why
        console.print(f"why {said['what']}: {escape(said['why'])}")
    if data["q_history"]:
        hist = Table(title="value history", box=None, header_style="bold")
        for col in ("when", "stage", "reward", "Q", "task"):
            hist.add_column(col)
        for h in data["q_history"][-10:]:
            hist.add_row(_when(h["t"]), h["stage"], _num(h["reward"]), _num(h["q"], "{:+.3f}"),
                         escape(str(h["task"] or "")))
        console.print(hist)
    for name, content in sorted(data["files"].items()):
        console.rule(escape(name))
        lexer = "python" if name.endswith(".py") else "cpp"
        console.print(Syntax(content, lexer, line_numbers=True, word_wrap=False))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from core.memory import export_memory

    out = Path(args.file).expanduser()
    if not out.parent.is_dir():   # like any other bad path: refused, nothing created
        from core.errors import ConfigError

        raise ConfigError(f"cannot write {args.file}: the folder {out.parent} does not exist (create it first)")
    if out.is_dir():
        from core.errors import ConfigError

        raise ConfigError(f"cannot write {args.file}: it is a folder; give a file name (e.g. {out / 'memory.jsonl'})")
    count = export_memory(_memory_path(args), out, filters=_filters(args))
    if args.json:
        print(json.dumps({"exported": count, "file": str(args.file)}))
    else:
        print(f"exported {count:,} experiences to {args.file}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from core.memory import import_memory

    data = import_memory(_memory_path(args), Path(args.file))
    if args.json:
        print(json.dumps({**data, "file": str(args.file)}))
    else:
        print(f"imported {data['added']:,} experiences from {args.file} ({data['skipped']:,} skipped as already "
              f"present or near-duplicates); the memory holds {data['total']:,}")
    return 0
