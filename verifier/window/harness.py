"""The timing window, run from the harness: every side in its own process, the clock here.

The reference, the candidate and (when refining) the task's best each run in a sandboxed job of their own
(``verifier.window.side``), speaking the messages of ``verifier.window.messages``. This process coordinates the
rounds, draws every round's seed, holds the clock and reads and compares the outputs; it never takes a side's
word for anything it can check. **Every side goes the same path** (issue #47), the trusted reference too: stopped
between its calls and continued the same way, its inputs a read-only mapping this process writes, its outputs read
and spoiled here, its threads held while it settles, in the same fork server; what one side paid and another did
not was in every ratio (an OpenMP relu equal to ``torch.relu`` in a plain process read up to 2x slower).

* **fresh inputs every round**: the reference's process draws the task's own ``get_inputs()`` under a
  new seed from the operating system (every element new, never a rescaled copy of an earlier set) into its
  ``draw.bin``; the harness copies them into every side's own input file while that side is stopped. The side
  maps the file read-only and calls on it directly: its inputs exist for it only once its clock runs.
* **the clock is here**: a call is the time from continuing the side and writing ``go NONCE`` to the
  side's ``done NONCE`` (on devices, the side's event pair, with this wall clock kept beside it); caches
  are flushed right before, by the reference's process (on devices, by each side while staging), while
  the side is still stopped. What one sample is (a cold call after the flush, or the public suites' warm
  calls) is the timing method's (``verifier.window.methods``, ``[verifier] timing``): the window consults it
  and nothing else changes. **The handshake is taken out** (``_samples``): every wall-clock sample less the
  median, over the rounds, of the trusted reference's wall time less its own clock around its call (continuing
  the side, the command, the answer, this process's wake-up: the same for every side, paid by no plain process).
  **A call too short to time** (``_Run.calibrate``) is timed as several calls a sample, each on an input set of
  its own (drawn, copied, checked and spoiled as every call), or, beyond ``MAX_SETS``, judged by nobody.
* **the outputs are read here**: the moment a call is reported done the side is stopped (every thread)
  and the harness reads its result where the side says it lies (``verifier.sandbox.procs.read_memory``)
  at positions drawn here and never told to the side, and checks its inputs unchanged; those values are
  compared with the reference's on the same inputs. A ``done`` written before the work is finished (by
  a thread of the candidate's own, which can read the channel as well as the side can) finds outputs
  that are not the reference's. Whether the harness can read a job's memory is decided from how the job was
  started (``verifier.sandbox.client.ForkServer.memory``), never from the side; where it can, each side's copy of
  the fork server's probe page must read back before its first command (``Side.probe_memory``) and any failed read
  is the side's failure. Only on a device (whose memory the harness never reads) does the side pick the positions
  itself, after the stop; on the CPU the job runner runs no window where the harness cannot read a job's memory.
* **the candidate phase is checked here**: before any command, each untrusted side's job has stopped itself at its
  candidate phase, before any candidate code ran; the harness counts its seccomp filters from ``/proc`` and
  continues it (``Side.enter_phase``).
* **every side is stopped** (SIGSTOP, every thread seen in state ``T``) except while its own call is timed
  or its last call's bookkeeping (``settle``) runs: a candidate's signal handlers, timers, threads or spinning
  cannot take a core from the reference or the best, nor compute outside its clock.
* **no thread of the candidate's runs while its side settles**: every thread of the side's process but the side's
  own (the process's first, which reads the channel) is held in a ptrace stop first (``Side.settle``,
  ``verifier.sandbox.procs.hold``: SIGCONT does not end it), and let go once the side is stopped again, into that
  stop; a thread new after the settle ran then, and fails the side. Only where the harness can reach the side's
  memory (``memory``, decided once, before any call); the holds are this OS thread's, taken and let go in one call.
* **the outputs are spoiled here**: once a side has settled and is stopped again, the harness writes
  ``SPOILED`` over its last call's outputs (``verifier.sandbox.procs.write_memory``), so a later call handed that
  block finds neither that result nor anything a thread of the candidate's own wrote there while the side settled
  (the side spoils them itself only where the harness cannot write its memory; a device's outputs, which the harness
  never reaches, the side spoils when the harness next stages it, ``stage``, never in its ``settle``: issue #50).
  Memory the side's allocator holds
  free is beyond this (nothing outside the allocator can overwrite it safely): the side fills the heap's top with
  ``SPOILED`` as it settles, its other threads held; what its own thread runs then is the side's code, or what
  native code patched into it (a "can still" row of docs/verifier.md).
* **every side's settings are watched**: before every timed call each side's threads' priorities,
  policies and CPUs and its resource limits are compared with what it started with
  (``verifier.sandbox.procs.SettingsWatch``); a change fails the side it was seen on.
* **every timed call is checked**: the reference's and the candidate's (and the best's) outputs of the
  same round at positions drawn by the harness, every call under the op trace and the call count; two
  more calls after the window are compared at every position.

``run_window`` returns the ``result`` and ``outputs`` that ``verifier.gates.performance.measured`` reads (the
sides' own picks, where the harness could not read their memory, follow from ``finish``).
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import random
import secrets
import select
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.jobs import layout_bytes, pick_positions, tensor_bytes
from verifier.sandbox import procs
from verifier.sandbox.client import JobExit, JobHandle, plain_files_only
from verifier.window.messages import (
    Answer,
    Command,
    Done,
    Failed,
    Finish,
    Flush,
    Gen,
    Go,
    Layout,
    Leaf,
    Ok,
    Outputs,
    Pick,
    Ready,
    Settle,
    Stage,
    parse_answer,
)
from verifier.window.methods import DEFAULT as DEFAULT_METHOD
from verifier.window.methods import METHODS, TimingMethod
from verifier.window.stats import Window, paired_ratio

# How long one command may take: a staging copy or a pick is milliseconds, a call is the kernel's time.
COMMAND_TIMEOUT_S = 30.0
# How much longer than the stop's own wait (0.5 s) a side whose stop the harness sent itself may take to stop: past it,
# a thread of the side's own is keeping it running (``Side.pause``), the side's failure.
STOP_GRACE_S = 2.0
# A side's process ended while the harness held its threads (``Side.settle`` asks its job how, once they are let go).
_ENDED_HELD = "ended while its threads were held"
# The most output tensors one call may report (what the harness reads is bounded by it and the output limit).
MAX_LEAVES = 4096


class SideFailed(Exception):
    """A side stopped answering (it crashed, hung, was killed or answered out of protocol), or failed a
    check of the harness's own (its outputs could not be read, its inputs or its settings changed)."""

    def __init__(self, side: str, message: str, exit_: JobExit | None = None):
        super().__init__(message)
        self.side, self.exit = side, exit_


