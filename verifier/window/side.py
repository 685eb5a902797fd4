"""One side of a timing window, inside its own job process (see verifier.window.harness for the harness).

Every side of a window (the reference, the candidate, the task's best) is a separate process: the
reference in the trusted reference server, the candidate and the best each in a sandboxed job of their
own, with a PID namespace of its own. Nothing a candidate does in its process can reach the others: the
harness holds the clock, draws the inputs, reads and compares the outputs and stops (SIGSTOP) every
untrusted side while another is timed.

The side answers the harness over two FIFOs the harness made in its job folder, one line per command
(``ctl.in``) and one per answer (``ctl.out``), in the messages of ``verifier.window.messages``. Both are
opened during the job's set-up and their names removed before any candidate code runs. An untrusted
side's inputs are a read-only mapping of ``inputs.bin``, which the harness writes while the side is
stopped and resumes it only to time its call: its inputs exist for it only once its clock runs. Its
answer to a call says where the result lies in its memory; the harness stops the side and reads the
result there itself (``verifier.sandbox.procs.read_memory``) before anything of the side runs again.

Untrusted sides run each call under the op trace and count the launcher calls (``calls``,
``forbidden`` per call, in ``result.json``): PyTorch compute or a forward that skips the library is
caught on any call, not only on the checked ones.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import resource
from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime
from verifier.inputs import Trial, make_inputs
from verifier.job.allocator import spoil, spoil_device, warm_heap_top
from verifier.job.candidate import CandidateFailure, _describe, _load_candidate, _save
from verifier.job.op_trace import OpTrace
from verifier.job.signals import signal_changes, signal_dispositions
from verifier.job.tensors import flatten
from verifier.jobs import input_layout, layout_bytes, pick
from verifier.task import TaskSpec, load_task_module
from verifier.window.in_process import CacheFlusher, instances
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
    parse_command,
)


def _views(buf: Any, layout: list[dict[str, Any]]) -> list[Any]:
    """Tensors over ``buf`` (a writable or read-only buffer) as ``layout`` places them (lists of tensors
    as lists); values as they are."""
    import warnings

    def view(e: dict[str, Any]) -> Any:
        if "seq" in e:
            items = [view(v) for v in e["items"]]
            return tuple(items) if e["seq"] == "tuple" else items
        if "offset" not in e:
            return e["value"]
        dtype = getattr(torch, e["dtype"])
        count = 1
        for d in e["shape"]:
            count *= int(d)
        with warnings.catch_warnings():  # a read-only mapping: only ever copied from
            warnings.simplefilter("ignore")
            flat = (torch.frombuffer(buf, dtype=dtype, count=count, offset=e["offset"]) if count
                    else torch.empty(0, dtype=dtype))
        return flat.view(e["shape"])

    return [view(e) for e in layout]


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of an input (itself, or those of a list of them), in layout order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _private(value: Any, device: str) -> Any:
    """This side's own copy of an input read from the mapping (on the device)."""
    if isinstance(value, torch.Tensor):
        return value.clone().to(device)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        items = [_private(v, device) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


class _Channel:
    """The side's end of its channel: the two FIFOs the harness made, opened in the job's set-up (the harness
    holds ``ctl.out`` open for reading and ``ctl.in`` for writing: neither open blocks), their names removed
    at once."""

    def __init__(self, job_dir: Path):
        self._out = os.open(job_dir / "ctl.out", os.O_WRONLY)
        self._in = os.open(job_dir / "ctl.in", os.O_RDONLY)
        for name in ("ctl.in", "ctl.out"):
            os.unlink(job_dir / name)
        self._buffer = b""

    def read(self) -> Command:
        while b"\n" not in self._buffer:
            chunk = os.read(self._in, 65536)
            if not chunk:
                raise EOFError("the harness closed the window")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return parse_command(line.decode())

    def reply(self, answer: Answer) -> None:
        data = (answer.line() + "\n").encode()
        while data:
            data = data[os.write(self._out, data):]


def _map_read_only(fd: int, size: int) -> Any:
    """``size`` bytes of the file ``fd`` mapped shared and read-only, as a buffer (``mmap.mmap`` would
    duplicate the descriptor, which the candidate's phase may not: ``verifier.sandbox.seccomp``)."""
    if size == 0:
        return bytearray()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f"mapping the inputs failed: {os.strerror(err)}")
    return (ctypes.c_char * size).from_address(address)


