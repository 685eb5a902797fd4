"""LLM access: the ``openai`` SDK (async) against any OpenAI-compatible endpoint.

Answers are streamed where the server streams, so ``timeout_s`` bounds a silence, not the answer's length (a
4,096-token answer at 13 tokens a second takes 315 s), and the caller hears how long a call has run and how many
tokens came (``CallNews``); leaving a call (a timeout, a stop) closes its connection, which ends the generation on
servers that watch for it (llama.cpp, vLLM). Concurrency limit (the configured one, else what the server serves at
once: ``core.servers``), retries with exponential backoff and jitter on 429, 5xx, silences and dropped connections
(honouring ``Retry-After``), each told to the caller before it waits; token and cost accounting with optional
budgets, and a response cache keyed by a hash of the request, so a run can be replayed offline (``replay=True``
answers only from the cache). Errors the user must fix (bad key, unknown model, a request longer than the model's
context, no endpoint) are ``LLMError`` with one line, in full, saying what to change; they are never retried.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from core.config import LLMConfig
from core.errors import LLMError
from core.servers import Overflow, ServerFacts, overflow_numbers, read_server

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam


Role = Literal["system", "user", "assistant"]
Message = tuple[Role, str]   # (role, content): what a prompt is made of


class BudgetExceeded(LLMError):
    """The run's token or cost budget is spent."""


class ContextOverflow(LLMError):
    """The server refused a request as longer than the model's context (a 400), with the numbers it gave: the
    caller can fit the prompt and ask once more (``core.budget``), which is no retry of the same request."""

    def __init__(self, message: str, numbers: Overflow):
        super().__init__(message)
        self.numbers = numbers


@dataclass(frozen=True)
class CallNews:
    """What a call in flight tells its caller: ``sent`` (it has a request slot, ``[llm] concurrency``, and goes to
    the server), ``progress`` (seconds since it was sent, answer tokens received so far) about once a second while
    tokens come, or ``retry`` (why the last try failed, the try that comes next of how many, and the seconds it
    waits first)."""

    kind: Literal["sent", "progress", "retry"]
    seconds: float = 0.0
    tokens: int = 0
    reason: str = ""
    next_try: int = 0
    tries: int = 0
    wait_s: float = 0.0


Listener = Callable[[CallNews], None]
PROGRESS_EVERY_S = 1.0    # the least time between two progress news of one call
DEFAULT_CONCURRENCY = 4   # requests in flight when neither [llm] concurrency nor the server says how many it serves


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    temperature: float = 0.7
    max_tokens: int = 4096
    sample: str = ""                               # tells samples apart: "<run>:<task>:<iteration>"

    def key(self) -> str:
        text = json.dumps([self.model, self.messages, round(self.temperature, 4), self.max_tokens, self.sample])
        return hashlib.sha256(text.encode()).hexdigest()

    def chars(self) -> int:
        return sum(len(c) for _, c in self.messages)


@dataclass
class ChatAnswer:
    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str = "stop"
    model: str = ""
    cached: bool = False
    seconds: float = 0.0
    cost: float = 0.0
    counted: bool = False     # tokens_in is the server's own count (its usage), not an estimate from characters

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ResponseCache(Protocol):
    """Where answers are kept by request key (the store): JSON-like records, ChatAnswer.to_dict() and aliases."""

    def cache_get(self, key: str) -> dict[str, Any] | None: ...
    def cache_put(self, key: str, value: dict[str, Any]) -> None: ...


