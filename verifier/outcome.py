"""The verifier's verdict: a plain, serialisable record, the one shape of an outcome from the verifier
to the store to the screen.

An ``Outcome`` holds one ``GateResult`` per gate, in order. A failed build or a wrong kernel is an
Outcome, never an exception; only the harness's own bugs raise. The store keeps ``to_dict()`` as plain
data with an experience and knows nothing of its fields; core reads it back with ``from_dict`` (records
of earlier versions included: missing fields take their defaults, unknown ones are ignored), and the
engine's events and the workbench carry the Outcome itself, so a field added here reaches them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from verifier.verdict import words

GATES: tuple[str, ...] = ("format", "anti_hack", "build", "correctness", "performance")

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"

TOOL = "tool"
"""A failed gate's ``details[TOOL]``: why the failure is the tool's and not the kernel's (a sandbox or timing
process lost, the machine out of memory, the verifier closing or failing itself). Such an outcome judges
nothing (``Outcome.not_judged``): it is never cached, the engine verifies again, and what still fails is
recorded as not judged, with no reward, no value moved, never a parent or a start point. A feasible outcome with
a review flag (``Outcome.flags``: what the harness could not fully check) judges nothing the same way (#48: a flag
that nothing downstream read let a forged speed through)."""


WAITING = "waiting"
"""A gate's status while it waits for the machine's timing lock (told to the listener, never stored): its message
says who holds the lock."""


@dataclass
class GateResult:
    """One gate's result: its name, passed/failed/skipped, a message a person or an LLM can act on."""

    name: str
    status: str = SKIPPED
    message: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass
