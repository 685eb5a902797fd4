"""The paper's metrics for runs, and their plots.

- CR: share of answers that gave a kernel that builds (an answer without code, or whose code fails
  the format or anti-hack gate, counts as not compiled).
- Acc: share of tasks with a feasible kernel within the budget.
- fast_1: share of tasks with a feasible kernel faster than the reference (its best's speedup above 1;
  a best whose window was too noisy to judge against the reference does not count).
- speedup of the best kernel over the first feasible one, and over the reference: median and IQR.
- per-iteration correctness: share of tasks with a feasible kernel by each iteration.
- roofline: where each task's best kernel sits against this machine's measured ceilings (the share
  of the roofline it reaches, and a log-log roofline plot with PyTorch's point beside it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store import Experience, RunRecord, Store, TaskProgress
from verifier.outcome import UNJUDGED

if TYPE_CHECKING:
    from core.workspace import Workspace


@dataclass
class RunMetrics:
    run_id: str
    method: str
    model: str
    tasks: int
    iterations: int
    attempts: int
    generated: int
    built: int
    feasible_tasks: int
    fast_tasks: int
    cr: float
    acc: float
    fast_1: float
    status: str = ""                                          # finished, stopped, failed, budget, running
    speedup_over_first: list[float] = field(default_factory=list)
    speedup_over_reference: list[float] = field(default_factory=list)
    curve: list[float] = field(default_factory=list)          # share of tasks feasible by iteration t+1
    roofline_fraction: list[float] = field(default_factory=list)  # best kernels' share of the roofline
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)   # JSON rows, one per task

    @staticmethod
    def median_iqr(values: list[float]) -> tuple[float, float, float] | None:
        if not values:
            return None
        if len(values) == 1:
            return values[0], values[0], values[0]
        q = statistics.quantiles(values, n=4, method="inclusive")
        return statistics.median(values), q[0], q[2]

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["speedup_over_first_median_iqr"] = self.median_iqr(self.speedup_over_first)
        d["speedup_over_reference_median_iqr"] = self.median_iqr(self.speedup_over_reference)
        d["roofline_fraction_median_iqr"] = self.median_iqr(self.roofline_fraction)
        return d


def _gate_passed(exp: Experience, gate: str) -> bool:
    found = exp.result.gate(gate)
    return found is not None and found.status == "passed"


def run_metrics(store: Store, run: RunRecord) -> RunMetrics:
    budget = int(run.config.get("iterations", 0))
    attempts = generated = built = 0
    feasible_at: dict[str, int] = {}
    per_task: dict[str, dict[str, Any]] = {}
    over_first: list[float] = []
    over_ref: list[float] = []
    roof_fraction: list[float] = []
    noisy: set[str] = set()
    for task_id in run.tasks:
        progress = run.progress.get(task_id) or TaskProgress()
        exps = [e for e in store.get_many(progress.attempts) if e is not None]
        first = best = None
        ref_ms = None
        for i, e in enumerate(exps):
            attempts += 1
            if e.files:
                generated += 1
                built += _gate_passed(e, "build")
            result = e.result
            if result.timed:
                feasible_at.setdefault(task_id, e.iteration if e.iteration is not None else i)
                first = first or result
                if e.id == progress.best_id or (best is None and not progress.best_id):
                    best = result      # the run's best: significantly faster in its own window, not the lowest time
                ref_ms = result.reference_ms or ref_ms
        if best is None and first is not None:
            best = first
        first_ms = first.latency_ms if first else None
        best_ms = best.latency_ms if best else None
        roofline = best.roofline if best else None
        row = {"attempts": len(exps), "first_ms": first_ms, "best_ms": best_ms, "reference_ms": ref_ms,
               "feasible_at": feasible_at.get(task_id), "roofline": roofline}
        if roofline and roofline.get("fraction") is not None:
            roof_fraction.append(roofline["fraction"])
        if best is not None and first is not None:
            # over the first draft: the two speedups over PyTorch, each a paired ratio from its own
            # window (the reference cancels the machine's state), never two latencies from two windows
            if best.speedup and first.speedup:
                gain = best.speedup / first.speedup
                row["speedup_over_first"] = gain
                over_first.append(gain)
            if best.speedup:
                row["speedup"] = best.speedup
                if best.vs_reference in UNJUDGED:   # a speedup no window could judge: not fast_1
                    noisy.add(task_id)
                over_ref.append(best.speedup)
        per_task[task_id] = row
    n = max(1, len(run.tasks))
    curve = [sum(1 for at in feasible_at.values() if at <= t) / n for t in range(budget)]
    fast = sum(1 for t, r in per_task.items() if r.get("speedup", 0) > 1.0 and t not in noisy)
    return RunMetrics(
        run_id=run.id, method=run.method, model=str(run.config.get("model", "")), tasks=len(run.tasks),
        iterations=budget, attempts=attempts, generated=generated, built=built, feasible_tasks=len(feasible_at),
        fast_tasks=fast, cr=built / attempts if attempts else 0.0, acc=len(feasible_at) / n, fast_1=fast / n,
        speedup_over_first=over_first, speedup_over_reference=over_ref, curve=curve, per_task=per_task,
        status=run.status, roofline_fraction=roof_fraction,
    )


def load_metrics(workspace: Workspace, run_ids: list[str] | None = None) -> list[RunMetrics]:
    """Metrics of the named runs (default: every run) of a workspace, read without blocking a writer."""
    from core.errors import WorkspaceError

    if not workspace.memory_path.exists():
        raise WorkspaceError(f"no memory in {workspace.root} yet: run `evokernel run` first")
    with Store.open(workspace.memory_path, readonly=True) as store:
        found = [store.get_run(r) for r in run_ids] if run_ids else list(store.list_runs())
        missing = [i for i, r in zip(run_ids or [], found) if r is None]
        if missing:
            raise WorkspaceError(f"no run {', '.join(missing)}; `evokernel report` lists all")
        runs = [r for r in found if r is not None]
        if not runs:
            raise WorkspaceError("no runs in this workspace yet")
        return [run_metrics(store, r) for r in runs]


def plot(metrics: list[RunMetrics], out_dir: Path) -> list[Path]:
    """Per-iteration correctness curves and the speedup distribution, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in metrics:
        ax.plot(range(1, len(m.curve) + 1), [100 * c for c in m.curve], marker=".", label=f"{m.method} ({m.run_id})")
    ax.set_xlabel("iteration (verifier calls per task)")
    ax.set_ylabel("tasks with a feasible kernel (%)")
    ax.set_ylim(0, 100)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "correctness_by_iteration.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)

    fig, ax = plt.subplots(figsize=(6, 4))
    data = [m.speedup_over_reference for m in metrics if m.speedup_over_reference]
    if data:
        ax.boxplot(data, tick_labels=[f"{m.method}\n{m.run_id}" for m in metrics if m.speedup_over_reference])
        ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("speedup of best kernel over PyTorch")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path = out_dir / "speedup_distribution.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)
    paths.append(plot_roofline(metrics, out_dir))
    return paths


