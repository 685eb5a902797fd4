"""The headless commands as a daily tool (issue 13): output piped into another program is whole
(TSV, never cut to 80 columns), bad paths are refused in one line, a headless run ends with a
readable summary, and an endpoint that cannot be reached is named at once."""

from __future__ import annotations

import os
import subprocess
import sys
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


# -- 5: a headless run ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_headless_run_ends_with_one_readable_line_and_the_right_iteration_count(workspace, llm_env):
    import candidates as C
    from openai_server import Reply, answer_with

    counter = iter(range(1000))

    def script(request, n):   # code that does not build, each answer distinct: three real iterations
        broken = C.elementwise(C.COMPILE_ERROR)
        broken["kernel.cpp"] += f"\nstatic const int kVariant{next(counter)} = 1;\n"
        return Reply(answer_with(broken))

    llm_env(script)
    proc = evokernel("run", "--tasks", "relu", "--iterations", "3", cwd=workspace.root)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("run ") and " finished: 0 of 1 task feasible after 3 of 3 iterations" in last
    assert "{" not in proc.stdout and "'iteration'" not in proc.stdout    # no raw dict


@pytest.mark.slow
def test_an_unreachable_endpoint_is_named_at_once_not_retried(workspace):
    import socket

    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = workspace.config_path.read_text().replace("retries = 3", "retries = 50").replace(
        "backoff_s = 0.05", "backoff_s = 5.0")
    workspace.config_path.write_text(config)
    url = f"http://127.0.0.1:{port}/v1"
    # 50 retries 5 s apart would outlast the timeout below by far: the run must end on the first refusal
    proc = evokernel("run", "--tasks", "relu", cwd=workspace.root, env={"OPENAI_BASE_URL": url}, timeout=120)
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert f"cannot reach the LLM endpoint at {url}" in out and "kept failing" not in out
    assert "Traceback" not in out
    last = proc.stdout.strip().splitlines()[-1]   # nothing was recorded: no run is kept (#52)
    assert last.startswith("run ") and " failed before its first answer: nothing was recorded" in last


def test_without_any_endpoint_the_message_names_both_settings(tmp_path):
    (tmp_path / "evokernel.toml").write_text('backend = "cpu"\n')
    env = {k: "" for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL")}
    proc = evokernel("run", "--tasks", "relu", cwd=tmp_path, env=env)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "OPENAI_BASE_URL" in err and "EVOKERNEL_MODEL" in err and "\n" not in err
