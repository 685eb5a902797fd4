"""What the workbench shows of a workspace, as plain data: one row per task, a task's attempts as a
tree (drafts are roots, refinements hang under the start point they came from), and one attempt
with its parent for a diff.

Read-only and quick (a few LMDB reads); safe from any thread. Nothing here knows about Textual.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store import Experience, RunRecord, Store, TaskState
from store.protocol import Memory
from verifier import GATES, Outcome, numbered_entry

# Experience and RunRecord (store/) are what an attempt and a run are stored as: the workbench names them from here,
# and a verdict's case as JSON shows it (numbered_entry: by its number, as every table names it).
__all__ = ["ATTEMPT_KINDS", "NOT_JUDGED", "AttemptLine", "Experience", "Outcome", "RunRecord", "TaskRow",
           "attempt_lines", "attempt_numbers", "attempt_with_parent", "closest_version", "default_attempt",
           "gate_states", "numbered_attempts", "numbered_entry", "outcome_json", "outcome_of", "recorded_best",
           "task_rows"]

if TYPE_CHECKING:
    from core.tasks import Task
    from core.workspace import Workspace

NOT_JUDGED = "not_judged"
"""The kind of an attempt whose verification the tool failed (``Outcome.not_judged``): shown in its task's
tree with the reason, never retrieved, rewarded, a parent or a start point."""
ATTEMPT_KINDS = ("draft_trace", "refine_trace", "human_edit", "baseline_trace", NOT_JUDGED)


@dataclass(frozen=True)
class TaskRow:
    """One line of the task table."""

    id: str
    level: int
    category: str
    stage: str                   # draft | refine
    used: int                    # verifier calls spent in the latest run of this task (or 0)
    budget: int
    best_speedup: float | None   # over the reference, of the best feasible attempt
    best_ms: float | None
    feasible: bool
    attempts: int = 0


@dataclass(frozen=True)
class AttemptLine:
    """One attempt in a task's tree, in display order (depth-first, oldest child first)."""

    id: str
    index: int                   # 1-based, in creation order among the task's attempts
    parent_id: str | None
    parent_index: int | None
    depth: int
    stage: str
    source: str                  # llm | human
    kind: str
    gates: tuple[tuple[str, str], ...]   # (gate, passed|failed|skipped) in gate order
    feasible: bool
    failed_gate: str | None
    message: str
    latency_ms: float | None
    speedup: float | None
    reward: float | None
    best: bool = False
    not_judged: bool = False     # the tool failed its verification: no verdict on the kernel
    repeats: int = 0             # later answers of a run that gave the same code again (not stored twice)
    last_child: bool = True      # no later sibling (for drawing the tree)
    ancestors_last: tuple[bool, ...] = field(default=())   # last_child of each ancestor, root first


def outcome_of(exp: Experience) -> Outcome:
    """The verifier's Outcome stored with an experience (the store keeps it as plain data), read back in
    the one shape the verifier wrote; knowledge and attempts never verified read as unverified."""
    return Outcome.from_dict(exp.outcome)


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """An outcome as ``verify --json`` prints it: every case named by its number, as the text names it (the
    per-case verdicts, and the cases in the gates' details: ``timed_cases``, ``not_timed``); the stored record keeps
    each case's index."""
    data = outcome.to_dict()
    numbers = {int(c["case"]): int(c.get("number") or int(c["case"]) + 1) for c in data.get("cases") or []
               if "case" in c}
    data["cases"] = [numbered_entry(c) for c in data.get("cases") or []]
    for gate in data.get("gates") or []:
        details = gate.get("details") or {}
        if isinstance(details.get("cases"), list):
            details["cases"] = [numbered_entry(c) if isinstance(c, dict) else c for c in details["cases"]]
        for name in ("timed_cases", "not_timed"):
            if isinstance(details.get(name), list):
                details[name] = [numbers.get(int(k), int(k) + 1) for k in details[name]]
    return data


def gate_states(outcome: Outcome) -> tuple[tuple[str, str], ...]:
    """Every gate's status, in order; gates an outcome does not mention count as skipped."""
    found = {g.name: g.status for g in outcome.gates}
    return tuple((g, found.get(g, "skipped")) for g in GATES)


