"""The messages of a timing window: what the harness (``verifier.window.harness``) and each side
(``verifier.window.side``) say to each other, one line each over the side's channel, typed here and nowhere
else. The harness writes commands; the side answers each one.

    gen SEED CASE K      (the reference only) fresh inputs from the task's ``get_inputs()`` under SEED (for
                         a multi-case task, case CASE; "-" for none), written to its ``inputs.bin``; for a
                         reference whose runs differ, the integer inputs of trial K. Answers ``ok LAYOUT``
    flush                (the reference only, on the host) evict the timed cores' caches; ``ok``
    layout LAYOUT        map ``inputs.bin`` (read-only for an untrusted side: the harness writes it while
                         the side is stopped) as LAYOUT places the inputs; ``ok``
    stage K              (a device side) copy the inputs to the device and flush its cache; ``ok``
    go NONCE K CALLS     call instance K on the inputs (CALLS times back to back: the timing method's sample,
                         ``verifier.window.methods``), synchronise; ``done NONCE EVENT PREEMPTED OUTPUTS`` at
                         once (EVENT per call), where OUTPUTS says where the last call's result lies in the
                         side's memory (the harness reads it there itself, the side stopped, before anything)
    settle [spoil]       the bookkeeping of the last call (its op trace, its library calls, signal
                         handling; the heap's top warmed; the next call's trace armed); ``ok``. With
                         ``spoil`` (an untrusted side whose memory the harness cannot write) the side also
                         spoils its last outputs itself; otherwise the harness does, once the side is
                         stopped again (``verifier.window.harness``)
    pick SEED LIMIT      keep LIMIT positions of the last result per output, drawn from SEED
                         (``verifier.jobs.pick``; ``all``: every position); ``ok``
    finish               write the kept picks and every call's report, and exit; ``ok``

The side says ``ready`` once its model is loaded. A line the side was not asked for, or a ``done`` with
another call's nonce, is a protocol failure: the side's channel is an ordinary pair of descriptors in a
process running the candidate's code, so the harness believes none of it without a check of its own (the
outputs, read from the side's memory while it is stopped, compared with the reference's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_COMPACT = (",", ":")


class ProtocolError(ValueError):
    """A line that is not a message of the window's protocol."""


# ----------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Gen:
    seed: int
    case: int | None
    trial: int

    def line(self) -> str:
        return f"gen {self.seed} {'-' if self.case is None else self.case} {self.trial}"


@dataclass(frozen=True)
class Flush:
    def line(self) -> str:
        return "flush"


@dataclass(frozen=True)
class Layout:
    layout: list[dict[str, Any]]

    def line(self) -> str:
        return "layout " + json.dumps(self.layout, separators=_COMPACT)


@dataclass(frozen=True)
class Stage:
    instance: int

    def line(self) -> str:
        return f"stage {self.instance}"


@dataclass(frozen=True)
class Go:
    nonce: str
    instance: int
    calls: int = 1                 # calls back to back in one sample (the timing method's, verifier.window.methods)

    def line(self) -> str:
        return f"go {self.nonce} {self.instance} {self.calls}"


@dataclass(frozen=True)
class Settle:
    spoil: bool = False            # the side spoils its last outputs itself (the harness cannot write its memory)

    def line(self) -> str:
        return "settle spoil" if self.spoil else "settle"


@dataclass(frozen=True)
class Pick:
    seed: int
    limit: int | None

    def line(self) -> str:
        return f"pick {self.seed} {'all' if self.limit is None else self.limit}"


@dataclass(frozen=True)
class Finish:
    def line(self) -> str:
        return "finish"


Command = Gen | Flush | Layout | Stage | Go | Settle | Pick | Finish


def parse_command(line: str) -> Command:
    """The command a line holds; raises ProtocolError."""
    word, _, rest = line.partition(" ")
    args = rest.split(" ") if rest else []
    try:
        if word == "gen" and len(args) == 3:
            return Gen(int(args[0]), None if args[1] == "-" else int(args[1]), int(args[2]))
        if word == "layout" and rest:
            return Layout(json.loads(rest))
        if word == "stage" and len(args) == 1:
            return Stage(int(args[0]))
        if word == "go" and len(args) == 3:
            return Go(args[0], int(args[1]), int(args[2]))
        if word == "settle" and args == ["spoil"]:
            return Settle(spoil=True)
        if word == "pick" and len(args) == 2:
            return Pick(int(args[0]), None if args[1] == "all" else int(args[1]))
        simple: dict[str, Command] = {"flush": Flush(), "settle": Settle(), "finish": Finish()}
        if word in simple and not args:
            return simple[word]
    except ValueError as exc:
        raise ProtocolError(f"malformed {word!r}: {line[:200]!r}") from exc
    raise ProtocolError(f"not a command: {line[:200]!r}")


# ----------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Leaf:
    """Where one output tensor of a call lies in the side's memory (its first element's address, in
    elements its shape and strides) and on which device."""

    address: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device: str

    def to_list(self) -> list[Any]:
        return [self.address, self.dtype, list(self.shape), list(self.strides), self.device]

    @classmethod
    def from_list(cls, v: list[Any]) -> Leaf:
        address, dtype, shape, strides, device = v
        return cls(int(address), str(dtype), tuple(int(d) for d in shape), tuple(int(d) for d in strides), str(device))


@dataclass(frozen=True)
class Outputs:
    """A call's result: its structure (``verifier.job.tensors.flatten``) and where each tensor leaf lies."""

    structure: Any
    leaves: tuple[Leaf, ...]


@dataclass(frozen=True)
class Ready:
    def line(self) -> str:
        return "ready"


@dataclass(frozen=True)
class Ok:
    layout: list[dict[str, Any]] | None = None     # a ``gen``'s answer

    def line(self) -> str:
        return "ok" if self.layout is None else "ok " + json.dumps(self.layout, separators=_COMPACT)


@dataclass(frozen=True)
class Done:
    nonce: str
    event_ms: float | None                 # the side's device event time, or None (the harness's clock decides)
    preempted: bool
    outputs: Outputs | None = None

    def line(self) -> str:
        event = "-" if self.event_ms is None else f"{self.event_ms:.6f}"
        where = "-" if self.outputs is None else json.dumps(
            {"structure": self.outputs.structure, "leaves": [leaf.to_list() for leaf in self.outputs.leaves]},
            separators=_COMPACT)
        return f"done {self.nonce} {event} {int(self.preempted)} {where}"


@dataclass(frozen=True)
class Failed:
    """An answer out of protocol (``error ...`` from the side, or any other line)."""

    text: str

    def line(self) -> str:
        return f"error {self.text}"


Answer = Ready | Ok | Done | Failed


def parse_answer(line: str) -> Answer:
    """The answer a line holds; anything else is ``Failed`` with the line (the harness says what it expected)."""
    word, _, rest = line.partition(" ")
    try:
        if word == "ready" and not rest:
            return Ready()
        if word == "ok":
            return Ok(json.loads(rest) if rest else None)
        if word == "done":
            nonce, event, preempted, where = rest.split(" ", 3)
            outputs = None
            if where != "-":
                data = json.loads(where)
                outputs = Outputs(data["structure"], tuple(Leaf.from_list(v) for v in data["leaves"]))
            return Done(nonce, None if event == "-" else float(event), preempted == "1", outputs)
    except (ValueError, KeyError, TypeError, RecursionError):
        pass
    return Failed(line[:200])
