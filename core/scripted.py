"""A scripted model and a canned verifier: the engine's loop with no endpoint, compiler or sandbox.

For tests of what the loop decides (stages, start points, rewards, values, the best) that run in
milliseconds. They replace the parts, not the checks of the parts: the real model client, the real
verifier and a few real end-to-end runs are tested on their own.

- ``ScriptedModel`` is an ``LLMClient`` answering ``script(request, n)`` (``n`` counts its calls).
- ``CannedVerifier`` follows the verifier protocol (``verify(task, files, on_gate, best=...)``):
  ``judge(task_id, files)`` gives a kernel's verdict, a ``Canned`` (a failing gate and its message,
  or a latency); the reference takes ``reference_ms``. Timings are exact, so a ratio's interval is
  the ratio itself and a verdict is "faster"/"slower" exactly when the change is at least
  ``min_change``, as the real gate decides on a noiseless machine. A ``Canned`` marked ``noisy`` is
  timed in a disturbed window instead: every interval spans ``NOISY_SPAN`` either side of its ratio,
  and the gate's rule makes it "noisy" wherever that interval holds 1; a ``Canned`` with its own
  ``span`` is timed with that interval instead (a narrow one reads "same speed" when it holds 1).
- ``load`` (one factor per verification, in call order) slows every kernel of that window alike, the
  way other work on the machine does: paired ratios stay, absolute latencies move between windows.
- ``keeps_verdicts``: as the real verifier, the same files timed beside the same best again return the
  recorded verdict (``from_cache``, no new window) unless the call asks for a ``fresh`` one.
  The reference takes ``reference_ms`` times its own factor in ``reference_load`` (1 when not given).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.llm import ChatAnswer, ChatRequest, Listener, Usage
from core.servers import ServerFacts
from verifier import (
    GATES,
    NOISE_LIMIT,
    GateResult,
    Outcome,
    Ratio,
    TaskSpec,
    Tolerance,
    VerifyConfig,
    candidate_hash,
    get_backend,
    judge_ratio,
    tolerance_for,
)


class ScriptedModel:
    """An LLM client whose answers come from ``script(request, n)``."""

    def __init__(self, script: Callable[[ChatRequest, int], str], model: str = "scripted",
                 facts: ServerFacts | None = None) -> None:
        """``facts``: what it says of itself as a server (nothing by default: no context limit)."""
        self.script = script
        self.model = model
        self.usage = Usage()
        self.requests: list[ChatRequest] = []
        self.facts = facts or ServerFacts()

    async def server(self) -> ServerFacts:
        return self.facts

    async def complete(self, request: ChatRequest, listen: Listener | None = None) -> ChatAnswer:
        self.requests.append(request)
        text = self.script(request, len(self.requests) - 1)
        tokens_in = sum(len(content) for _, content in request.messages) // 4
        self.usage.tokens_in += tokens_in
        self.usage.tokens_out += len(text) // 4
        self.usage.requests += 1
        return ChatAnswer(text=text, tokens_in=tokens_in, tokens_out=len(text) // 4, model=self.model)

    async def close(self) -> None:
        return None


@dataclass(frozen=True)
class Canned:
    """A kernel's verdict: ``latency_ms`` when it passes every gate, else the gate it fails at."""

    latency_ms: float | None = None
    failed_gate: str = ""
    message: str = ""
    internal: bool = False      # the verifier's own failure (a lost node, a harness error), not the kernel's
    noisy: bool = False         # timed in a window disturbed by other load (see NOISY_SPAN)
    span: float | None = None   # the interval's factor either side of each ratio (None: exact, or NOISY_SPAN)
    flags: tuple[str, ...] = ()  # what the harness could not fully check (a review flag: Outcome.not_judged)


NOISY_SPAN = 1.6  # a disturbed window's interval: [ratio / 1.6, ratio * 1.6], far wider than any noise limit


@dataclass
class _Backend:
    name: str
    device: str = "cpu"


