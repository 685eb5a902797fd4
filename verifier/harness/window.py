"""The timing window, run from the harness: every side in its own process, the clock here.

The reference runs in a job of the trusted reference server, the candidate and (when refining) the
task's best each in a sandboxed job of their own (``verifier.job.side``). This process coordinates
the rounds, draws every round's seed, holds the clock and compares the outputs:

* **fresh inputs every round**: the reference's process draws the task's own ``get_inputs()`` under a
  new seed from the operating system (every element new, never a rescaled copy of an earlier set);
  the harness copies them into each side's read-only input file and every side copies them into its
  own buffers before its call. No two calls of a window, or of two verifications, see related values.
* **the clock is here**: a call is the time from writing ``go NONCE`` to the side's ``done NONCE``
  (on devices, the side's event pair, with this wall clock kept beside it); caches are flushed right
  before, by the reference's process (on devices, by each side while staging). What one sample is (a
  cold call after the flush, or the public suites' warm calls) is the timing method's
  (``verifier.timing_method``, ``[verifier] timing``): the window consults it and nothing else changes.
* **untrusted sides are stopped** (SIGSTOP through the fork server, every thread seen stopped) while
  any other side is timed: a candidate's signal handlers, timers, threads or spinning cannot take
  a core from the reference or the best, and its memory writes reach only its own process.
* **every timed call is checked**: the reference's and the candidate's outputs of the same round, at
  positions drawn after both calls, every call under the op trace and the call count; two more calls
  after the window are compared at every position.

``run_window`` returns the ``result`` and ``outputs`` that ``verifier.gates.performance.measured`` reads.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import secrets
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.jobs import layout_bytes, tensor_bytes
from verifier.sandbox.client import JobExit, JobHandle
from verifier.timing_method import DEFAULT as DEFAULT_METHOD
from verifier.timing_method import METHODS, TimingMethod
from verifier.window_stats import Window, paired_ratio

# How long one command may take: a staging copy or a pick is milliseconds, a call is the kernel's time.
COMMAND_TIMEOUT_S = 30.0


class SideFailed(Exception):
    """A side stopped answering (it crashed, hung, was killed or answered out of protocol)."""

    def __init__(self, side: str, message: str, exit_: JobExit | None = None):
        super().__init__(message)
        self.side, self.exit = side, exit_


class Side:
    """One side's process, reached through the two FIFOs in its job folder."""

    def __init__(self, name: str, job_dir: Path, trusted: bool):
        self.name, self.job_dir, self.trusted = name, job_dir, trusted
        for fifo in ("ctl.in", "ctl.out"):
            os.mkfifo(job_dir / fifo, 0o600)
        # Read-write opens never block, and keep both FIFOs open whatever the side does; the side's end
        # is found gone by its job's exit, not by end-of-file.
        self._to = os.open(job_dir / "ctl.in", os.O_RDWR)
        self._from = os.open(job_dir / "ctl.out", os.O_RDWR | os.O_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(self._from, select.POLLIN)
        self._buffer = b""
        self.handle: JobHandle | None = None
        self.inputs: mmap.mmap | None = None
        self.stopped = False

    def start(self, handle: JobHandle | JobExit) -> None:
        if isinstance(handle, JobExit):
            raise SideFailed(self.name, f"could not start: {handle.describe()}", handle)
        self.handle = handle

    def send(self, line: str) -> None:
        data = (line + "\n").encode()
        while data:
            data = data[os.write(self._to, data):]

    def read(self, timeout: float = COMMAND_TIMEOUT_S) -> list[str]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self._poll.poll(50):
                try:
                    chunk = os.read(self._from, 65536)
                except BlockingIOError:
                    continue
                self._buffer += chunk
                if len(self._buffer) > 1 << 20:
                    raise SideFailed(self.name, "answered out of protocol (over 1 MB without a line end)")
                continue
            assert self.handle is not None
            if self.handle.done:
                raise SideFailed(self.name, "ended", self.handle.wait(0))
            if time.monotonic() > deadline:
                self.handle.kill()
                raise SideFailed(self.name, f"did not answer within {timeout:.0f} s and was killed",
                                 JobExit("timeout", seconds=timeout))
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode(errors="replace").split(" ")

    def go(self, calls: int = 1) -> tuple[float, list[str]]:
        """One timed sample: milliseconds from writing ``go NONCE [CALLS]`` to reading the answer line, per call
        (``calls`` back to back, the timing method's), and the answer, which must be ``done NONCE ...`` with this
        sample's nonce (its event time per call too)."""
        nonce = secrets.token_hex(8)
        line = (f"go {nonce}\n" if calls == 1 else f"go {nonce} {calls}\n").encode()
        t0 = time.perf_counter_ns()
        os.write(self._to, line)
        words = self.read(COMMAND_TIMEOUT_S * calls)
        t1 = time.perf_counter_ns()
        if len(words) != 4 or words[0] != "done" or words[1] != nonce:
            raise SideFailed(self.name, f"answered {' '.join(words)[:200]!r} to a timed call: only the harness's "
                                        "own answer line may be written to the side's channel")
        return (t1 - t0) / 1e6 / calls, words

    def call(self, line: str, expect: str = "ok", timeout: float = COMMAND_TIMEOUT_S) -> list[str]:
        self.send(line)
        words = self.read(timeout)
        if words[0] != expect:
            raise SideFailed(self.name, f"answered {' '.join(words)[:200]!r} to {line.split(' ')[0]!r}")
        return words

    def flush(self) -> None:
        """Have this side (the reference's, on the host) evict the caches before another side's call."""
        self.call("flush")

    def pause(self, stop: bool) -> None:
        """Stop or continue an untrusted side (the reference, trusted, is never stopped)."""
        if self.trusted or self.stopped == stop:
            return
        assert self.handle is not None
        if not self.handle.pause(stop):
            if self.handle.done:
                raise SideFailed(self.name, "ended", self.handle.wait(0))
            # the sandbox worker did not stop or continue a process that is still there: the tool's failure
            what = "stop" if stop else "continue"
            raise SideFailed(self.name, "could not be stopped" if stop else "could not be continued",
                             JobExit("lost", detail=f"the sandbox worker did not {what} the timing process"))
        self.stopped = stop

    def close(self) -> None:
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.inputs is not None:
            self.inputs.close()
            self.inputs = None


@dataclass
class WindowSettings:
    warmup: int
    max_rounds: int
    budget_s: float
    min_rounds: int = 5
    precision: float = 0.0         # stop once every reported ratio is within ±this share (0: never early)
    settle_rounds: int = 8         # rounds before the precision may stop the window
    samples: int = 1024            # positions compared per output on every timed call
    case: int | None = None        # a multi-case task's case
    clock: str = "wall"            # "wall" (this process's) or "events" (the sides' device events)
    method: TimingMethod = METHODS[DEFAULT_METHOD]   # what one sample is (verifier.timing_method)


Observer = Callable[[str, Any], None]
"""``observe(event, what)``: ``("inputs", the inputs' bytes)`` after each draw, ``("timed", (side, sides))``
right before each timed call. For tests, which look at what every call saw and at the other sides."""


def run_window(sides: dict[str, Side], settings: WindowSettings, flush: Callable[[], None] | None = None,
               observe: Observer | None = None) -> dict[str, Any]:
    """Run one window over ``sides`` (``reference`` and ``candidate``, maybe ``best``), all started and
    answering. Returns the result part of what ``verifier.gates.performance.measured`` reads (the sides'
    picks follow from ``finish``); raises ``SideFailed``."""
    run = _Run(sides, settings, flush, observe)
    try:
        return run.all_rounds()
    finally:
        run.close()


class _Run:
    """One window's state: the sides, the inputs' layout and the reference's mapping, the checks."""

    def __init__(self, sides: dict[str, Side], settings: WindowSettings, flush: Callable[[], None] | None,
                 observe: Observer | None):
        self.sides, self.settings, self.flush, self.observe = sides, settings, flush, observe
        self.ref, self.cand = sides["reference"], sides["candidate"]
        self.untrusted = [s for s in sides.values() if not s.trusted]
        self.names = list(sides)
        self.rng = random.Random(secrets.randbits(64))
        self.case = "-" if settings.case is None else str(settings.case)
        self.layout: list[dict[str, Any]] = []
        self.source: mmap.mmap | None = None
        self.checks: list[dict[str, Any]] = []

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    def fresh_inputs(self, instance: int) -> None:
        """A new draw in the reference's process, copied into every untrusted side's own input file."""
        words = self.ref.call(f"gen {secrets.randbits(62)} {self.case} {instance}")
        if self.source is None:
            self.layout = json.loads(" ".join(words[1:]))
            size = layout_bytes(self.layout)
            fd = os.open(self.ref.job_dir / "inputs.bin", os.O_RDONLY)
            try:
                self.source = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            for s in self.untrusted:
                fd = os.open(s.job_dir / "inputs.bin", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.ftruncate(fd, size)
                    s.inputs = mmap.mmap(fd, size)
                finally:
                    os.close(fd)
                s.call("layout " + json.dumps(self.layout, separators=(",", ":")))
        for s in self.untrusted:
            assert s.inputs is not None
            s.inputs[:] = self.source     # one copy per side: no side can change what another reads
        if self.observe is not None:
            self.observe("inputs", bytes(self.source))

    def stage(self, instance: int) -> None:
        """Fresh inputs into every side's buffers; then every untrusted side stopped."""
        for s in self.sides.values():
            s.pause(False)
        self.fresh_inputs(instance)
        for s in self.sides.values():
            s.call(f"stage {instance}")
        for s in self.untrusted:
            s.pause(True)

    def timed(self, name: str, calls: int = 1) -> tuple[float, float | None, bool]:
        """One side's sample of ``calls`` calls, the others stopped: (harness ms, the side's event ms or None,
        preempted), per call."""
        s = self.sides[name]
        s.pause(False)
        if self.flush is not None and self.settings.method.flush:
            self.flush()
        if self.observe is not None:
            self.observe("timed", (name, self.sides))
        ms, words = s.go(calls)
        s.pause(True)
        return ms, None if words[2] == "-" else float(words[2]), words[3] == "1"

    def pick(self, meta: dict[str, Any], limit: int | None) -> None:
        """The reference and the candidate keep the same positions of their last results (drawn now)."""
        for s in self.sides.values():
            s.pause(False)
        seed = secrets.randbits(62)
        what = "all" if limit is None else str(limit)
        self.ref.call(f"pick {seed} {what}")
        self.cand.call(f"pick {seed} {what}")
        self.checks.append(meta)

    def all_rounds(self) -> dict[str, Any]:
        """The warm-up, the timed rounds and the two calls after them."""
        settings, names = self.settings, self.names
        for s in self.sides.values():
            s.read()   # "ready": the model is loaded
        samples: dict[str, list[float]] = {n: [] for n in names}
        wall: dict[str, list[float]] = {n: [] for n in names}
        order: list[list[str]] = []
        preempted: list[bool] = []
        warmup = settings.warmup if settings.method.warmup is None else settings.method.warmup
        for i in range(warmup):   # untimed: loads libraries, touches pages, warms the allocators
            if i < 2:
                self.stage(i % 2)
            for name in self.rng.sample(names, len(names)):
                self.timed(name)
        started = time.perf_counter()
        budget = settings.budget_s * len(names)
        i = 0
        while i < settings.max_rounds and (i < settings.min_rounds or time.perf_counter() - started < budget):
            k = i % 2
            self.stage(k)
            this_round = self.rng.sample(names, len(names))
            switched = False
            for name in this_round:
                ms, event, was_preempted = self.timed(name, settings.method.calls)
                wall[name].append(ms)
                samples[name].append(event if settings.clock == "events" and event is not None else ms)
                switched |= was_preempted
            order.append(this_round)
            preempted.append(switched)
            self.pick({"round": i, "trial": k, "what": f"timed call {i + 1}"}, settings.samples)
            i += 1
            if settings.precision and i >= settings.settle_rounds and settled(samples, settings.precision):
                break
        # After the window: each instance once more on fresh inputs, compared at every position.
        for k, what in ((1, "a call after timing"), (0, "a call after timing on new inputs")):
            self.stage(k)
            for name in ("reference", "candidate"):
                self.timed(name)
            self.pick({"round": i, "trial": k, "what": what}, None)
            i += 1
        window = Window(names, samples, wall, order, clock=settings.clock, preempted=preempted)
        return {"window": window.to_dict(), "checks": self.checks, "input_bytes": tensor_bytes(self.layout)}


def settled(samples: dict[str, list[float]], precision: float) -> bool:
    """Whether every ratio a window reports (the reference over the candidate; the best over the candidate
    when there is a best) has an interval within ±``precision`` of the ratio: the rounds still to come
    would narrow an interval no verdict depends on. The width decides, never the side of 1 the ratio is
    on, so stopping here favours no verdict; a window stopped here is never "noisy" for its width
    (``verifier.verdict.judge``: the noise limit is far above the precision)."""
    cand = samples["candidate"]
    for other in ("reference", "best"):
        if other in samples:
            ratio = paired_ratio(samples[other], cand)
            if not ratio.half_width_pct <= 100.0 * precision:    # an infinite interval never settles
                return False
    return True


def finish(sides: dict[str, Side]) -> dict[str, tuple[JobExit, dict[str, Any] | None]]:
    """Tell every side to write what it kept and wait for it to end: (how it ended, its result.json)."""
    ended: dict[str, tuple[JobExit, dict[str, Any] | None]] = {}
    for name, s in sides.items():
        try:
            s.pause(False)
            s.call("finish")
        except SideFailed:
            pass
        assert s.handle is not None
        exit_ = s.handle.wait()
        result = None
        try:
            result = json.loads((s.job_dir / "result.json").read_text())
        except (OSError, ValueError):
            pass
        ended[name] = (exit_, result if isinstance(result, dict) else None)
    return ended

