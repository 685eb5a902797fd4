"""Issue 27, item 8: `evokernel report` covers hand edits: with no run at all, a workspace whose hand
edits produced a best kernel gets a "hand" row per task (edits, first correct, best, gain), never
"no runs in this workspace yet"."""

from __future__ import annotations

import json

from test_cli_daily import evokernel, tsv

from memory_content import outcome, relu_files


def hand_edits(ws) -> None:
    """Three saves of relu: a typo, a first correct kernel at 2x PyTorch, then the best at 3x."""
    from store import Experience, Store, TaskState

    with Store.open(ws.memory_path) as store:
        def edit(body, out, parent=None, **extra):
            exp_id, _ = store.add_experience(Experience(
                task_id="relu", kind="human_edit", backend="cpu", stage="draft", source="human", title="relu hand edit",
                files=relu_files(body), outcome=out, parent_id=parent, extra=extra))
            return exp_id

        edit("out[i] = = x[i];", outcome("relu", "build", "error: expected expression"), slip=True)
        first = edit("out[i] = x[i] > 0.f ? x[i] : 0.f;", {**outcome("relu", ms=2.0, ref=4.0), "candidate_hash": "f1"})
        # the best was timed beside the first in its own window: 1.4x faster there (never 3.00 / 2.00)
        best = edit("out[i] = fmaxf(x[i], 0.f);", {**outcome("relu", ms=1.0, ref=3.0), "candidate_hash": "b2",
                                                   "best_hash": "f1", "gain": 1.4, "gain_ci": [1.3, 1.5],
                                                   "vs_best": "faster"}, first)
        store.put_task(TaskState("relu", feasible=True, stage="refine", best_id=best, start_points=[first, best]))


def test_report_without_runs_shows_the_hand_row(workspace):
    hand_edits(workspace)
    proc = evokernel("report", cwd=workspace.root)
    assert proc.returncode == 0, proc.stderr
    assert "no runs" not in proc.stdout + proc.stderr
    [row] = tsv(proc.stdout)
    assert row["task"] == "relu" and row["edits"] == "3" and row["typos"] == "1"
    assert row["first"] == "2.00x" and row["best"] == "3.00x" and row["best/first"] == "1.40x"

    data = json.loads(evokernel("report", "--json", cwd=workspace.root).stdout)
    assert data["runs"] == [] and data["hand"]["relu"]["best_speedup"] == 3.0


def test_a_best_never_timed_beside_the_first_edit_is_not_measured_together(workspace):
    """Two speedups from two windows are never divided (issue 25): the row says so instead."""
    from store import Experience, Store, TaskState

    with Store.open(workspace.memory_path) as store:
        ids = [store.add_experience(Experience(
            task_id="relu", kind="human_edit", backend="cpu", stage="draft", source="human", title="relu hand edit",
            files=relu_files(body), outcome={**outcome("relu", ms=ms, ref=ref), "candidate_hash": h}))[0]
            for body, ms, ref, h in (("out[i] = x[i] > 0.f ? x[i] : 0.f;", 2.0, 4.0, "f1"),
                                     ("out[i] = fmaxf(x[i], 0.f);", 1.0, 3.0, "b2"))]
        store.put_task(TaskState("relu", feasible=True, stage="refine", best_id=ids[1], start_points=ids))
    [row] = tsv(evokernel("report", cwd=workspace.root).stdout)
    assert row["best/first"] == "not measured together"


def test_the_report_says_each_verdicts_word_and_why_an_option_shows_nothing(workspace):
    """The findings (#51, 4): the report dropped the "too noisy" flag (0.87x shown for a verdict that judged
    nothing); `report --tasks --cases` and `--retime` were silently ignored in a workspace with hand edits but
    no runs."""
    from store import Experience, Store

    hand_edits(workspace)
    with Store.open(workspace.memory_path) as store:
        store.add_experience(Experience(
            task_id="softmax", kind="human_edit", backend="cpu", stage="draft", source="human", title="softmax edit",
            files=relu_files("out[i] = x[i];"), outcome={**outcome("softmax", ms=2.3, ref=2.0), "speedup": 0.87,
                                                          "speedup_ci": [0.52, 1.41], "vs_reference": "noisy"}))
    proc = evokernel("report", cwd=workspace.root)
    assert proc.returncode == 0, proc.stderr
    rows = {r["task"]: r for r in tsv(proc.stdout)}
    assert rows["softmax"]["first"] == "0.87x too noisy", rows["softmax"]
    assert rows["relu"]["best"] == "3.00x"     # no verdict stored with it: the figure alone, as before
    assert rows["softmax"]["best/first"] == "1.00x"   # one edit, the first and the best: itself, not "apart"
    asked = evokernel("report", "--tasks", "--cases", "--retime", cwd=workspace.root)
    assert asked.returncode == 0, asked.stderr
    for option in ("report --retime: no run", "report --tasks: no run", "report --cases: no multi-case task"):
        assert option in asked.stderr, asked.stderr
