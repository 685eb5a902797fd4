"""Bad input to the commands gets one line saying what is wrong (exit 2 for usage), never a traceback,
and never a run that does something other than what was asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).parent.parent / "fixtures" / "suite"


def evokernel(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL")}
    return subprocess.run([sys.executable, "-m", "evotui.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**base, **(env or {})})


def one_line_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evokernel: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("write, words", [
    (lambda p: p.write_bytes(b'backend = "\xff"\n'), "not UTF-8"),
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: p.write_text("[llm]\ntemperature = -5\n"), "temperature"),
    (lambda p: p.write_text("[verifier]\natol = nan\n"), "atol"),
    (lambda p: p.write_text('[llm]\nbase_url = "localhost:8000/v1"\n'), "must start with http"),
])
def test_a_bad_config_file_is_one_line(tmp_path, write, words):
    write(tmp_path / "evokernel.toml")
    assert words in one_line_error(evokernel("tasks", cwd=tmp_path))


def test_a_malformed_endpoint_url_in_the_environment_is_named(tmp_path):
    line = one_line_error(evokernel("tasks", cwd=tmp_path, env={"OPENAI_BASE_URL": "http://[::1"}))
    assert "OPENAI_BASE_URL" in line and "not a valid URL" in line


@pytest.mark.parametrize("args, words", [
    (["--tasks", ""], "no task named"),
    (["--tasks", ","], "no task named"),
    (["--iterations", "0"], "--iterations must be at least 1"),
    (["--iterations", "-1"], "--iterations must be at least 1"),
    (["--level", "9"], "no task at level 9"),
])
def test_a_run_that_would_not_do_what_was_asked_is_refused_before_it_starts(tmp_path, args, words):
    """An empty --tasks (an unset shell variable) must not mean "every task", at 30 paid calls each."""
    proc = evokernel("run", "--suite", str(SUITE), *args, cwd=tmp_path,
                     env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "EVOKERNEL_MODEL": "m"})
    assert words in one_line_error(proc)


def test_duplicate_task_ids_are_one_task():
    from core.tasks import load_suite

    suite = load_suite(SUITE)
    assert [t.id for t in suite.select(["relu", "softmax", "relu"])] == ["relu", "softmax"]


def test_paths_that_are_files_not_folders_say_so(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert "is a file" in one_line_error(evokernel("verify", "afile", "--task", "relu", cwd=tmp_path))
    assert "is not a folder" in one_line_error(evokernel("tasks", "--suite", "afile", cwd=tmp_path))
    assert "not a folder" in one_line_error(evokernel("-w", "afile", "tasks", cwd=tmp_path))


def test_verify_threads_out_of_range_is_a_usage_error(tmp_path):
    (tmp_path / "cand").mkdir()
    for n in ("0", "-1", "100000"):
        assert "--threads" in one_line_error(evokernel("verify", "cand", "--task", "relu", "--threads", n, cwd=tmp_path))


def test_size_scale_auto_on_a_task_whose_inputs_fail_names_the_task(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "boom.py").write_text(
        "import torch\nN = 4096\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
        "def get_inputs():\n    raise RuntimeError('boom')\n\ndef get_init_inputs():\n    return []\n")
    # one task that cannot be sized is one line; the listing itself goes on (exit 0)
    line = one_line_error(evokernel("tasks", "--suite", str(suite), "--size-scale", "auto", cwd=tmp_path), code=0)
    assert "boom" in line and "size-scale auto" in line


def test_our_own_failure_is_one_line_with_the_details_kept(tmp_path, monkeypatch, capsys):
    """A bug of ours (here: planted) prints one line naming a crash log that holds the traceback."""
    import core.tasks
    from evotui import cli

    def broken(*args, **kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(core.tasks, "load_suite", broken)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tasks"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("evokernel: internal error (RuntimeError: planted bug); details in ")
    log = Path(err.rsplit("details in ", 1)[1])
    assert log.is_file() and "Traceback" in log.read_text() and "planted bug" in log.read_text()


def test_memory_arguments_out_of_range_are_usage_errors(tmp_path):
    assert "give the id" in one_line_error(evokernel("memory", "show", "", cwd=tmp_path))
    assert "--offset" in one_line_error(evokernel("memory", "list", "--offset", "-3", cwd=tmp_path))