class Outcome:
    """Everything one verification found. ``to_dict``/``from_dict`` round-trip through JSON and msgpack."""

    task: str = ""
    backend: str = ""
    feasible: bool = False
    failed_gate: str | None = None
    message: str = ""
    gates: list[GateResult] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    latency_ms: float | None = None          # the candidate's median in the timing window
    latency_spread_ms: float | None = None   # its interquartile range
    reference_ms: float | None = None        # the reference's median in the same window
    speedup: float | None = None             # reference / candidate: median of the per-round ratios, one window
    speedup_ci: list[float] | None = None    # [low, high]: its 95 % paired-bootstrap interval
    vs_reference: str = ""                   # its verdict (verifier.verdict.Verdict): "faster", "slower", "same",
    #                                          "noisy" (too disturbed to judge), "implausible"
    best_ms: float | None = None             # the task's best, timed in the same window (when given)
    gain: float | None = None                # best / candidate, paired like speedup: above 1 is faster than the best
    gain_ci: list[float] | None = None       # [low, high]: its 95 % interval
    vs_best: str = ""                        # the same verdict against the best; "" when no best was timed
    best_hash: str = ""                      # the candidate hash of the best it was timed against
    timing_rounds: int = 0                   # rounds in the window (each side called once per round)
    flags: list[str] = field(default_factory=list)
    candidate_hash: str = ""
    build_cached: bool = False
    size_overrides: dict[str, int] = field(default_factory=dict)
    threads: int = 0
    roofline: dict[str, Any] | None = None  # verifier.machine.roofline.assess(): achieved GB/s, GFLOP/s, floor, summary
    seconds: float = 0.0
    created_at: float = 0.0
    from_cache: bool = False
    node: dict[str, Any] = field(default_factory=dict)  # the cluster node that verified it (empty: this machine)
    # a multi-case task's verdict per case, in case order: {"case" (its index in the task's cases), "number" (what
    # every surface names it: verifier.cases.case_number; --json's "case"), "inputs" (shapes, dtypes,
    # attributes in words), "correct", "max_abs_error", "max_rel_error", "trials", "message" (its first
    # failure), and once timed "latency_ms", "reference_ms", "speedup", "speedup_ci", "rounds"}
    cases: list[dict[str, Any]] = field(default_factory=list)
    listener: Callable[[GateResult], None] | None = field(default=None, repr=False, compare=False)
    verified: bool = field(default=True, repr=False, compare=False)
    """False only for an outcome read back from nothing (``from_dict(None)``: knowledge, an attempt never
    verified); never stored."""

    @classmethod
    def start(cls, task: str, backend: str) -> Outcome:
        return cls(task=task, backend=backend, gates=[GateResult(name) for name in GATES])

    def gate(self, name: str) -> GateResult:
        for g in self.gates:
            if g.name == name:
                return g
        raise KeyError(name)

    def pass_gate(self, name: str, message: str = "", seconds: float = 0.0, **details: Any) -> None:
        g = self.gate(name)
        g.status, g.message, g.seconds = PASSED, message, seconds
        g.details.update(details)
        if self.listener is not None:
            self.listener(g)

    def fail(self, name: str, message: str, seconds: float = 0.0, **details: Any) -> Outcome:
        """Mark gate ``name`` failed; the first failure decides ``failed_gate`` and ``message``."""
        g = self.gate(name)
        g.status, g.message, g.seconds = FAILED, message, g.seconds or seconds
        g.details.update(details)
        if self.listener is not None:
            self.listener(g)
        self.feasible = False
        if self.failed_gate is None:
            self.failed_gate = name
            self.message = f"{name}: {message}"
        return self

    def finish(self) -> Outcome:
        """Decide feasibility: every gate passed."""
        if self.failed_gate is None and all(g.passed for g in self.gates):
            self.feasible = True
            parts = [f"feasible; {self.latency_ms:.3f} ms" if self.latency_ms is not None else "feasible"]
            if self.speedup is not None:
                parts.append(words(self.vs_reference, self.speedup, self.speedup_ci,
                                   f"the reference ({self.reference_ms:.3f} ms in the same window)"))
            if self.vs_best:
                parts.append(words(self.vs_best, self.gain, self.gain_ci, "the best"))
            if self.flags:
                parts.append("flagged, so no verdict (the harness could not fully check it): " + "; ".join(self.flags))
            self.message = ", ".join(parts)
        return self

    CASE_TIMES = ("latency_ms", "reference_ms", "speedup", "speedup_ci", "vs_reference", "gain", "gain_ci", "vs_best",
                  "rounds")

    def add_case_times(self, timed: list[dict[str, Any]]) -> None:
        """Each case's time, speedup and verdicts from its own window (the performance gate's ``cases``) beside
        its correctness verdict in ``cases``."""
        by_case = {int(c["case"]): c for c in self.cases if "case" in c}
        for t in timed:
            entry = by_case.get(int(t["case"]))
            if entry is None:
                entry = by_case[int(t["case"])] = {"case": int(t["case"])}
                self.cases.append(entry)
            if "number" in t:
                entry.setdefault("number", t["number"])
            entry.update({k: t[k] for k in self.CASE_TIMES if k in t})
        self.cases.sort(key=lambda c: int(c.get("case", 0)))

    @property
    def not_judged(self) -> str:
        """Why this outcome says nothing of the kernel (a failure of the tool's own, ``TOOL``; a gate of the
        verifier's own failure, ``internal``; a review flag on an outcome that passed every gate: what the harness
        could not fully check, ``flags``), or "" when it is the kernel's verdict. Such an outcome is never cached,
        never a best, a reward or a parent."""
        for g in self.gates:
            if g.status == FAILED and (g.details.get(TOOL) or g.details.get("internal")):
                return str(g.details.get(TOOL) or g.message)
        if self.failed_gate is None and self.flags:
            return "the harness could not fully check this verdict (" + "; ".join(self.flags) + ")"
        return ""

    @property
    def timed(self) -> bool:
        """Feasible with a latency, and judged (``not_judged``): a kernel that counts for speed."""
        return self.feasible and self.latency_ms is not None and not self.not_judged

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("listener", None)
        data.pop("verified", None)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Outcome:
        """The outcome of a ``to_dict`` record, as stored by this version or an earlier one: fields it lacks
        take their defaults, keys it does not know are ignored; None or {} reads as an unverified,
        infeasible outcome."""
        if not data:
            return cls(verified=False)
        known = {f.name for f in fields(cls)} - {"listener", "verified"}
        kwargs = {k: v for k, v in data.items() if k in known}
        gate_fields = {f.name for f in fields(GateResult)}
        kwargs["gates"] = [GateResult(**{k: v for k, v in g.items() if k in gate_fields})
                           for g in data.get("gates") or []]
        return cls(**kwargs)

    def gate_or_none(self, name: str) -> GateResult | None:
        """The gate called ``name``, None when the outcome does not mention it."""
        return next((g for g in self.gates if g.name == name), None)