def _where(structure: Any, leaves: list[torch.Tensor]) -> Outputs:
    """Where a call's result lies in this process (the harness reads it there)."""
    return Outputs(structure, tuple(Leaf(int(t.data_ptr()), str(t.dtype).removeprefix("torch."), tuple(t.shape),
                                         tuple(t.stride()), t.device.type) for t in leaves))


def _side(job: dict[str, Any], job_dir: Path, device_runtime: DeviceRuntime) -> dict[str, Any]:
    """The side's command loop (see the module docstring and ``verifier.window.messages``)."""
    spec = TaskSpec.from_dict(job["task"])
    device = device_runtime.device
    role = str(job["role"])
    trusted = role == "reference"
    trials = [Trial.from_dict(t) for t in job["trials"]]
    signals = signal_dispositions()   # before any candidate code runs: no call may change it
    module = load_task_module(spec)
    # Set-up, before any candidate code: the channel (its names removed) and, for an untrusted side, its
    # inputs' file, which the harness made read-only and writes while the side is stopped.
    channel = _Channel(job_dir)
    inputs_fd = None if trusted else os.open(job_dir / "inputs.bin", os.O_RDONLY)
    if trusted:
        make = module.Model
    else:
        try:
            make = _load_candidate(job, job_dir, device_runtime,
                                   module_name="candidate_model" if role == "candidate" else "best_model")
        except CandidateFailure:
            raise
        except Exception as exc:
            raise CandidateFailure("performance", f"loading model.py failed: {_describe(exc)}") from exc
    try:   # one per instance seed, like the reference's and the correctness trials'
        models = instances(make, module, trials, device, bool(job.get("eval_mode")))
    except Exception as exc:
        raise CandidateFailure("performance", f"{'Model' if trusted else 'ModelNew'}(*get_init_inputs()) "
                                              f"failed: {_describe(exc)}") from exc
    channel.reply(Ready())
    shared: Any = None
    inputs_span = (0, 0)          # an untrusted side's read-only input mapping (start, end)
    source: list[Any] = []
    buffers: list[Any] = []       # on a device: this side's own copies of the inputs (on the host: ``source``)
    current = 0
    last: tuple[Any, Any, list[torch.Tensor]] | None = None   # the last call's result, where the harness reads it
    settled = True
    trial_inputs: dict[int, list[Any]] = {}   # a trial's own inputs, for ``fixed_integers``
    picks: list[dict[str, Any]] = []
    calls: list[dict[str, int]] = []
    forbidden: list[dict[str, int]] = []
    changed: list[str] = []   # how the candidate's code changed signal handling, if it did
    events = device_runtime.events() if job.get("timer") == "events" else None
    sync = device_runtime.synchronize
    # On a device every side flushes the device's cache after staging (the harness cannot reach it); on
    # the host the reference's side flushes the caches for every timed call (``flush``): a process of
    # its own with passive OpenMP threads, so nothing of the flush spins beside the call it precedes.
    nbytes = int(job.get("flush_bytes") or 0)
    flush = CacheFlusher(device_runtime.flush_bytes(nbytes), device) if device != "cpu" and nbytes else None
    host_flush = CacheFlusher(nbytes) if device == "cpu" and trusted and nbytes else None

    # An untrusted side's next call is traced from before the clock starts: the trace is made and entered
    # after staging and after each call's bookkeeping (so its set-up is not timed, only the ops it
    # intercepts), and left before any other command, whose own PyTorch work (copies, picks) it must not
    # count. Nothing of the candidate runs in this thread while the side waits for its next command.
    armed: OpTrace | None = None
    trace: OpTrace | None = None

    def arm() -> None:
        nonlocal armed
        if not trusted and armed is None:
            runtime.reset_calls()
            armed = OpTrace().start()

    def disarm() -> OpTrace | None:
        nonlocal armed
        done, armed = armed, None
        if done is not None:
            done.stop()
        return done

    def settle(own_spoil: bool = True) -> None:
        """The last call's bookkeeping, outside the clock: its report, the heap warmed, the next trace armed; with
        ``own_spoil``, the last outputs spoiled here (only where the harness cannot write this side's memory: it
        spoils them itself once the side is stopped again, beyond the reach of the candidate's code)."""
        nonlocal settled, changed
        if settled:
            return
        settled = True
        if not trusted:
            if not changed:
                changed = signal_changes(signals, signal_dispositions())
            calls.append(runtime.call_counts())
            forbidden.append(trace.forbidden() if trace is not None else {})
        # After every call (only after one that faulted let 1 in 4 calls fault 31 MB); the same for every
        # side: the next call's outputs are carved from memory already mapped, where this call's lie now.
        if last is not None:
            if not trusted and own_spoil:   # read by the harness already; the reference's are picked after the round
                spoil(last[2], inputs_span)
            warm_heap_top(2 * sum(t.numel() * t.element_size() for t in last[2]) + (1 << 20))
        arm()

    def map_inputs(layout: list[dict[str, Any]]) -> None:
        nonlocal shared, source, buffers, inputs_span
        size = layout_bytes(layout)
        if trusted:
            fd = os.open(job_dir / "inputs.bin", os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(fd, size)
            shared = mmap.mmap(fd, size)
            os.close(fd)
        else:
            assert inputs_fd is not None
            shared = _map_read_only(inputs_fd, size)
            if size:
                inputs_span = (ctypes.addressof(shared), ctypes.addressof(shared) + size)
        source = _views(shared, layout)
        buffers = [_private(x, device) for x in source] if device != "cpu" else source

    while True:
        try:
            command = channel.read()
        except EOFError:
            break
        if not isinstance(command, Go):
            disarm()
        if isinstance(command, Gen) and trusted:
            fresh = make_inputs(module.get_inputs, Trial(command.seed, "normal", case=command.case))
            if job.get("fixed_integers"):
                which = command.trial % len(trials)
                if which not in trial_inputs:
                    trial_inputs[which] = make_inputs(module.get_inputs, trials[which])
                own = trial_inputs[which]
                fresh = [mine if isinstance(mine, torch.Tensor) and not (mine.is_floating_point() or mine.is_complex())
                         else x for x, mine in zip(fresh, own)]
            layout = input_layout(fresh)
            if shared is None:
                map_inputs(layout)
            for view, x in zip(source, fresh):
                for dst, src in zip(_tensors(view), _tensors(x)):
                    dst.copy_(src)
            channel.reply(Ok(layout))
        elif isinstance(command, Flush) and host_flush is not None:
            host_flush()
            channel.reply(Ok())
        elif isinstance(command, Layout):
            map_inputs(command.layout)
            channel.reply(Ok())
        elif isinstance(command, Stage):
            current = command.instance % len(models)
            if not trusted and last is not None:
                # the last call's device outputs, read already (picked after its done): spoiled here, where the side
                # runs with its threads free (never in ``settle``, where the harness holds them and the device's
                # queue thread would block the fill); freed at the next ``go``, the block handed back holds SPOILED
                spoil_device(last[2])
            if device != "cpu":
                for buf, view in zip(buffers, source):
                    for dst, src in zip(_tensors(buf), _tensors(view)):
                        dst.copy_(src)
            if flush is not None:
                flush()
            sync()
            arm()
            channel.reply(Ok())
        elif isinstance(command, Go):
            settle()        # done already by the harness's ``settle`` after the last call, unless it sent none
            current = command.instance % len(models)
            repeat = max(1, min(command.calls, 1000))   # the timing method's calls in one sample
            last = None     # the last result's memory goes back to the allocator, for this call's outputs
            arm()           # armed already (by the staging or the last settle) unless a command came between
            before = resource.getrusage(resource.RUSAGE_SELF)
            pair = events() if events is not None else None
            try:
                if pair is not None:
                    pair[0].record()
                with torch.no_grad():
                    for _ in range(repeat):
                        out = models[current](*buffers)
                if pair is not None:
                    pair[1].record()
                sync()
            except Exception as exc:
                disarm()
                raise CandidateFailure("performance", f"a timed call raised {_describe(exc)}") from exc
            after = resource.getrusage(resource.RUSAGE_SELF)
            structure, leaves = flatten(out, copy=False, cpu=False)
            event_ms = float(pair[0].elapsed_time(pair[1])) / repeat if pair is not None else None
            channel.reply(Done(command.nonce, event_ms, after.ru_nivcsw != before.ru_nivcsw, _where(structure, leaves)))
            last, settled = (out, structure, leaves), False
            del out
            trace = disarm()
        elif isinstance(command, Settle):
            settle(command.spoil)
            channel.reply(Ok())
        elif isinstance(command, Pick):
            if last is None:
                raise CandidateFailure("performance", "internal: pick before any call")
            on_host = [t.detach().to("cpu") for t in last[2]]
            picks.append(pick(last[1], on_host, command.seed, command.limit))
            channel.reply(Ok())
        elif isinstance(command, Finish):
            settle()
            disarm()
            _save(job_dir, {"picks": picks})
            channel.reply(Ok())
            break
        else:
            channel.reply(Failed(f"unexpected {type(command).__name__.lower()} for the {role}'s side"))
    return {"calls": calls, "forbidden": forbidden, "signals_changed": changed}