@dataclass
class CannedVerifier:
    """Verdicts from ``judge`` instead of builds, trials and timings."""

    judge: Callable[[str, dict[str, str]], Canned]
    reference_ms: float = 10.0
    min_change: float = 0.03
    noise_limit: float = NOISE_LIMIT
    backend: Any = field(default_factory=lambda: _Backend("cpu"))
    calls: list[tuple[str, bool]] = field(default_factory=list)   # (task, timed beside a best)
    load: list[float] = field(default_factory=list)   # a factor on every kernel's time, per verification
    reference_load: list[float] = field(default_factory=list)   # the same for the reference
    keeps_verdicts: bool = False   # as the real verifier: the same files (and best) again return the recorded verdict
    fresh: list[bool] = field(default_factory=list)            # per verification: whether it was asked to measure anew
    _recorded: dict[tuple[str, str, str], Outcome] = field(default_factory=dict)

    def verify(self, task: TaskSpec, candidate: str | Path | dict[str, str],
               on_gate: Callable[[GateResult], None] | None = None, *, fresh: bool = False,
               best: dict[str, str] | None = None) -> Outcome:
        if not isinstance(candidate, dict):
            raise TypeError("the canned verifier judges files given as a dict")
        key = (task.id, candidate_hash(candidate), candidate_hash(best) if best else "")
        if self.keeps_verdicts and not fresh and key in self._recorded:
            recorded = Outcome.from_dict(self._recorded[key].to_dict())
            recorded.from_cache = True
            return recorded
        self.calls.append((task.id, best is not None))
        self.fresh.append(fresh)
        verdict = self.judge(task.id, candidate)
        out = Outcome.start(task.id, self.backend.name)
        out.candidate_hash = candidate_hash(candidate)
        for name in GATES:
            if verdict.failed_gate == name:
                details = {"internal": True, "transient": True} if verdict.internal else {}
                out.fail(name, verdict.message or f"canned failure at {name}", **details)
                break
            if name == "performance":
                self._time(out, verdict, best)
            else:
                out.pass_gate(name, "canned")
            if on_gate is not None:
                on_gate(out.gate(name))
        self._recorded[key] = out.finish()
        return out

    def _time(self, out: Outcome, verdict: Canned, best: dict[str, str] | None) -> None:
        call = len(self.calls) - 1
        factor = self.load[call] if call < len(self.load) else 1.0
        latency = (verdict.latency_ms if verdict.latency_ms is not None else self.reference_ms) * factor
        reference = self.reference_ms * (self.reference_load[call] if call < len(self.reference_load) else 1.0)
        out.latency_ms, out.latency_spread_ms, out.reference_ms = latency, 0.0, reference
        out.speedup = reference / latency
        span = verdict.span if verdict.span is not None else NOISY_SPAN if verdict.noisy else 1.0
        out.speedup_ci, out.vs_reference = self._verdict(out.speedup, span)
        out.timing_rounds = 20
        if best is not None:
            best_ms = (self.judge(out.task, best).latency_ms or self.reference_ms) * factor
            out.best_ms, out.gain, out.best_hash = best_ms, best_ms / latency, candidate_hash(best)
            out.gain_ci, out.vs_best = self._verdict(out.gain, span)
        out.flags = list(verdict.flags)
        out.pass_gate("performance", f"{latency:.3f} ms (canned)")

    def _verdict(self, ratio: float, span: float) -> tuple[list[float], str]:
        """The interval and the gate's own rule (``verifier.verdict.judge``) on it: an exact ratio's
        interval is itself; a noisy window's spans ``span`` either side."""
        ci = Ratio(ratio, ratio / span, ratio * span)
        return ci.to_list(), judge_ratio(ci, self.min_change, self.noise_limit)

    def tolerance_for(self, task: TaskSpec) -> Tolerance:
        """What a real verifier with default settings applies on this backend (nothing here compares outputs)."""
        return tolerance_for(task, VerifyConfig(), get_backend(self.backend.name))

    def close(self) -> None:
        return None