@dataclass
class Usage:
    """Tokens and cost so far, against optional budgets."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    requests: int = 0
    cached: int = 0
    token_budget: int | None = None
    cost_budget: float | None = None

    def check(self) -> None:
        if self.token_budget is not None and self.tokens_in + self.tokens_out >= self.token_budget:
            raise BudgetExceeded(f"token budget spent ({self.tokens_in + self.tokens_out:,} of {self.token_budget:,})")
        if self.cost_budget is not None and self.cost >= self.cost_budget:
            raise BudgetExceeded(f"cost budget spent (${self.cost:.2f} of ${self.cost_budget:.2f})")


class LLMClient(Protocol):
    """What the engine needs from a model."""

    model: str
    usage: Usage

    async def server(self) -> ServerFacts:
        """What the endpoint says about itself (its models, context, requests at once); checks that it serves
        ``model`` (``LLMError`` naming the models it does serve). Read once; a fact not said is no error."""

    async def complete(self, request: ChatRequest, listen: Listener | None = None) -> ChatAnswer:
        """Answer one chat request (from the cache when it holds it); ``listen`` hears the call's progress and
        its retries while it runs."""

    async def close(self) -> None:
        """Release connections."""


@dataclass
class _Retryable(Exception):
    reason: str
    retry_after: float | None = None


class _NoStreaming(Exception):
    """The server refused a streamed request: asked again unstreamed (a property of the server, no retry)."""


class _EmptyStream(Exception):
    """A stream that ended, or a streamed request whose connection dropped, before anything came: llama-cpp-python's
    ways of failing a streamed request it cannot take (a prompt longer than its context); the same request
    unstreamed gets its reason in words (a 400 with numbers), or fails as a connection would."""


class OpenAIClient:
    """An OpenAI-compatible endpoint through the official SDK."""

    def __init__(self, config: LLMConfig, cache: ResponseCache | None = None, *, replay: bool = False,
                 usage: Usage | None = None):
        if not config.model and not replay and not config.base_url and not config.api_key:
            raise LLMError("no LLM endpoint configured: set OPENAI_BASE_URL and EVOKERNEL_MODEL (and OPENAI_API_KEY "
                           "if it needs one), or `base_url` and `model` under [llm] in evokernel.toml")
        if not config.model:
            raise LLMError("no model configured: set EVOKERNEL_MODEL or `model` under [llm] in evokernel.toml")
        if not replay and not config.base_url and not config.api_key:
            raise LLMError("no LLM endpoint configured: set OPENAI_BASE_URL (and OPENAI_API_KEY if it needs one), "
                           "or `base_url` under [llm] in evokernel.toml")
        self.config = config
        self.model = config.model
        self.cache = cache
        self.replay = replay
        self.usage = usage or Usage(token_budget=config.token_budget, cost_budget=config.cost_budget)
        self._backoff = config.backoff_s
        self.concurrency = config.concurrency or DEFAULT_CONCURRENCY   # requests in flight (the server's, when read)
        self._sem = asyncio.Semaphore(self.concurrency)
        self._client: AsyncOpenAI | None = None
        self._server: ServerFacts | None = None
        self._stream = True           # until the server refuses a streamed request
        self._stream_usage = True     # ask for usage in the stream (stream_options) until the server refuses it

    def _sdk(self) -> AsyncOpenAI:
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(base_url=self.config.base_url, api_key=self.config.api_key or "not-needed",
                                       timeout=self.config.timeout_s, max_retries=0)
        return self._client

    async def server(self) -> ServerFacts:
        if self._server is None:
            if self.replay or not self.config.base_url:
                self._server = ServerFacts()
            else:
                self._server = await asyncio.to_thread(read_server, self.config.base_url, self.config.api_key,
                                                       self.model)
            if self.config.concurrency is None and self._server.slots:
                self.concurrency = self._server.slots
                self._sem = asyncio.Semaphore(self.concurrency)
        facts = self._server
        if facts.listed and facts.models and self.model not in facts.models:
            raise LLMError(f"the endpoint at {self._where()} does not serve model {self.model!r}; it serves "
                           f"{_listed(facts.models)}: set EVOKERNEL_MODEL or `model` under [llm] to one of them")
        return facts

    def _price(self, tokens_in: int, tokens_out: int) -> float:
        c = self.config
        return tokens_in / 1e6 * c.price_in_per_mtok + tokens_out / 1e6 * c.price_out_per_mtok

    async def complete(self, request: ChatRequest, listen: Listener | None = None) -> ChatAnswer:
        key = request.key()
        if self.cache is not None:
            hit = await asyncio.to_thread(self._cached, key, request)
            if hit is not None:
                answer = ChatAnswer(**{k: v for k, v in hit.items() if k in ChatAnswer.__dataclass_fields__})
                answer.cached, answer.seconds, answer.cost = True, 0.0, 0.0
                self.usage.cached += 1
                return answer
        if self.replay:
            raise LLMError("replay: this request is not in the response cache (the run diverged from the recorded one)")
        self.usage.check()
        async with self._sem:
            if listen is not None:
                listen(CallNews("sent"))
            answer = await self._with_retries(request, listen)
        self.usage.tokens_in += answer.tokens_in
        self.usage.tokens_out += answer.tokens_out
        self.usage.cost += answer.cost
        self.usage.requests += 1
        if self.cache is not None:
            await asyncio.to_thread(self._remember, key, request, answer)
        return answer

    def _cached(self, key: str, request: ChatRequest) -> dict[str, Any] | None:
        """The cached answer to ``request``; when replaying, also the answer recorded for the same
        sample (run, task, iteration) even if the prompt differs (timing noise can change a choice)."""
        cache = self.cache
        assert cache is not None, "only called with a cache"
        hit = cache.cache_get(key)
        if hit is None and self.replay and request.sample:
            alias = cache.cache_get("sample:" + request.sample)
            hit = cache.cache_get(alias["key"]) if alias else None
        return hit

    def _remember(self, key: str, request: ChatRequest, answer: ChatAnswer) -> None:
        cache = self.cache
        assert cache is not None, "only called with a cache"
        cache.cache_put(key, {**answer.to_dict(), "request_chars": request.chars()})
        if request.sample:
            cache.cache_put("sample:" + request.sample, {"key": key})

    async def _with_retries(self, request: ChatRequest, listen: Listener | None) -> ChatAnswer:
        last = ""
        tries = self.config.retries + 1
        for attempt in range(tries):
            try:
                try:
                    return await self._once(request, listen)
                except _NoStreaming:
                    return await self._once(request, listen)   # the same try, unstreamed: the server refused streams
                except _EmptyStream:
                    # the same try, unstreamed, once: the server says why in words (or answers after all)
                    return await self._once(request, listen, stream=False)
            except _Retryable as exc:
                last = exc.reason
                if attempt == self.config.retries:
                    break
                delay = exc.retry_after if exc.retry_after is not None else self._backoff * 2**attempt
                wait = min(delay, 60.0) * (0.5 + random.random())
                if listen is not None:
                    listen(CallNews("retry", reason=last, next_try=attempt + 2, tries=tries, wait_s=wait))
                await asyncio.sleep(wait)
        hint = ""
        if last.startswith("no answer for"):
            hint = (f"; a server slower than that to start answering (a long prompt, requests queued behind others) "
                    f"needs a larger [llm] timeout_s (now {self.config.timeout_s:g}) or a smaller [llm] concurrency "
                    f"(now {self.concurrency})")
        elif last.startswith("connection failed"):
            hint = "; check that the server is still running"
        raise LLMError(f"the LLM endpoint at {self._where()} kept failing after {tries} tries: {last}{hint}")

    def _where(self) -> str:
        return self.config.base_url or "the OpenAI default (api.openai.com)"

    async def _once(self, request: ChatRequest, listen: Listener | None, stream: bool | None = None) -> ChatAnswer:
        import openai

        messages = [_sdk_message(role, content) for role, content in request.messages]
        started = time.perf_counter()
        streamed = self._stream if stream is None else stream
        try:
            if streamed:
                return await self._streamed(request, messages, started, listen)
            resp = await self._sdk().chat.completions.create(
                model=request.model,
                messages=messages,
                temperature=request.temperature,
                max_tokens=request.max_tokens,
            )
        except openai.RateLimitError as exc:
            raise _Retryable("429 rate limited", _retry_after(exc)) from None
        except openai.APITimeoutError:
            bound = ("the longest silence a streamed answer may have" if streamed else
                     "this server does not stream, so it bounds the whole answer")
            raise _Retryable(f"no answer for {self.config.timeout_s:g} s ([llm] timeout_s: {bound})") from None
        except openai.APIConnectionError as exc:
            if self.usage.requests == 0 and _refused(exc):
                # Nothing ever answered at this address: retrying will not make a server appear.
                raise LLMError(f"cannot reach the LLM endpoint at {self._where()} ({exc.__cause__ or exc}): "
                               "is the server running? Check OPENAI_BASE_URL or `base_url` under [llm]") from None
            if streamed and not _refused(exc):
                # llama-cpp-python closes a streamed request it cannot take (a prompt over its context) before it
                # answers, or after an empty 200: the same try unstreamed hears why (a 400 with the numbers)
                raise _EmptyStream() from None
            cause = exc.__cause__ or exc
            raise _Retryable(f"connection failed ({str(cause) or type(cause).__name__})") from None
        except openai.AuthenticationError:
            raise LLMError("the endpoint refused the API key (401): check OPENAI_API_KEY") from None
        except openai.NotFoundError:
            raise LLMError(self._not_found(request.model)) from None
        except openai.BadRequestError as exc:
            text = _full(exc)
            numbers = overflow_numbers(text)
            if numbers is not None:
                raise ContextOverflow(f"the request is longer than the model's context (400): {text}",
                                      numbers) from None
            if streamed and "stream" in text.lower():
                self._refuse_stream(text)
            raise LLMError(f"the endpoint rejected the request (400): {text}") from None
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code in (408, 409):
                raise _Retryable(f"server error {exc.status_code} ({_full(exc)})", _retry_after(exc)) from None
            if streamed and exc.status_code in (405, 415, 422, 501) and "stream" in _full(exc).lower():
                self._refuse_stream(_full(exc))
            raise LLMError(f"the endpoint answered {exc.status_code}: {_full(exc)}") from None
        except openai.APIError as exc:  # e.g. a body that is not a completion
            raise _Retryable(f"malformed answer ({_full(exc)})") from None
        except ValueError as exc:  # a body that is not JSON at all
            raise _Retryable(f"malformed answer ({type(exc).__name__}: {_full(exc)})") from None
        choices = getattr(resp, "choices", None) or []
        if not choices:
            raise _Retryable("an answer without choices")
        message = choices[0].message
        text = (message.content if message is not None else None) or ""
        usage = getattr(resp, "usage", None)
        return self._answer(request, text, usage, choices[0].finish_reason, getattr(resp, "model", ""), started)

    async def _streamed(self, request: ChatRequest, messages: list[ChatCompletionMessageParam], started: float,
                        listen: Listener | None) -> ChatAnswer:
        """One streamed try: the deltas gathered as they come (each read waits at most ``timeout_s``); the
        connection is closed however the try ends (a timeout, a stop), so a server that watches for it stops
        generating."""
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if self._stream_usage else {}
        # a streamed answer's connection is not kept for the next request: llama-cpp-python ends a stream it fails
        # with a complete, empty 200 on a connection it then closes, which a pool would hand the next request
        stream = await self._sdk().chat.completions.create(
            model=request.model, messages=messages, temperature=request.temperature,
            max_tokens=request.max_tokens, stream=True, extra_headers={"Connection": "close"}, **extra)
        parts: list[str] = []
        chunks = 0
        finish: str | None = None
        model = ""
        usage: Any = None
        said = started
        if "event-stream" not in stream.response.headers.get("content-type", "event-stream"):
            # a server that ignores `stream` (answers one JSON body): read it as such, and ask it unstreamed from
            # now on (its timeout then bounds the whole answer, which the timeout's message says)
            self._stream = False
            async with stream:
                return self._whole(request, json.loads(await stream.response.aread()), started)
        async with stream:
            async for chunk in _or_empty(stream, lambda: bool(parts)):
                model = model or getattr(chunk, "model", "") or ""
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or []:
                    delta = getattr(choice, "delta", None)
                    content = getattr(delta, "content", None) if delta is not None else None
                    if content:
                        parts.append(content)
                        chunks += 1
                    finish = getattr(choice, "finish_reason", None) or finish
                now = time.perf_counter()
                if listen is not None and now - said >= PROGRESS_EVERY_S:
                    said = now
                    listen(CallNews("progress", seconds=now - started, tokens=chunks))
        if not parts and finish is None and usage is None:
            raise _EmptyStream()
        if usage is None:    # a server that reports no usage in a stream: one token a content delta
            usage = {"completion_tokens": chunks}
        return self._answer(request, "".join(parts), usage, finish, model, started)

    def _whole(self, request: ChatRequest, body: Any, started: float) -> ChatAnswer:
        """An unstreamed completion's JSON body (from a server that answered a streamed request with one)."""
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _Retryable("an answer without choices")
        message = choices[0].get("message") or {}
        text = str(message.get("content") or "") if isinstance(message, dict) else ""
        return self._answer(request, text, body.get("usage") or {}, choices[0].get("finish_reason"),
                            str(body.get("model") or ""), started)

    def _answer(self, request: ChatRequest, text: str, usage: Any, finish: str | None, model: str | None,
                started: float) -> ChatAnswer:
        def said(name: str) -> int | None:
            value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
            return int(value) if isinstance(value, (int, float)) and value > 0 else None

        counted = said("prompt_tokens")
        tokens_in = counted or request.chars() // 4
        tokens_out = said("completion_tokens") or len(text) // 4
        return ChatAnswer(text=text, tokens_in=tokens_in, tokens_out=tokens_out, finish_reason=finish or "stop",
                          model=model or "", seconds=time.perf_counter() - started,
                          cost=self._price(tokens_in, tokens_out), counted=counted is not None)

    def _refuse_stream(self, text: str) -> None:
        """The server refused a streamed request: ask without ``stream_options`` first, then unstreamed."""
        if self._stream_usage and "stream_options" in text:
            self._stream_usage = False
        else:
            self._stream = False
        raise _NoStreaming(text)

    def _not_found(self, model: str) -> str:
        """A 404: the model is not served (with the ones that are), or the base URL is not an API's."""
        served = self._server.models if self._server is not None else ()
        if served and model not in served:
            return (f"the endpoint does not serve model {model!r} (404); it serves {_listed(served)}: set "
                    "EVOKERNEL_MODEL or `model` under [llm] to one of them")
        base = (self.config.base_url or "").rstrip("/")
        hint = f" (it usually ends in /v1: {base}/v1?)" if base and not base.endswith("/v1") else ""
        return (f"the endpoint answered 404 for model {model!r} at {self._where()}: check EVOKERNEL_MODEL or "
                f"`model` under [llm], and the base URL{hint}")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


