"""LLM access: the ``openai`` SDK (async) against any OpenAI-compatible endpoint.

Concurrency limit, retries with exponential backoff and jitter on 429, 5xx, timeouts and dropped
connections (honouring ``Retry-After``), token and cost accounting with optional budgets, and a
response cache keyed by a hash of the request, so a run can be replayed offline (``replay=True``
answers only from the cache). Errors the user must fix (bad key, unknown model, no endpoint) are
``LLMError`` with one line saying what to do.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from core.config import LLMConfig
from core.errors import LLMError

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam


Role = Literal["system", "user", "assistant"]
Message = tuple[Role, str]   # (role, content): what a prompt is made of


class BudgetExceeded(LLMError):
    """The run's token or cost budget is spent."""


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

    async def complete(self, request: ChatRequest) -> ChatAnswer:
        """Answer one chat request (from the cache when it holds it)."""

    async def close(self) -> None:
        """Release connections."""


@dataclass
class _Retryable(Exception):
    reason: str
    retry_after: float | None = None


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
        self._sem = asyncio.Semaphore(config.concurrency)
        self._client: AsyncOpenAI | None = None

    def _sdk(self) -> AsyncOpenAI:
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(base_url=self.config.base_url, api_key=self.config.api_key or "not-needed",
                                       timeout=self.config.timeout_s, max_retries=0)
        return self._client

    def _price(self, tokens_in: int, tokens_out: int) -> float:
        c = self.config
        return tokens_in / 1e6 * c.price_in_per_mtok + tokens_out / 1e6 * c.price_out_per_mtok

    async def complete(self, request: ChatRequest) -> ChatAnswer:
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
            answer = await self._with_retries(request)
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

    async def _with_retries(self, request: ChatRequest) -> ChatAnswer:
        last = ""
        for attempt in range(self.config.retries + 1):
            try:
                return await self._once(request)
            except _Retryable as exc:
                last = exc.reason
                if attempt == self.config.retries:
                    break
                delay = exc.retry_after if exc.retry_after is not None else self._backoff * 2**attempt
                await asyncio.sleep(min(delay, 60.0) * (0.5 + random.random()))
        raise LLMError(f"the LLM endpoint at {self._where()} kept failing after {self.config.retries + 1} tries: "
                       f"{last}")

    def _where(self) -> str:
        return self.config.base_url or "the OpenAI default (api.openai.com)"

    async def _once(self, request: ChatRequest) -> ChatAnswer:
        import openai

        messages = [_sdk_message(role, content) for role, content in request.messages]
        started = time.perf_counter()
        try:
            resp = await self._sdk().chat.completions.create(
                model=request.model,
                messages=messages,
                temperature=request.temperature,
                max_tokens=request.max_tokens,
            )
        except openai.RateLimitError as exc:
            raise _Retryable("429 rate limited", _retry_after(exc)) from None
        except openai.APITimeoutError:
            raise _Retryable(f"no answer within {self.config.timeout_s:.0f} s") from None
        except openai.APIConnectionError as exc:
            if self.usage.requests == 0 and _refused(exc):
                # Nothing ever answered at this address: retrying will not make a server appear.
                raise LLMError(f"cannot reach the LLM endpoint at {self._where()} ({exc.__cause__ or exc}): "
                               "is the server running? Check OPENAI_BASE_URL or `base_url` under [llm]") from None
            raise _Retryable(f"connection failed ({exc.__cause__ or exc})") from None
        except openai.AuthenticationError:
            raise LLMError("the endpoint refused the API key (401): check OPENAI_API_KEY") from None
        except openai.NotFoundError:
            raise LLMError(f"the endpoint does not know model {request.model!r} (404): check EVOKERNEL_MODEL "
                           "or the base URL (it usually ends in /v1)") from None
        except openai.BadRequestError as exc:
            raise LLMError(f"the endpoint rejected the request (400): {_short(exc)}") from None
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code in (408, 409):
                raise _Retryable(f"server error {exc.status_code}", _retry_after(exc)) from None
            raise LLMError(f"the endpoint answered {exc.status_code}: {_short(exc)}") from None
        except openai.APIError as exc:  # e.g. a body that is not a completion
            raise _Retryable(f"malformed answer ({_short(exc)})") from None
        except ValueError as exc:  # a body that is not JSON at all
            raise _Retryable(f"malformed answer ({type(exc).__name__}: {_short(exc)})") from None
        choices = getattr(resp, "choices", None) or []
        if not choices:
            raise _Retryable("an answer without choices")
        message = choices[0].message
        text = (message.content if message is not None else None) or ""
        usage = getattr(resp, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None) or request.chars() // 4
        tokens_out = getattr(usage, "completion_tokens", None) or len(text) // 4
        return ChatAnswer(text=text, tokens_in=int(tokens_in), tokens_out=int(tokens_out),
                          finish_reason=choices[0].finish_reason or "stop", model=getattr(resp, "model", "") or "",
                          seconds=time.perf_counter() - started, cost=self._price(int(tokens_in), int(tokens_out)))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


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


def _short(exc: Exception) -> str:
    text = str(getattr(exc, "message", "") or exc)
    return " ".join(text.split())[:200]


def _sdk_message(role: Role, content: str) -> ChatCompletionMessageParam:
    """One (role, content) pair of a request as the SDK's message record (one record type per role)."""
    if role == "system":
        return {"role": "system", "content": content}
    if role == "user":
        return {"role": "user", "content": content}
    return {"role": "assistant", "content": content}
