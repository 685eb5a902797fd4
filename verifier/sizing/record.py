"""What a probe leaves: its progress lines as it goes (``Progress``: one JSON line per step, so a probe
killed for time or memory still says how far it got; the last line has ``"final": true``) and the record
of what it found (``Probe``), read back from those lines by the harness (``verifier.sizing.launch``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class Progress:
    """The probe's progress file: each record appended as one JSON line, the file closed after each, before
    the next step begins."""

    def __init__(self, path: str):
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


@dataclass
class Probe:
    """What a probe of a task's reference found (all fields optional but ``ok``)."""

    ok: bool
    loaded: bool = False
    factor: float = 1.0
    overrides: dict[str, int] = field(default_factory=dict)
    cases: list[dict[str, Any]] | None = None   # a multi-case task's cases (JSON records) at these sizes
    ms: float | None = None
    case_ms: list[float] = field(default_factory=list)
    bytes: int | None = None
    ops: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    reason: str = ""        # why it is outside the window: busy, at_floor, no_sizes, memory_cap, cliff, no_closer_size,
    #                         steps (a probe that did not finish: timeout, failed)
    on_cpu: float | None = None  # the share of the best call's wall time the reference's threads ran
    source: str = ""        # the source the overrides refer to, when it is not the task's own (literals lifted)
    steps: list[dict[str, Any]] = field(default_factory=list)  # the probe's progress lines, as JSON
    sized_by: str = ""      # "counted work" (at a rate corrected by a timing) or "measured time"; "" not sized

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Probe:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
