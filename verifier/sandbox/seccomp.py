"""The seccomp filters of sandboxed jobs: one module for every backend (issues #34 and #35 agree on it).

What a job may ask of the kernel is decided here and nowhere else:

* ``RuntimeNeeds``: what a backend's runtime needs from the kernel while a job runs (threads, signal
  timers, socket families, open files, files opened after set-up, device ioctls). Each backend declares
  its own as ``runtime_needs`` (``verifier.backends.base.Backend``), written from what that runtime is
  documented or measured to do, with the source beside each value; nothing else in the project guesses a
  runtime's needs.
* ``lock_down``: installs the filter in the calling process (or, with ``all_threads``, on every thread it
  already has). The filter refuses, for every job, what no job needs: new processes, exec, ptrace and
  other processes' memory, namespaces, mounts, keyrings, BPF, io_uring, userfaultfd, sessions, clock and
  host changes, chmod (candidates), sockets outside the runtime's families, signals and signalling timers
  aimed anywhere but at the job itself. What the runtime declares it needs is left open.
* ``[verifier] seccomp`` (``VerifyConfig.seccomp``): on by default. Off only to tell a sandbox failure
  from a kernel failure on a runtime the filter has not met (``bench/npu_check.py`` runs every check
  both ways); a verification without the filter says so in its isolation line.

* ``enter_candidate_phase``: once a candidate job's set-up is done (its channel and output files open, its
  task modules and the candidate's library loaded), a narrower filter on every thread for the phase in
  which the candidate's code runs: an allow-list (``candidate_allow``: ``CANDIDATE_ALLOW`` and what the
  runtime's needs add), everything else EPERM (no open, create, link, rename, no descriptor duplicated, no
  pipe, no socket, no new filter), unless the runtime declares it opens files after set-up
  (``RuntimeNeeds.opens_files_after_setup``: a device runtime loading kernels on first launch). The job then stops
  itself (``SIGSTOP``) before any candidate code runs, and the harness counts its filters from outside
  (``phase_filters``, ``verifier.sandbox.procs.seccomp_filters``) before it lets it go on: the job's own word about
  its phase decides nothing (issue #48: load-time Python replaced the function that enters it with a no-op).

Both filters keep scheduling, priority and resource-limit calls to the caller itself (``SELF_ONLY``; the
PID namespace of its own that each candidate job gets keeps ``sched_setaffinity`` to the job's threads).
Seccomp filters stack: a later filter can only narrow what an earlier one allows, never widen it.
"""

from __future__ import annotations

import errno
import signal
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

# syscalls no job ever needs; each fails with EPERM.
DENY = ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kill", "tkill",
        "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "unshare", "setns", "mount", "umount2", "pivot_root",
        "chroot", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "io_uring_setup",
        "io_uring_enter", "io_uring_register", "userfaultfd", "setsid", "setpgid", "reboot", "kexec_load",
        "init_module", "finit_module", "delete_module", "swapon", "swapoff", "acct", "settimeofday",
        "clock_settime", "sethostname", "setdomainname", "open_by_handle_at", "name_to_handle_at")
# Timers that deliver a signal: a handler could interrupt the harness's code in the job (issue #24). Python,
# PyTorch and libgomp arm none once a job started; a timerfd delivers no signal and reads a clock any
# process can read anyway, so it stays. A runtime that arms them says so (``RuntimeNeeds.signal_timers``).
SIGNAL_TIMERS = ("setitimer", "alarm", "timer_create", "timer_settime")
# Refused to candidate jobs too: the sandbox's user owns the jobs root (unlistable: without Landlock that
# is what keeps jobs apart) and, as root, every system file and the device nodes bound in read-write.
DENY_CHMOD = ("chmod", "fchmod", "fchmodat", "fchmodat2")
_CLONE_THREAD = 0x00010000
# Scheduling, priority and resource limits: on the caller itself only (issue #35: a candidate pinned the best's
# threads to one CPU, and set the fork server's file-size limit to 4 KiB). Each names its target by its first
# argument, 0 being the caller; ``sched_setaffinity`` is not here, since glibc binds a new thread from its
# creator (OpenMP's places): a job's PID namespace of its own keeps it to the job's threads.
SELF_ONLY = ("sched_setscheduler", "sched_setparam", "sched_setattr", "prlimit64", "migrate_pages", "move_pages")
# Also refused outright: what acts on another process by pid or pidfd and no job needs.
DENY_OTHERS = ("process_madvise", "process_mrelease", "kcmp")
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1

