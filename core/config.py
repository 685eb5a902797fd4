"""EvoKernel configuration: one pydantic model read from ``evokernel.toml``, then environment overrides.

Every field has a docstring and a default that works on a laptop CPU. Environment variables:
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (the usual OpenAI SDK ones), ``EVOKERNEL_MODEL``,
``EVOKERNEL_BACKEND``, ``EVOKERNEL_CLUSTER``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import ConfigError
from verifier import VerifyConfig


class LLMConfig(BaseModel):
    """Where drafts come from: any OpenAI-compatible chat-completions endpoint."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    """Endpoint, e.g. http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama). Env: OPENAI_BASE_URL."""

    api_key: str | None = None
    """API key; prefer the OPENAI_API_KEY environment variable to writing it here."""

    model: str | None = None
    """Model name as the endpoint knows it. Env: EVOKERNEL_MODEL."""

    temperature: float = Field(0.7, ge=0, le=2)
    """Sampling temperature for drafts and refinements."""

    max_tokens: int = Field(4096, ge=1)
    """Most tokens one answer may have; less when the model's context leaves less beside the prompt (the answer
    budget is fitted per request, down to 512 tokens: ``core.budget``)."""

    context_tokens: int | None = Field(None, ge=256)
    """The model's context in tokens (prompt and answer together), for a server that does not say it (Ollama
    without a loaded model, llama-cpp-python); the smaller of this and what the server says is used. None: what the
    server says (vLLM's /v1/models, llama.cpp's /props, Ollama's /api/ps or /api/show), else its first 400 answer."""

    concurrency: int | None = Field(None, ge=1)
    """LLM requests in flight at once. None: what the server serves at once (llama.cpp's slots, 1 for
    llama-cpp-python), else 4. More than the server serves only queues them there, each waiting out its timeout."""

    timeout_s: float = Field(300.0, gt=0)
    """Seconds of silence before a request is abandoned (then retried): answers are streamed, so this bounds the
    wait for the next token, not the whole answer (a server that does not stream: the whole answer)."""

    retries: int = Field(4, ge=0)
    """Retries on 429, 5xx and timeouts, with exponential backoff."""

    backoff_s: float = Field(1.0, ge=0)
    """First retry delay in seconds (doubling each retry, with jitter) unless the server says Retry-After."""

    price_in_per_mtok: float = Field(0.0, ge=0)
    """Price per million prompt tokens, for the cost counter."""

    price_out_per_mtok: float = Field(0.0, ge=0)
    """Price per million completion tokens, for the cost counter."""

    token_budget: int | None = None
    """Stop a run once it has used this many tokens in all (None: no limit)."""

    cost_budget: float | None = None
    """Stop a run once it has cost this much (None: no limit)."""


class EngineConfig(BaseModel):
    """The draft/refine loop and the value-driven memory policy (defaults from the EvoKernel paper)."""

    model_config = ConfigDict(extra="forbid")

    iterations: int = Field(30, ge=1)
    """Verifier calls per task in a run (the budget T)."""

    alpha: float = Field(0.3, gt=0, le=1)
    """Q-value learning rate: Q <- Q + alpha (r - Q)."""

    epsilon: float = Field(0.1, ge=0, le=1)
    """Exploration rate of the epsilon-greedy choice by Q."""

    n_context: int = Field(4, ge=0)
    """Experiences N put in a prompt."""

    pool_factor: float = Field(2.0, ge=1)
    """lambda: the candidate pool holds K = lambda * N similar items before choosing by Q."""

    pool_growth: float = Field(0.1, ge=0)
    """How much lambda grows per iteration (wider pools as memory fills)."""

    q_floor: float = -0.8
    """Items whose stage Q falls below this drop out of retrieval."""

    adoption_weight: float = Field(1.0, ge=0)
    """Credit weight of items the model cites as used; ignored items get ``ignored_weight``."""

    ignored_weight: float = Field(0.0, ge=0)
    """Credit weight of retrieved items the model did not cite (also when it cites none). 0, from the
    measurement in docs/memory.md: any weight above it lets an item earn value from the prompts it sat in."""

    uncited_limit: int = Field(12, ge=0)
    """An item shown this many times (over every task's prompts) and never cited leaves the retrieval pool
    (0: never). From the measurement in docs/memory.md."""

    parallel_builds: int = Field(2, ge=1)
    """Verifications running at once (timing is always one at a time)."""

    final_window: bool = True
    """At the end of a run, time each task's best beside its first feasible kernel and the reference in
    one window (one verification per task, outside the budget), so the report's best/first and best/ref
    come from one window."""


class ClusterConfig(BaseModel):
    """Verification on a Ray cluster of workstations (``pip install 'evokernel[cluster]'``)."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    """None: verify in this process (the default). "local" starts a one-node Ray here; "auto" joins the
    cluster `ray start` runs on this machine; "ray://host:port" joins a remote head. Env: EVOKERNEL_CLUSTER."""

    node_cache_dir: str | None = None
    """Build and reference cache folder on every node (None: ~/.cache/evokernel there; with "local",
    the workspace's own cache)."""


class Config(BaseModel):
    """The whole of ``evokernel.toml``."""

    model_config = ConfigDict(extra="forbid")

    backend: str = "cpu"
    """Where kernels run: cpu, cuda or ascend. Env: EVOKERNEL_BACKEND."""

    form: Literal["kernel-launch", "custom-op"] = "kernel-launch"
    """The candidate form prompts ask for where the backend takes several (ascend): "kernel-launch", flat
    kernel sources called through aclrtlaunch_* entries (the default: one build step of seconds, and the form
    that has run furthest here), or "custom-op", a CANN custom-operator project (op_host/, op_kernel/, a
    binding calling aclnn<Op>; what NPUKernelBench and MultiKernelBench ask for; built by msopgen and
    build.sh, minutes per candidate). The verifier takes either form whatever this says."""

    suite: str = "builtin"
    """Task suite: "builtin" or a folder of KernelBench-format files."""

    size_scale: float | str | None = None
    """Scale module-level sizes of tasks (a factor in (0, 1], or "auto" for about 4M input elements)."""

    theme: str = "dark"
    """Workbench theme: dark or light."""

    llm: LLMConfig = Field(default_factory=LLMConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    verifier: VerifyConfig = Field(default_factory=VerifyConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)


def load_config(path: Path | None) -> Config:
    """Read ``path`` (if it exists) and apply environment overrides."""
    data: dict[str, Any] = {}
    if path is not None and path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text (TOML files are UTF-8)") from None
        except IsADirectoryError:
            raise ConfigError(f"{path} is a folder, not a TOML file") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path or 'config'}: {where}: {first['msg']}") from None
    env = os.environ
    if env.get("OPENAI_BASE_URL"):
        config.llm.base_url = env["OPENAI_BASE_URL"]
    if env.get("OPENAI_API_KEY"):
        config.llm.api_key = env["OPENAI_API_KEY"]
    if env.get("EVOKERNEL_MODEL"):
        config.llm.model = env["EVOKERNEL_MODEL"]
    if env.get("EVOKERNEL_BACKEND"):
        config.backend = env["EVOKERNEL_BACKEND"]
    if env.get("EVOKERNEL_CLUSTER"):
        config.cluster.address = env["EVOKERNEL_CLUSTER"]
    if config.llm.base_url:
        problem = _url_problem(config.llm.base_url)
        if problem:
            origin = "OPENAI_BASE_URL" if env.get("OPENAI_BASE_URL") else f"{path or 'config'}: llm.base_url"
            raise ConfigError(f"{origin} {config.llm.base_url!r}: {problem}")
    return config


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint's base URL, or None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https:// (e.g. http://localhost:8000/v1)"
    if not parts.hostname:
        return "names no host (e.g. http://localhost:8000/v1)"
    return None
