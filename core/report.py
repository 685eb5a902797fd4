"""The paper's metrics for runs, and their plots.

- CR: share of answers that gave a kernel that builds (an answer without code, or whose code fails
  the format or anti-hack gate, counts as not compiled).
- Acc: share of tasks with a feasible kernel within the budget.
CR, Acc and fast_1 are None (n/a) for a run that recorded no attempt: nothing was generated to measure.
- per run: the iterations done (the most any task used, beside the budget), tokens, the seconds it ran, and why
  its attempts failed (the failing gate's name counted, answers without usable code as "no code", the tool's
  own failures as "not judged"; tasks that ended early beside).
Every figure is read from the verdicts of the timing windows, never from two windows divided:
- fast_1: share of tasks whose best kernel's own window says "faster" than the reference (its whole
  interval above 1 by at least the gate's minimum change); "same speed", "too noisy" or a kernel the
  machine's ceiling makes implausible do not count, whatever the ratio.
- speedup of the best kernel over the first feasible one, and over the reference: from the run's final
  window (the engine times each task's best beside its first feasible kernel and the reference at the
  end of a run), else the paired gain of the window in which the best was timed beside the first (1
  when the first is the best); a best never timed beside the first is "not measured together" and
  left out (dividing two speedups from two windows is not a measurement).
- speedup over the reference, and the reference's time: from the final window, else the best's own.
  Median and IQR over tasks. With a final window the task's first and best times and the best's
  roofline point are that window's too (no time from another window beside its reference).
- per-iteration correctness: share of tasks with a feasible kernel by each iteration.
- roofline: where each task's best kernel sits against this machine's measured ceilings (the share
  of the roofline it reaches, and a log-log roofline plot with PyTorch's point beside it).
- per case (a multi-case task): how many of its cases the best kernel passed (all, being feasible),
  with each case's time, the reference's and the speedup from that case's own window; a task never
  feasible shows its closest attempt instead (the most cases correct), its failing cases named with
  their inputs. Read from the verdicts' ``Outcome.cases``, nothing computed across windows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.attempts import outcome_of
from store import Experience, RunRecord, Store, TaskProgress
from verifier import FASTER, Outcome

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
    cr: float | None                                          # None (n/a): no attempt was recorded
    acc: float | None
    fast_1: float | None
    status: str = ""                                          # finished, stopped, failed, budget, running
    done: int = 0                                             # iterations done: the most any task used
    tokens: int = 0
    seconds: float = 0.0                                      # the run's time running, all its sessions together
    failures: dict[str, int] = field(default_factory=dict)    # failing gate (or "no code", "not judged") -> attempts
    ended_early: list[str] = field(default_factory=list)      # tasks that ended before their budget, and why
    speedup_over_first: list[float] = field(default_factory=list)
    speedup_over_reference: list[float] = field(default_factory=list)
    curve: list[float] = field(default_factory=list)          # share of tasks feasible by iteration t+1
    roofline_fraction: list[float] = field(default_factory=list)  # best kernels' share of the roofline
    not_measured_together: int = 0    # tasks whose best was never timed beside their first feasible kernel
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
    found = outcome_of(exp).gate_or_none(gate)
    return found is not None and found.status == "passed"


@dataclass
class _Tally:
    """What a run's attempts add up to, task by task (``run_metrics``)."""

    attempts: int = 0
    generated: int = 0
    built: int = 0
    fast: int = 0
    apart: int = 0
    feasible_at: dict[str, int] = field(default_factory=dict)
    over_first: list[float] = field(default_factory=list)
    over_ref: list[float] = field(default_factory=list)
    roof_fraction: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def count(self, task_id: str, exps: list[Experience], best_id: str | None
              ) -> tuple[Outcome | None, Outcome | None, Outcome | None]:
        """Count a task's attempts; its first timed kernel, its best (significantly faster in its own window, not
        the lowest time), and the attempt with the most cases correct (the later on a tie)."""
        first = best = closest = None
        for i, e in enumerate(exps):
            self.attempts += 1
            if e.files:
                self.generated += 1
                self.built += _gate_passed(e, "build")
            result = outcome_of(e)
            why = ("not judged" if result.not_judged else "no code" if not e.files else
                   result.failed_gate if not result.feasible else None)
            if why:
                self.failures[why] = self.failures.get(why, 0) + 1
            if result.cases and (closest is None or _cases_correct(result) >= _cases_correct(closest)):
                closest = result
            if result.timed:
                self.feasible_at.setdefault(task_id, e.iteration if e.iteration is not None else i)
                first = first or result
                if e.id == best_id or (best is None and not best_id):
                    best = result
        return first, best if best is not None else first, closest


