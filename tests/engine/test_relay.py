"""bench/relay.py: the endpoint a person or another session plays. A request's prompt becomes a file, the
answer file's text becomes the response (through the engine's own client, the openai SDK over loopback),
and a request retried after a timeout maps to the file it already has."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _relay_module():
    spec = importlib.util.spec_from_file_location("bench_relay", ROOT / "bench" / "relay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_prompt_becomes_a_file_and_the_answer_file_the_response(tmp_path):
    from core.config import LLMConfig
    from core.llm import ChatRequest, OpenAIClient

    relay_module = _relay_module()
    relay = relay_module.Relay(tmp_path / "relay", timeout_s=30).start()
    client = OpenAIClient(LLMConfig(base_url=relay.base_url, model="player", timeout_s=60, retries=0))
    request = ChatRequest(model="player", messages=(("system", "You write kernels."),
                                                    ("user", "## Task relu (level 1, activation)\nWrite one.")))

    def play():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            waiting = relay_module.pending(tmp_path / "relay")
            if waiting:
                (tmp_path / "relay" / "answers" / f"{waiting[0]}.tmp").write_text("Change: a first version\n")
                (tmp_path / "relay" / "answers" / f"{waiting[0]}.tmp").rename(
                    tmp_path / "relay" / "answers" / waiting[0])
                return
            time.sleep(0.1)

    async def ask():
        try:
            return await client.complete(request)
        finally:
            await client.close()

    player = threading.Thread(target=play)
    player.start()
    try:
        answer = asyncio.run(ask())
    finally:
        player.join()
    assert answer.text == "Change: a first version\n"
    written = tmp_path / "relay" / "requests" / "0001-relu-draft.md"
    assert written.read_text() == ("=== SYSTEM ===\nYou write kernels.\n\n=== USER ===\n## Task relu (level 1, "
                                   "activation)\nWrite one.\n")
    assert relay_module.pending(tmp_path / "relay") == []
    # the same request again (a retry): the same file, answered at once
    body = {"messages": [{"role": "system", "content": "You write kernels."},
                         {"role": "user", "content": "## Task relu (level 1, activation)\nWrite one."}]}
    assert relay.file_for(body) == "0001-relu-draft.md" and relay.wait_for("0001-relu-draft.md")
    relay.stop()
    assert "answered 0001-relu-draft.md" in (tmp_path / "relay" / "relay.log").read_text()
    # the player's command: what waits (nothing now; a request without its answer file after)
    import subprocess
    import sys

    def listed() -> str:
        return subprocess.run([sys.executable, str(ROOT / "bench" / "relay.py"), "pending", "--folder",
                               str(tmp_path / "relay")], capture_output=True, text=True, timeout=60).stdout
    assert listed().strip() == "nothing pending"
    (tmp_path / "relay" / "requests" / "0002-gelu-draft.md").write_text("=== USER ===\n## Task gelu (level 1, x)\n")
    assert listed().strip() == "0002-gelu-draft.md"
