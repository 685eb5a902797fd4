"""What an OpenAI-compatible server says about itself: the models it serves, its context length and how many
requests it serves at once, read where each kind of server says it, and the numbers of its "too long" errors.

- vLLM and SGLang: the models and the context (``max_model_len`` of the model's entry) from ``/v1/models``; requests
  at once are not said (the configured ``concurrency`` stands).
- llama.cpp (``llama-server``): the context of a slot (``default_generation_settings.n_ctx``) and the slots
  (``total_slots``) from ``/props``.
- llama-cpp-python (``python -m llama_cpp.server``, known by its ``/openapi.json`` title): one request at a time;
  its context is not said: its first 400 "too long" answer gives it.
- Ollama (known by ``/api/ps``): the context of the loaded model (``context_length``), else ``num_ctx`` of
  ``/api/show``; requests at once are not said.

Every read is a short GET (or Ollama's POST ``/api/show``) with a few seconds' timeout; what a server does not
answer is unknown (None), never guessed, and nothing here raises: the client decides what a missing fact means.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

READ_TIMEOUT_S = 30.0   # a server busy generating answers its GETs between tokens (llama-cpp-python: 6.6 s seen)


@dataclass(frozen=True)
class ServerFacts:
    """What the endpoint said about itself (each fact with where it was read, for the messages that use it)."""

    models: tuple[str, ...] = ()        # the model ids /v1/models lists (empty: it lists none, or did not answer)
    listed: bool = False                # /v1/models answered with a list (an empty one included)
    context_tokens: int | None = None   # the most tokens one request may hold, prompt and answer together
    context_source: str = ""            # where that was read, e.g. "llama.cpp's /props (n_ctx)"
    slots: int | None = None            # requests it serves at once (None: not said)
    slots_source: str = ""
    kind: str = ""                      # "vLLM", "llama.cpp", "llama-cpp-python", "Ollama", "" (not known)
    notes: tuple[str, ...] = field(default=())   # what could not be read, in words (for doctor and the docs)


def root_of(base_url: str) -> str:
    """The server's root: the base URL without its trailing ``/v1`` (llama.cpp's ``/props`` and Ollama's ``/api``
    live there)."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")).rstrip("/")


