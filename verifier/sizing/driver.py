"""``probe()``: one task's reference sized (``mode`` "auto") or run at the factor given, as the list of
its named steps (each in ``verifier.sizing.search``). It runs inside the probe's job
(``verifier.sizing.job_entry``); the tests call it directly with a script of measured times."""

from __future__ import annotations

from typing import Any

from verifier.sizing.measure import Measure, time_reference
from verifier.sizing.record import Progress
from verifier.sizing.search import Search


def probe(job: dict[str, Any], progress: Progress, measure: Measure | None = None) -> dict[str, Any]:
    """Size (``mode`` "auto") or just run the task in ``job``; ``measure`` times one spec (default
    :func:`verifier.sizing.measure.time_reference`: the tests pass their own to script the times a busy
    machine gives). Returns the record of what it found (``verifier.sizing.record.Probe``'s fields)."""
    search = Search(job, progress, measure or time_reference)
    search.load()                       # a task that does not load fails here, before any sizing
    too_big = search.fit_memory()       # shrunk on the meta device until its tensors fit the memory cap
    if too_big is not None:
        return too_big
    search.pin_failing_cases()          # cases whose reference fails at scaled sizes: kept as written or dropped
    search.start_from_count()           # the counted work's sizes, or small ones to grow from by time
    search.measure_until_sized()        # measure and move until in the window, confirmed or stuck
    best = search.settle()              # the closest over the window measured again; the closest chosen
    out = search.chosen(best)
    if search.trace:
        out["ops"] = search.traced(best)
    outside = search.outside(best)
    if outside is not None:
        out["problem"], out["reason"] = outside
    return out