# The phase in which the candidate's code runs (``enter_candidate_phase``, after the job's set-up): an allow-list.
# Every syscall not named here fails with EPERM: no file opened, created, linked or renamed, no descriptor
# duplicated or pipe made, no socket, no new process (the job's filter refuses those already, by name), and
# nothing a later kernel adds. What Python, PyTorch's CPU build and libgomp were seen to call in this phase
# (every `make test`'s honest candidates, the correctness job and the timing window's sides, found with the
# filter's default action set to log), plus the calls their code paths reach in rarer cases (a thread's
# start and end, an allocation's growth, a wait with a timeout, a thread's name), each named below.
CANDIDATE_ALLOW = (
    # memory: the allocators (glibc, PyTorch's), thread stacks, the inputs' mapping
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "membarrier", "get_mempolicy",
    # descriptors the job already holds: its channel, its files (JobFiles), its input file, stdout and stderr
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "lseek", "close", "fstat", "newfstatat", "statx", "fstatfs", "ftruncate", "fsync", "fdatasync", "fcntl",
    "poll", "ppoll", "select", "pselect6",
    # reading names (no open): a path's status, a link, the working folder (Python's tracebacks, PyTorch's lookups)
    "stat", "lstat", "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getcwd", "getdents64",
    # threads and their waits (OpenMP's pool, PyTorch's), signals to the job itself (the job's filter keeps them
    # there), scheduling of its own threads (the job's filter and its PID namespace keep them there)
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq", "set_tid_address", "sched_yield",
    "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_getattr",
    "sched_setparam", "sched_setscheduler", "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
    "getpriority", "setpriority", "prlimit64", "getrlimit", "getrusage", "prctl", "arch_prctl", "getcpu",
    "rt_sigprocmask", "rt_sigaction", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
    "sigaltstack", "tgkill", "tkill", "restart_syscall", "exit", "exit_group",
    # clocks, sleeps, timers read (the job compares its signal timers around each call), identities, randomness
    "getitimer", "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "times",
    "getrandom", "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
    "getresuid", "getresgid", "getpgrp", "getpgid", "getsid", "uname", "sysinfo", "capget", "umask",
)
# Per runtime need (``RuntimeNeeds``): threads (clone with CLONE_THREAD; the job's filter refuses any other clone
# and answers clone3 with ENOSYS, which glibc takes to mean clone: clone3 must reach that answer unchanged).
ALLOW_THREADS = ("clone", "clone3")
ALLOW_SIGNAL_TIMERS = ("timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
                       "setitimer", "alarm")
ALLOW_DEVICE_IOCTLS = ("ioctl",)
# fcntl's commands, but a duplicate's (F_DUPFD 0, F_DUPFD_CLOEXEC 1030): flags, locks, pipe sizes, seals.
_F_DUPFD, _F_DUPFD_CLOEXEC = 0, 1030
# Nor an owner for a descriptor's signals (F_SETOWN 8, F_SETSIG 10, F_SETOWN_EX 15; ``FIOSETOWN`` and
# ``SIOCSPGRP`` by ioctl): the kernel would signal the owner, any process of the job's user it can name (where
# jobs share a PID namespace: the fork server, another side), whenever the harness writes to the job's channel.
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902
_FCNTL_COMMANDS = (*(c for c in range(1, 64) if c not in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX)),
                   *(c for c in range(1024, 1040) if c != _F_DUPFD_CLOEXEC))
# Logged instead of refused: for finding what a runtime calls in this phase (a development aid, never on).
_DISCOVER = False


@dataclass(frozen=True)
class RuntimeNeeds:
    """What a backend's runtime needs from the kernel while a job runs, beyond a single-process Python with
    PyTorch. Each field is a need the filter leaves open; the defaults are the CPU's (g++ and OpenMP)."""

    threads: bool = True
    """Creates threads (OpenMP's pool, a device runtime's callback and event threads)."""

    signal_timers: bool = False
    """Arms timers that deliver signals (``timer_create``, ``setitimer``, ``alarm``)."""

    socket_families: tuple[int, ...] = (socket.AF_UNIX,)
    """Socket families it opens (a device runtime talking to its driver's daemon over a Unix socket, or
    netlink); never an internet family for a job on one machine."""

    open_files: int = 256
    """Descriptors it holds open at once (RLIMIT_NOFILE): a device runtime maps many libraries and nodes."""

    opens_files_after_setup: bool = False
    """Opens files once set-up is done (a device runtime loading kernel binaries or libraries on first
    launch): the phase in which candidate code runs must then leave ``open``/``openat`` to it."""

    device_ioctls: bool = False
    """Talks to a device driver through ``ioctl`` on its nodes (``verifier.backends.base.Backend.sandbox_devices``)."""

    sources: tuple[str, ...] = field(default=())
    """Where each value comes from (documentation pages, a measurement): what the next reader checks."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RuntimeNeeds:
        if not data:
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("socket_families", "sources"):
            if key in known:
                known[key] = tuple(known[key])
        return cls(**known)


CPU_NEEDS = RuntimeNeeds(sources=("measured here: Python, PyTorch's CPU build and libgomp under the filter, "
                                  "every `make test`",))


def describe(needs: RuntimeNeeds, enabled: bool = True) -> str:
    """The filter in words, for a verdict's isolation line and ``evokernel doctor``."""
    if not enabled:
        return "no seccomp filter ([verifier] seccomp = false)"
    refused = ["fork", "exec", "ptrace", "signals to other processes", "scheduling or limits of others"]
    if not needs.signal_timers:
        refused.append("signalling timers")
    if tuple(needs.socket_families) == (socket.AF_UNIX,):
        refused.append("non-Unix sockets")
    phase = ("" if needs.opens_files_after_setup else
             "; once set up, an allow-list while the candidate's code runs (no open, descriptor duplicated or "
             "socket)")
    return "seccomp: no " + ", ".join(refused) + phase