def task_rows(store: Store, tasks: Sequence[Task], budget: int, runs: list[RunRecord] | None = None) -> list[TaskRow]:
    """The task table: each task's stage and best result from the store, progress from its latest run."""
    runs = runs if runs is not None else store.list_runs()
    latest: dict[str, RunRecord] = {}
    for run in runs:                      # oldest first: later runs win
        for task_id in run.tasks:
            latest[task_id] = run
    states = {s.task_id: s for s in store.list_tasks()}
    best_ids = [s.best_id for s in states.values() if s.best_id]
    best = {e.id: e for e in store.get_many(best_ids)}
    rows = []
    for task in tasks:
        state = states.get(task.id) or TaskState(task.id)
        last_run = latest.get(task.id)
        progress = last_run.progress.get(task.id) if last_run else None
        exp = best.get(state.best_id or "")
        rows.append(TaskRow(
            id=task.id, level=task.level, category=task.category, stage=state.stage if state.feasible else "draft",
            used=progress.iterations_used if progress else 0,
            budget=int(last_run.config.get("iterations", budget)) if last_run else budget,
            best_speedup=outcome_of(exp).speedup if exp else None, best_ms=state.best_latency_ms,
            feasible=state.feasible,
            attempts=len(progress.attempts) if progress else 0,
        ))
    return rows


def numbered_attempts(store: Memory, task_id: str) -> list[Experience]:
    """The task's attempts in creation order: the n-th is attempt ``#n`` wherever it is shown (the
    attempt tree, the memory browser), so one attempt has one number."""
    pairs = store.attempt_tree(task_id)
    return [e for e in store.get_many([i for i, _ in pairs]) if e.kind in ATTEMPT_KINDS]


def attempt_numbers(store: Memory, task_ids: Iterable[str]) -> dict[str, int]:
    """Experience id -> its ``#n`` among its task's attempts, for every attempt of ``task_ids``."""
    return {e.id: n for task_id in sorted(set(task_ids)) for n, e in enumerate(numbered_attempts(store, task_id), 1)}


def attempt_lines(store: Store, task_id: str) -> list[AttemptLine]:
    """The task's attempts as a tree, flattened depth-first for display."""
    exps = numbered_attempts(store, task_id)
    state = store.get_task(task_id)
    best_id = state.best_id if state else None
    index = {e.id: n for n, e in enumerate(exps, 1)}
    uses: dict[str, int] = {}
    for run in store.list_runs():       # a run lists an attempt once per answer that gave it
        for exp_id in (run.progress[task_id].attempts if task_id in run.progress else []):
            uses[exp_id] = uses.get(exp_id, 0) + 1
    children: dict[str | None, list[Experience]] = {}
    for e in exps:
        parent = e.parent_id if e.parent_id in index else None
        children.setdefault(parent, []).append(e)
    lines: list[AttemptLine] = []

    def walk(parent: str | None, depth: int, ancestors: tuple[bool, ...]) -> None:
        kids = children.get(parent, [])
        for n, e in enumerate(kids):
            last = n == len(kids) - 1
            out = outcome_of(e)
            lines.append(AttemptLine(
                id=e.id, index=index[e.id], parent_id=e.parent_id if e.parent_id in index else None,
                parent_index=index.get(e.parent_id or ""), depth=depth, stage=e.stage, source=e.source, kind=e.kind,
                gates=gate_states(out), feasible=out.feasible, failed_gate=out.failed_gate,
                message=out.message, latency_ms=out.latency_ms, speedup=out.speedup,
                reward=e.reward, best=e.id == best_id, not_judged=e.kind == NOT_JUDGED,
                repeats=max(0, uses.get(e.id, 0) - 1), last_child=last,
                ancestors_last=ancestors,
            ))
            walk(e.id, depth + 1, (*ancestors, last))

    walk(None, 0, ())
    return lines


def default_attempt(lines: list[AttemptLine]) -> AttemptLine | None:
    """The attempt to show first: the task's best, else its newest."""
    best = [line for line in lines if line.best]
    return best[0] if best else max(lines, key=lambda line: line.index, default=None)


def attempt_with_parent(store: Store, exp_id: str) -> tuple[Experience | None, Experience | None]:
    """An attempt (or any experience) with its files, and its parent's (None when it has none)."""
    exp = store.get(exp_id)
    parent = store.get(exp.parent_id) if exp is not None and exp.parent_id else None
    return exp, parent