def run_metrics(store: Store, run: RunRecord) -> RunMetrics:
    budget = int(run.config.get("iterations", 0))
    tally = _Tally()
    per_task: dict[str, dict[str, Any]] = {}
    for task_id in run.tasks:
        progress = run.progress.get(task_id) or TaskProgress()
        exps = [e for e in store.get_many(progress.attempts) if e is not None]
        first, best, closest = tally.count(task_id, exps, progress.best_id)
        per_task[task_id] = _task_row(tally, progress, len(exps), first, best, closest,
                                      tally.feasible_at.get(task_id))
    n = max(1, len(run.tasks))
    curve = [sum(1 for at in tally.feasible_at.values() if at <= t) / n for t in range(budget)]
    tried = tally.attempts > 0    # a run that recorded no attempt measured nothing: n/a, not 0 %
    seconds = run.extra.get("seconds")
    return RunMetrics(
        run_id=run.id, method=run.method, model=str(run.config.get("model", "")), tasks=len(run.tasks),
        iterations=budget, attempts=tally.attempts, generated=tally.generated, built=tally.built,
        feasible_tasks=len(tally.feasible_at), fast_tasks=tally.fast,
        cr=tally.built / tally.attempts if tried else None, acc=len(tally.feasible_at) / n if tried else None,
        fast_1=tally.fast / n if tried else None,
        speedup_over_first=tally.over_first, speedup_over_reference=tally.over_ref, curve=curve, per_task=per_task,
        status=run.status, roofline_fraction=tally.roof_fraction, not_measured_together=tally.apart,
        done=max((p.iterations_used for p in run.progress.values()), default=0),
        tokens=run.tokens_in + run.tokens_out,
        seconds=float(seconds) if isinstance(seconds, (int, float)) else max(0.0, run.updated_at - run.started_at),
        failures=dict(sorted(tally.failures.items(), key=lambda kv: -kv[1])),
        ended_early=[f"{t}: {p.broken}" for t, p in run.progress.items() if p.broken],
    )


def _task_row(tally: _Tally, progress: TaskProgress, attempts: int, first: Outcome | None, best: Outcome | None,
              closest: Outcome | None, feasible_at: int | None) -> dict[str, Any]:
    """A task's row of the report: its first and best times, its best's speedups (from the final window when the
    run ended with one, else from the best's own), its cases and its roofline; the tally's speedups and fast_1."""
    roofline = best.roofline if best else None
    row: dict[str, Any] = {"attempts": attempts, "first_ms": first.latency_ms if first else None,
                           "best_ms": best.latency_ms if best else None,
                           "reference_ms": best.reference_ms if best else None,   # the best's own window
                           "feasible_at": feasible_at, "roofline": roofline}
    if best is not None and best.cases:
        row["cases"] = case_summary(best, "best")
    elif best is None and closest is not None:
        row["cases"] = case_summary(closest, "closest")
    final = progress.extra.get("final") or {}
    if final.get("feasible") and final.get("best") == progress.best_id:
        # the best, the first and the reference timed together at the end of the run: every time in the
        # row from that window (never the first's and the best's own windows beside its reference)
        roofline = _roofline_at(roofline, final.get("latency_ms"))
        row.update(first_ms=final.get("first_ms") or row["first_ms"],
                   best_ms=final.get("latency_ms") or row["best_ms"], roofline=roofline)
        row.update(reference_ms=final["reference_ms"], speedup=final["speedup"], speedup_ci=final["speedup_ci"],
                   vs_reference=final["vs_reference"], speedup_over_first=final["gain"],
                   speedup_over_first_ci=final["gain_ci"], over_first=final["vs_first"], window="final")
        tally.over_first.append(final["gain"])
        tally.over_ref.append(final["speedup"])
        tally.fast += final["vs_reference"] == FASTER
    elif best is not None and first is not None:
        gain = over_first_paired(best, first)
        if gain is None:
            row["speedup_over_first"] = None
            row["over_first"] = "not measured together"
            tally.apart += 1
        else:
            row["speedup_over_first"], row["speedup_over_first_ci"] = gain
            tally.over_first.append(gain[0])
        if best.speedup:
            row["speedup"], row["speedup_ci"] = best.speedup, best.speedup_ci
            row["vs_reference"] = best.vs_reference
            tally.over_ref.append(best.speedup)
            tally.fast += best.vs_reference == FASTER
    if roofline and roofline.get("fraction") is not None:
        tally.roof_fraction.append(roofline["fraction"])
    return row


def _roofline_at(roofline: dict[str, Any] | None, latency_ms: float | None) -> dict[str, Any] | None:
    """The best kernel's roofline point at its time in the final window (same bytes, FLOPs and ceilings)."""
    if not roofline or not latency_ms or not roofline.get("bytes"):
        return roofline
    from verifier import assess_roofline

    ceilings = ({"triad_gbps": roofline["ceiling_gbps"], "fma_gflops": roofline["ceiling_gflops"]}
                if roofline.get("ceiling_gbps") and roofline.get("ceiling_gflops") else None)
    point = {"bytes": roofline["bytes"], "flops": roofline.get("flops", 0)}
    return assess_roofline(point, latency_ms, ceilings) or roofline


def _cases_correct(result: Outcome) -> int:
    return sum(1 for c in result.cases if c.get("correct") is True)


CASE_FIELDS = ("case", "inputs", "correct", "max_abs_error", "max_rel_error", "message", "latency_ms",
               "reference_ms", "speedup", "speedup_ci", "vs_reference", "gain", "gain_ci", "vs_best", "rounds", "timed")


