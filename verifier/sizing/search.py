"""The search over scale factors: from the sizes the task is written at to the sizes whose reference call
lands in the time window, in named steps (``verifier.sizing.driver`` runs them in order).

The count decides first (``start_from_count``: the work counted on the meta device at the nominal rates,
``verifier.sizing.work``), a timing only confirms it (``confirm_count``) and corrects the rate in steps when
it disagrees; without a count the measured time decides (``step_toward_window``: bracketing, bisecting,
nudging past sizes that do not move). A shared machine only ever slows a call, so every size keeps the
best time measured at it (``_Tried``) and the closest sizes over the window are measured again before the
choice (``settle``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from verifier.cases import case_bytes, case_number
from verifier.sizing.case_limits import case_cap_ms, fit_case_indices
from verifier.sizing.limits import (
    BUSY_ON_CPU,
    CALL_CAP_S,
    CASES_BYTES_BUDGET,
    MAX_GROWTH,
    MAX_STEPS,
    RATE_STEP,
    START_BYTES,
    WINDOW_MS,
)
from verifier.sizing.measure import Measure, Timing
from verifier.sizing.record import Progress
from verifier.sizing.scaling import fixed_divisors, scale_cases, scale_values
from verifier.sizing.work import counted_cases, counted_ms, geomean, meta_bytes
from verifier.task import TaskSpec, load_task_module, size_constants


def spec_at(spec: TaskSpec, factor: float, pinned: dict[int, str] | None = None,
            each: dict[int, float] | None = None) -> tuple[TaskSpec, dict[str, int], tuple[int, ...]]:
    """The spec with every size scaled by ``factor`` (module sizes and case extents), its overrides, and
    the index in ``spec.cases`` of each of its cases (cases dropped, pinned or over the budget, are gone:
    a case is known by that index, never by its place among those left).
    ``pinned``: cases by index whose reference failed at scaled sizes, "keep" (as written) or "drop";
    ``each``: a further factor for cases by index (shrunk to the time limit of one case)."""
    pinned = pinned or {}
    sizes = size_constants(spec.source)
    scaled = scale_values(sizes, factor, fixed=fixed_divisors(spec.source)) if sizes and factor != 1.0 else dict(sizes)
    overrides = {k: v for k, v in scaled.items() if v != sizes[k]}
    # cases listed in code (no case file) are described, not read by the task: they cannot be scaled
    cases = scale_cases(spec.cases, factor, each) if spec.cases and spec.case_file and (factor != 1.0 or each) \
        else spec.cases
    origin = tuple(range(len(cases)))
    if spec.case_file:  # never grown past the cases' memory budget (the largest shrink back to fit it)
        # a case kept as written that alone is over the budget cannot run here at all
        pinned = {k: ("drop" if how == "keep" and case_bytes(spec.cases[k]) > CASES_BYTES_BUDGET else how)
                  for k, how in pinned.items()}
        left = [k for k in range(len(cases)) if pinned.get(k) != "drop"]
        chosen = tuple(spec.cases[k] if pinned.get(k) == "keep" else cases[k] for k in left)
        placed = fit_case_indices(chosen, keep=frozenset(i for i, k in enumerate(left) if pinned.get(k) == "keep"))[0]
        cases = tuple(c for _, c in placed)
        origin = tuple(left[i] for i, _ in placed)
    return replace(spec, size_overrides=overrides, cases=cases), overrides, origin


@dataclass
class _Tried:
    """Sizes measured: the best time at them over every measurement (noise only ever slows a call)."""

    factor: float
    ms: float
    spec: TaskSpec
    overrides: dict[str, int]
    nbytes: int | None
    result: Timing
    calls: int = 1
    on_cpu: float = 1.0   # the share of the best call's wall time its threads ran
    origin: tuple[int, ...] = ()   # the index in the task's cases of each case of ``spec``


def _sizes_key(spec: TaskSpec) -> str:
    return json.dumps([sorted(spec.size_overrides.items()), list(spec.cases)], sort_keys=True, default=str)


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "not enough memory" in text


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"


# what a step of the measuring loop says next
AGAIN, STOP = "again", "stop"


class Search:
    """One task's search for its sizes (``mode`` "auto"), or one run at the factor given: the state the
    steps share (the sizes now, the sizes measured, the cases pinned or shrunk, the notes) and the steps."""

    def __init__(self, job: dict[str, Any], progress: Progress, measure: Measure):
        self.progress, self.measure = progress, measure
        self.spec = spec = TaskSpec.from_dict(job["spec"])
        self.threads = int(job.get("threads", 1))
        self.lo, self.hi = job.get("window", WINDOW_MS)
        self.cap = int(job["bytes_cap"])
        self.call_cap = float(job.get("call_cap_s", CALL_CAP_S))
        self.auto = job.get("mode") == "auto"
        self.trace = bool(job.get("trace", True))
        self.factor = float(job.get("factor", 1.0))
        self.notes: list[str] = []
        self.has_sizes = bool(size_constants(spec.source)) or bool(spec.cases)
        self.pinned: dict[int, str] = {}   # cases whose reference failed at scaled sizes: kept as written, or dropped
        self.each: dict[int, float] = {}   # cases shrunk further to the time limit of one case, by their factor
        self.current: TaskSpec = spec
        self.overrides: dict[str, int] = {}
        self.origin: tuple[int, ...] = tuple(range(len(spec.cases)))
        self.nbytes: int | None = None
        self.capped = False
        self.target = math.sqrt(self.lo * self.hi)
        # sizes from counted work: the factor whose counted work, at the nominal rates times ``rate``, takes the
        # window's middle (the largest the memory caps allow at most); no timing decides them unless it disagrees
        self.rate = 1.0
        self.start = self.f_max = self.factor
        self.confirming = False   # the sizes are the count's until a timing disagrees by more than the window
        self.calibrations = 0
        self.reason = ""
        self.inner = (self.lo * (self.hi / self.lo) ** 0.15, self.hi / (self.hi / self.lo) ** 0.15)  # 2-50: ~3.2-31 ms
        self.tried: dict[str, _Tried] = {}  # by sizes: the best time measured at them (a shared machine only slows)
        self.previous: tuple[float, float] | None = None
        self.stuck = ""
        self.failures = 0
        self.too_small: float | None = None  # the largest factor at which the reference failed (sized too small)
        self.too_big: float | None = None    # the smallest factor at which it ran out of memory

    # -- the sizes at a factor ------------------------------------------------------------------

    def at(self, f: float) -> tuple[TaskSpec, dict[str, int], tuple[int, ...]]:
        """The spec at ``f``, its overrides, and the index in ``spec.cases`` of each of its cases."""
        return spec_at(self.spec, f, self.pinned, self.each)

    def move_to(self, f: float) -> None:
        """The sizes now are those at ``f``."""
        self.factor = f
        self.current, self.overrides, self.origin = self.at(f)
        self.nbytes = meta_bytes(self.current)

    def written(self, placed: tuple[int, ...]) -> tuple[dict[str, Any], ...]:
        """Each case of a spec whose cases are ``spec.cases`` at the indices ``placed``, as the task writes it."""
        return tuple(self.spec.cases[k] for k in placed)

    def fits(self, f: float) -> bool:
        """Within the memory cap, and a multi-case task's cases within their budget as scaled (the budget
        would shrink them to a common cap otherwise: sizes that move with the factor, not the count)."""
        got = meta_bytes(self.at(f)[0])
        if got is None or got > self.cap:
            return False
        return not self.spec.case_file or sum(case_bytes(c) for c in scale_cases(self.spec.cases, f, self.each)) <= \
            CASES_BYTES_BUDGET

    def largest_fit(self) -> float:
        """The largest factor (up to MAX_GROWTH) whose sizes fit the memory caps."""
        if not self.fits(self.start):
            return self.start
        if self.fits(MAX_GROWTH):
            return MAX_GROWTH
        a, b = math.log(self.start), math.log(MAX_GROWTH)
        for _ in range(16):
            mid = (a + b) / 2
            a, b = (mid, b) if self.fits(math.exp(mid)) else (a, mid)
        return math.exp(a)

    def predicted(self, f: float) -> float | None:
        """The counted work at ``f``, in milliseconds at the nominal rates (None: it cannot be counted)."""
        at_f, _, placed = self.at(f)
        got = counted_ms(at_f, self.written(placed))
        return geomean(got) if got else None

    def by_count(self, r: float) -> float:
        """The largest factor up to ``f_max`` whose counted work takes at most the window's middle at ``r``."""
        top = self.predicted(self.f_max)
        if top is not None and top * r <= self.target:
            return self.f_max
        a, b = math.log(1e-4), math.log(self.f_max)
        for _ in range(14):   # to 0.06 % of the factor: sizes move in whole steps long before that
            mid = (a + b) / 2
            got = self.predicted(math.exp(mid))
            a, b = (mid, b) if got is not None and got * r <= self.target else (a, mid)
        return math.exp(a)

    def from_count(self, wanted: float | None = None) -> None:
        """The sizes now are the count's at the current rate (``wanted``: its factor, found already), and
        ``capped`` when the memory caps stop them."""
        self.move_to(self.by_count(self.rate) if wanted is None else wanted)
        self.capped = self.factor >= self.f_max * 0.999 and self.f_max < MAX_GROWTH
        if self.capped and self.factor > 1.0 and "growth stopped at the memory cap" not in self.notes:
            self.notes.append("growth stopped at the memory cap")

    def pin(self, k: int, i: int, what: str) -> None:
        """Case ``k`` (the ``i``-th of the sizes now) failed: kept as written from now on, or dropped when it
        fails as written too."""
        n = case_number(self.spec.cases, k)
        if self.pinned.get(k) == "keep" or self.spec.cases[k] == self.current.cases[i]:
            self.pinned[k] = "drop"
            self.notes.append(f"case #{n} dropped: its reference fails at its own sizes ({what})")
        else:
            self.pinned[k] = "keep"
            self.notes.append(f"case #{n} kept as written: its reference fails at scaled sizes ({what})")

    def forget(self) -> None:
        """Every size measured so far had a case at other sizes: none of them counts any more."""
        self.tried.clear()
        self.previous = None

    # -- the steps, in order --------------------------------------------------------------------

    def load(self) -> None:
        """The task at the factor asked for: a task that does not load fails here, before any sizing."""
        self.current, self.overrides, self.origin = self.at(self.factor)
        load_task_module(self.current)
        self.progress.write({"loaded": True})
        self.nbytes = meta_bytes(self.current)

    def fit_memory(self) -> dict[str, Any] | None:
        """Shrunk on the meta device until its tensors fit the memory cap (bisecting the log of the factor);
        the failed record when it cannot be (not "auto", or nothing to scale)."""
        nbytes, cap = self.nbytes, self.cap
        if nbytes is None or nbytes <= cap:
            return None
        if not self.auto:
            return {"ok": False, "loaded": True, "factor": self.factor, "bytes": nbytes,
                    "problem": f"needs {nbytes / 2**30:.1f} GiB of tensors at these sizes (cap {cap / 2**30:.1f} GiB): "
                               "use --size-scale auto or a smaller factor"}
        if not self.has_sizes:
            return {"ok": False, "loaded": True, "factor": self.factor, "bytes": nbytes,
                    "problem": f"needs {nbytes / 2**30:.1f} GiB and has no module-level sizes to scale"}
        a, b = math.log(1e-4), math.log(self.factor)
        for _ in range(30):
            mid = (a + b) / 2
            got = meta_bytes(self.at(math.exp(mid))[0])
            if got is not None and got <= cap:
                a = mid
            else:
                b = mid
        self.move_to(math.exp(a))
        self.notes.append(f"shrunk to fit {cap / 2**30:.1f} GiB before timing")
        self.progress.write({"factor": self.factor, "bytes": self.nbytes})
        return None

    def pin_failing_cases(self) -> None:
        """Cases whose reference fails at the sizes counted (a split's sections no longer summing to its
        extent): kept as written, or dropped when they fail even so, as a timing would find, but from the count."""
        spec = self.spec
        if not (self.auto and spec.case_file and len(spec.cases) > 1):
            return
        for _ in range(2 * len(spec.cases)):
            errors: dict[int, str] = {}
            per_case = counted_cases(self.current, self.written(self.origin), each_case=True, errors=errors)
            bad = [i for i, w in enumerate(per_case or []) if w is None]
            if per_case is None or not bad or len(bad) >= len(per_case):
                break
            for i in bad:
                if i < len(self.origin):
                    self.pin(self.origin[i], i, errors.get(i, ""))
            self.move_to(self.factor)

    def start_from_count(self) -> None:
        """Where the measuring starts: the count's sizes when the work can be counted; else, for a task over
        START_BYTES, small sizes to grow from by measured time (a GPU-sized call can take seconds on a CPU)."""
        counted = self.auto and self.has_sizes and counted_ms(self.current, self.written(self.origin)) is not None
        self.f_max = self.start = self.factor
        if counted:
            self.f_max = self.largest_fit()
            self.from_count()
        elif self.auto and self.has_sizes and self.nbytes is not None and self.nbytes > START_BYTES:
            a, b = math.log(1e-4), math.log(self.factor)
            for _ in range(20):
                mid = (a + b) / 2
                got = meta_bytes(self.at(math.exp(mid))[0])
                a, b = (mid, b) if got is not None and got <= START_BYTES else (a, mid)
            self.move_to(math.exp(a))
        self.confirming = counted
        self.calibrations = 0

    def measure_until_sized(self) -> None:
        """Measure, then move, until the sizes are in the window (or confirmed, or stuck, or out of steps)."""
        for step in range(MAX_STEPS + 2 * len(self.spec.cases)):  # a case pinned (see below) takes a step
            self.progress.write({"factor": self.factor, "bytes": self.nbytes, "started": True})
            try:
                result = self.measure(self.current, self.threads, self.call_cap, trace=False)
            except Exception as exc:
                if self.after_failure(exc) == STOP:
                    break
                continue
            if self.shrink_slow_cases(result):
                continue
            entry = self.keep(result)
            self.progress.write({"factor": self.factor, "bytes": self.nbytes, "ms": result["ms"]})
            if not self.auto or not self.has_sizes:
                break
            if self.confirming:
                how = self.confirm_count(entry)
                if how == STOP:
                    break
                if how == AGAIN:
                    continue
            ms = entry.ms
            if self.inner[0] <= ms <= 3 * self.hi and entry.calls < (2 if entry.on_cpu >= BUSY_ON_CPU else 3):
                continue  # near or in the window: measure the same sizes again before trusting one noisy measurement
            if self.inner[0] <= ms <= self.inner[1] or (self.lo <= ms <= self.hi and step >= 5):
                break  # (auto aims inside the window's middle, so a noisy re-measurement stays in it)
            if self.step_toward_window(entry) == STOP:
                break
        else:
            if self.auto and self.has_sizes:
                self.notes.append(f"stopped after {MAX_STEPS} sizing steps")
        if not self.tried:
            raise RuntimeError(f"the reference failed at every size tried ({'; '.join(self.notes)})")

    # -- within a measuring step ----------------------------------------------------------------

    def after_failure(self, exc: Exception) -> str:
        """The reference failed at the sizes now: one case pinned (its constraint broken by scaling), or the
        sizes moved (shrunk out of memory, grown back when scaled too small); raises what cannot be sized
        around. AGAIN or STOP (kept the sizes it ran at)."""
        spec, origin, pinned = self.spec, self.origin, self.pinned
        oom = _out_of_memory(exc)
        case = getattr(exc, "evokernel_case", -1)
        k = origin[case] if spec.case_file and isinstance(case, int) and 0 <= case < len(origin) else -1
        if self.auto and not oom and k >= 0 and pinned.get(k) != "drop" and \
                len([i for i in origin if pinned.get(i) != "drop"]) > 1:
            # one case's own constraint broken by scaling (a split's sections no longer summing to its
            # extent): that case stays as written from now on, and is dropped if it fails even so
            self.pin(k, int(case), _what(exc))
            if self.confirming:   # the count decides again, that case as written (or gone): its sizes cannot move
                self.f_max = self.largest_fit()
                self.from_count()
            else:
                self.move_to(self.factor)
            self.forget()
            return AGAIN
        # out of memory: an intermediate the meta device does not count (attention's N x N scores), shrink;
        # otherwise scaled too small for the operator (a pooling window longer than its input), grow back
        factor = self.factor
        if not (self.auto and self.has_sizes and (oom or factor < 1)):
            raise exc
        if self.failures >= 4:
            if not self.tried:
                raise exc
            self.notes.append(f"at scale {factor:.3g} the reference failed ({type(exc).__name__}): "
                              "kept the sizes it ran at")
            return STOP
        self.failures += 1
        self.confirming = False   # the count did not foresee it: the measured time decides from here
        measured = [t.factor for t in self.tried.values()]
        if oom:
            self.too_big = factor if self.too_big is None else min(self.too_big, factor)
            self.notes.append(f"at scale {factor:.3g} the reference ran out of memory: shrunk")
            low = max([f for f in (self.too_small, *measured) if f is not None and f < factor], default=None)
            wanted = math.sqrt(low * factor) if low is not None else factor / 8
        else:
            self.too_small = factor if self.too_small is None else max(self.too_small, factor)
            self.notes.append(f"at scale {factor:.3g} the reference failed ({type(exc).__name__}): grown back")
            high = min([f for f in (self.too_big, *measured) if f is not None and f > factor], default=None)
            wanted = math.sqrt(factor * high) if high is not None else min(1.0, factor * 2)
        for _ in range(30):  # sizes at their floors move only once the factor has moved far enough
            if _sizes_key(self.at(wanted)[0]) != _sizes_key(self.current) or not 1e-4 < wanted < 1:
                break
            wanted = min(1.0, wanted * 1.5) if not oom else max(1e-4, wanted / 1.5)
        self.move_to(wanted)
        return AGAIN

    def shrink_slow_cases(self, result: Timing) -> bool:
        """A case the machine cannot run within the time limit of one case: shrunk (to a quarter of the limit,
        by the work its sizes grow with), dropped if it is at its smallest sizes already. True when a case
        changed (the sizes are measured afresh)."""
        spec, current, origin, pinned = self.spec, self.current, self.origin, self.pinned
        if not (self.auto and spec.case_file and len(current.cases) > 1):
            return False
        limit = case_cap_ms(len(current.cases))
        slow_cases = [(i, t) for i, t in enumerate(result.get("case_ms", [])) if t > limit]
        changed = False
        for i, t in slow_cases:
            if i >= len(origin):
                continue
            k = origin[i]
            n = case_number(self.spec.cases, k)
            before = current.cases[i]
            self.each[k] = self.each.get(k, 1.0) * (0.25 * limit / t) ** 0.5
            shrunk, _, placed = self.at(self.factor)
            after = dict(zip(placed, shrunk.cases)).get(k)
            if pinned.get(k) != "keep" and after is not None and after != before:
                self.notes.append(f"case #{n} shrunk to the {limit:.0f} ms time limit of one case "
                                  f"(one call took {t:.0f} ms)")
                changed = True
            elif len([n for n in origin if pinned.get(n) != "drop"]) > 1:
                pinned[k] = "drop"
                self.notes.append(f"case #{n} dropped: one call takes {t:.0f} ms at its smallest sizes, over "
                                  f"the {limit:.0f} ms time limit of one case")
                changed = True
        if changed:
            self.move_to(self.factor)
            self.forget()
        return changed

    def keep(self, result: Timing) -> _Tried:
        """The measurement kept with the sizes now: their best time over every measurement at them."""
        key = _sizes_key(self.current)
        entry = self.tried.get(key)
        if entry is None:
            entry = self.tried[key] = _Tried(self.factor, result["ms"], self.current, self.overrides, self.nbytes,
                                             result, on_cpu=result.get("on_cpu", 1.0), origin=self.origin)
        else:
            entry.calls += 1
            if result["ms"] < entry.ms:
                entry.ms, entry.result = result["ms"], result
                entry.on_cpu = result.get("on_cpu", 1.0)
        return entry

    def confirm_count(self, entry: _Tried) -> str | None:
        """The count's sizes, timed: STOP when confirmed (or as large as the memory caps allow), AGAIN to
        measure them again or to try the count's sizes at a corrected rate, None when the count cannot
        place it (the measured time decides from here)."""
        ms = entry.ms
        if self.lo <= ms <= self.hi or (ms < self.lo and self.capped):
            return STOP
        if entry.calls < 2:
            return AGAIN   # outside: measured again before the rate is corrected (a busy moment only slows)
        nominal = self.predicted(self.factor)
        self.confirming = False
        if nominal and self.calibrations < 3:
            # the operator runs at another rate than the nominal one: correct it in steps of RATE_STEP (a
            # load that slows a call less than that leaves the same sizes) and size from the count again
            step_rate = RATE_STEP ** round(math.log(ms / nominal) / math.log(RATE_STEP))
            if step_rate != self.rate:
                self.calibrations += 1
                self.rate = step_rate
                wanted = self.by_count(self.rate)
                if _sizes_key(self.at(wanted)[0]) != _sizes_key(self.current):
                    self.from_count(wanted)
                    self.confirming = True
                    return AGAIN
        return None

    def step_toward_window(self, entry: _Tried) -> str | None:
        """The next sizes to measure, from the measured times: STOP when there is none closer to the window
        (a time jump between neighbouring sizes, or the memory cap)."""
        factor, ms, lo, hi, tried = self.factor, entry.ms, self.lo, self.hi, self.tried
        key = _sizes_key(self.current)
        # the bracket from every size measured: a size measured slower than a larger one was slowed by noise
        below = max([t.factor for t in tried.values() if t.ms < self.inner[0]]
                    + ([self.too_small] if self.too_small else []), default=None)
        above = min([t.factor for t in tried.values() if t.ms > self.inner[1] and (below is None or t.factor > below)]
                    + ([self.too_big] if self.too_big else []), default=None)
        # work grows as factor**p: p from the last two measurements, else a guess (2: a matrix's worth)
        p = 2.0
        previous = self.previous
        if previous and previous[0] != factor and previous[1] > 0:
            p = math.log(ms / previous[1]) / math.log(factor / previous[0])
            p = min(8.0, max(0.5, p)) if p == p else 2.0  # a conv's work is batch x in x out x h x w
        self.previous = (factor, ms)
        wanted = factor * (self.target / ms) ** (1.0 / p)
        wanted = min(wanted, MAX_GROWTH, factor * 8)  # grow at most 8x per step: overhead hides the work
        if below is not None and above is not None and not below < wanted < above:
            wanted = math.sqrt(below * above)        # bracketed: bisect between the two
        nxt, nxt_overrides, nxt_origin = self.at(wanted)
        # sizes move in steps (divisors, floors): nudge until they do move
        for _ in range(10):
            if _sizes_key(nxt) != key:
                break
            wanted = wanted * 1.3 if ms < lo else wanted / 1.3
            if not 1e-4 <= wanted <= MAX_GROWTH or (below is not None and wanted <= below) or \
                    (above is not None and wanted >= above):
                break
            nxt, nxt_overrides, nxt_origin = self.at(wanted)

        if _sizes_key(nxt) in tried and below is not None and above is not None:
            wanted = math.sqrt(below * above)  # a noisy estimate led back: bisect the bracket instead
            nxt, nxt_overrides, nxt_origin = self.at(wanted)
        for _ in range(5):  # no bracket yet: step on by a fixed ratio past the sizes already tried
            if _sizes_key(nxt) not in tried or (below is not None and above is not None):
                break
            wanted = wanted * (0.6 if ms > hi else 1.6)
            nxt, nxt_overrides, nxt_origin = self.at(wanted)
        if _sizes_key(nxt) in tried:
            under = max((t.ms for t in tried.values() if t.ms < lo), default=None)
            over = min((t.ms for t in tried.values() if t.ms > hi), default=None)
            if below is not None and above is not None and under is not None and over is not None:
                self.stuck = (f"its time jumps from {under:.3g} to {over:.3g} ms between neighbouring sizes tried "
                              "(a performance cliff, or a busy machine)")
                self.reason = "cliff"
            else:
                self.stuck = "no untried size closer to the window"
                self.reason = "no_closer_size"
            return STOP
        nb = meta_bytes(nxt)
        if nb is not None and nb > self.cap:
            if wanted < factor or self.capped:
                return STOP
            # grow only as far as the memory cap allows: the largest factor whose tensors fit
            a, b = math.log(factor), math.log(wanted)
            for _ in range(14):
                mid = (a + b) / 2
                got = meta_bytes(self.at(math.exp(mid))[0])
                a, b = (mid, b) if got is not None and got <= self.cap else (a, mid)
            self.capped = True
            self.notes.append("growth stopped at the memory cap")
            wanted = math.exp(a)
            nxt, nxt_overrides, nxt_origin = self.at(wanted)
            nb = meta_bytes(nxt)
            if _sizes_key(nxt) == key:
                return STOP
        self.factor, self.current, self.overrides, self.origin, self.nbytes = wanted, nxt, nxt_overrides, nxt_origin, nb
        return None

    # -- the choice -----------------------------------------------------------------------------

    def distance(self, ms: float) -> float:
        """How far ``ms`` is outside the window, in log terms (0 inside)."""
        return 0.0 if self.lo <= ms <= self.hi else abs(math.log(ms / (self.lo if ms < self.lo else self.hi)))

    def closest(self) -> _Tried:
        """The sizes measured closest to the window (then to its middle)."""
        return min(self.tried.values(),
                   key=lambda t: (self.distance(t.ms), abs(math.log(max(t.ms, 1e-9) / self.target))))

    def nearest_over(self) -> _Tried | None:
        """The fastest sizes measured over the window."""
        return min((t for t in self.tried.values() if t.ms > self.hi), key=lambda t: t.ms, default=None)

    def measure_again(self, t: _Tried) -> None:
        """Sizes measured once more, their best time kept."""
        self.progress.write({"factor": t.factor, "bytes": t.nbytes, "started": True})
        result = self.measure(t.spec, self.threads, self.call_cap, trace=False)
        self.progress.write({"factor": t.factor, "bytes": t.nbytes, "ms": result["ms"]})
        t.calls += 1
        if result["ms"] < t.ms:
            t.ms, t.result, t.on_cpu = result["ms"], result, result.get("on_cpu", 1.0)

    def settle(self) -> _Tried:
        """The sizes chosen: the closest to the window, after the closest size over the window (the best one,
        or the upper side of a time jump) is measured again, up to four times when its calls waited for a
        CPU (the machine's other load only ever slows a call)."""
        for _ in range(6):
            best, slow_t = self.closest(), self.nearest_over()
            if not (self.auto and self.has_sizes) or slow_t is None or self.lo <= best.ms <= self.hi:
                break  # in the window, or nothing over it
            if slow_t.ms >= min(1e3 * self.call_cap, 20 * self.hi) or \
                    slow_t.calls >= (2 if slow_t.on_cpu >= BUSY_ON_CPU else 4):
                break
            self.measure_again(slow_t)
        return self.closest()

    def chosen(self, best: _Tried) -> dict[str, Any]:
        """The record of the sizes chosen (``verifier.sizing.record.Probe``'s fields), with the notes on the
        cases the memory budget left out, each said by its own index."""
        spec, auto, has_sizes = self.spec, self.auto, self.has_sizes
        if spec.case_file:
            for k in sorted(set(range(len(spec.cases))) - set(best.origin)):
                if self.pinned.get(k) != "drop":
                    self.notes.append(f"case #{case_number(spec.cases, k)} dropped: over the cases' "
                                      f"{CASES_BYTES_BUDGET / 2**20:.0f} MiB memory "
                                      "budget " + ("as written (its reference fails at other sizes)"
                                                   if self.pinned.get(k) == "keep" else "at its smallest sizes"))
        sized_by = ("" if not (auto and has_sizes) else "counted work" + (f" at {self.rate:g}x the nominal time"
                    if self.rate != 1 else "") if self.confirming else "measured time")
        return {"ok": True, "loaded": True, "factor": best.factor, "overrides": best.overrides,
                "cases": list(best.spec.cases) if spec.cases else None, "ms": best.ms,
                "case_ms": best.result.get("case_ms", []), "bytes": best.nbytes, "notes": self.notes,
                "on_cpu": round(best.on_cpu, 3), "sized_by": sized_by}

    def traced(self, best: _Tried) -> dict[str, int]:
        """The aten operators one forward at the chosen sizes runs (none when it takes seconds)."""
        if not (best.ms and best.ms < 5000):
            return {}
        try:
            return self.measure(best.spec, self.threads, self.call_cap, trace=True)["ops"]
        except Exception:
            return {}

    def outside(self, best: _Tried) -> tuple[str, str] | None:
        """Why the chosen sizes are outside the window, in words and as a reason word; None inside it."""
        lo, hi, ms, tried, threads = self.lo, self.hi, best.ms, self.tried, self.threads
        stuck, reason = self.stuck, self.reason
        if reason == "cliff":  # the times as measured last (a size measured again after the jump was found)
            under = max((t.ms for t in tried.values() if t.ms < lo), default=None)
            over_ms = min((t.ms for t in tried.values() if t.ms > hi), default=None)
            if under is not None and over_ms is not None:
                stuck = (f"its time jumps from {under:.3g} to {over_ms:.3g} ms between neighbouring sizes tried "
                         "(a performance cliff, or a busy machine)")
        if ms is None or lo <= ms <= hi:
            return None
        smallest_ran = self.too_small is not None and best.factor == min(t.factor for t in tried.values())
        at_floor = self.has_sizes and ms > hi and (_sizes_key(best.spec) == _sizes_key(self.at(1e-4)[0])
                                                   or smallest_ran)
        if ms > hi and best.on_cpu < BUSY_ON_CPU:
            why, reason = (f"the machine's other load: its best call ran on a CPU for {best.on_cpu:.0%} of its time"
                           + (f" (with {threads} threads: try threads = 1 on a shared machine)" if threads > 1 else "")
                           + ("; at its smallest sizes" if at_floor else "")), "busy"
        elif not self.has_sizes:
            why, reason = "no module-level sizes or cases to scale (literal shapes in get_inputs?)", "no_sizes"
        elif at_floor:
            why, reason = ("one call takes this long at its smallest sizes (each size at its floor or fixed"
                           + (", or the reference fails below them" if smallest_ran else "")
                           + "): its least work is over the window on this machine"), "at_floor"
        elif ms < lo and self.spec.case_file and \
                sum(case_bytes(c) for c in best.spec.cases) >= 0.9 * CASES_BYTES_BUDGET:
            why, reason = (f"its {len(best.spec.cases)} cases are at their memory budget "
                           f"({CASES_BYTES_BUDGET / 2**20:.0f} MiB of inputs in all: a verification keeps "
                           "every trial's results of every case)"), "memory_cap"
        elif ms < lo and self.capped:
            why, reason = (f"larger sizes would exceed the {self.cap / 2**20:.0f} MiB memory cap"
                           + (f" or the cases' {CASES_BYTES_BUDGET / 2**20:.0f} MiB budget" if self.spec.case_file
                              else "")), "memory_cap"
        elif stuck and reason == "cliff" and (slowed := self.nearest_over()) is not None and \
                slowed.on_cpu < BUSY_ON_CPU:
            why, reason = (stuck.split(" (")[0] + ", and the calls over the window ran on a CPU for "
                           f"{slowed.on_cpu:.0%} of their time: the machine's other load"), "busy"
        elif stuck:
            why = stuck
        else:
            why, reason = f"sizing stopped after {MAX_STEPS} steps", "steps"
        problem = f"{ms:.3g} ms is outside the {lo:g}-{hi:g} ms window" + (f": {why}" if self.auto else
                                                                            ": use --size-scale auto")
        return problem, reason if self.auto else "not_sized"