def _get(url: str, api_key: str | None, body: dict[str, Any] | None = None) -> Any:
    """The JSON a GET (or, with ``body``, a POST) of ``url`` answers, or None (any failure: not there, not JSON)."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=READ_TIMEOUT_S) as resp:   # noqa: S310 - the user's endpoint
            return json.loads(resp.read(2_000_000) or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def read_server(base_url: str, api_key: str | None, model: str) -> ServerFacts:
    """Everything the server at ``base_url`` says about itself and ``model`` (blocking: a few short requests)."""
    root = root_of(base_url)
    listing = _get(base_url.rstrip("/") + "/models", api_key)
    entries = listing.get("data") if isinstance(listing, dict) else None
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else None
    models = tuple(str(e.get("id")) for e in entries or [] if e.get("id"))
    facts: dict[str, Any] = {"models": models, "listed": entries is not None}
    notes: list[str] = []
    mine = next((e for e in entries or [] if e.get("id") == model), None)
    if mine is not None and _int(mine.get("max_model_len")):      # vLLM, SGLang
        facts.update(context_tokens=_int(mine.get("max_model_len")), kind="vLLM" if mine.get("owned_by") == "vllm"
                     else "", context_source="the server's /v1/models (max_model_len)")
    props = _get(root + "/props", api_key)
    if isinstance(props, dict) and ("total_slots" in props or "default_generation_settings" in props):
        facts["kind"] = "llama.cpp"
        settings = props.get("default_generation_settings")
        n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        n_ctx = n_ctx or _int(props.get("n_ctx"))
        if n_ctx and "context_tokens" not in facts:
            facts.update(context_tokens=n_ctx, context_source="llama.cpp's /props (n_ctx of a slot)")
        if _int(props.get("total_slots")):
            facts.update(slots=_int(props.get("total_slots")), slots_source="llama.cpp's /props (total_slots)")
    if not facts.get("kind"):
        openapi = _get(root + "/openapi.json", api_key)
        title = str(((openapi or {}).get("info") or {}).get("title", "")) if isinstance(openapi, dict) else ""
        if "llama.cpp python" in title.lower():
            # it answers one request at a time (a lock around its one model) and says nothing of its context
            facts.update(kind="llama-cpp-python", slots=1, slots_source="llama-cpp-python answers one request at "
                                                                        "a time")
            notes.append("llama-cpp-python does not say its context length: read from its first 'too long' answer")
        elif "vllm" in title.lower():
            facts["kind"] = "vLLM"
    if not facts.get("kind"):
        ps = _get(root + "/api/ps", api_key)
        if isinstance(ps, dict) and isinstance(ps.get("models"), list):
            facts["kind"] = "Ollama"
            loaded = next((m for m in ps["models"] if isinstance(m, dict) and model in (m.get("name"), m.get("model"))),
                          None)
            if loaded is not None and _int(loaded.get("context_length")) and "context_tokens" not in facts:
                facts.update(context_tokens=_int(loaded.get("context_length")),
                             context_source="Ollama's /api/ps (context_length of the loaded model)")
            if "context_tokens" not in facts:
                show = _get(root + "/api/show", api_key, {"model": model})
                num_ctx = _num_ctx(show.get("parameters") if isinstance(show, dict) else None)
                if num_ctx:
                    facts.update(context_tokens=num_ctx, context_source="Ollama's /api/show (num_ctx)")
                else:
                    notes.append("Ollama did not say the context it serves this model with (it cuts longer prompts "
                                 "silently): set [llm] context_tokens to its num_ctx / OLLAMA_CONTEXT_LENGTH")
    return ServerFacts(notes=tuple(notes), **facts)


def _num_ctx(parameters: Any) -> int | None:
    """``num_ctx N`` in Ollama's ``/api/show`` parameters text."""
    if not isinstance(parameters, str):
        return None
    m = re.search(r"^\s*num_ctx\s+(\d+)\s*$", parameters, re.M)
    return _int(m.group(1)) if m else None


@dataclass(frozen=True)
class Overflow:
    """The numbers of a server's "request too long" answer: its context, and the prompt's tokens when it says them."""

    context_tokens: int
    prompt_tokens: int | None = None


# vLLM, llama-cpp-python and the OpenAI wording: "This model's maximum context length is 2048 tokens. However, you
# requested 7971 tokens (3875 in the messages, 4096 in the completion)."
_OPENAI_WORDS = re.compile(r"maximum context length is (\d+) tokens")
_PROMPT_WORDS = re.compile(r"(\d+) in the messages|prompt contains at least (\d+) input tokens|"
                           r"request has (\d+) input tokens")
# llama.cpp: "the request exceeds the available context size" with n_prompt_tokens and n_ctx in the error object
_LLAMA_CPP = re.compile(r"n_ctx\W+(\d+)")
_LLAMA_CPP_PROMPT = re.compile(r"n_prompt_tokens\W+(\d+)")


def overflow_numbers(text: str) -> Overflow | None:
    """The context and prompt tokens a 400 "too long" answer states, or None when it is no such answer."""
    m = _OPENAI_WORDS.search(text)
    if m:
        prompt = _PROMPT_WORDS.search(text)
        return Overflow(int(m.group(1)), _int(next((g for g in prompt.groups() if g), None)) if prompt else None)
    if "context" in text.lower() and (n := _LLAMA_CPP.search(text)):
        prompt = _LLAMA_CPP_PROMPT.search(text)
        return Overflow(int(n.group(1)), _int(prompt.group(1)) if prompt else None)
    return None
