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
  which the candidate's code runs (``CANDIDATE_DENY``: no open, create, link, rename, no descriptor
  duplicated, no pipe, no socket), unless the runtime declares it opens files after set-up
  (``RuntimeNeeds.opens_files_after_setup``: a device runtime loading kernels on first launch).

Both filters keep scheduling, priority and resource-limit calls to the caller itself (``SELF_ONLY``; the
PID namespace of its own that each candidate job gets keeps ``sched_setaffinity`` to the job's threads).
Seccomp filters stack: a later filter can only narrow what an earlier one allows, never widen it.
"""

from __future__ import annotations

import errno
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

# The phase in which the candidate's code runs (``enter_candidate_phase``, after the job's set-up): no file
# is opened, created, linked or renamed, no descriptor duplicated or pipe made, no socket made or connected,
# unless the runtime declares it opens files after set-up (then its files and sockets stay open to it).
CANDIDATE_DENY = ("open", "openat", "openat2", "creat", "mknod", "mknodat", "mkdir", "mkdirat", "rmdir", "link",
                  "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "rename", "renameat", "renameat2",
                  "truncate", "dup", "dup2", "dup3", "pipe", "pipe2", "memfd_create", "fsopen", "fsmount",
                  "fspick", "open_tree", "move_mount", "inotify_init", "inotify_init1", "fanotify_init")
CANDIDATE_DENY_SOCKETS = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4")
_F_DUPFD, _F_DUPFD_CLOEXEC = 0, 1030


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
             "; once set up, no open, descriptor duplicated or socket while the candidate's code runs")
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


def candidate_filter(needs: RuntimeNeeds) -> str | None:
    """Install, on every thread of this process, the narrower filter of the phase in which the candidate's
    code runs (``CANDIDATE_DENY``; sockets too unless ``needs.opens_files_after_setup``). Stacked on the
    job's filter, it can only narrow it. Returns None on success or why it is unavailable."""
    try:
        import pyseccomp as seccomp
    except Exception as exc:
        return f"pyseccomp unavailable: {exc}"
    if needs.opens_files_after_setup:
        return None     # the runtime opens libraries, kernels and sockets on first launch: nothing to narrow
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        f.set_attr(seccomp.Attr.CTL_TSYNC, 1)
        for name in (*CANDIDATE_DENY, *CANDIDATE_DENY_SOCKETS):
            _add(f, seccomp, name)
        for cmd in (_F_DUPFD, _F_DUPFD_CLOEXEC):
            _add(f, seccomp, "fcntl", seccomp.Arg(1, seccomp.EQ, cmd))
        f.load()
    except Exception as exc:
        return f"the candidate phase's seccomp filter failed: {exc}"
    return None


# What the sandbox asked of the job it runs in this process (``phase_filter``): the job installs it once its
# set-up is done (``enter_candidate_phase``). Nothing is set outside a sandboxed candidate job.
_phase: dict[str, Any] = {}


def phase_filter(needs: RuntimeNeeds) -> None:
    """Called by the fork server in a candidate job's process before the job runs: the job must narrow its
    filter with ``enter_candidate_phase`` before any candidate code runs."""
    _phase["needs"] = needs


def enter_candidate_phase() -> str | None:
    """The job's set-up is done and the candidate's code is about to run (its ``model.py``, ``ModelNew()``,
    every call): install the candidate phase's filter if the sandbox asked for one. Returns None, or why the
    filter could not be installed (the job must then not run the candidate: a thread the library's load-time
    code started with a filter of its own makes the filter fail on every thread)."""
    needs = _phase.pop("needs", None)
    if needs is None:
        return None
    return candidate_filter(needs)
