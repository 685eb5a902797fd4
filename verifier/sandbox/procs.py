"""The harness's own view of a sandboxed job's process, from the host's ``/proc`` (issue #35): the harness
never takes a job's word for what it can see itself.

* ``host_pid``: the job's process as this process names it (a job has a PID namespace of its own inside
  the sandbox's; the fork server reports the pid it sees);
* ``stop``/``resume``: SIGSTOP or SIGCONT to the job's process group from here, a stop returning once every
  thread of the job is seen stopped;
* ``Settings``: every thread's scheduling policy, priority and CPU affinity and the process's resource
  limits, read before every timed call and compared with what the job started with (``changes``);
* ``read_memory``: values at given addresses of a stopped job's memory (``process_vm_readv``), so a timed
  call's outputs are read by the harness at the moment the call is reported done, not reported by the job;
* ``write_memory``: one byte over given spans of a stopped job's memory (``process_vm_writev``; where a
  mapping is read-only, ``force_write_memory`` through ``/proc/PID/mem``), so a call's outputs are spoiled
  by the harness once read, not by the job (``verifier.window.harness``);
* ``hold``/``release``: every thread of a stopped job but one kept in a ptrace stop (``PTRACE_SEIZE``) while the job
  is continued, and let go into the job's stop again (``PTRACE_DETACH``), so the job's own thread does its
  bookkeeping between calls with no thread of the candidate's running beside it.

Reading or writing another process's memory, or holding its threads, needs ptrace access to it: the harness has it
over its jobs when it runs as root (with ``CAP_SYS_PTRACE``), or when it started them in a user namespace of its own
(bubblewrap's ``--unshare-user``). ``memory_access`` decides it from that, from the harness's side only, and confirms
it on the fork server's probe page (made before any job ran); a job's own memory is then read as a matter of course,
and a read that fails is the job's failure (issue #48: a candidate that made the first page of its own maps unreadable
had the harness take its word for its outputs).

* ``seccomp_filters``: how many seccomp filters each thread of a job has, read from ``/proc`` while it is stopped at its
  candidate phase (``verifier.sandbox.seccomp.enter_candidate_phase``), never the job's own count.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from verifier.sandbox.lockdown import wait_stopped


def _status(pid: int) -> dict[str, str]:
    return _status_of(f"/proc/{pid}/status")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def host_pid(ancestor: int, ns_pid: int, wait_s: float = 1.0) -> int | None:
    """The pid (in this process's namespace) of the process that the process ``ancestor`` (a host pid, the
    fork server) sees as ``ns_pid``, among its children and grandchildren (a job's first process exits at
    once and the server adopts the job); None if none shows within ``wait_s``."""
    level = len(_status(ancestor).get("NSpid", "").split()) - 1
    if level < 0:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        near = _children(ancestor)
        for pid in [*near, *(g for c in near for g in _children(c))]:
            nspid = _status(pid).get("NSpid", "").split()
            if len(nspid) > level and nspid[level] == str(ns_pid):
                return pid
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)


def _stat(path: str) -> list[bytes] | None:
    """The fields of a ``/proc`` ``stat`` file after the command's name (the state first), or None if it is gone."""
    try:
        with open(path, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_group(pid: int) -> int | None:
    """The process group of ``pid`` as this process names it."""
    fields = _stat(f"/proc/{pid}/stat")
    try:
        return int(fields[2]) if fields is not None else None
    except (ValueError, IndexError):
        return None


def stop(group: int, pid: int, wait_s: float = 0.5) -> bool:
    """SIGSTOP to the job's process group; True once every thread of ``pid`` is seen stopped."""
    try:
        os.killpg(group, signal.SIGSTOP)
    except OSError:
        return False
    return wait_stopped(pid, time.monotonic() + wait_s)


def resume(group: int) -> bool:
    try:
        os.killpg(group, signal.SIGCONT)
    except OSError:
        return False
    return True


# ----------------------------------------------------------------------------- scheduling and limits

_POLICIES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE", 6: "SCHED_DEADLINE"}


@dataclass(frozen=True)
class Settings:
    """What decides how fast a process runs, besides its code: per thread (nice, policy, real-time
    priority, allowed CPUs), and the process's resource limits."""

    threads: dict[int, tuple[int, int, int, frozenset[int]]]
    limits: dict[str, tuple[str, str]]


def _cpu_list(text: str) -> frozenset[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part.strip():
            cpus.add(int(part))
    return frozenset(cpus)


def settings(pid: int) -> Settings | None:
    """``pid``'s settings now (None if it is gone)."""
    found: dict[int, tuple[int, int, int, frozenset[int]]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        fields = _stat(f"/proc/{pid}/task/{tid}/stat")
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as g:
                cpus = next(line.split(":", 1)[1].strip() for line in g if line.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue        # a thread that just ended
        if fields is None:
            continue
        found[int(tid)] = (int(fields[16]), int(fields[38]), int(fields[37]), _cpu_list(cpus))
    limits: dict[str, tuple[str, str]] = {}
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in list(f)[1:]:
                name = line[:26].strip()
                parts = line[26:].split()
                if name and len(parts) >= 2:
                    limits[name] = (parts[0], parts[1])
    except OSError:
        return None
    return Settings(found, limits)


def _words(nice: int, policy: int, rt: int) -> str:
    return f"{_POLICIES.get(policy, policy)} nice {nice}" + (f" priority {rt}" if rt else "")


class SettingsWatch:
    """A job's settings, watched between its calls: its limits must stay those it started with, every thread
    keeps the priority, policy and CPUs it had when first seen (OpenMP binds a thread to its CPU when it
    makes it, never after), and a new thread runs at the job's own priority and policy."""

    def __init__(self, first: Settings):
        self.limits = dict(first.limits)
        self.threads = dict(first.threads)
        self.own = next(iter(first.threads.values()))[:3] if first.threads else None

    def changes(self, now: Settings) -> list[str]:
        """How ``now`` differs, in words (empty when it does not); new threads are remembered."""
        out = [f"{name} {'/'.join(self.limits[name])} -> {soft}/{hard}" for name, (soft, hard) in now.limits.items()
               if name in self.limits and self.limits[name] != (soft, hard)]
        for tid, state in sorted(now.threads.items()):
            seen = self.threads.get(tid)
            if seen is None:
                if self.own is not None and state[:3] != self.own:
                    out.append(f"a new thread at {_words(*state[:3])}, the job's own are at {_words(*self.own)}")
                self.threads[tid] = state
            elif seen[:3] != state[:3]:
                out.append(f"a thread moved from {_words(*seen[:3])} to {_words(*state[:3])}")
            elif seen[3] != state[3]:
                out.append(f"a thread moved from CPUs {sorted(seen[3])} to {sorted(state[3])}")
        return out


# ----------------------------------------------------------------------------- memory

class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_IOV_MAX = 1024


@functools.cache
def _vm_call(name: str) -> Any:
    """The C library's ``process_vm_readv`` or ``process_vm_writev`` (the same signature), bound once."""
    call = getattr(ctypes.CDLL(None, use_errno=True), name)
    call.restype = ctypes.c_ssize_t
    call.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
                     ctypes.c_ulong, ctypes.c_ulong]
    return call


def read_memory(pid: int, spans: list[tuple[int, int]]) -> bytes:
    """The bytes at ``spans`` ((address, length) pairs) of ``pid``'s memory, concatenated; raises OSError
    (EFAULT for an address the process has not mapped, EPERM where the harness may not read it)."""
    readv = _vm_call("process_vm_readv")
    total = sum(n for _, n in spans)
    out = ctypes.create_string_buffer(total)
    done = 0
    for start in range(0, len(spans), _IOV_MAX):
        chunk = spans[start:start + _IOV_MAX]
        size = sum(n for _, n in chunk)
        local = _IoVec(ctypes.addressof(out) + done, size)
        remote = (_IoVec * len(chunk))(*[_IoVec(addr, n) for addr, n in chunk])
        n = readv(pid, ctypes.byref(local), 1, remote, len(chunk), 0)
        if n < 0:
            err = ctypes.get_errno() or errno.EFAULT
            raise OSError(err, os.strerror(err))
        if n != size:          # a partial read: a span is not (wholly) mapped
            raise OSError(errno.EFAULT, f"only {done + n} of {total} bytes of the job's memory are mapped")
        done += size
    return out.raw


_FILL_BYTES = 1 << 20                       # one preallocated buffer, written again and again
_fill: dict[int, ctypes.Array[ctypes.c_char]] = {}


def _pieces(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(address + at, min(_FILL_BYTES, length - at)) for address, length in spans
            for at in range(0, length, _FILL_BYTES)]


def write_memory(pid: int, spans: list[tuple[int, int]], byte: int) -> None:
    """Write ``byte`` over ``spans`` ((address, length) pairs) of ``pid``'s memory; raises OSError (EFAULT for a
    span the process has not mapped, or mapped read-only; EPERM where the harness may not write it)."""
    writev = _vm_call("process_vm_writev")
    if byte not in _fill:
        _fill[byte] = ctypes.create_string_buffer(bytes([byte]) * _FILL_BYTES, _FILL_BYTES)
    base = ctypes.addressof(_fill[byte])
    pieces = _pieces(spans)
    for start in range(0, len(pieces), _IOV_MAX):
        chunk = pieces[start:start + _IOV_MAX]
        size = sum(n for _, n in chunk)
        local = (_IoVec * len(chunk))(*[_IoVec(base, n) for _, n in chunk])
        remote = (_IoVec * len(chunk))(*[_IoVec(addr, n) for addr, n in chunk])
        n = writev(pid, local, len(chunk), remote, len(chunk), 0)
        if n < 0:
            err = ctypes.get_errno() or errno.EFAULT
            raise OSError(err, os.strerror(err))
        if n != size:          # a partial write: a span is not (wholly) mapped writable
            raise OSError(errno.EFAULT, f"only {n} of {size} bytes of the job's memory could be written")


def force_write_memory(pid: int, spans: list[tuple[int, int]], byte: int) -> None:
    """``write_memory`` through ``/proc/PID/mem``, which also writes a private read-only mapping (the kernel
    copies the page for the process, as for a debugger); raises OSError where that fails too."""
    fill = bytes([byte]) * _FILL_BYTES
    fd = os.open(f"/proc/{pid}/mem", os.O_WRONLY)
    try:
        for address, length in _pieces(spans):
            if os.pwrite(fd, fill[:length], address) != length:
                raise OSError(errno.EFAULT, f"only part of {length} bytes at {address:#x} could be written")
    finally:
        os.close(fd)


def file_mappings(pid: int, device: int, inode: int) -> list[tuple[int, int]]:
    """Where ``pid`` maps the file ``device``:``inode`` (as ``os.stat`` gives them): (start, end) spans, from
    ``/proc/PID/maps``."""
    want = f"{os.major(device):02x}:{os.minor(device):02x}"
    out: list[tuple[int, int]] = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 5 and fields[4] == str(inode) and fields[3] == want:
                    start, end = fields[0].split("-")
                    out.append((int(start, 16), int(end, 16)))
    except (OSError, ValueError):
        pass
    return out


_CAP_SYS_PTRACE = 19


def _yama_scope() -> int:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0       # no Yama: the ordinary ptrace rules


def memory_access(server: int, probe: dict[str, Any] | None, user_namespace: bool) -> str:
    """Whether this process can read and write the memory of the jobs of the fork server ``server`` (its host pid):
    "" when it can, else why not, in words. Decided from how the jobs were started, never from anything a job does:
    this process is root with ``CAP_SYS_PTRACE``, or it started the server in a user namespace of its own
    (``user_namespace``: bubblewrap's ``--unshare-user``; the jobs' memory belongs to that namespace, whose owner
    holds every capability in it), and Yama does not forbid every attach (``ptrace_scope`` 3). Then confirmed on the
    server's probe page (``probe``: ``{"address", "token"}``, made before any job ran): a failure there is the
    tool's, never a job's."""
    if _yama_scope() >= 3:
        return "the harness cannot read a job's memory here (Yama's ptrace_scope is 3: no process may)"
    try:
        root = os.geteuid() == 0 and bool(int(_status(os.getpid()).get("CapEff", "0"), 16) >> _CAP_SYS_PTRACE & 1)
    except ValueError:
        root = False
    if not (root or user_namespace):
        return ("the harness cannot read a job's memory here: it is neither root (with CAP_SYS_PTRACE) nor the owner "
                "of the jobs' user namespace (bubblewrap's --unshare-user)")
    if not probe:
        return "the harness cannot read a job's memory here: the fork server made no probe page"
    try:
        got = read_memory(server, [(int(probe["address"]), 16)])
    except OSError as exc:
        return f"the harness cannot read a job's memory here (its fork server's: {exc.strerror})"
    if got.hex() != probe.get("token"):
        return "the harness cannot read a job's memory here (its fork server's probe page holds another token)"
    return ""


def seccomp_filters(pid: int) -> dict[int, int | None]:
    """How many seccomp filters each thread of ``pid`` has (``Seccomp_filters`` of ``/proc/PID/task/TID/status``;
    None where the kernel does not say); empty if it is gone."""
    found: dict[int, int | None] = {}
    for tid in threads(pid):
        value = _status_of(f"/proc/{pid}/task/{tid}/status").get("Seccomp_filters")
        try:
            found[tid] = int(value) if value is not None else None
        except ValueError:
            found[tid] = None
    return found


def _status_of(path: str) -> dict[str, str]:
    try:
        with open(path) as f:
            return {k: v.strip() for k, _, v in (line.partition(":") for line in f)}
    except OSError:
        return {}


# ----------------------------------------------------------------------------- threads held while a side settles

_PTRACE_DETACH, _PTRACE_SEIZE = 17, 0x4206
_WNOHANG, _WALL = 1, 0x40000000


@functools.cache
def _ptrace() -> Any:
    """The C library's ``ptrace``, bound once."""
    call = ctypes.CDLL(None, use_errno=True).ptrace
    call.restype = ctypes.c_long
    call.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return call


def threads(pid: int) -> set[int]:
    """The threads of ``pid`` (their ids as this process names them); empty if it is gone."""
    try:
        return {int(tid) for tid in os.listdir(f"/proc/{pid}/task")}
    except (OSError, ValueError):
        return set()


def hold(tids: list[int]) -> list[int]:
    """``PTRACE_SEIZE`` each of ``tids``, threads of a process that is stopped (SIGSTOP, every thread seen stopped):
    each is then in a ptrace stop, which a ``SIGCONT`` to its process does not end (the tracer alone restarts a seized
    tracee), so the process can be continued with only its other threads running. Returns the threads held, in
    order; on a failure, the ones held so far are let go (``release``) and OSError is raised (ESRCH: the thread is
    gone; EPERM: another tracer holds it, or this process may not trace it). The holds belong to the calling OS
    thread: ``release`` must be called from it."""
    seize = _ptrace()
    held: list[int] = []
    for tid in tids:
        if seize(_PTRACE_SEIZE, tid, None, None) != 0:
            err = ctypes.get_errno()
            if ended(tid):
                continue            # ended (it runs no more): nothing to hold
            release(held)
            raise OSError(err, f"thread {tid}: {os.strerror(err)}")
        held.append(tid)
    return held


def _thread_state(tid: int) -> bytes | None:
    fields = _stat(f"/proc/{tid}/stat")
    return fields[0] if fields else None


def ended(tid: int) -> bool:
    """Whether the thread ``tid`` has ended (a zombie, or gone)."""
    return _thread_state(tid) in (None, b"Z", b"X")


def stopped_alive(pid: int) -> bool:
    """Whether ``pid`` is stopped now (its own thread in state ``T``, every other stopped or gone), not ended."""
    return _thread_state(pid) == b"T" and stopped(pid, 0.0)


def stopped(pid: int, wait_s: float = 0.5) -> bool:
    """Whether every thread of ``pid`` is (or comes to be, within ``wait_s``) stopped or gone."""
    return wait_stopped(pid, time.monotonic() + wait_s)


def unstopped(pid: int) -> list[str]:
    """The threads of ``pid`` not stopped now, each as ``tid (state)`` (``D``: in an uninterruptible system call)."""
    out = []
    for tid in sorted(threads(pid)):
        state = _thread_state(tid)
        if state not in (None, b"T", b"t", b"Z", b"X"):
            out.append(f"{tid} ({state.decode(errors='replace')})")
    return out


def release(tids: list[int]) -> None:
    """``PTRACE_DETACH`` each of ``tids`` (held by ``hold`` from this OS thread). A thread of a process in a group stop
    (SIGSTOP) joins it and stays stopped; one that has ended meanwhile (killed) is reaped here, since a traced thread's
    end waits for its tracer."""
    detach = _ptrace()
    for tid in tids:
        if detach(_PTRACE_DETACH, tid, None, None) == 0:
            continue
        deadline = time.monotonic() + 1.0
        while True:
            try:
                if os.waitpid(tid, _WNOHANG | _WALL)[0] == tid:
                    break
            except OSError:
                break        # not a tracee of this thread (any more): nothing to reap
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)
