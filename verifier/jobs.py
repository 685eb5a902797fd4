"""What the harness and the worker exchange for the reference and the candidate's correctness jobs:
one dataclass per message, imported by both sides, written as ``job.json`` and ``result.json``.

``result.json`` is an envelope (``JobStatus``: ok, or the stage and error of a failure) with the
job's result fields beside it. Tensors never go through JSON: outputs travel as ``outputs.pt``,
loaded with ``weights_only=True``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verifier.inputs import Trial
from verifier.task import TaskSpec


@dataclass
class ShapeSearch:
    """Second shapes of one kind for the reference to try, in order; the first it accepts is kept."""

    kind: str                                  # "smaller", "larger" or "tiny" (verifier.task.SHAPE_KINDS)
    candidates: list[dict[str, int]]
    trial: Trial                               # seeds and distribution; its overrides are filled in


@dataclass
class ReferenceJob:
    task: TaskSpec
    trials: list[Trial]
    shapes: list[ShapeSearch] = field(default_factory=list)
    threads: int = 1
    runtime: str = ""           # the backend's device runtime, ``module:Class`` (verifier.backends.runtime_target)
    want_outputs: bool = True
    want_timing: bool = True
    want_bandwidth: bool = False
    timing: dict[str, Any] = field(default_factory=dict)   # the performance gate's settings
    machine_lock: str | None = None
    noise_ratios: dict[str, list[float]] = field(default_factory=dict)  # measured before: see ReferenceResult
    kind: str = "reference"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = self.task.to_dict()
        d["trials"] = [t.to_dict() for t in self.trials]
        d["shapes"] = [{"kind": s.kind, "candidates": s.candidates, "trial": s.trial.to_dict()} for s in self.shapes]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReferenceJob:
        d = dict(d)
        d["task"] = TaskSpec.from_dict(d["task"])
        d["trials"] = [Trial.from_dict(t) for t in d["trials"]]
        d["shapes"] = [ShapeSearch(s["kind"], [dict(c) for c in s["candidates"]], Trial.from_dict(s["trial"]))
                       for s in d.get("shapes", [])]
        return cls(**d)


@dataclass
class ReferenceResult:
    """What the reference job found besides its outputs (which are in ``outputs.pt``)."""

    trials: list[Trial] = field(default_factory=list)      # the trials kept, in the order of the outputs
    dropped: list[str] = field(default_factory=list)       # widened trials the reference is undefined on, and why
    alt_rejected: list[str] = field(default_factory=list)  # second shapes the reference refused
    eval_mode: str = ""              # why the model runs in eval mode ("" : as constructed, training mode)
    nondeterministic: list[str] = field(default_factory=list)  # outputs that differ between two runs
    timing: dict[str, Any] | None = None
    bandwidth_gbps: float | None = None
    # Rounding noise (float32 against float64) over the output's RMS, per "distribution|shape" slot and
    # output, newly measured: the harness keeps them per task, so later jobs scale instead of re-running
    # the reference in float64.
    noise_ratios: dict[str, list[float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["trials"] = [t.to_dict() for t in self.trials]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReferenceResult:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["trials"] = [Trial.from_dict(t) for t in d.get("trials", [])]
        return cls(**d)


@dataclass
class CandidateJob:
    """The correctness trials of one candidate: it makes each trial's inputs from its seeds, as the
    reference did (verifier.inputs.make_inputs), and never sees the reference's outputs. It calls in the
    order of ``schedule``: (trial, seed) pairs, every trial once with seed 0 (every output position kept)
    and some again with a seed (the positions ``pick`` draws from it kept), so every instance is called
    more than once, in an order the harness drew (``verifier.gates.correctness.call_schedule``). An empty
    schedule calls every trial once, in order."""

    task: TaskSpec
    trials: list[Trial]
    schedule: list[tuple[int, int]] = field(default_factory=list)
    library: str = ""
    signatures: list[dict[str, Any]] = field(default_factory=list)
    model: str = "model.py"
    threads: int = 1
    runtime: str = ""           # the backend's device runtime, ``module:Class`` (verifier.backends.runtime_target)
    timer: str = "wall"
    eval_mode: bool = False
    kind: str = "candidate"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = self.task.to_dict()
        d["trials"] = [t.to_dict() for t in self.trials]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CandidateJob:
        d = dict(d)
        d["task"] = TaskSpec.from_dict(d["task"])
        d["trials"] = [Trial.from_dict(t) for t in d["trials"]]
        d["schedule"] = [(int(t), int(seed)) for t, seed in d.get("schedule", [])]
        return cls(**d)


@dataclass
class TrialReport:
    """What the worker saw during one trial of the candidate (its outputs are in ``outputs.pt``)."""

    calls: dict[str, int] = field(default_factory=dict)          # library calls by function
    forbidden_ops: dict[str, int] = field(default_factory=dict)  # aten ops beyond allocation and views
    inputs_changed: list[int] = field(default_factory=list)
    escaped_stream: list[int] = field(default_factory=list)      # outputs that changed after the stream finished
    signals_changed: list[str] = field(default_factory=list)     # worker_common.signal_changes around the calls
    trial: int = -1              # a repeated call's trial (-1: the trial's first call, in trial order)


@dataclass
class CandidateResult:
    trials: list[TrialReport] = field(default_factory=list)    # each trial's first call, in trial order
    repeats: list[TrialReport] = field(default_factory=list)   # the later calls, in the schedule's order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CandidateResult:
        return cls([TrialReport(**r) for r in d.get("trials", [])], [TrialReport(**r) for r in d.get("repeats", [])])


@dataclass
class JobStatus:
    """The envelope of every ``result.json``: ok, or where the job failed and why."""

    ok: bool = False
    stage: str = ""
    error: str = ""
    trial: int | None = None
    traceback: str = ""


JOB_TYPES: dict[str, type[ReferenceJob] | type[CandidateJob]] = {"reference": ReferenceJob, "candidate": CandidateJob}


def load_job(job_dir: Path) -> Any:
    """The job in ``job_dir``: a ReferenceJob or CandidateJob, or (other kinds) the plain dict."""
    data = json.loads((Path(job_dir) / "job.json").read_text())
    cls = JOB_TYPES.get(data.get("kind"))
    return cls.from_dict(data) if cls is not None else data


def write_job(job_dir: Path, job: Any) -> None:
    data = job if isinstance(job, dict) else job.to_dict()
    (Path(job_dir) / "job.json").write_text(json.dumps(data))


def read_result(job_dir: Path) -> tuple[JobStatus | None, dict[str, Any]]:
    """(the envelope, the result fields) of ``result.json``; (None, {}) when absent or unreadable."""
    try:
        data = json.loads((Path(job_dir) / "result.json").read_text())
    except (OSError, ValueError):
        return None, {}
    if not isinstance(data, dict):
        return None, {}
    status = JobStatus(ok=bool(data.get("ok")), stage=str(data.get("stage") or ""), error=str(data.get("error") or ""),
                       trial=data.get("trial") if isinstance(data.get("trial"), int) else None,
                       traceback=str(data.get("traceback") or ""))
    return status, data


# ----------------------------------------------------------------------------- timing windows

_ALIGN = 64


def input_layout(inputs: list[Any]) -> list[dict[str, Any]]:
    """Where each input of a timing window lives in a side's ``inputs.bin`` (tensors, 64-byte aligned),
    or its value (numbers and other plain arguments), as the reference's side writes them and every
    side reads them (verifier.window.harness, verifier.window.side)."""
    import torch

    offset = 0

    def place(x: Any) -> dict[str, Any]:
        nonlocal offset
        if isinstance(x, torch.Tensor):
            nbytes = x.numel() * x.element_size()
            entry = {"dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape), "offset": offset,
                     "nbytes": nbytes}
            offset += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
            return entry
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in x):  # torch.cat's inputs
            return {"seq": type(x).__name__, "items": [place(v) for v in x]}
        try:
            json.dumps(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"an input of type {type(x).__name__} cannot be passed to the timing window's "
                            "processes (tensors, lists of tensors and JSON values can)") from exc
        return {"value": x}

    return [place(x) for x in inputs]


def _placed(layout: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tensors' entries of ``layout``, lists of tensors opened."""
    out: list[dict[str, Any]] = []
    for e in layout:
        out += _placed(e["items"]) if "seq" in e else [e] if "offset" in e else []
    return out


