"""Performance counters of another process's threads, opened by the harness with ``perf_event_open`` (never by the
candidate: its seccomp filter refuses the call): what a timed call cost in cycles, instructions, cache misses and
branch misses where the machine exposes a PMU, and in CPU time, page faults and context switches everywhere
Linux counts them in software.

``Counters`` opens one counter per event per thread of a process (``/proc/<pid>/task``), adds threads that appear
later (an OpenMP pool made at the first parallel region) at each ``read``, and reads their sums. ``CallCounts`` is
a window observer (``verifier.window.harness.Observer``: told before each timed call which side is called): the
counts between a side's call and the next call of any side are that call's (the other sides are stopped then). An
event the machine does not have is left out and said (``missing``): a VM without a PMU (this project's machine:
"no such event" for every hardware counter) still gives the software ones.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "riscv64": 241}.get(platform.machine())
_CLOEXEC = 8   # PERF_FLAG_FD_CLOEXEC
_ATTR_SIZE = 64   # PERF_ATTR_SIZE_VER0: type, size, config, period, sample_type, read_format, flags, ...

# (name, type, config, kernel counted too): type 0 hardware, 1 software
EVENTS: tuple[tuple[str, int, int, bool], ...] = (
    ("cycles", 0, 0, False), ("instructions", 0, 1, False), ("cache_references", 0, 2, False),
    ("cache_misses", 0, 3, False), ("branch_misses", 0, 5, False),
    ("task_clock_ns", 1, 1, True), ("page_faults", 1, 2, True), ("context_switches", 1, 3, True),
    ("cpu_migrations", 1, 4, True),
)


def _attr(kind: int, config: int, kernel: bool) -> ctypes.Array[ctypes.c_char]:
    raw = bytearray(_ATTR_SIZE)
    struct.pack_into("IIQ", raw, 0, kind, _ATTR_SIZE, config)
    flags = (0 if kernel else 1 << 5) | 1 << 6    # exclude_kernel unless counted there, exclude_hv
    struct.pack_into("Q", raw, 40, flags)
    return ctypes.create_string_buffer(bytes(raw), _ATTR_SIZE)


_libc = ctypes.CDLL(None, use_errno=True)


def _open(kind: int, config: int, kernel: bool, tid: int) -> int:
    """A counting fd for one event of one thread, or ``-errno``."""
    if _SYSCALL is None:
        return -errno.ENOSYS
    fd = int(_libc.syscall(_SYSCALL, _attr(kind, config, kernel), tid, -1, -1, _CLOEXEC))
    if fd < 0 and kernel and ctypes.get_errno() == errno.EACCES:   # only user space may be counted here
        fd = int(_libc.syscall(_SYSCALL, _attr(kind, config, False), tid, -1, -1, _CLOEXEC))
    return fd if fd >= 0 else -ctypes.get_errno()


@dataclass
class Counters:
    """The counters of every thread of process ``pid`` (see the module's docstring)."""

    pid: int
    events: Sequence[tuple[str, int, int, bool]] = EVENTS
    missing: dict[str, str] = field(default_factory=dict)      # event -> why it is not counted here
    _fds: dict[tuple[int, str], int] = field(default_factory=dict)

    def attach(self) -> None:
        """Open the counters of the threads not counted yet (every thread of the process now)."""
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        except OSError:
            return
        for tid in tids:
            for name, kind, config, kernel in self.events:
                if name in self.missing or (tid, name) in self._fds:
                    continue
                fd = _open(kind, config, kernel, tid)
                if fd >= 0:
                    self._fds[(tid, name)] = fd
                elif -fd in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.ENOSYS, errno.EACCES, errno.EPERM):
                    self.missing[name] = os.strerror(-fd) + (" (no PMU: a virtual machine?)" if kind == 0 and
                                                             -fd == errno.ENOENT else "")

    def read(self) -> dict[str, int]:
        """Each event's sum over the process's threads so far (new threads attached first)."""
        self.attach()
        sums: dict[str, int] = {}
        for (_tid, name), fd in self._fds.items():
            try:
                sums[name] = sums.get(name, 0) + struct.unpack("Q", os.read(fd, 8))[0]
            except OSError:
                continue   # the thread has ended: its last value is in the earlier sums
        return sums

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


class CallCounts:
    """A window observer counting each side's timed calls (see the module's docstring): ``per_call(side)`` is the
    mean of each event over its complete calls; ``calls(side)`` how many were counted."""

    def __init__(self) -> None:
        self._counters: dict[str, Counters] = {}
        self._last: tuple[str, dict[str, int]] | None = None
        self._totals: dict[str, dict[str, int]] = {}
        self._calls: dict[str, int] = {}
        self.problem = ""

    def __call__(self, what: str, payload: Any) -> None:
        if what != "timed":
            return
        name, sides = payload
        snapshot = {}
        for side_name, side in sides.items():
            if side_name not in self._counters:
                pid = _host_pid(side)
                if pid is None:
                    self.problem = self.problem or f"the {side_name} side's process is not known to the harness"
                    continue
                self._counters[side_name] = Counters(pid)
            snapshot[side_name] = self._counters[side_name].read()
        if self._last is not None:
            called, before = self._last
            after = snapshot.get(called, {})
            total = self._totals.setdefault(called, {})
            for event, value in after.items():
                total[event] = total.get(event, 0) + value - before.get(event, 0)
            self._calls[called] = self._calls.get(called, 0) + 1
        self._last = (name, snapshot.get(name, {}))

    def calls(self, side: str) -> int:
        return self._calls.get(side, 0)

    def per_call(self, side: str) -> dict[str, float]:
        n = self._calls.get(side, 0)
        return {k: v / n for k, v in self._totals.get(side, {}).items()} if n else {}

    def missing(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self._counters.values():
            out.update(c.missing)
        return out

    def close(self) -> None:
        for c in self._counters.values():
            c.close()


def _host_pid(side: Any) -> int | None:
    handle = getattr(side, "handle", None)
    try:
        pid = handle.host_pid() if handle is not None else None
    except Exception:  # noqa: BLE001 - a side that has ended
        return None
    return int(pid) if pid else None
