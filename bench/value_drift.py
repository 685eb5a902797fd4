"""How values evolve under the credit weights, measured on recorded runs.

    .venv/bin/python bench/value_drift.py --suite DIR [--cite-rate 0.083] [--iterations 4]
    .venv/bin/python bench/value_drift.py --workspace WS        # the runs a workspace recorded (a real model's)

Every credited attempt of a memory keeps what its prompt showed (``extra.context``), what its answer cited
(``extra.cited``) and its reward. This replays those updates, Q <- Q + alpha * w * (r - Q), from zero under
several credit schemes and says, per scheme, what the values came to for the items shown from other tasks:

* ``main``: main before #36: cited items w = 1, the others 0.3, and every item w = 1 when the answer cites
  none (22 of 24 answers of the loopback run);
* ``uncited 0.3`` / ``0.1`` / ``0``: cited w = 1, the others (also when none is cited) the given weight.

Measured: how many items were never cited and the share of them whose value rose above 0.05 (value earned by
sitting in prompts), the mean value of failed attempts shown to other tasks, the share of the top N by value
that were never cited (what exploitation would show next), and how many showings came before an item's first
citation (the limit after which a never-cited item leaves the pool). Without ``--workspace`` it records runs
itself first (``bench/recorded.py``: the engine of this checkout, or of ``--code``, e.g. main's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

CODE = os.environ.get("EVOKERNEL_CODE") or str(Path(__file__).resolve().parents[1])
sys.path.insert(0, CODE)
sys.path.insert(0, str(Path(__file__).resolve().parent))

ALPHA = 0.3
SCHEMES = {"main": (0.3, True), "uncited 0.3": (0.3, False), "uncited 0.1": (0.1, False), "uncited 0": (0.0, False)}
ATTEMPTS = ("draft_trace", "refine_trace", "human_edit")
TOP = 4


def attempts_in_order(store: Any) -> list[Any]:
    """The credited attempts (evokernel's and a person's), oldest first."""
    found = [e for e in store.query(limit=None) if e.kind in ATTEMPTS and (e.extra or {}).get("method", "evokernel")
             == "evokernel"]
    return sorted(found, key=lambda e: (e.created_at, e.id))


def replay(attempts: list[Any], ignored: float, none_is_full: bool) -> dict[str, dict[str, float]]:
    """Each shown item's Q1 and Q2 after replaying every attempt's credit under one scheme (start points, credited
    with w = 1 in every scheme, are left out: they are the task's own)."""
    q: dict[str, dict[str, float]] = defaultdict(lambda: {"draft": 0.0, "refine": 0.0})
    owner = {a.id: a.task_id for a in attempts}
    for a in attempts:
        if a.reward is None:
            continue
        shown = [i for i in (a.extra or {}).get("context", []) if owner.get(i) != a.task_id]
        cited = set((a.extra or {}).get("cited", [])) & set(shown)
        for i in shown:
            w = 1.0 if i in cited or (none_is_full and not cited) else ignored
            q[i][a.stage] += ALPHA * w * (a.reward - q[i][a.stage])
    return q


def measure(store: Any) -> None:
    from core.attempts import outcome_of

    attempts = attempts_in_order(store)
    items = {e.id: e for e in store.query(limit=None)}
    shows: dict[str, int] = defaultdict(int)
    cites: dict[str, int] = defaultdict(int)
    before_first: list[int] = []
    for a in attempts:
        shown = [i for i in (a.extra or {}).get("context", []) if items.get(i) is not None
                 and items[i].task_id != a.task_id]
        cited = set((a.extra or {}).get("cited", []))
        for i in shown:
            if i in cited and not cites[i]:
                before_first.append(shows[i])
            shows[i] += 1
            cites[i] += i in cited
    shown_ids = [i for i in shows if shows[i]]
    never = [i for i in shown_ids if not cites[i]]
    failed = [i for i in shown_ids if items[i].kind in ATTEMPTS and not outcome_of(items[i]).feasible]
    answers = sum(1 for a in attempts if (a.extra or {}).get("context"))
    citing = sum(1 for a in attempts if set((a.extra or {}).get("cited", [])) & set((a.extra or {}).get("context", [])))
    print(f"{len(attempts)} credited attempts, {answers} with memory shown, {citing} citing an item shown; "
          f"{len(shown_ids)} items shown from other tasks, {len(never)} never cited")
    print(f"{'scheme':14s} {'never-cited Q1 > 0.05':>22s} {'mean Q1 never cited':>20s} {'mean Q failed shown':>20s} "
          f"{f'top {TOP} never cited':>18s}")
    for name, (ignored, none_full) in SCHEMES.items():
        q = replay(attempts, ignored, none_full)
        rising = [i for i in never if q[i]["draft"] > 0.05]
        mean_never = statistics.mean(q[i]["draft"] for i in never) if never else 0.0
        mean_failed = statistics.mean(max(q[i].values(), key=abs) for i in failed) if failed else 0.0
        top = sorted(shown_ids, key=lambda i: -q[i]["draft"])[:TOP]
        top_never = sum(1 for i in top if not cites[i]) / max(1, len(top))
        print(f"{name:14s} {len(rising) / max(1, len(never)):>22.2f} {mean_never:>20.3f} {mean_failed:>20.3f} "
              f"{top_never:>18.2f}")
    if before_first:
        ordered = sorted(before_first)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(f"showings before an item's first citation ({len(ordered)} items cited): median "
              f"{statistics.median(ordered):.0f}, 90th percentile {p90}, most {ordered[-1]}")
    else:
        print("no item was ever cited")
    for limit in (4, 8, 12, 16):
        print(f"  never cited and shown at least {limit:2d} times: {sum(1 for i in never if shows[i] >= limit)} items; "
              f"cited items first cited after {limit} or more showings: "
              f"{sum(1 for b in before_first if b >= limit)}")
    consolidation(store, attempts)


def consolidation(store: Any, attempts: list[Any]) -> None:
    """Under the weights now (uncited 0): each item's value when correct kernels of a third operator have cited
    it (``core.memory.successful_adopters`` reaching ``RULE_MIN_TASKS``), and the values of items cited by three
    operators of which some citing attempts failed: where the consolidation threshold ``RULE_MIN_Q`` falls."""
    q: dict[str, dict[str, float]] = defaultdict(lambda: {"draft": 0.0, "refine": 0.0})
    good: dict[str, set[str]] = defaultdict(set)
    bad: dict[str, set[str]] = defaultdict(set)
    reached: list[float] = []
    mixed: list[float] = []
    owner = {a.id: a.task_id for a in attempts}
    for a in attempts:
        if a.reward is None:
            continue
        shown = [i for i in (a.extra or {}).get("context", []) if owner.get(i) != a.task_id]
        for i in set((a.extra or {}).get("cited", [])) & set(shown):
            q[i][a.stage] += ALPHA * (a.reward - q[i][a.stage])
            (good if a.reward > 0 else bad)[i].add(a.task_id)
            if len(good[i]) == 3 and a.reward > 0:
                (mixed if bad.get(i) else reached).append(max(q[i].values()))
    print(f"consolidation: {len(reached)} items reached 3 operators citing them in correct kernels with no failed "
          f"citation, at values {', '.join(f'{v:.2f}' for v in sorted(reached)) or '-'}; {len(mixed)} with a failed "
          f"citation too, at {', '.join(f'{v:.2f}' for v in sorted(mixed)) or '-'}")
    for operators in (2, 1):
        cited = set(good) | set(bad)
        clean = sorted(max(q[i].values()) for i in cited if len(good.get(i, set()) | bad.get(i, set())) >= operators
                       and not bad.get(i))
        dirty = sorted(max(q[i].values()) for i in cited if bad.get(i) and len(good.get(i, set()) | bad[i]) >= operators)
        print(f"  items cited by {operators}+ operators: only in correct kernels {len(clean)}, values "
              f"{_spread(clean)}; also in a failed one {len(dirty)}, values {_spread(dirty)}")


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{values[0]:.2f} .. {statistics.median(values):.2f} .. {values[-1]:.2f} (min, median, max)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, help="measure the runs this workspace (or memory.lmdb) recorded")
    parser.add_argument("--suite", type=Path, help="a fetched KernelBench's KernelBench folder, to record runs")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--cite-rate", type=float, default=2 / 24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from store import Store

    if args.workspace is not None:     # a workspace, or a memory.lmdb itself (one the benchmarks recorded)
        path = args.workspace if args.workspace.suffix == ".lmdb" else args.workspace / ".evokernel" / "memory.lmdb"
        with Store.open(path, readonly=True) as store:
            measure(store)
        return 0
    if args.suite is None:
        parser.error("give --workspace (recorded runs) or --suite (to record some)")
    import recorded
    import retrieval_quality as rq

    folder = Path(tempfile.mkdtemp(prefix="evokernel-value-drift-"))
    facts = recorded.facts_with_meter(folder / "cache")
    families = {t: label[0] for t, label in rq.LABELS.items()}
    with Store.open(folder / "memory.lmdb") as store:
        # two runs in sequence, as a workspace accumulates them: the memory tasks, then the held-out ones
        for seed, ids in ((args.seed, rq.MEMORY), (args.seed + 1, rq.HELD_OUT)):
            recorded.record(store, rq.load(args.suite, ids), families, facts, iterations=args.iterations, seed=seed,
                            cite_rate=args.cite_rate)
        print(f"recorded with the engine of {CODE}: {len(rq.MEMORY)} then {len(rq.HELD_OUT)} public tasks, "
              f"{args.iterations} calls each, cite rate {args.cite_rate:.3f}")
        measure(store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