def _add(f: Any, seccomp: Any, name: str, *args: Any) -> None:
    """An EPERM rule, skipped where the syscall does not exist on this architecture (or this libseccomp)."""
    try:
        f.add_rule(seccomp.ERRNO(errno.EPERM), name, *args)
    except Exception:
        pass


def lock_down(pid: int, needs: RuntimeNeeds | None = None, *, all_threads: bool = False,
              deny_chmod: bool = False) -> str | None:
    """Install the filter in this process; threads created later inherit it. With ``all_threads`` it also
    goes onto threads that already exist (TSYNC), else the process must be single-threaded. ``pid``: the
    job's own process, the only one its signals may reach. ``deny_chmod``: chmod fails too. Returns None on
    success or the reason the filter is unavailable."""
    needs = needs or CPU_NEEDS
    try:
        import pyseccomp as seccomp
    except Exception as exc:  # library or libseccomp.so missing
        return f"pyseccomp unavailable: {exc}"
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        if all_threads:
            f.set_attr(seccomp.Attr.CTL_TSYNC, 1)
        denied = (*DENY, *(() if needs.signal_timers else SIGNAL_TIMERS), *(DENY_CHMOD if deny_chmod else ()))
        for name in denied:
            try:
                f.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except Exception:  # syscall absent on this architecture
                pass
        # New processes: clone without CLONE_THREAD is a fork; clone3 falls back to clone.
        if needs.threads:
            f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
        else:
            f.add_rule(seccomp.ERRNO(errno.EPERM), "clone")
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        # Sockets: only the runtime's families (Unix alone by default: no network even without bubblewrap).
        families = sorted(set(needs.socket_families))
        if len(families) == 1:
            f.add_rule(seccomp.ERRNO(errno.EPERM), "socket", seccomp.Arg(0, seccomp.NE, families[0]))
        else:
            allowed = set(families)
            for family in range(46):   # AF_MAX on Linux
                if family not in allowed:
                    f.add_rule(seccomp.ERRNO(errno.EPERM), "socket", seccomp.Arg(0, seccomp.EQ, family))
        # A descriptor's signals sent to another process (F_SETOWN and friends, ``_FCNTL_COMMANDS``).
        for cmd in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX):
            _add(f, seccomp, "fcntl", seccomp.Arg(1, seccomp.EQ, cmd))
        for cmd in (_FIOSETOWN, _SIOCSPGRP):
            _add(f, seccomp, "ioctl", seccomp.Arg(1, seccomp.EQ, cmd))
        # Signals to threads of other processes.
        f.add_rule(seccomp.ERRNO(errno.EPERM), "tgkill", seccomp.Arg(0, seccomp.NE, pid))
        f.add_rule(seccomp.ERRNO(errno.EPERM), "rt_sigqueueinfo", seccomp.Arg(0, seccomp.NE, pid))
        f.add_rule(seccomp.ERRNO(errno.EPERM), "rt_tgsigqueueinfo", seccomp.Arg(0, seccomp.NE, pid))
        # Scheduling, priority and limits: the caller's own only.
        for name in SELF_ONLY:
            _add(f, seccomp, name, seccomp.Arg(0, seccomp.NE, 0))
        for name in DENY_OTHERS:
            _add(f, seccomp, name)
        for name, who in (("setpriority", _PRIO_PROCESS), ("ioprio_set", _IOPRIO_WHO_PROCESS)):
            _add(f, seccomp, name, seccomp.Arg(0, seccomp.NE, who))
            _add(f, seccomp, name, seccomp.Arg(1, seccomp.NE, 0))
        f.load()
    except Exception as exc:
        return f"seccomp filter failed: {exc}"
    return None