def case_summary(result: Outcome, of: str) -> dict[str, Any]:
    """A multi-case verdict per case for the report: ``of`` ("best": the task's best kernel; "closest": no
    kernel was feasible, this is the attempt with the most cases correct), ``total``, ``passed``,
    ``failed`` (cases whose correctness was judged), ``failing`` (each failing case's number, inputs and first
    failure), ``timed`` (cases with a time of their own) and ``per_case`` (the verdict's fields as stored:
    a case's time, the reference's and the speedup come from that case's own window). A case is named by its
    number here, in text and JSON alike (``verifier.cases.numbered_entry``), as ``verify`` names it."""
    from verifier import numbered_entry

    judged = [c for c in result.cases if c.get("correct") is not None]
    failing = [numbered_entry(c) for c in judged if c.get("correct") is False]
    return {"of": of, "total": len(result.cases), "passed": len(judged) - len(failing), "failed": len(failing),
            "failing": [{"case": c.get("case", 0), "inputs": str(c.get("inputs", "")),
                         "message": str(c.get("message", ""))} for c in failing],
            "timed": sum(1 for c in result.cases if c.get("latency_ms") is not None),
            "per_case": [{k: v for k, v in numbered_entry(c).items() if k in CASE_FIELDS} for c in result.cases]}


def over_first_paired(best: Outcome, first: Outcome) -> tuple[float, list[float] | None] | None:
    """(gain, interval) of the best over the first feasible kernel from one window: 1 when they are the
    same kernel, the best's paired gain when the first was the best it was timed beside, else None."""
    if best is first or (best.candidate_hash and best.candidate_hash == first.candidate_hash):
        return 1.0, [1.0, 1.0]
    if best.gain and best.vs_best and first.candidate_hash and best.best_hash == first.candidate_hash:
        return float(best.gain), best.gain_ci
    return None


def retime(workspace: Workspace, run_ids: list[str] | None = None) -> list[str]:
    """``report --retime``: time each task's best beside its first feasible kernel and PyTorch in one
    window now (the engine's final window, again), for the named runs (default: every run), so the
    report's best/first and best/ref come from one window. Returns what could not be re-timed, in words."""
    import asyncio

    from core.session import Session

    problems: list[str] = []
    with Session(workspace) as session:
        runs = [session.find_run(r) for r in run_ids] if run_ids else list(session.store.list_runs())
        for run in runs:
            try:
                tasks = session.tasks([t for t in run.tasks], suite=str(run.config.get("suite") or "") or None,
                                      scale=run.config.get("size_scale"))
            except Exception as exc:   # a suite moved or a task renamed since: say so, go on
                problems.append(f"run {run.id}: its tasks could not be loaded ({exc})")
                continue
            asyncio.run(session.engine.final_windows(run, tasks, again=True))
            session.store.put_run(run)
    return problems


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
    else:   # an empty plot says why it is empty
        ax.text(0.5, 0.5, "no task of these runs has a timed kernel:\nno speedup to show", ha="center", va="center",
                transform=ax.transAxes, color="grey")
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
    speedup over PyTorch from its own window, and the best over the first from one window
    (``over_first_paired``: the best's gain when it was timed beside the first; otherwise "not measured
    together", never a ratio of two windows' figures). The best is the task's recorded best when a
    person wrote it, else the first correct edit."""
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
            correct = [e for e in exps if outcome_of(e).timed]
            first = correct[0] if correct else None
            best = next((e for e in correct if state is not None and e.id == state.best_id), first)
            row: dict[str, Any] = {"edits": len(exps), "typos": sum(1 for e in exps if (e.extra or {}).get("slip")),
                                   "first_id": first.id if first else None, "best_id": best.id if best else None,
                                   "best_is_the_tasks": best is not None and state is not None
                                   and best.id == state.best_id}
            for name, chosen in (("first", first), ("best", best)):
                result = outcome_of(chosen) if chosen is not None else None
                row[f"{name}_ms"] = result.latency_ms if result else None
                row[f"{name}_speedup"] = result.speedup if result else None
                # the window's word with its figure: a "too noisy" 0.87x judged nothing, and says so
                row[f"{name}_vs_reference"] = result.vs_reference if result else ""
                row[f"{name}_speedup_ci"] = result.speedup_ci if result else None
            shown = outcome_of(best) if best is not None else None
            closest = max((outcome_of(e) for e in exps if outcome_of(e).cases), key=_cases_correct, default=None)
            if shown is not None and shown.cases:
                row["cases"] = case_summary(shown, "best")
            elif shown is None and closest is not None:
                row["cases"] = case_summary(closest, "closest")
            # one edit that is both the first and the best is 1x itself, never "not measured together"
            paired = (None if not (best and first) else (1.0, [1.0, 1.0]) if best.id == first.id
                      else over_first_paired(outcome_of(best), outcome_of(first)))
            row["best_over_first"] = paired[0] if paired else None
            row["best_over_first_ci"] = paired[1] if paired else None
            row["over_first"] = ("" if paired or not (best and first) else "not measured together")
            rows[task_id] = row
    return rows
