"""Local model servers as their users run them (#52), against a real loopback server speaking the OpenAI protocol
(``openai_server``) and the real client and engine, with the canned verifier: the model's context read where the
server says it and every request budgeted inside it, a 400 "too long" answered by a fitted prompt, a request that
cannot fit refused before it is sent, streamed answers whose timeout bounds a silence, waits and retries told, the
server's slots as the default concurrency, and errors in full that are not retried."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

import candidates as C
from openai_server import Reply, ScriptedLLM, answer_with

RELU = C.elementwise(C.RELU)
# llama-cpp-python's and vLLM's words for a request longer than the model's context
TOO_LONG = ("This model's maximum context length is {ctx} tokens. However, you requested {total} tokens ({prompt} in "
            "the messages, {completion} in the completion). Please reduce the length of the messages or completion.")


def _judge(task_id, files):
    from core.scripted import Canned

    return Canned(latency_ms=8.0)


def _answer(tag: int = 0) -> str:
    return answer_with({**RELU, "kernel.cpp": RELU["kernel.cpp"] + f"\nstatic const int kTag = {tag};\n"})


def _tokens(body: dict) -> int:
    """The prompt's tokens as the loopback server counts them (4 characters a token)."""
    return sum(len(m.get("content", "")) for m in body.get("messages", [])) // 4


def _run(workspace, monkeypatch, server, *, iterations=1, tasks=("relu",), **llm):
    """A run on the real client against ``server``: (record or the error, events, session's store runs)."""
    from core import events as ev
    from core.errors import LLMError
    from core.scripted import CannedVerifier
    from core.session import Session

    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    events: list[ev.Event] = []
    with Session(workspace) as session:
        for key, value in llm.items():
            setattr(session.config.llm, key, value)
        session._verifier = CannedVerifier(_judge)
        session.bus.subscribe(events.append)
        async def go():
            try:
                return await session.run(session.tasks(list(tasks)), method="evokernel", iterations=iterations,
                                         suite=None, scale=None)
            finally:
                await session.close_async()   # in the loop its connections were made in

        try:
            result = asyncio.run(go())
        except LLMError as exc:
            result = exc
        runs = session.store.list_runs()
    return result, events, runs


def test_the_context_llama_cpp_says_bounds_every_request_and_its_slots_the_concurrency(workspace, monkeypatch):
    """llama.cpp's /props: a 6,000-token slot and one slot. Every request's prompt and answer budget fit in 6,000
    tokens (main sent max_tokens 4,096 beside a ~2,400-token prompt: over), and one request at a time reaches the
    server (main sent four at once to a one-slot server, where three waited out their timeouts)."""
    props = {"/props": {"default_generation_settings": {"n_ctx": 6000}, "total_slots": 1}}
    with ScriptedLLM(lambda req, n: Reply(_answer(n), delay=0.2), extra_get=props) as server:
        record, events, _ = _run(workspace, monkeypatch, server, tasks=("relu", "softmax", "sum_dim"), concurrency=None)
    assert record.status == "finished", record
    assert len(server.requests) == 3
    for body in server.requests:
        assert _tokens(body) + body["max_tokens"] <= 6000
    assert server.most_in_flight == 1
    started = next(e for e in events if type(e).__name__ == "RunStarted")
    assert "6,000 tokens (llama.cpp's /props" in started.limits and "1 request at once" in started.limits


@pytest.mark.parametrize("refusal", ["empty_stream", "drop"])
def test_a_too_long_answer_teaches_the_context_and_the_prompt_is_fitted_once(workspace, monkeypatch, refusal):
    """llama-cpp-python says nothing of its context until a request is too long, and as it does: a streamed request
    whose prompt is over its context gets a 200 and an empty stream, or its connection closed with no answer (both
    seen against the real server); the same request unstreamed gets a 400 with the numbers. The prompt is fitted to
    them (knowledge cut by rank, a smaller answer budget) and sent once more; the run completes (main: the run
    failed on the first request, its message cut at 200 characters)."""
    context = 1900

    def script(req, n):
        prompt, completion = _tokens(req), req.get("max_tokens", 4096)
        if req.get("stream") and prompt > context:
            return Reply(**{refusal: True})
        if not req.get("stream") and prompt + completion > context:
            return Reply(status=400, text=TOO_LONG.format(ctx=context, total=prompt + completion, prompt=prompt,
                                                          completion=completion))
        return Reply(_answer(n))

    with ScriptedLLM(script) as server:
        record, events, _ = _run(workspace, monkeypatch, server, iterations=2)
    assert record.status == "finished", record
    assert not record.progress["relu"].broken and record.progress["relu"].iterations_used == 2
    assert [bool(b.get("stream")) for b in server.requests] == [True, False, True, True]   # empty, 400, fitted
    assert all(_tokens(b) + b["max_tokens"] <= context for b in server.requests[2:])
    assert any("asking again with the prompt fitted" in getattr(e, "message", "") for e in events)


