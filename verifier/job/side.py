"""One side of a timing window, inside its own job process (see verifier.harness.window for the harness).

Every side of a window (the reference, the candidate, the task's best) is a separate process: the
reference in the trusted reference server, the candidate and the best each in a sandboxed job of their
own. Nothing a candidate does in its process can reach the others: the harness holds the clock, draws
the inputs, compares the outputs and stops (SIGSTOP) every untrusted side while another is timed.

The side answers the harness over two FIFOs in its job folder, one line per command (``ctl.in``) and
one per answer (``ctl.out``)::

    gen SEED CASE K    (the reference only) fresh inputs from the task's ``get_inputs()`` under SEED,
                       written to ``inputs.bin``; answers ``ok LAYOUT_JSON``. For a reference that
                       differs between runs (a duplicate-index scatter: ``fixed_integers``) the integer
                       inputs are trial K's, so the places its two runs differ are known

    flush              (the reference only, on the host) overwrite a buffer that evicts the timed cores'
                       caches, right before another side's timed call; answers ``ok``
    layout JSON        map ``inputs.bin`` (read-only) and make this side's private input buffers
    stage K            copy ``inputs.bin`` into the private buffers; instance K is called next
    go NONCE           call instance K once, synchronise; answers ``done NONCE EVENT_MS PREEMPTED``
                       at once, then keeps a copy of the result (the harness's clock stops at "done")
    pick SEED LIMIT    keep LIMIT positions of that result per output (drawn from SEED after the call;
                       ``all``: every position), for the harness to compare
    finish             write the kept picks (``outputs.pt``) and every call's report, and exit

Untrusted sides run each call under the op trace and count the launcher calls (``calls``,
``forbidden`` per call, in ``result.json``): PyTorch compute or a forward that skips the library is
caught on any call, not only on the checked ones. ``NONCE`` is a fresh random word per call: native
code cannot answer "done" early without reading this process's memory.
"""

from __future__ import annotations

import json
import mmap
import os
import resource
from pathlib import Path
from typing import Any

import torch

from verifier import runtime
from verifier.backends import DeviceRuntime
from verifier.inputs import Trial, make_inputs
from verifier.job.allocator import warm_heap_top
from verifier.job.candidate import CandidateFailure, _describe, _load_candidate, _save
from verifier.job.op_trace import OpTrace
from verifier.job.signals import signal_changes, signal_dispositions
from verifier.job.tensors import flatten
from verifier.job.timing import CacheFlusher, instances
from verifier.jobs import input_layout, layout_bytes
from verifier.task import TaskSpec, load_task_module


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
    def __init__(self, job_dir: Path):
        # The harness opened ctl.out for reading and holds ctl.in open: neither open blocks.
        self._out = os.open(job_dir / "ctl.out", os.O_WRONLY)
        self._in = open(job_dir / "ctl.in", "rb", buffering=0)
        self._buffer = b""

    def read(self) -> list[str]:
        while b"\n" not in self._buffer:
            chunk = self._in.read(65536)
            if not chunk:
                raise EOFError("the harness closed the window")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode().split(" ")

    def reply(self, text: str) -> None:
        data = (text + "\n").encode()
        while data:
            data = data[os.write(self._out, data):]


def _pick(snapshot: tuple[Any, list[torch.Tensor]], seed: int, limit: int | None) -> dict[str, Any]:
    """The result reduced to ``limit`` positions per output drawn from ``seed`` (None: every position),
    with each output's full shape kept beside. Every side draws the same positions from the same seed."""
    structure, leaves = snapshot
    gen = torch.Generator().manual_seed(seed)
    picked = []
    for leaf in leaves:
        if limit is None or leaf.numel() <= limit:
            picked.append(leaf.contiguous().clone())
        else:
            idx = torch.randint(leaf.numel(), (limit,), generator=gen)
            picked.append(leaf.reshape(-1)[idx].clone())
    return {"structure": structure, "leaves": picked, "shapes": [list(leaf.shape) for leaf in leaves]}


