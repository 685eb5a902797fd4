"""The `tasks` and `verify` commands, run as real subprocesses of the installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import candidates as C

SUITE = Path(__file__).parent.parent / "fixtures" / "suite"


def evokernel(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evotui.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_tasks_json_lists_builtin_tasks_with_level_and_category(tmp_path):
    proc = evokernel("tasks", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["tasks"]) >= 60
    for row in data["tasks"]:
        assert row["level"] in (1, 2) and row["category"] and row["id"]


def test_tasks_on_a_missing_suite_is_a_usage_error(tmp_path):
    proc = evokernel("tasks", "--suite", str(tmp_path / "missing"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("evokernel: ") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_verify_json_reports_every_gate(tmp_path):
    cand = tmp_path / "cand"
    cand.mkdir()
    for name, text in C.elementwise(C.RELU).items():
        (cand / name).write_text(text)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = evokernel("verify", str(cand), "--task", "relu", "--suite", str(SUITE), "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("task", "feasible", "failed_gate", "message", "latency_ms", "reference_ms", "speedup", "gates"):
        assert key in data
    assert data["feasible"] is True and data["failed_gate"] is None
    assert [g["name"] for g in data["gates"]] == ["format", "anti_hack", "build", "correctness", "performance"]

    # a failing candidate still exits 0: verification ran
    (cand / "kernel.cpp").write_text(C.IDENTITY)
    proc = evokernel("verify", str(cand), "--task", "relu", "--suite", str(SUITE), "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["failed_gate"] == "correctness"

    # human output names the gates
    proc = evokernel("verify", str(cand), "--task", "relu", "--suite", str(SUITE), cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "correctness" in proc.stdout and "values differ" in proc.stdout


def test_verify_usage_errors_exit_2(tmp_path):
    proc = evokernel("verify", str(tmp_path / "nope"), "--task", "relu", cwd=tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    (tmp_path / "c").mkdir()
    proc = evokernel("verify", str(tmp_path / "c"), "--task", "no_such_task", cwd=tmp_path)
    assert proc.returncode == 2 and "no task" in proc.stderr
    proc = evokernel("verify", str(tmp_path / "c"), "--task", "relu", "--backend", "tpu", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown backend" in proc.stderr