def roofline_points(metrics: list[RunMetrics]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The ceilings (of the first kernel that has them) and one point per run and task with a best
    kernel: ``{"label", "intensity", "gflops", "reference_gflops", "fraction", "bound"}``."""
    ceilings: dict[str, Any] | None = None
    points: list[dict[str, Any]] = []
    for m in metrics:
        for task, row in m.per_task.items():
            roof = row.get("roofline") or {}
            if not roof.get("intensity") or not roof.get("achieved_gflops"):
                continue
            if ceilings is None and roof.get("ceiling_gbps"):
                ceilings = {"gbps": roof["ceiling_gbps"], "gflops": roof["ceiling_gflops"]}
            ref_gflops = roof["flops"] / (row["reference_ms"] / 1e3) / 1e9 if row.get("reference_ms") else None
            points.append({"label": task if len(metrics) == 1 else f"{task} ({m.run_id})",
                           "intensity": roof["intensity"], "gflops": roof["achieved_gflops"],
                           "reference_gflops": ref_gflops, "fraction": roof.get("fraction"),
                           "bound": roof.get("bound")})
    return ceilings, points


def plot_roofline(metrics: list[RunMetrics], out_dir: Path) -> Path:
    """``roofline.png``: the machine's roofline (triad bandwidth, FMA peak) on log-log axes, each
    task's best kernel (filled) and PyTorch's reference (hollow) at the task's arithmetic intensity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    ceilings, points = roofline_points(metrics)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    if points:
        xs = [p["intensity"] for p in points]
        lo, hi = min(xs) / 4, max(xs) * 4
        if ceilings:
            ridge = ceilings["gflops"] / ceilings["gbps"]
            lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
            grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
            ax.plot(grid, [min(ceilings["gflops"], x * ceilings["gbps"]) for x in grid], color="black", lw=1.5,
                    label=f"roofline: {ceilings['gbps']:.1f} GB/s triad, {ceilings['gflops']:.0f} GFLOP/s FMA")
        for i, p in enumerate(points):
            color = plt.cm.tab10(i % 10)
            ax.scatter([p["intensity"]], [p["gflops"]], color=color, zorder=3,
                       label=f"{p['label']}" + (f" ({100 * p['fraction']:.0f} %)" if p.get("fraction") else ""))
            if p["reference_gflops"]:
                ax.scatter([p["intensity"]], [p["reference_gflops"]], facecolors="none", edgecolors=color, zorder=3)
                ax.plot([p["intensity"]] * 2, [p["reference_gflops"], p["gflops"]], color=color, lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=6, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no roofline data yet:\nkernels verified before the roofline was measured",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, reference's minimum bytes)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("best kernels (filled) vs PyTorch (hollow) on this machine's roofline", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    path = out_dir / "roofline.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def hand_rows(workspace: Workspace) -> dict[str, dict[str, Any]]:
    """A person's hand edits per task, runs or none: how many (and how many were typos: a save that
    failed to build or the format gate), the first correct one and the best one, each with its
    speedup over PyTorch from its own window, and the best over the first as the ratio of those two
    speedups (the reference cancels the machine's state; never two latencies from two windows). The
    best is the task's recorded best when a person wrote it, else the first correct edit."""
    if not workspace.memory_path.exists():
        return {}
    rows: dict[str, dict[str, Any]] = {}
    with Store.open(workspace.memory_path, readonly=True) as store:
        edits: dict[str, list[Experience]] = {}
        for exp in store.iter_experiences(kind="human_edit"):
            edits.setdefault(exp.task_id, []).append(exp)
        for task_id, exps in sorted(edits.items()):
            exps.sort(key=lambda e: (e.created_at, e.id))
            state = store.get_task(task_id)
            correct = [e for e in exps if e.result.timed]
            first = correct[0] if correct else None
            best = next((e for e in correct if state is not None and e.id == state.best_id), first)
            row: dict[str, Any] = {"edits": len(exps), "typos": sum(1 for e in exps if (e.extra or {}).get("slip")),
                                   "first_id": first.id if first else None, "best_id": best.id if best else None,
                                   "best_is_the_tasks": best is not None and state is not None
                                   and best.id == state.best_id}
            for name, chosen in (("first", first), ("best", best)):
                result = chosen.result if chosen is not None else None
                row[f"{name}_ms"] = result.latency_ms if result else None
                row[f"{name}_speedup"] = result.speedup if result else None
            if row["first_speedup"] and row["best_speedup"]:
                row["best_over_first"] = row["best_speedup"] / row["first_speedup"]
            else:
                row["best_over_first"] = None
            rows[task_id] = row
    return rows