def test_a_request_that_cannot_fit_is_refused_before_it_is_sent_naming_the_setting(workspace, monkeypatch):
    """A 700-token context cannot hold the shortest relu prompt and a 512-token answer: the run stops before any
    request, saying so with the server's and this tool's settings, and leaves no run behind."""
    props = {"/props": {"default_generation_settings": {"n_ctx": 700}, "total_slots": 1}}
    with ScriptedLLM(lambda req, n: Reply(_answer(n)), extra_get=props) as server:
        error, _, runs = _run(workspace, monkeypatch, server)
    assert server.requests == [] and runs == []
    message = str(error)
    assert "700-token context (llama.cpp's /props" in message and "the request was not sent" in message
    assert "--ctx-size" in message and "[llm] context_tokens" in message and "[llm] max_tokens" in message


def test_a_task_whose_prompt_cannot_fit_what_the_server_says_ends_early_saying_why(workspace, monkeypatch):
    """A server that says nothing of its context until its 400 says 900 tokens: the fitted prompt still cannot leave
    an answer its 512 tokens, so the task ends early with the settings to change, and nothing more is sent."""
    def script(req, n):
        prompt, completion = _tokens(req), req.get("max_tokens", 4096)
        return Reply(status=400, text=TOO_LONG.format(ctx=900, total=prompt + completion, prompt=prompt,
                                                      completion=completion))

    with ScriptedLLM(script) as server:
        record, events, _ = _run(workspace, monkeypatch, server, iterations=2)
    assert len(server.requests) == 1
    broken = record.progress["relu"].broken
    assert broken.startswith("relu ended early: the shortest prompt") and "900-token context (the server's 400" in broken
    assert "--ctx-size" in broken and record.status == "finished" and not record.progress["relu"].attempts


def test_the_prompt_log_shows_what_was_left_out_to_fit(workspace, monkeypatch):
    """A 2,048-token context: the prompt keeps the reference and says the rules in short, and the prompt log (the
    request as sent, one file per request) says what was left out and the answer budget."""
    props = {"/props": {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1}}
    with ScriptedLLM(lambda req, n: Reply(_answer(n)), extra_get=props) as server:
        record, events, _ = _run(workspace, monkeypatch, server)
    assert record.status == "finished", record
    [body] = server.requests
    assert _tokens(body) + body["max_tokens"] <= 2048 and body["max_tokens"] >= 512
    user = body["messages"][-1]["content"]
    assert "## Task relu" in user and "which names the rule)" in user
    [logged] = (workspace.logs_dir / "prompts" / record.id).iterdir()
    text = logged.read_text()
    assert "the rules the verifier enforces in full (given in short)" in text
    assert f"answer budget (max_tokens): {body['max_tokens']:,}" in text and user in text
    fitted = [e for e in events if type(e).__name__ == "PromptFitted"]
    assert fitted and fitted[0].max_tokens == body["max_tokens"]


def test_a_slow_server_streams_a_long_answer_past_the_timeout_with_the_wait_shown(workspace, monkeypatch):
    """A server streaming 50 tokens a second answers 150 tokens (3 s) with timeout_s = 1: streamed, the timeout
    bounds the silence between tokens, so the answer completes and the wait is told once a second with the tokens
    so far (main: unstreamed, every try timed out, the run failed after its retries). The real rate, 13 tokens a
    second for 4,096 tokens under timeout_s = 300, is the same with everything 100 times longer (docs/running.md)."""
    text = _answer(0).ljust(600)
    with ScriptedLLM(lambda req, n: Reply(text, tokens_per_s=50)) as server:
        record, events, _ = _run(workspace, monkeypatch, server, timeout_s=1.0, retries=1)
    assert record.status == "finished", record
    assert len(server.requests) == 1 and server.requests[0]["stream"] is True
    waits = [e for e in events if type(e).__name__ == "AnswerProgress"]
    assert waits and waits[-1].seconds >= 2.0 and 0 < waits[-1].tokens <= 150
    answered = next(e for e in events if type(e).__name__ == "ResponseReceived")
    assert answered.tokens_out == 150 and answered.seconds >= 2.5