def candidate_allow(needs: RuntimeNeeds) -> tuple[str, ...]:
    """What the candidate's phase allows for a runtime with ``needs`` (``CANDIDATE_ALLOW`` and what it needs)."""
    return (*CANDIDATE_ALLOW, *(ALLOW_THREADS if needs.threads else ()),
            *(ALLOW_SIGNAL_TIMERS if needs.signal_timers else ()),
            *(ALLOW_DEVICE_IOCTLS if needs.device_ioctls else ()))


def candidate_filter(needs: RuntimeNeeds) -> str | None:
    """Install, on every thread of this process (TSYNC), the allow-list of the phase in which the candidate's
    code runs (``candidate_allow``): anything else fails with EPERM. Stacked on the job's filter, it can only
    narrow it. A runtime that opens files after set-up (``needs.opens_files_after_setup``: a device runtime
    loading kernels, libraries and sockets on first launch) gets no narrower filter than the job's. Returns
    None on success or why it is unavailable."""
    try:
        import pyseccomp as seccomp
    except Exception as exc:
        return f"pyseccomp unavailable: {exc}"
    if needs.opens_files_after_setup:
        return None     # the runtime opens libraries, kernels and sockets on first launch: nothing to narrow
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.LOG if _DISCOVER else seccomp.ERRNO(errno.EPERM))
        f.set_attr(seccomp.Attr.CTL_TSYNC, 1)
        for name in candidate_allow(needs):
            if name == "fcntl":   # every command but a duplicate's
                for cmd in _FCNTL_COMMANDS:
                    _allow(f, seccomp, name, seccomp.Arg(1, seccomp.EQ, cmd))
            else:
                _allow(f, seccomp, name)
        f.load()
    except Exception as exc:
        return f"the candidate phase's seccomp filter failed: {exc}"
    return None


def _allow(f: Any, seccomp: Any, name: str, *args: Any) -> None:
    """An ALLOW rule, skipped where the syscall does not exist on this architecture (or this libseccomp)."""
    try:
        f.add_rule(seccomp.ALLOW, name, *args)
    except Exception:
        pass


# What the sandbox asked of the job it runs in this process (``phase_filter``): the job installs it once its
# set-up is done (``enter_candidate_phase``). Nothing is set outside a sandboxed candidate job.
_phase: dict[str, Any] = {}


def phase_filters(base: int, needs: RuntimeNeeds) -> int:
    """How many seccomp filters every thread of a candidate job has once it entered its phase, for a job forked
    from a fork server with ``base`` filters of its own: the job's filter (``lock_down``), then the phase's marker
    and its allow-list (``enter_candidate_phase``), none of those two where the runtime opens files after set-up.
    The harness compares it with ``/proc/PID/task/*/status`` while the job is stopped at its phase."""
    return base + 1 + (0 if needs.opens_files_after_setup else 2)


def phase_filter(needs: RuntimeNeeds) -> None:
    """Called by the fork server in a candidate job's process before the job runs: the job must enter its phase with
    ``enter_candidate_phase`` before any candidate code runs, and stop there for the harness to look."""
    _phase["needs"] = needs


def enter_candidate_phase() -> str | None:
    """The job's set-up is done and the candidate's code is about to run (its ``model.py``, ``ModelNew()``,
    every call): install the candidate phase's filter if the sandbox asked for one, then stop (``SIGSTOP``) until the
    harness has counted this process's filters from outside and continued it. Returns None, or why the filter could
    not be installed (the job must then not run the candidate: a thread with a filter of its own makes it fail on
    every thread). An empty filter goes on first, the phase's own (which refuses ``seccomp``) after it, so a filter
    that answered ``seccomp`` with success and installed nothing would leave the count short (``phase_filters``)."""
    needs = _phase.pop("needs", None)
    if needs is None:
        return None
    if needs.opens_files_after_setup:
        problem = candidate_filter(needs)
    else:
        problem = _marker() or candidate_filter(needs)    # the phase's own refuses any filter after it
    if problem:
        return problem
    signal.raise_signal(signal.SIGSTOP)    # the harness counts the filters, then continues the job
    return None


def _marker() -> str | None:
    """An empty filter (it allows what the filters under it allow), on every thread: the first of the two the
    phase counts (a filter that swallows ``seccomp`` cannot tell the two calls apart)."""
    try:
        import pyseccomp as seccomp

        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        f.set_attr(seccomp.Attr.CTL_TSYNC, 1)
        f.load()
    except Exception as exc:
        return f"the candidate phase's second filter failed: {exc}"
    return None