def first_change(before: dict[str, str], after: dict[str, str], limit: int = 60) -> str:
    """What an edit changed, in a few words for its title: the first added (else removed) line of its
    diff against ``before``, with its file: "kernel.cpp: + #pragma omp simd"; "" when nothing differs."""
    import difflib

    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, "").splitlines(), after.get(name, "").splitlines()
        if old == new:
            continue
        added: list[str] = []
        removed: list[str] = []
        for line in difflib.unified_diff(old, new, lineterm="", n=0):
            if line.startswith(("+++", "---", "@@")):
                continue
            text = " ".join(line[1:].split())
            if text:
                (added if line[0] == "+" else removed).append(text)
        if added or removed:
            sign, text = ("+", added[0]) if added else ("-", removed[0])
            return f"{name}: {sign} {text}"[:limit]
    return ""


LINEAGE_SCAN = 60
"""How many of a task's latest working versions a save is compared with to find where it came from."""


def closest_version(store: Memory, task_id: str, files: dict[str, str], hint: str | None = None
                    ) -> tuple[str | None, str]:
    """Where a person's save came from: the task's attempt whose code is closest to ``files`` among those a save
    may descend from (correctness passed and judged, not a probe or a typo), by the share
    of lines the two have alike; ``hint`` (the last working version the folder noted, or what the engine put
    there) wins a tie, then the latest. Returns (its id, why, in words), or (None, "") when the task has none.
    (#51: parented on the last passing save, a v1-plus-``simd`` save hung under v3, its diff rewriting the file.)"""
    import difflib

    candidates = [e for e in numbered_attempts(store, task_id) if _may_parent(e)][-LINEAGE_SCAN:]
    if not candidates:
        return None, ""
    numbers = {e.id: n for n, e in enumerate(numbered_attempts(store, task_id), 1)}
    saved = _lines(files)

    def alike(exp: Experience) -> float:
        theirs = _lines(exp.files)
        return difflib.SequenceMatcher(None, theirs, saved, autojunk=False).ratio() if theirs or saved else 1.0

    scored = [(alike(e), e.id == hint, e.created_at, e) for e in candidates]
    share, _, _, chosen = max(scored, key=lambda s: (round(s[0], 6), s[1], s[2]))
    label = f"#{numbers.get(chosen.id, '?')}"
    if hint and chosen.id != hint and hint in numbers:
        why = (f"the closest earlier version, {label} ({100 * share:.0f} % of lines alike; the last working version "
               f"#{numbers[hint]} is further)")
    else:
        why = f"the closest earlier version, {label} ({100 * share:.0f} % of lines alike)"
    return chosen.id, why


def _may_parent(exp: Experience) -> bool:
    """Whether a later save may descend from ``exp``: it passed correctness, was judged, and teaches."""
    if exp.kind == NOT_JUDGED or (exp.extra or {}).get("probe") or (exp.extra or {}).get("slip") or not exp.files:
        return False
    found = outcome_of(exp).gate_or_none("correctness")
    return found is not None and found.passed


def _lines(files: dict[str, str]) -> list[str]:
    """A candidate's lines, each with its file's name, spacing aside: what two versions are compared by."""
    return [f"{name}:{' '.join(line.split())}" for name in sorted(files) for line in files[name].splitlines()
            if line.strip()]


def recorded_best(ws: Workspace, task_id: str, folder: Path, backend: str) -> tuple[str, dict[str, str]] | None:
    """When the memory holds an attempt of ``task_id`` with this code (comments and spacing aside,
    ``candidate_identity``) that was timed beside a best: (that attempt as the workbench names it, ``#n``,
    the best's files). Passing the same best to the verifier finds the verdict it recorded for that window."""
    from core.workspace_files import read_candidate_files
    from store.errors import SchemaMismatch, StoreNotFound, StoreUnreadable
    from verifier import candidate_identity

    if not ws.memory_path.exists():
        return None
    identity = candidate_identity(read_candidate_files(folder))
    try:
        with Store.open(ws.memory_path, readonly=True) as store:
            for exp in store.iter_experiences(task=task_id, backend=backend):
                best_id = (exp.extra or {}).get("best")
                if (exp.backend == backend and best_id and exp.files and exp.kind != NOT_JUDGED
                        and (exp.code_id or candidate_identity(exp.files)) == identity):
                    best = store.get(best_id)
                    if best is not None and best.files:
                        number = attempt_numbers(store, [task_id]).get(exp.id)
                        return (f"#{number}" if number else exp.id), dict(best.files)
    except (StoreNotFound, StoreUnreadable, SchemaMismatch):
        return None   # a memory that cannot be read: verify as if none was recorded
    return None