def _side(job: dict[str, Any], job_dir: Path, device_runtime: DeviceRuntime) -> dict[str, Any]:
    """The side's command loop (see the module docstring)."""
    spec = TaskSpec.from_dict(job["task"])
    device = device_runtime.device
    role = str(job["role"])
    trusted = role == "reference"
    trials = [Trial.from_dict(t) for t in job["trials"]]
    signals = signal_dispositions()   # before any candidate code runs: no call may change it
    module = load_task_module(spec)
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
    channel = _Channel(job_dir)
    channel.reply("ready")
    shared: Any = None
    source: list[Any] = []
    buffers: list[Any] = []
    current = 0
    snapshot: tuple[Any, list[torch.Tensor]] | None = None
    kept: list[torch.Tensor] = []   # the last call's outputs, copied into buffers made once and reused
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
    # after staging and after each call (so its set-up is not timed, only the ops it intercepts), and left
    # before any other command, whose own PyTorch work (copies, picks) it must not count. Nothing of the
    # candidate runs in this thread while the side waits for its next command.
    armed: OpTrace | None = None

    def arm() -> None:
        nonlocal armed
        if not trusted and armed is None:
            runtime.reset_calls()
            armed = OpTrace().start()

    def disarm() -> OpTrace | None:
        nonlocal armed
        trace, armed = armed, None
        if trace is not None:
            trace.stop()
        return trace

    def map_inputs(layout: list[dict[str, Any]], writable: bool) -> None:
        nonlocal shared, source, buffers
        path = job_dir / "inputs.bin"
        size = layout_bytes(layout)
        if writable:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(fd, size)
            shared = mmap.mmap(fd, size)
        else:
            fd = os.open(path, os.O_RDONLY)
            shared = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        os.close(fd)
        source = _views(shared, layout)
        buffers = [_private(x, device) for x in source]

    while True:
        try:
            words = channel.read()
        except EOFError:
            break
        command = words[0]
        if command != "go":
            disarm()
        if command == "gen" and trusted:
            seed, case = int(words[1]), (None if words[2] == "-" else int(words[2]))
            fresh = make_inputs(module.get_inputs, Trial(seed, "normal", case=case))
            if job.get("fixed_integers"):
                which = int(words[3]) % len(trials)
                if which not in trial_inputs:
                    trial_inputs[which] = make_inputs(module.get_inputs, trials[which])
                own = trial_inputs[which]
                fresh = [mine if isinstance(mine, torch.Tensor) and not (mine.is_floating_point() or mine.is_complex())
                         else x for x, mine in zip(fresh, own)]
            layout = input_layout(fresh)
            if shared is None:
                map_inputs(layout, writable=True)
            for view, x in zip(source, fresh):
                for dst, src in zip(_tensors(view), _tensors(x)):
                    dst.copy_(src)
            channel.reply("ok " + json.dumps(layout, separators=(",", ":")))
        elif command == "flush" and host_flush is not None:
            host_flush()
            channel.reply("ok")
        elif command == "layout":
            map_inputs(json.loads(" ".join(words[1:])), writable=False)
            channel.reply("ok")
        elif command == "stage":
            current = int(words[1]) % len(models)
            for buf, view in zip(buffers, source):
                for dst, src in zip(_tensors(buf), _tensors(view)):
                    dst.copy_(src)
            if flush is not None:
                flush()
            sync()
            arm()
            channel.reply("ok")
        elif command == "go":
            nonce = words[1]
            repeat = max(1, min(int(words[2]), 1000)) if len(words) > 2 else 1   # the timing method's calls
            arm()           # armed already (by the staging or the last call) unless a command came between
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
            preempted = after.ru_nivcsw != before.ru_nivcsw
            event_ms = f"{float(pair[0].elapsed_time(pair[1])) / repeat:.6f}" if pair is not None else "-"
            channel.reply(f"done {nonce} {event_ms} {int(preempted)}")
            trace = disarm()
            # Copied into the same buffers every call, and the result freed at once: nothing allocated
            # after a call outlives it, so the next call's outputs reuse the same memory instead of
            # faulting in fresh pages inside the timed region (a 4 MiB output: 1,024 faults, ~1 ms).
            structure, leaves = flatten(out, copy=False, cpu=False)
            if [(b.shape, b.dtype) for b in kept] != [(v.shape, v.dtype) for v in leaves]:
                kept = [torch.empty(v.shape, dtype=v.dtype) for v in leaves]
            for buf, v in zip(kept, leaves):
                buf.copy_(v)
            snapshot = (structure, kept)
            del out, leaves     # (never poisoned: no other side's results are in this process to reuse)
            if not trusted:
                if not changed:
                    changed = signal_changes(signals, signal_dispositions())
                calls.append(runtime.call_counts())
                forbidden.append(trace.forbidden() if trace is not None else {})
            # After every call (only after one that faulted let 1 in 4 calls fault 31 MB); the same
            # for every side.
            warm_heap_top(2 * sum(k.numel() * k.element_size() for k in kept) + (1 << 20))
            arm()
        elif command == "pick":
            if snapshot is None:
                raise CandidateFailure("performance", "internal: pick before any call")
            picks.append(_pick(snapshot, int(words[1]), None if words[2] == "all" else int(words[2])))
            channel.reply("ok")
        elif command == "finish":
            _save(job_dir, {"picks": picks})
            channel.reply("ok")
            break
        else:
            channel.reply("error unknown command")
    return {"calls": calls, "forbidden": forbidden, "signals_changed": changed}