def test_a_silence_past_the_timeout_is_a_retry_the_user_sees_and_the_last_names_the_setting(workspace, monkeypatch):
    """A server silent for longer than timeout_s before its first token: each retry is an event with its reason;
    the run's last error names [llm] timeout_s and how to resume (main: silent retries, "no answer within 1 s")."""
    with ScriptedLLM(lambda req, n: Reply(_answer(n), first_token_s=2.0)) as server:
        error, events, _ = _run(workspace, monkeypatch, server, timeout_s=0.5, retries=1, backoff_s=0.01)
    retried = [e for e in events if type(e).__name__ == "CallRetried"]
    assert len(retried) == 1 and retried[0].next_try == 2 and retried[0].tries == 2
    assert "[llm] timeout_s" in retried[0].reason
    problem = next(e for e in events if type(e).__name__ == "EngineProblem" and e.fatal)
    assert "larger [llm] timeout_s (now 0.5)" in problem.message and "nothing was recorded" in problem.message


def test_an_error_is_said_in_full_and_not_retried(monkeypatch):
    """A 400 whose message is long (the numbers at its end) is said whole, once (main cut it at 200 characters)."""
    from core.config import LLMConfig
    from core.errors import LLMError
    from core.llm import ChatRequest, OpenAIClient

    long = "the prompt template failed: " + "a detail the user needs to read, " * 12 + "at token 2047 of 2048"
    with ScriptedLLM(lambda req, n: Reply(status=400, text=long)) as server:
        client = OpenAIClient(LLMConfig(base_url=server.base_url, model="m", timeout_s=2, retries=3))
        with pytest.raises(LLMError) as caught:
            asyncio.run(client.complete(ChatRequest(model="m", messages=(("user", "hi"),))))
        assert len(server.requests) == 1
    assert caught.value.args[0].endswith("at token 2047 of 2048")


def test_a_model_the_server_does_not_serve_is_refused_with_the_ones_it_does(workspace, monkeypatch):
    """EVOKERNEL_MODEL=gpt-4o-nonexistent against a server that lists only its own model: refused before any
    request, naming the served one (main: accepted, and recorded as the run's model)."""
    with ScriptedLLM(lambda req, n: Reply(_answer(n)), models=["smollm2-135m"]) as server:
        monkeypatch.setenv("EVOKERNEL_MODEL", "gpt-4o-nonexistent")
        error, _, runs = _run(workspace, monkeypatch, server)
    assert server.requests == [] and runs == []
    assert "does not serve model 'gpt-4o-nonexistent'; it serves 'smollm2-135m'" in str(error)


def test_the_answers_own_model_is_recorded(workspace, monkeypatch):
    """A server that answers under another name than the one asked (llama-cpp-python's alias): the attempt keeps
    the name the answer gave (main kept only the configured one)."""
    from store import Store

    with ScriptedLLM(lambda req, n: Reply(_answer(n), model="SmolLM2-135M-Instruct.Q4_1.gguf"),
                     models=[]) as server:
        record, _, _ = _run(workspace, monkeypatch, server)
    with Store.open(workspace.memory_path, readonly=True) as store:
        [exp] = store.get_many(record.progress["relu"].attempts)
    assert exp.model == "scripted-coder" and exp.extra["answered_by"] == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_server_that_does_not_stream_is_asked_unstreamed():
    """A server that refuses ``stream`` (a 400 naming it) is asked the same request unstreamed, at once, and from
    then on; its timeout then bounds the whole answer, which the client's timeout message says."""
    from core.config import LLMConfig
    from core.llm import ChatRequest, OpenAIClient

    with ScriptedLLM(lambda req, n: Reply("done"), streams=False) as server:
        client = OpenAIClient(LLMConfig(base_url=server.base_url, model="m", timeout_s=2, retries=0))

        async def twice():
            try:
                return [await client.complete(ChatRequest(model="m", messages=(("user", "hi"),), sample=s))
                        for s in ("a", "b")]
            finally:
                await client.close()

        answers = asyncio.run(twice())
    assert [a.text for a in answers] == ["done", "done"]
    assert [bool(b.get("stream")) for b in server.requests] == [True, False, False]


def test_a_call_left_mid_stream_closes_its_connection():
    """A call abandoned while the answer streams (the run paused, a timeout) closes its connection, which is what
    tells llama.cpp and vLLM to stop generating: the server sees the client go."""
    from core.config import LLMConfig
    from core.llm import ChatRequest, OpenAIClient

    with ScriptedLLM(lambda req, n: Reply("x" * 4000, tokens_per_s=100)) as server:
        client = OpenAIClient(LLMConfig(base_url=server.base_url, model="m", timeout_s=5, retries=0))

        async def leave():
            call = asyncio.ensure_future(client.complete(ChatRequest(model="m", messages=(("user", "hi"),))))
            await asyncio.sleep(1.0)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await client.close()

        asyncio.run(leave())
        deadline = time.monotonic() + 5
        while not server.abandoned and time.monotonic() < deadline:
            time.sleep(0.05)
    assert server.abandoned == 1