def layout_bytes(layout: list[dict[str, Any]]) -> int:
    """The size of ``inputs.bin`` for ``layout`` (at least one byte: a mapping cannot be empty)."""
    return max(max((e["offset"] + e["nbytes"] for e in _placed(layout)), default=0), 1)


def tensor_bytes(layout: list[dict[str, Any]]) -> int:
    """The bytes of one set of the inputs' tensors."""
    return sum(int(e["nbytes"]) for e in _placed(layout))


REPEAT_SAMPLES = 4096
"""Positions per output a repeated call of the correctness trials keeps (``CandidateJob.schedule``)."""


def pick_positions(numels: list[int], seed: int, limit: int | None) -> list[Any]:
    """The flat positions ``pick`` keeps of outputs of ``numels`` values: an index tensor per output drawn
    from ``seed``, or None (every position: no ``limit``, or an output of at most ``limit`` values)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [None if limit is None or n <= limit else torch.randint(n, (limit,), generator=gen) for n in numels]


def pick(structure: Any, leaves: list[Any], seed: int, limit: int | None) -> dict[str, Any]:
    """A result reduced to ``limit`` positions per output drawn from ``seed`` (``pick_positions``), each
    output's full shape kept beside. Whoever holds the seed draws the same positions: the reference's side
    and the harness for what they compare, a job for a repeated call of its correctness trials."""
    picked = []
    for leaf, idx in zip(leaves, pick_positions([leaf.numel() for leaf in leaves], seed, limit)):
        picked.append(leaf.contiguous().clone() if idx is None else leaf.reshape(-1)[idx].clone())
    return {"structure": structure, "leaves": picked, "shapes": [list(leaf.shape) for leaf in leaves]}
