"""``tasks --check``: vet a suite by loading, sizing and running every reference once.

Each task runs in its own probe job (verifier.sizing) under a time and memory cap, so a task that
hangs, calls ``os._exit`` or needs a missing package is one row with its problem, never the end of
the listing. The summary line says how many loaded, ran, and landed in the time window.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from core.tasks import Suite, Task, apply_probe, probe_task, recorded_sizes
from verifier import PROBE_TIMEOUT_S, SIZING_BYTES_CAP, SIZING_WINDOW_MS, ProbeSandbox

# why a task is outside the window, as the summary line says it
_OUTSIDE = {"at_floor": "over it at their smallest sizes", "no_sizes": "with nothing to scale",
            "memory_cap": "under it at the memory cap", "cliff": "at a time jump between sizes",
            "no_closer_size": "with no closer size", "steps": "out of sizing steps", "failed": "did not run",
            "timeout": "timed out", "busy": "slowed by the machine's other load",
            "not_sized": "at the sizes given (only --size-scale auto sizes a task into the window)"}


PROBE_TIME_MEANING = (
    "ref ms: the reference alone in its sizing probe, the best of back-to-back calls on the same inputs with "
    "warm caches (verifier.sizing). `evokernel verify` times it in a window instead: the median call, caches flushed "
    "before each, fresh inputs every round, beside the candidate; small tasks take longer there (up to about a "
    "millisecond more per call on a CPU). Compare a kernel's speedup, from one window, never these two times.")
"""Why ``tasks --check``'s reference time and a verification's differ, as both are measured."""


class CheckReport(TypedDict):
    """What ``tasks --check`` found (``--json`` prints it as is)."""

    rows: list[dict[str, Any]]      # one JSON record per task file, keys as check_tasks documents them
    summary: dict[str, Any]         # counts, the window, the scale and why tasks are outside it
    line: str                       # the summary in one line
    ms_meaning: str                 # what its times are, beside a verification's (PROBE_TIME_MEANING)


def check_tasks(suite: Suite, tasks: list[Task], scale: float | str | None, *, threads: int = 1,
                cache_dir: Path | None = None, window: tuple[float, float] = SIZING_WINDOW_MS,
                bytes_cap: int = SIZING_BYTES_CAP,
                timeout_s: float = PROBE_TIMEOUT_S, resize: bool = False, sandbox: ProbeSandbox | None = None,
                use_bwrap: bool = True, seccomp: bool = True, level: int | None = None,
                progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> CheckReport:
    """``{"rows": [...], "summary": {...}, "line": "..."}``: one row per task file (those that did not
    parse included), with ``loaded``, ``sized``, ``ms``, ``in_window``, ``category`` and ``problems``.
    Under "auto" with a workspace (``cache_dir``) the sizes recorded there are used (``recorded``) and
    those not yet recorded are decided and recorded; ``resize`` decides them all again. Every probe runs
    in ``sandbox``, else in one made for the listing (with the verifier's ``use_bwrap`` and ``seccomp``).
    The files the suite refused (at ``level`` when given) are rows too, at their level."""
    if sandbox is None:
        with ProbeSandbox(threads, use_bwrap=use_bwrap, seccomp=seccomp) as own:
            return check_tasks(suite, tasks, scale, threads=threads, cache_dir=cache_dir, window=window,
                               bytes_cap=bytes_cap, timeout_s=timeout_s, resize=resize, sandbox=own, level=level,
                               progress=progress)
    rows: list[dict[str, Any]] = []
    lo, hi = window
    refused = suite.refusals(level)
    total = len(tasks) + len(refused)
    for where, at, why in refused:
        rows.append({"id": Path(where).stem, "level": at, "category": "", "loaded": False, "sized": False,
                     "ms": None, "in_window": False, "problems": [why], "notes": [], "path": where})
        if progress:
            progress(len(rows), total, rows[-1])
    for task in tasks:
        recorded = scale == "auto" and not resize and (rec := recorded_sizes(task, cache_dir)) is not None and rec.ok
        probe = probe_task(task, scale, threads=threads, cache_dir=cache_dir, window=window, bytes_cap=bytes_cap,
                           timeout_s=timeout_s, resize=resize, sandbox=sandbox)
        sized = apply_probe(task, probe) if probe.ok else task
        in_window = probe.ms is not None and lo <= probe.ms <= hi
        problems = [probe.problem] if probe.problem else []
        rows.append({
            "id": task.id, "level": task.level, "category": sized.category, "category_from": sized.category_source,
            "loaded": probe.loaded, "sized": probe.ok and (in_window or scale != "auto"),
            "ms": probe.ms, "case_ms": probe.case_ms, "in_window": in_window,
            "sizes": sized.sizes, "scaled": sized.scale_note(), "bytes": probe.bytes,
            "cases": len(task.original_cases), "problems": problems,
            "notes": [*task.notes, *probe.notes, *sized.case_notes], "recorded": recorded, "sized_by": probe.sized_by,
            "outside": "" if in_window else probe.reason or ("failed" if probe.ms is None else "not_sized"),
            "path": str(task.path),
        })
        if progress:
            progress(len(rows), total, rows[-1])
    n = len(rows)
    summary = {"tasks": n, "loaded": sum(r["loaded"] for r in rows), "ran": sum(r["ms"] is not None for r in rows),
               "in_window": sum(r["in_window"] for r in rows), "problems": sum(bool(r["problems"]) for r in rows),
               "window_ms": [lo, hi], "scale": scale}
    outside: dict[str, int] = {}
    for r in rows:
        if not r["in_window"]:
            why = r.get("outside") or "failed"
            outside[why] = outside.get(why, 0) + 1
    summary["outside"] = outside
    pct = 100.0 * summary["in_window"] / n if n else 0.0
    line = (f"{n} tasks: {summary['loaded']} loaded, {summary['ran']} ran, {summary['in_window']} in the "
            f"{lo:g}-{hi:g} ms window ({pct:.0f} %), {summary['problems']} with problems")
    if outside:
        said = sorted(outside.items(), key=lambda kv: (-kv[1], kv[0]))
        line += " (outside: " + ", ".join(f"{v} {_OUTSIDE.get(k, k)}" for k, v in said) + ")"
    return {"rows": rows, "summary": summary, "line": line, "ms_meaning": PROBE_TIME_MEANING}
