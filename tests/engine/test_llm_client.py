"""The LLM client against a real loopback server: retries, errors that need the user, the cache,
budgets, and answer parsing."""

from __future__ import annotations

import asyncio

import pytest

from core.config import LLMConfig
from core.errors import LLMError
from core.llm import BudgetExceeded, ChatRequest, OpenAIClient
from core.responses import parse_answer

from openai_server import Reply, ScriptedLLM


class DictCache:
    def __init__(self):
        self.data = {}

    def cache_get(self, key):
        return self.data.get(key)

    def cache_put(self, key, value):
        self.data[key] = value


def client_for(server, cache=None, **overrides) -> OpenAIClient:
    cfg = LLMConfig(base_url=server.base_url, model="m", timeout_s=1.0, retries=3, backoff_s=0.01, **overrides)
    return OpenAIClient(cfg, cache=cache)


def ask(client, text="hi", sample="s:0"):
    async def go():
        try:
            return await client.complete(ChatRequest(model="m", messages=(("user", text),), sample=sample))
        finally:
            await client.close()

    return asyncio.run(go())


def test_retries_transient_failures_then_answers():
    replies = [Reply(status=429, retry_after=0.01), Reply(status=503), Reply(raw="{not json"), Reply("done")]
    with ScriptedLLM(lambda req, n: replies[n]) as server:
        answer = ask(client_for(server), text="write a kernel " * 10)
    assert answer.text == "done" and len(server.requests) == 4
    assert answer.tokens_in > 0 and not answer.cached


def test_slow_answers_time_out_and_are_retried():
    with ScriptedLLM(lambda req, n: Reply("late", delay=2.0) if n == 0 else Reply("on time")) as server:
        assert ask(client_for(server)).text == "on time"


def test_gives_up_with_one_line_after_the_retries():
    with ScriptedLLM(lambda req, n: Reply(status=500, text="down")) as server:
        with pytest.raises(LLMError, match="kept failing after 4 tries: server error 500"):
            ask(client_for(server))
        assert len(server.requests) == 4


@pytest.mark.parametrize("status, words", [(401, "API key"), (404, "404 for model"), (400, "rejected")])
def test_errors_the_user_must_fix_are_not_retried(status, words):
    with ScriptedLLM(lambda req, n: Reply(status=status, text="nope")) as server:
        with pytest.raises(LLMError, match=words):
            ask(client_for(server))
        assert len(server.requests) == 1


def test_cache_answers_repeats_and_replay_needs_no_server():
    cache = DictCache()
    with ScriptedLLM(lambda req, n: Reply(f"answer {n}")) as server:
        first = ask(client_for(server, cache))
        again = ask(client_for(server, cache))
        other_sample = ask(client_for(server, cache), sample="s:1")
    assert again.text == first.text == "answer 0" and again.cached
    assert other_sample.text == "answer 1"
    replay = OpenAIClient(LLMConfig(model="m"), cache=cache, replay=True)
    assert ask(replay).text == "answer 0"
    # a changed prompt for a recorded sample replays the answer recorded for that sample
    assert ask(replay, text="a different prompt").text == "answer 0"
    with pytest.raises(LLMError, match="not in the response cache"):
        ask(OpenAIClient(LLMConfig(model="m"), cache=cache, replay=True), sample="never:seen")


def test_token_budget_stops_requests():
    with ScriptedLLM(lambda req, n: Reply("x" * 400)) as server:
        client = client_for(server, token_budget=50)

        async def go():
            await client.complete(ChatRequest(model="m", messages=(("user", "hi"),), sample="a"))
            await client.complete(ChatRequest(model="m", messages=(("user", "hi"),), sample="b"))

        with pytest.raises(BudgetExceeded, match="token budget"):
            asyncio.run(go())
        assert len(server.requests) == 1


def test_missing_configuration_says_what_to_set():
    with pytest.raises(LLMError, match="EVOKERNEL_MODEL"):
        OpenAIClient(LLMConfig(base_url="http://x/v1"))
    with pytest.raises(LLMError, match="OPENAI_BASE_URL"):
        OpenAIClient(LLMConfig(model="m"))


@pytest.mark.parametrize("text, files, problem", [
    ("```cpp file=kernel.cpp\nint x;\n```\n```python file=model.py\nclass ModelNew: pass\n```", ["kernel.cpp", "model.py"], ""),
    ("### kernel.cpp\n```cpp\nint x;\n```\n**model.py**\n```python\nclass ModelNew: pass\n```", ["kernel.cpp", "model.py"], ""),
    ("```cpp\n// kernel.cpp\nint x;\n```\n```python\nimport torch\nclass ModelNew: pass\n```", ["kernel.cpp", "model.py"], ""),
    ("```cpp\nint a;\n```\n```cpp\nint b;\n```\n```python\nclass ModelNew: pass\n```",
     ["kernel.cpp", "kernel_2.cpp", "model.py"], ""),
    ("I think you should use OpenMP.", [], "no fenced code blocks"),
    ("```cpp file=kernel.cpp\nint x;\n", ["kernel.cpp"], "stopped with kernel.cpp unclosed"),
    ("```cpp file=kernel.cpp\nint x;\n```", ["kernel.cpp"], "no model.py"),
    ("", [], "empty"),
    # a custom-op project keeps its layout, whatever the fences' languages
    ("```cpp file=op_host/add_custom.cpp\nint h;\n```\n```cpp file=op_kernel/erf/tail.h\nint t;\n```\n"
     "```json file=add_custom.json\n[]\n```\n```cpp file=./binding.cpp\nint b;\n```\n"
     "```python file=model.py\nclass ModelNew: pass\n```",
     ["add_custom.json", "binding.cpp", "model.py", "op_host/add_custom.cpp", "op_kernel/erf/tail.h"], ""),
    ("```cpp file=/etc/kernel.cpp\nint x;\n```\n```python file=model.py\nclass ModelNew: pass\n```",
     [], "is an absolute path"),
    ("```cpp file=op_host/../../kernel.cpp\nint x;\n```\n```python file=model.py\nclass ModelNew: pass\n```",
     [], "climbs out of the kernel folder"),
    ("```cpp file=op_host/a$b.cpp\nint x;\n```\n```python file=model.py\nclass ModelNew: pass\n```",
     [], "is not allowed"),
    ("```cpp file=op_kernel/a/b/c.h\nint x;\n```\n```python file=model.py\nclass ModelNew: pass\n```",
     [], "3 folders deep"),
])
def test_answers_become_files_or_a_reason(text, files, problem):
    parsed = parse_answer(text)
    assert sorted(parsed.files) == files
    assert (problem in parsed.problem) if problem else parsed.ok, parsed.problem
    assert "\n" not in parsed.problem