async def _or_empty(stream: AsyncIterator[Any], started: Callable[[], bool]) -> AsyncIterator[Any]:
    """``stream``'s chunks; a connection that drops before any content came (llama-cpp-python failing a request it
    cannot take, after its 200) is an empty stream, asked again unstreamed to hear why."""
    import openai

    try:
        async for chunk in stream:
            yield chunk
    except openai.APITimeoutError:
        raise      # a silence past timeout_s: a retry, not a refusal
    except openai.APIConnectionError as exc:
        if started():   # dropped mid-answer: the server went away (a retry), it did not refuse the request
            cause = exc.__cause__ or exc
            raise _Retryable(f"connection failed mid-answer ({str(cause) or type(cause).__name__})") from None
        raise _EmptyStream() from None


def _refused(exc: Exception) -> bool:
    """A connection that could not be made at all (refused, no such host), as opposed to one that
    dropped or timed out: the endpoint is not there."""
    cause = exc.__cause__   # the HTTP library's ConnectError (httpx or its successor), matched by name
    return cause is not None and any(k.__name__ == "ConnectError" for k in type(cause).__mro__)


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value else None
    except (AttributeError, ValueError):
        return None


def _full(exc: Exception) -> str:
    """An error's message in full on one line (the server's own words, never cut: they name the numbers)."""
    text = str(getattr(exc, "message", "") or exc)
    return " ".join(text.split())


def _listed(models: tuple[str, ...], at_most: int = 12) -> str:
    shown = ", ".join(repr(m) for m in models[:at_most])
    return shown + (f" and {len(models) - at_most} more" if len(models) > at_most else "")


def _sdk_message(role: Role, content: str) -> ChatCompletionMessageParam:
    """One (role, content) pair of a request as the SDK's message record (one record type per role)."""
    if role == "system":
        return {"role": "system", "content": content}
    if role == "user":
        return {"role": "user", "content": content}
    return {"role": "assistant", "content": content}
