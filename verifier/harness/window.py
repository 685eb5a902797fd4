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
  before, by the reference's process (on devices, by each side while staging).
* **untrusted sides are stopped** (SIGSTOP through the fork server, every thread seen stopped) while
  any other side is timed: a candidate's signal handlers, timers, threads or spinning cannot take
  a core from the reference or the best, and its memory writes reach only its own process.
* **every timed call is checked**: the reference's and the candidate's outputs of the same round, at
  positions drawn after both calls, every call under the op trace and the call count; two more calls
  after the window are compared at every position.

``run_window`` returns the ``result`` and ``outputs`` that ``verifier.gates.performance.judge`` reads.
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
from verifier.timing import Window

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
            raise SideFailed(self.name, "could not be stopped" if stop else "could not be continued")
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
    samples: int = 1024            # positions compared per output on every timed call
    case: int | None = None        # a multi-case task's case
    clock: str = "wall"            # "wall" (this process's) or "events" (the sides' device events)


Observer = Callable[[str, Any], None]
"""``observe(event, what)``: ``("inputs", the inputs' bytes)`` after each draw, ``("timed", (side, sides))``
right before each timed call. For tests, which look at what every call saw and at the other sides."""


def run_window(sides: dict[str, Side], settings: WindowSettings, flush: Callable[[], None] | None = None,
               observe: Observer | None = None) -> dict[str, Any]:
    """Run one window over ``sides`` (``reference`` and ``candidate``, maybe ``best``), all started and
    answering. Returns the result part of what ``verifier.gates.performance.judge`` reads (the sides'
    picks follow from ``finish``); raises ``SideFailed``."""
    ref, cand = sides["reference"], sides["candidate"]
    untrusted = [s for s in sides.values() if not s.trusted]
    rng = random.Random(secrets.randbits(64))
    names = list(sides)
    for s in sides.values():
        s.read()   # "ready": the model is loaded
    case = "-" if settings.case is None else str(settings.case)

    layout: list[dict[str, Any]] = []
    source: mmap.mmap | None = None

    def fresh_inputs(instance: int) -> None:
        nonlocal layout, source
        words = ref.call(f"gen {secrets.randbits(62)} {case} {instance}")
        if source is None:
            layout = json.loads(" ".join(words[1:]))
            size = layout_bytes(layout)
            fd = os.open(ref.job_dir / "inputs.bin", os.O_RDONLY)
            try:
                source = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            for s in untrusted:
                fd = os.open(s.job_dir / "inputs.bin", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.ftruncate(fd, size)
                    s.inputs = mmap.mmap(fd, size)
                finally:
                    os.close(fd)
                s.call("layout " + json.dumps(layout, separators=(",", ":")))
        for s in untrusted:
            assert s.inputs is not None
            s.inputs[:] = source     # one copy per side: no side can change what another reads
        if observe is not None:
            observe("inputs", bytes(source))

    def stage(instance: int) -> None:
        for s in sides.values():
            s.pause(False)
        fresh_inputs(instance)
        for s in sides.values():
            s.call(f"stage {instance}")
        for s in untrusted:
            s.pause(True)

    def timed(name: str) -> tuple[float, float | None, bool]:
        s = sides[name]
        s.pause(False)
        if flush is not None:
            flush()
        if observe is not None:
            observe("timed", (name, sides))
        nonce = secrets.token_hex(8)
        line = f"go {nonce}\n".encode()
        t0 = time.perf_counter_ns()
        os.write(s._to, line)
        words = s.read()
        t1 = time.perf_counter_ns()
        s.pause(True)
        if len(words) != 4 or words[0] != "done" or words[1] != nonce:
            raise SideFailed(name, f"answered {' '.join(words)[:200]!r} to a timed call: only the harness's own "
                                   "answer line may be written to the side's channel")
        event = None if words[2] == "-" else float(words[2])
        return (t1 - t0) / 1e6, event, words[3] == "1"

    samples: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    order: list[list[str]] = []
    preempted: list[bool] = []
    checks: list[dict[str, Any]] = []

    def pick(meta: dict[str, Any], limit: int | None) -> None:
        for s in sides.values():
            s.pause(False)
        seed = secrets.randbits(62)
        what = "all" if limit is None else str(limit)
        ref.call(f"pick {seed} {what}")
        cand.call(f"pick {seed} {what}")
        checks.append(meta)

    for i in range(settings.warmup):   # untimed: loads libraries, touches pages, warms the allocators
        if i < 2:
            stage(i % 2)
        for name in rng.sample(names, len(names)):
            timed(name)
    started = time.perf_counter()
    budget = settings.budget_s * len(names)
    i = 0
    while i < settings.max_rounds and (i < settings.min_rounds or time.perf_counter() - started < budget):
        k = i % 2
        stage(k)
        this_round = rng.sample(names, len(names))
        switched = False
        for name in this_round:
            ms, event, was_preempted = timed(name)
            wall[name].append(ms)
            samples[name].append(event if settings.clock == "events" and event is not None else ms)
            switched |= was_preempted
        order.append(this_round)
        preempted.append(switched)
        pick({"round": i, "trial": k, "what": f"timed call {i + 1}"}, settings.samples)
        i += 1
    # After the window: each instance once more on fresh inputs, compared at every position.
    for k, what in ((1, "a call after timing"), (0, "a call after timing on new inputs")):
        stage(k)
        for name in ("reference", "candidate"):
            timed(name)
        pick({"round": i, "trial": k, "what": what}, None)
        i += 1
    window = Window(names, samples, wall, order, clock=settings.clock, preempted=preempted)
    input_bytes = tensor_bytes(layout)
    if source is not None:
        source.close()
    return {"window": window.to_dict(), "checks": checks, "input_bytes": input_bytes}


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

