"""The headless commands as a daily tool (issue 13): output piped into another program is whole
(TSV, never cut to 80 columns), bad paths are refused in one line, a headless run ends with a
readable summary, and an endpoint that cannot be reached is named at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def evokernel(*args, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    """The real command with stdout a pipe (not a terminal), as `evokernel ... | less` would have it."""
    full = {**os.environ, "COLUMNS": "80", **(env or {})}
    return subprocess.run([sys.executable, "-m", "evotui.cli", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def tsv(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line]
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    assert all(len(line.split("\t")) == len(header) for line in lines[1:])
    return rows


def test_tasks_piped_are_tsv_with_whole_ids(tmp_path):
    proc = evokernel("tasks", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    rows = tsv(proc.stdout)
    ids = [r["id"] for r in rows]
    from core.tasks import load_suite

    assert ids == [t.id for t in load_suite("builtin").select()]
    long = max(rows, key=lambda r: len(r["description"]))
    assert len(long["description"]) > 60          # descriptions whole, not cut to a column


@pytest.fixture
def workspace_with_a_run(tmp_path):
    from store import Experience, RunRecord, Store

    ws = tmp_path / "ws"
    (ws / ".evokernel").mkdir(parents=True)
    (ws / "evokernel.toml").write_text('backend = "cpu"\n')
    model = "Qwen/Qwen3-Coder-30B-A3B-Instruct-a-long-model-name"
    with Store.open(ws / ".evokernel" / "memory.lmdb") as store:
        ids = []
        for i, (files, feasible) in enumerate([({"kernel.cpp": "int a;"}, True), ({}, False), ({}, False)]):
            gates = [{"name": "format", "status": "passed" if files else "failed"},
                     {"name": "build", "status": "passed" if files else "skipped"}]
            outcome = {"feasible": feasible, "latency_ms": 1.0 if feasible else None, "reference_ms": 2.0,
                       "gates": gates, "failed_gate": None if feasible else "format"}
            exp_id, _ = store.add_experience(Experience(
                task_id="gemm_bias_relu_with_a_long_name", kind="draft_trace", backend="cpu", stage="draft",
                title=f"attempt {i}", files=files, outcome=outcome, source="llm", model=model, iteration=i))
            ids.append(exp_id)
        store.put_run(RunRecord(id="20261202-120000-abcd", method="evokernel", status="finished",
                                config={"iterations": 3, "model": model},
                                tasks=["gemm_bias_relu_with_a_long_name"],
                                progress={"gemm_bias_relu_with_a_long_name": {"attempts": ids, "iterations_used": 3}}))
    return ws, model


def test_report_piped_shows_whole_values_and_counts_answers_without_code_as_not_compiled(workspace_with_a_run):
    ws, model = workspace_with_a_run
    proc = evokernel("report", "--tasks", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    runs, _, by_task = proc.stdout.partition("\n\n")
    [row] = tsv(runs)
    assert row["run"] == "20261202-120000-abcd" and row["status"] == "finished" and row["model"] == model
    assert row["CR"] == "33%"          # 1 of 3 answers built; the 2 without code count as not compiled
    [task] = tsv(by_task)
    assert task["run"] == "20261202-120000-abcd" and task["task"] == "gemm_bias_relu_with_a_long_name"
    assert "wrote" in proc.stderr and "wrote" not in proc.stdout


def test_memory_list_piped_has_every_column_whole(workspace_with_a_run):
    ws, _ = workspace_with_a_run
    proc = evokernel("memory", "list", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    rows = tsv(proc.stdout)
    assert len(rows) == 3 and "…" not in proc.stdout
    assert {r["task"] for r in rows} == {"gemm_bias_relu_with_a_long_name"}
    assert {"created", "src", "title"} <= set(rows[0])


def test_memory_export_into_a_missing_folder_is_refused_and_creates_nothing(workspace_with_a_run, tmp_path):
    ws, _ = workspace_with_a_run
    target = tmp_path / "nonexistent" / "dir" / "x.jsonl"
    proc = evokernel("memory", "export", str(target), cwd=ws)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "\n" not in err and "does not exist" in err and str(target.parent) in err
    assert not (tmp_path / "nonexistent").exists()
    proc = evokernel("memory", "export", "/nonexistent/dir/x.jsonl", cwd=ws)
    assert proc.returncode == 2 and "\n" not in proc.stderr.strip() and not Path("/nonexistent").exists()