@pytest.mark.parametrize("text, context, prompt", [
    (TOO_LONG.format(ctx=2048, total=7971, prompt=3875, completion=4096), 2048, 3875),
    ("This model's maximum context length is 4096 tokens. However, you requested 4096 output tokens and your prompt "
     "contains at least 3876 input tokens, for a total of at least 7972 tokens.", 4096, 3876),
    ('{"code": 400, "message": "the request exceeds the available context size, try increasing it", '
     '"type": "exceed_context_size_error", "n_prompt_tokens": 5120, "n_ctx": 4096}', 4096, 5120),
    ("invalid temperature", None, None),
])
def test_the_numbers_of_a_too_long_answer(text, context, prompt):
    from core.servers import overflow_numbers

    found = overflow_numbers(text)
    assert (found.context_tokens, found.prompt_tokens) == (context, prompt) if context else found is None


def test_a_budget_fits_the_answer_to_what_the_context_leaves():
    from core.budget import ContextBudget

    budget = ContextBudget(max_tokens=4096, context_tokens=2048, source="test")
    assert budget.answer_tokens(budget.prompt_chars()) <= 2048 - budget.tokens(budget.prompt_chars())
    assert budget.prompt_chars() == 0                        # 4,096 answer tokens leave no prompt in 2,048
    assert budget.answer_tokens(3000) == 2048 - budget.tokens(3000) and budget.fits(3000)
    assert not budget.fits(4800)                             # below the 512-token floor
    budget.learn(3000, 1000)                                 # the server counted: its rate from now on
    assert budget.counted and abs(budget.chars_per_token - 3000 / 976) < 1e-9
    assert ContextBudget(max_tokens=4096).answer_tokens(10**6) == 4096   # no context known: as configured
    assert re.search(r"about [\d,]+ tokens\) leaves", budget.too_long("relu", 9000))


def test_memory_items_left_out_to_fit_are_neither_retrieved_nor_credited(workspace, monkeypatch):
    """Relevant memory items of other tasks and a context that holds some of them: the prompt fitter leaves the others
    out, and the attempt records (and credits, and counts as retrieved) exactly the items its prompt showed, never one
    the model did not see (main recorded every retrieved item, so an unseen one's use counts grew and it could be
    passed over: ``policy.passed_over``). The context is the first of a few sizes that keeps some items, not all."""
    from core.session import Session
    from store import Experience

    with Session(workspace) as session:
        for i in range(40):
            kernel = C.RELU + "".join(f"static const int kPad{i}_{k} = {k};\n" for k in range(120))
            session.store.add_experience(Experience(
                task_id=f"other{i}", kind="draft_trace", backend="cpu", stage="draft", title=f"other{i} draft #1",
                files=C.elementwise(kernel), outcome={"verified": True, "feasible": True, "latency_ms": 1.0},
                extra={"change": f"change of item {i}"}, signature={"ops": ["relu"], "category": "activation"}))
    seen = []
    for n_ctx in (4100, 4000, 4200, 3950, 4150, 4050, 4250):
        props = {"/props": {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}}
        with ScriptedLLM(lambda req, n: Reply(_answer(n)), extra_get=props) as server:
            record, events, _ = _run(workspace, monkeypatch, server, max_tokens=512)
        assert record.status == "finished", record
        [body] = server.requests
        shown = set(re.findall(r"\[mem:([0-9a-z]+)\]", body["messages"][-1]["content"]))
        retrieved = next(e for e in events if type(e).__name__ == "PromptSent").context_ids
        with Session(workspace) as session:
            [attempt] = session.store.get_many(record.progress["relu"].attempts)
            recorded = set(attempt.extra["context"])
            items = [session.store.get(i) for i in recorded]
        assert recorded == shown == set(retrieved), (n_ctx, sorted(shown), sorted(recorded))
        assert all(item is not None and item.task_id.startswith("other") for item in items)
        fitted = [e for e in events if type(e).__name__ == "PromptFitted"]
        seen.append((n_ctx, len(shown), fitted[0].left_out if fitted else ()))
        if fitted and any(" of " in said and "memory items" in said for said in fitted[0].left_out) and shown:
            return     # some items shown, some left out: the case this test is for
    pytest.fail(f"no context size kept some memory items and left others out: {seen}")