class Side:
    """One side's process, reached through the two FIFOs in its job folder (made here, before the job starts;
    the side removes their names in its set-up) and, for an untrusted side, its input file (made here,
    read-only to the side)."""

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
        # written by the harness only, for every side (the reference's too: every side's inputs are the same kind of
        # memory, written the same way): the side can open it for reading and nothing else
        self._inputs_fd = os.open(job_dir / "inputs.bin", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o400)
        self.stopped = False
        self.watch: procs.SettingsWatch | None = None
        self.memory = ""           # why the harness cannot read this side's memory ("": it can)
        self.probe: dict[str, Any] | None = None   # the fork server's probe page, which the job has from its start
        self.phase: int | None = None   # the seccomp filters of its candidate phase (None: no phase is asked)
        self._held: list[int] = []   # its threads the harness holds while it settles (``settle``)

    def start(self, handle: JobHandle | JobExit, *, memory: str = "", probe: dict[str, Any] | None = None,
              phase: int | None = None) -> None:
        """The side's job, started: ``memory``, why the harness cannot read its memory ("": it can: decided from how
        the job was started, ``verifier.sandbox.client.ForkServer.memory``), ``probe`` where the job has the server's
        probe page, ``phase`` the seccomp filters of its candidate phase (``ForkServer.phase_filters``)."""
        if isinstance(handle, JobExit):
            raise SideFailed(self.name, f"could not start: {handle.describe()}", handle)
        self.handle, self.memory, self.probe, self.phase = handle, memory, probe, phase

    def enter_phase(self) -> None:
        """Before any command: the side's job stops itself at its candidate phase, before any of the candidate's code
        runs; the harness counts its seccomp filters from ``/proc`` and continues it
        (``verifier.sandbox.client.JobHandle.check_phase``). A side that ends first, or has another count, fails."""
        if self.trusted or self.phase is None:
            return
        assert self.handle is not None
        why = self.handle.check_phase(self.phase)
        if why == "ended":
            raise SideFailed(self.name, "ended", self.handle.wait(0))
        if why:
            raise SideFailed(self.name, why)

    def send(self, command: Command) -> None:
        data = (command.line() + "\n").encode()
        while data:
            data = data[os.write(self._to, data):]

    def read(self, timeout: float = COMMAND_TIMEOUT_S) -> Answer:
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
            pid = self.handle.host_pid() if self._held else None
            if pid is not None and procs.ended(pid):
                # killed while its threads are held: a traced thread's end waits for the harness, so the job is not
                # seen done until ``settle`` lets them go
                raise SideFailed(self.name, _ENDED_HELD)
            if time.monotonic() > deadline:
                self.handle.kill()
                raise SideFailed(self.name, f"did not answer within {timeout:.0f} s and was killed",
                                 JobExit("timeout", seconds=timeout))
        line, self._buffer = self._buffer.split(b"\n", 1)
        return parse_answer(line.decode(errors="replace"))

    def go(self, instance: int, calls: int = 1) -> tuple[float, Done]:
        """One timed sample: milliseconds per call from continuing the side (every side the same way, the trusted
        reference too) and writing ``go NONCE K CALLS`` (``calls`` back to back, the timing method's) to reading
        the answer, which must be ``done`` with this sample's nonce; the side is stopped again at once."""
        nonce = secrets.token_hex(8)
        line = (Go(nonce, instance, calls).line() + "\n").encode()
        t0 = time.perf_counter_ns()
        self.pause(False)
        os.write(self._to, line)
        answer = self.read(COMMAND_TIMEOUT_S * calls)
        t1 = time.perf_counter_ns()
        self.pause(True)
        if not isinstance(answer, Done) or answer.nonce != nonce:
            raise SideFailed(self.name, f"answered {_text(answer)!r} to a timed call: only the harness's own answer "
                                        "line may be written to the side's channel")
        return (t1 - t0) / 1e6 / calls, answer

    def call(self, command: Command, timeout: float = COMMAND_TIMEOUT_S) -> Ok:
        self.send(command)
        answer = self.read(timeout)
        if not isinstance(answer, Ok):
            raise SideFailed(self.name, f"answered {_text(answer)!r} to {command.line().split(' ')[0]!r}")
        return answer

    def awake(self, command: Command) -> Ok:
        """``command`` for a side that is stopped between calls: continued for it, stopped again after."""
        was = self.stopped
        self.pause(False)
        answer = self.call(command)
        self.pause(was)
        return answer

    def settle(self, spoil: bool) -> None:
        """The last call's bookkeeping (``settle``), this side stopped before and after. Where the harness can reach
        a side's memory (``memory``, decided before any call), every thread of its process but its own
        (the one that reads the channel: the process's first, whose id is the process's) is held in a ptrace stop
        first (``verifier.sandbox.procs.hold``), so nothing of the candidate's runs while the side settles; the side
        is stopped again before they are let go. A thread that is new afterwards ran while the side settled: the
        side fails. All from this OS thread (ptrace's holds are the calling thread's)."""
        if self.memory:
            self.awake(Settle(spoil=spoil))
            return
        assert self.handle is not None and self.stopped
        pid = self.handle.host_pid()
        if pid is None:
            raise SideFailed(self.name, "could no longer be found")
        before = procs.threads(pid)
        try:
            held = procs.hold(sorted(before - {pid}))
        except OSError as exc:
            if self.handle.done or not procs.threads(pid):
                raise SideFailed(self.name, "ended", self.handle.wait(0)) from exc
            raise SideFailed(self.name, f"could not have its threads held while it settled ({exc.strerror}): a "
                                        "side's threads must be open to the harness, traced by nothing else") from exc
        failure: SideFailed | None = None
        self._held = held
        try:
            self.awake(Settle(spoil=spoil))
        except SideFailed as exc:
            failure = exc
        finally:
            procs.release(held)
            self._held = []
        if failure is not None:
            if failure.exit is None and str(failure) == _ENDED_HELD:   # its end is known once they are let go
                raise SideFailed(self.name, "ended", self.handle.wait(5)) from failure
            if held and failure.exit is not None and failure.exit.status == "timeout":
                # the job's end is the harness's kill: the message says why (a thread of its own it waited on)
                raise SideFailed(self.name, f"{failure}, settling with its other threads held (its own bookkeeping "
                                            "needs none of them)") from failure
            raise failure
        if not procs.stopped(pid):
            raise SideFailed(self.name, "could not be stopped after it settled",
                             JobExit("lost", detail="a thread let go after the settle did not stop"))
        new = procs.threads(pid) - before
        if new:
            raise SideFailed(self.name, f"started {len(new)} thread(s) while it settled (between its calls, with "
                                        "its other threads held): nothing of the candidate's may run then")

    def flush(self) -> None:
        """Have this side (the reference's, on the host) evict the caches before another side's call."""
        self.awake(Flush())

    def pause(self, stop: bool) -> None:
        """Stop or continue this side (every side alike, the trusted reference too: issue #47)."""
        if self.stopped == stop:
            return
        assert self.handle is not None
        if not self.handle.pause(stop):
            if self.handle.done:
                raise SideFailed(self.name, "ended", self.handle.wait(0))
            pid = self.handle.host_pid()
            if stop and pid is not None:
                # the harness sent the SIGSTOP itself: a candidate's process still there whose threads do not all stop
                # within the grace is keeping a thread of its own in a system call (MAP_POPULATE of gigabytes, red team
                # irt), the side's doing, not the tool's
                if procs.stopped(pid, STOP_GRACE_S):
                    self.stopped = True
                    return
                if not self.handle.done and not self.trusted:
                    late = procs.unstopped(pid)
                    raise SideFailed(self.name, f"did not stop within {STOP_GRACE_S + 0.5:.1f} s of the harness's "
                                                f"SIGSTOP: thread(s) {', '.join(late[:4]) or 'of its own'} stayed in a "
                                                "system call (a side's threads must stop when it is stopped between "
                                                "calls)")
            # the sandbox worker did not stop or continue a process that is still there: the tool's failure
            what = "stop" if stop else "continue"
            raise SideFailed(self.name, "could not be stopped" if stop else "could not be continued",
                             JobExit("lost", detail=f"the sandbox worker did not {what} the timing process"))
        self.stopped = stop

    def map_inputs(self, size: int) -> None:
        """The harness's own mapping of the side's input file, ``size`` bytes."""
        if self.inputs is not None:
            self.inputs.close()
        os.ftruncate(self._inputs_fd, size)
        self.inputs = mmap.mmap(self._inputs_fd, size)

    def check_settings(self) -> None:
        """This side's threads and limits as it started (the first call records them)."""
        assert self.handle is not None
        now = self.handle.settings()
        if now is None:
            return           # not found from here (the job ended: its next command says so)
        if self.watch is None:
            self.watch = procs.SettingsWatch(now)
            return
        changed = self.watch.changes(now)
        if changed:
            raise SideFailed(self.name, "had its scheduling or limits changed between its calls ("
                             + "; ".join(changed[:3]) + "): no side may change how fast another runs, or itself")

    def probe_memory(self) -> None:
        """Where the harness reads this side's memory (``memory`` is "": decided from how the job was started, never
        from anything the side does), its copy of the fork server's probe page, made before any candidate code ran,
        must read back now: a side that made it unreadable fails, as does any later read of its memory that fails.
        Where the harness cannot read a job's memory (``memory`` says why) nothing is probed: on a device the side's
        own picks are its report, flagged (no verdict); on the CPU the window does not run at all."""
        assert self.handle is not None
        if self.memory or self.probe is None:
            return
        pid = self.handle.host_pid()
        if pid is None:
            raise SideFailed(self.name, "could no longer be found")
        try:
            got = procs.read_memory(pid, [(int(self.probe["address"]), 16)])
        except OSError as exc:
            raise SideFailed(self.name, f"made memory it had from its start unreadable to the harness "
                                        f"({exc.strerror}): a side's memory is the harness's to read") from exc
        if got.hex() != self.probe.get("token"):
            raise SideFailed(self.name, "changed memory it had from its start (the harness's probe page)")

    def read_outputs(self, outputs: Outputs | None, seed: int, limit: int | None, max_bytes: int,
                     on_device: bool) -> dict[str, Any] | None:
        """The call's outputs at the positions ``seed`` draws (``verifier.jobs.pick``), read from the stopped
        side's memory where ``done`` says they lie; None where the harness cannot read them (a device's
        memory on a device backend, or no access here: the side picks them itself)."""
        assert self.handle is not None
        if outputs is None:
            raise SideFailed(self.name, "reported a call done without saying where its outputs are")
        if len(outputs.leaves) > MAX_LEAVES:
            raise SideFailed(self.name, f"reported {len(outputs.leaves)} outputs (at most {MAX_LEAVES})")
        if any(leaf.device != "cpu" for leaf in outputs.leaves):
            if on_device:
                return None
            raise SideFailed(self.name, "reported outputs on a device, on a backend that has none")
        if self.memory:
            return None
        pid = self.handle.host_pid()
        if pid is None:
            raise SideFailed(self.name, "could no longer be found")
        try:
            leaves = _read_leaves(pid, outputs, seed, limit, max_bytes)
        except (OSError, ValueError) as exc:
            raise SideFailed(self.name, f"reported a result the harness could not read in its memory ({exc}): "
                                        "a call's outputs must be complete when it reports done") from exc
        shapes = [list(leaf.shape) for leaf in outputs.leaves]
        return {"structure": outputs.structure, "leaves": leaves, "shapes": shapes}

    def spoil_outputs(self, results: tuple[Outputs | None, ...], max_bytes: int) -> None:
        """Write ``SPOILED`` over the extent of each of the last sample's host outputs (where its ``done`` said they
        lie: every call's, a sample of calls each on an input set of its own; one write for them all),
        this side stopped after its ``settle``: that memory holds neither the result nor zeros a thread of the
        candidate's wrote there while the side settled. Only the last call's outputs, which the side holds until its
        next call has made its own:
        an earlier call's memory may be free in the side's allocator now, or another tensor's, and writing
        there breaks an honest process (glibc aborts: "malloc(): unsorted double linked list corrupted"). An
        output inside the side's read-only input mapping (a view of an input) is left alone: the inputs are
        checked unchanged after every call. Only where the harness can read (so write) this side's memory."""
        from verifier.job.allocator import SPOILED

        assert self.handle is not None and self.stopped
        if self.memory:
            return
        if not results or any(outputs is None for outputs in results):   # an untimed call's too: its memory is
            # handed to the next call
            raise SideFailed(self.name, "reported a call done without saying where its outputs are")
        try:
            spans = _merged([s for outputs in results if outputs is not None for leaf in outputs.leaves
                             if leaf.device == "cpu" for s in [_extent(leaf, max_bytes)] if s[1]])
        except ValueError as exc:
            raise SideFailed(self.name, f"reported outputs the harness could not spoil ({exc})") from exc
        pid = self.handle.host_pid()
        if pid is None or not spans:
            return
        try:
            procs.write_memory(pid, spans, SPOILED)
            return
        except OSError:
            pass           # a read-only mapping among them: one span at a time
        mine = os.fstat(self._inputs_fd)
        inputs = procs.file_mappings(pid, mine.st_dev, mine.st_ino)
        for address, length in [p for span in spans for p in _outside(span, inputs)]:
            try:
                procs.write_memory(pid, [(address, length)], SPOILED)
            except OSError:
                try:
                    procs.force_write_memory(pid, [(address, length)], SPOILED)
                except OSError as exc:
                    raise SideFailed(self.name, f"reported an output at {address:#x} ({length} bytes) that the "
                                                f"harness could not overwrite ({exc.strerror}): a call's outputs must "
                                                "lie in the side's own memory") from exc

    def close(self) -> None:
        for fd in (self._to, self._from, self._inputs_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.inputs is not None:
            self.inputs.close()
            self.inputs = None


def _text(answer: Answer) -> str:
    return answer.text if isinstance(answer, Failed) else answer.line()[:200]


def _read_leaves(pid: int, outputs: Outputs, seed: int, limit: int | None, max_bytes: int) -> list[Any]:
    """Each output leaf's values at the positions ``seed`` draws, read from ``pid``'s memory."""
    import torch

    shapes = [leaf.shape for leaf in outputs.leaves]
    numels = []
    for shape in shapes:
        n = 1
        for d in shape:
            if d < 0:
                raise ValueError(f"a negative extent in shape {list(shape)}")
            n *= d
        numels.append(n)
    leaves = []
    for leaf, numel, idx in zip(outputs.leaves, numels, pick_positions(numels, seed, limit)):
        dtype = getattr(torch, leaf.dtype, None)
        if not isinstance(dtype, torch.dtype) or len(leaf.strides) != len(leaf.shape):
            raise ValueError(f"an output of dtype {leaf.dtype!r}, shape {list(leaf.shape)}")
        item = torch.empty(0, dtype=dtype).element_size()
        count = numel if idx is None else int(idx.numel())
        if count * item > max_bytes:
            raise ValueError("outputs larger than the output limit")
        contiguous = _contiguous(leaf)
        if count == 0:
            leaves.append(torch.empty(leaf.shape if idx is None else (0,), dtype=dtype))
            continue
        if contiguous and (idx is None or numel * item <= WHOLE_READ_BYTES):
            spans = [(leaf.address, numel * item)]   # a small output is read whole, its positions picked here
        else:
            flat = torch.arange(numel) if idx is None else idx
            offset = torch.zeros_like(flat)
            rest = flat.clone()
            for size, stride in zip(reversed(leaf.shape), reversed(leaf.strides)):
                offset += (rest % size) * stride
                rest //= size
            spans = [(leaf.address + int(o) * item, item) for o in offset.tolist()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = torch.frombuffer(bytearray(procs.read_memory(pid, spans)), dtype=dtype).clone()
        if idx is not None and values.numel() == numel and numel > idx.numel():
            values = values[idx]
        leaves.append(values.reshape(leaf.shape) if idx is None else values)
    return leaves


def _extent(leaf: Leaf, max_bytes: int) -> tuple[int, int]:
    """(address, length): from a leaf's first element to the end of its last (0 for an empty one)."""
    import torch

    dtype = getattr(torch, leaf.dtype, None)
    if not isinstance(dtype, torch.dtype) or len(leaf.strides) != len(leaf.shape) or leaf.address < 0:
        raise ValueError(f"an output of dtype {leaf.dtype!r}, shape {list(leaf.shape)}")
    if any(d < 0 for d in leaf.shape) or any(st < 0 for st in leaf.strides):
        raise ValueError(f"an output of shape {list(leaf.shape)}, strides {list(leaf.strides)}")
    if any(d == 0 for d in leaf.shape):
        return leaf.address, 0
    length = (1 + sum((d - 1) * st for d, st in zip(leaf.shape, leaf.strides))) * torch.empty(
        0, dtype=dtype).element_size()
    if length > max_bytes:
        raise ValueError("an output larger than the output limit")
    return leaf.address, length


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(address, length) spans, overlapping or adjacent ones joined."""
    out: list[list[int]] = []
    for address, length in sorted(spans):
        if out and address <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], address + length - out[-1][0])
        else:
            out.append([address, length])
    return [(a, n) for a, n in out]


def _outside(span: tuple[int, int], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``span`` (address, length) outside every (start, end) of ``holes``."""
    parts = [(span[0], span[0] + span[1])]
    for lo, hi in holes:
        parts = [q for a, b in parts for q in ((a, min(b, lo)), (max(a, hi), b)) if q[0] < q[1]]
    return [(a, b - a) for a, b in parts]


def _contiguous(leaf: Leaf) -> bool:
    expected = 1
    for size, stride in zip(reversed(leaf.shape), reversed(leaf.strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


_memcmp: Any = None


def _same(a: mmap.mmap, b: mmap.mmap) -> bool:
    """Whether two mappings hold the same bytes (memcmp: no copy, no thread of PyTorch's spinning after)."""
    global _memcmp
    if _memcmp is None:
        _memcmp = ctypes.CDLL(None).memcmp
        _memcmp.restype = ctypes.c_int
        _memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    if len(a) != len(b):
        return False
    if not len(a):
        return True
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pa = torch.frombuffer(a, dtype=torch.uint8).data_ptr()
        pb = torch.frombuffer(b, dtype=torch.uint8).data_ptr()
    return int(_memcmp(pa, pb, len(a))) == 0


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
    on_device: bool = False        # the sides stage their inputs on a device (``stage``) before each call
    max_output_bytes: int = 1 << 30   # the most of one call's outputs the harness reads from a side
    method: TimingMethod = METHODS[DEFAULT_METHOD]   # what one sample is (verifier.window.methods)


Observer = Callable[[str, Any], None]
"""``observe(event, what)``: ``("inputs", the inputs' bytes)`` after each draw, ``("timed", (side, sides))``
right before each timed call (the flush done, the timed side still stopped). For tests, which look at what
every call saw and at the sides."""


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
    """One window's state: the sides, the inputs' layout and the reference's draw, the checks."""

    def __init__(self, sides: dict[str, Side], settings: WindowSettings, flush: Callable[[], None] | None,
                 observe: Observer | None):
        self.sides, self.settings, self.flush, self.observe = sides, settings, flush, observe
        self.ref, self.cand = sides["reference"], sides["candidate"]
        self.untrusted = [s for s in sides.values() if not s.trusted]
        self.names = list(sides)
        self.rng = random.Random(secrets.randbits(64))
        self.layout: list[dict[str, Any]] = []
        self.source: mmap.mmap | None = None
        self.checks: list[dict[str, Any]] = []
        # per side, per check: what the harness read of its outputs ("own": the side picked them itself, where the
        # harness cannot read its memory; None: the side was not called for that check). The reference's are
        # what the others' are compared with.
        self.read: dict[str, list[dict[str, Any] | str | None]] = {name: [] for name in sides}
        self.instance = 0
        self.seed = 0
        self.sets = 1           # input sets per sample: a call below what one timed call resolves gets more (``plan``)
        self.plan: dict[str, Any] = {}

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    def fresh_inputs(self, instance: int) -> None:
        """A new draw in the reference's process (its ``draw.bin``: ``sets`` input sets), copied into every side's
        own input file (the reference's too) while the side is stopped."""
        answer = self.ref.awake(Gen(secrets.randbits(62), self.settings.case, instance, self.sets))
        size = layout_bytes(answer.layout or []) * self.sets
        if self.source is None or len(self.source) != size:
            self.layout = answer.layout or []
            if self.source is not None:
                self.source.close()
            fd = os.open(self.ref.job_dir / "draw.bin", os.O_RDONLY)
            try:
                self.source = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            for s in self.sides.values():
                s.map_inputs(size)
                s.awake(Layout(self.layout, self.sets))
        for s in self.sides.values():
            assert s.inputs is not None and s.stopped
            s.inputs[:] = self.source     # one copy per side: no side can change what another reads
        if self.observe is not None:
            one = len(self.source) // self.sets
            for j in range(self.sets):
                self.observe("inputs", bytes(self.source[j * one:(j + 1) * one]))

    def stage(self, instance: int) -> None:
        """A round's inputs: fresh ones in every side's input file (and, on a device, its buffers); every side
        stays stopped; the positions compared this round drawn now (never told to a side)."""
        self.instance = instance
        self.seed = secrets.randbits(62)
        self.fresh_inputs(instance)
        if self.settings.on_device:
            for s in self.sides.values():
                s.awake(Stage(instance))

    def timed(self, name: str, limit: int | None = None, checked: bool = True, calls: int = 1,
              ) -> tuple[float, Done]:
        """One side's sample of ``calls`` calls, the others stopped: (harness ms per call, the answer). Every side
        alike, the trusted reference too (issue #47: what one side pays and another does not is not in a
        window): its outputs read the moment it reports done (``checked``), at the round's positions (``limit``
        per output; None: every position), its inputs checked unchanged, its threads held while it settles, its
        outputs spoiled."""
        s = self.sides[name]
        for side in self.sides.values():
            side.check_settings()
        if self.flush is not None and self.settings.method.flush:
            self.flush()
        if self.observe is not None:
            self.observe("timed", (name, self.sides))
        ms, done = s.go(self.instance, self.sets if self.sets > 1 else calls)
        results = done.every
        if done.outputs is None:
            raise SideFailed(name, "reported a call done without saying where its outputs are")
        if len(results) != self.sets:
            raise SideFailed(name, f"reported {len(results)} results of a sample of {self.sets} calls")
        if checked:
            read = [s.read_outputs(outputs, self.seed, limit, self.settings.max_output_bytes,
                                   self.settings.on_device) for outputs in results]
            if any(got is None for got in read):   # the side's own word, picked after the stop (one per call)
                s.awake(Pick(self.seed, limit))
                read = [None] * len(read)
            self.read[name] += ["own" if got is None else got for got in read]
            assert s.inputs is not None and self.source is not None
            if not _same(s.inputs, self.source):
                raise SideFailed(name, "changed its inputs in a timed call: inputs are read-only")
        s.settle(spoil=bool(s.memory))
        s.spoil_outputs(results, self.settings.max_output_bytes)
        return ms, done

    def check(self, meta: dict[str, Any], limit: int | None) -> None:
        """The round's checks, one per call of a sample: their positions, for what is not compared (every side's
        outputs are read already)."""
        for j in range(self.sets):
            self.checks.append({**meta, "seed": self.seed, "limit": limit, **({"set": j} if self.sets > 1 else {})})

    def calibrate(self, wall: dict[str, list[float]], gaps: list[float]) -> None:
        """How many calls a sample takes (``sets``), from the calibration rounds' single calls: ``wall``, each side's
        harness times; ``gaps``, the trusted reference's wall time less its own clock (the handshake). A sample must
        take at least ``timable_ms`` (``TIMABLE_MS``, or ``JITTER_FACTOR`` times the handshake's jitter if more),
        so the handshake's jitter is a small share of it: a call below that is timed as several calls a sample,
        each on an input set of its own (fresh inputs, checked, spoiled, as every call), as the public suites time
        small calls (many calls a sample), never one call on the same inputs again; where even ``MAX_SETS`` calls
        (or ``MAX_SETS_BYTES`` of inputs) stay below it, the window says so (``untimable``)."""
        handshake = statistics.median(gaps) if gaps else 0.0
        jitter = statistics.median(abs(g - handshake) for g in gaps) if gaps else 0.0
        timable = max(TIMABLE_MS, JITTER_FACTOR * jitter)
        call = min(max(statistics.median(v) - handshake, MIN_SAMPLE_MS) for v in wall.values())
        set_bytes = max(1, layout_bytes(self.layout))
        most = max(1, min(MAX_SETS, MAX_SETS_BYTES // set_bytes))
        sets = 1 if call >= timable else min(most, math.ceil(timable / call))
        self.plan = {"sets": sets, "timable_ms": timable, "call_ms": call, "handshake_ms": handshake,
                     "jitter_ms": jitter, "untimable": call * sets < timable}
        self.sets = sets

    def all_rounds(self) -> dict[str, Any]:
        """The warm-up, the timed rounds and the two calls after them."""
        settings, names = self.settings, self.names
        for s in self.untrusted:
            s.enter_phase()     # stopped at its candidate phase, before any candidate code: its filters counted here
        for s in self.sides.values():
            answer = s.read()   # "ready": the model is loaded
            if not isinstance(answer, Ready):
                raise SideFailed(s.name, f"answered {_text(answer)!r} before it was ready")
        for s in self.sides.values():
            s.pause(True)
            s.probe_memory()
        wall: dict[str, list[float]] = {n: [] for n in names}
        events: dict[str, list[float]] = {n: [] for n in names}
        own: list[float] = []
        order: list[list[str]] = []
        preempted: list[bool] = []
        warmup = settings.warmup if settings.method.warmup is None else settings.method.warmup
        last: dict[str, float] = {}
        for i in range(warmup):   # untimed: loads libraries, touches pages, warms the allocators
            if i < 2:
                self.stage(i % 2)
            for name in self.rng.sample(names, len(names)):
                last[name] = self.timed(name, checked=False)[0]
        if settings.clock == "wall" and settings.method.calls == 1 and min(last.values(), default=0.0) < CERTAIN_MS:
            # the calibration rounds: single calls, as the rounds' will be unless they are too short to time
            seen: dict[str, list[float]] = {n: [] for n in names}
            gaps: list[float] = []
            for i in range(CALIBRATION_ROUNDS):
                self.stage(i % 2)
                for name in self.rng.sample(names, len(names)):
                    ms, done = self.timed(name, checked=False)
                    seen[name].append(ms)
                    if name == "reference" and done.own_ms is not None:
                        gaps.append(ms - done.own_ms)
            self.calibrate(seen, gaps)
            if self.sets > 1:   # the new sets' memory, touched once before the rounds
                self.stage(0)
                for name in names:
                    self.timed(name, checked=False)
        started = time.perf_counter()
        budget = settings.budget_s * len(names)
        i = 0
        while i < settings.max_rounds and (i < settings.min_rounds or time.perf_counter() - started < budget):
            k = i % 2
            self.stage(k)
            this_round = self.rng.sample(names, len(names))
            switched = False
            for name in this_round:
                ms, done = self.timed(name, settings.samples, calls=settings.method.calls)
                wall[name].append(ms)
                events[name].append(done.event_ms if done.event_ms is not None else ms)
                if name == "reference":
                    own.append(done.own_ms if done.own_ms is not None else ms)
                switched |= done.preempted
            order.append(this_round)
            preempted.append(switched)
            self.check({"round": i, "trial": k, "what": f"timed call {i + 1}"}, settings.samples)
            i += 1
            if settings.precision and i >= settings.settle_rounds and settled(
                    _samples(wall, events, own, settings.clock)[0], settings.precision):
                break
        # After the window: each instance once more on fresh inputs, compared at every position.
        for k, what in ((1, "a call after timing"), (0, "a call after timing on new inputs")):
            self.stage(k)
            for name in ("reference", "candidate"):
                self.timed(name)
            if "best" in self.read:
                self.read["best"] += [None] * self.sets
            self.check({"round": i, "trial": k, "what": what}, None)
            i += 1
        samples, handshake = _samples(wall, events, own, settings.clock)
        window = Window(names, samples, wall, order, clock=settings.clock, preempted=preempted,
                        handshake_ms=handshake, own=own)
        memory = {s.name: s.memory for s in self.untrusted if s.memory}
        return {"window": window.to_dict(), "checks": self.checks, "input_bytes": tensor_bytes(self.layout),
                "read": self.read, "memory": memory, "sample": {**self.plan, "sets": self.sets}}


def _samples(wall: dict[str, list[float]], events: dict[str, list[float]], own: list[float],
             clock: str) -> tuple[dict[str, list[float]], float]:
    """Every side's samples and the handshake taken out of them (ms). On a device, the sides' event times. On the
    host, the harness's wall clock less the handshake: the median over the rounds of the trusted reference's wall
    time less its own clock around its call (continuing the side, the command and the answer, and the harness's
    wake-up: what every side pays alike, since every side goes the same path). A plain process timing the calls
    pays none of it; left in, it pulled every ratio towards 1 (issue #47)."""
    if clock == "events":
        return {n: list(v) for n, v in events.items()}, 0.0
    ref = wall.get("reference") or []
    gaps = [w - o for w, o in zip(ref, own)]
    handshake = max(0.0, statistics.median(gaps)) if gaps else 0.0
    return {n: [max(w - handshake, MIN_SAMPLE_MS) for w in v] for n, v in wall.items()}, handshake


# The least a sample is taken to be, once the handshake is out (a side's wall time can fall under the handshake's
# median by the handshake's own jitter).
MIN_SAMPLE_MS = 1e-4
TIMABLE_MS = 0.25
"""The least one sample takes (ms of calls, the handshake out): a call below it is timed as several calls a sample,
each on inputs of its own (``_Run.calibrate``). The handshake (continuing the side, its command and answer, the
harness's wake-up: 0.1-0.5 ms here) is taken out by its median; what stays is its jitter, which must be a small share
of a sample (``JITTER_FACTOR``: under load the jitter, not this, decides)."""
JITTER_FACTOR = 20.0
"""A sample takes at least this many times the handshake's jitter (its median absolute deviation over the
calibration rounds): the jitter is then within 5 % of a sample."""
CALIBRATION_ROUNDS = 4
"""Rounds of single calls after the warm-up that decide how many calls a sample takes (``_Run.calibrate``)."""
CERTAIN_MS = 2.0
"""A warm-up whose every call took this long (ms, the harness's clock) needs no calibration: one call a sample (eight
times the least sample: the handshake's jitter, measured by the calibration, is then a small share of a call unless
the machine is far from quiet, where the interval says so)."""
MAX_SETS = 64
"""The most calls (each on an input set of its own) one sample takes."""
WHOLE_READ_BYTES = 64 << 10
"""An output this small is read whole from a side's memory (one span) and its positions picked here."""
MAX_SETS_BYTES = 32 << 20
"""The most bytes of inputs those sets take together (every set is drawn, copied to every side and checked
unchanged each round: a window of 64 sets of 1 MiB took over 20 s on this 2-core machine under load)."""


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
            s.call(Finish())
        except SideFailed:
            pass
        assert s.handle is not None
        exit_ = s.handle.wait()
        if not s.trusted:
            plain_files_only(s.job_dir)   # what an untrusted side left is read back only as plain files
        result = None
        try:
            result = json.loads((s.job_dir / "result.json").read_text())
        except (OSError, ValueError):
            pass
        ended[name] = (exit_, result if isinstance(result, dict) else None)
    return ended
