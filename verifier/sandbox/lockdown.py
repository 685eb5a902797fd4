"""Linux lockdown primitives, with no server state: what the fork server (``verifier.sandbox.forkserver``) and a
confined build (``confined_exec``) apply to a process of their own, and the probes of whether each works here.

* a process hardened (``harden_process``: non-dumpable, no new privileges) and stripped of every capability
  (``drop_capabilities``);
* a user and PID namespace of its own (``new_pid_namespace``: its next child is PID 1 of a namespace in which no
  process but its own can be named), and a task count the kernel enforces inside it (``cap_tasks``), each with its
  probe (``pid_namespaces_work``, ``task_cap_works``);
* a Landlock domain (``confine_job``: reads on an allow-list and its own folder, writes in its folder only, no
  TCP, no signals or attaching beyond the domain) and the kernel's Landlock ABI (``landlock_abi``);
* resource limits (``limit``), the death signal (``set_death_signal``), the child subreaper (``set_subreaper``);
* a job's process group stopped, continued or killed from outside (``pause_group``, ``wait_stopped``,
  ``kill_group``) and its thread count read (``threads_of``).

Only ``ctypes``, ``os``, ``resource``, ``signal`` and ``struct``: the fork server imports this before it forks.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import struct
import time

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LL_WRITE_FILE, _LL_READ_FILE = 1 << 1, 1 << 2
_LL_TRUNCATE = 1 << 14
# write_file, read_file, remove_dir, remove_file, make_{char,dir,reg,sock,fifo,block,sym}
_LL_V1 = _LL_WRITE_FILE | _LL_READ_FILE | sum(1 << b for b in range(4, 13))
_LL_REFER = 1 << 13
_LL_NET_TCP = 1 | 2               # bind_tcp, connect_tcp (ABI 4)
_LL_SCOPES = 1 | 2                # abstract Unix sockets, signals (ABI 6)
# Device nodes every process may write (their reads come with /dev).
_STD_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")

_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
        _libc_handle.syscall.restype = ctypes.c_long
    return _libc_handle


def _prctl(option: int, arg: int = 0) -> int:
    z = ctypes.c_ulong(0)
    return int(_libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), z, z, z))


def harden_process() -> None:
    """Non-dumpable (others cannot open its /proc/PID/mem, environ or fd, nor ptrace it without
    CAP_SYS_PTRACE; an exec resets this, so a spawned job calls it again) and no new privileges."""
    make_non_dumpable()
    try:
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    except (OSError, AttributeError):
        pass


def make_non_dumpable() -> None:
    """This process's /proc/PID/{mem,environ,fd} closed to processes without CAP_SYS_PTRACE (and no
    core dumps)."""
    try:
        _prctl(_PR_SET_DUMPABLE, 0)
    except (OSError, AttributeError):
        pass


def drop_capabilities() -> None:
    """Drop every capability: bounding set (needs CAP_SETPCAP, so first), ambient, then effective,
    permitted and inheritable. A no-op where there are none (inside bubblewrap)."""
    try:
        libc = _libc()
        try:
            last = int(open("/proc/sys/kernel/cap_last_cap").read())
        except (OSError, ValueError):
            last = 40
        for cap in range(last + 1):
            _prctl(_PR_CAPBSET_DROP, cap)
        _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
        header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()
        libc.capset(header, data)
    except (OSError, AttributeError):
        pass


_CLONE_NEWUSER, _CLONE_NEWPID = 0x10000000, 0x20000000


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def new_pid_namespace() -> str | None:
    """Move this (single-threaded) process into a user namespace of its own, in which its next child is
    PID 1 of a PID namespace of its own, its uid and gid mapped to themselves; None, or why not. The child
    sees no process but itself: every system call that names a process (``sched_setaffinity``,
    ``prlimit64``, ``setpriority``, ``kill``, ``ptrace``) reaches its own threads and nothing else, the
    fork server and the other jobs included. The user namespace holds no capability its owner lacks
    outside it, and the child drops even those (``drop_capabilities``)."""
    uid, gid = os.geteuid(), os.getegid()
    libc = _libc()
    if libc.unshare(ctypes.c_int(_CLONE_NEWUSER | _CLONE_NEWPID)) != 0:
        return f"unshare failed: {os.strerror(ctypes.get_errno())}"
    # A non-dumpable process's /proc/self files belong to root, not to it: dumpable while it writes its maps
    # (nothing but this process can reach it yet: a job's Landlock domain keeps it from processes outside)
    # Mapping uid 0 needs CAP_SETFCAP, which the server dropped: root's jobs stay unmapped (their ids read
    # as the overflow id inside; files are checked by their real ids all the same).
    _prctl(_PR_SET_DUMPABLE, 1)
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    except OSError:
        pass
    finally:
        make_non_dumpable()
    return None


def pid_namespaces_work() -> tuple[bool, str]:
    """Whether each job can have a PID namespace of its own here (a forked probe tries), and why not."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        problem = new_pid_namespace()
        os.write(w, (problem or "").encode()[:400])
        os._exit(0)
    os.close(w)
    why = os.read(r, 4096).decode(errors="replace")
    os.close(r)
    os.waitpid(pid, 0)
    return not why, why


def cap_tasks(tasks: int) -> None:
    """At most ``tasks`` threads and processes in this job (``RLIMIT_NPROC``). Called in the job's own user
    namespace, after it was made: since Linux 5.14 the kernel counts RLIMIT_NPROC per (user namespace, uid)
    (ucounts), and the level above is held to the limit the namespace's creator had when it made it (the
    server's), so the count is this job's alone, never the server's nor its siblings'. The kernel never
    enforces it for root (uid 0 of the initial namespace): there the server watches
    (``verifier.sandbox.forkserver.WATCH_S``)."""
    limit(resource.RLIMIT_NPROC, tasks)


def task_cap_works() -> bool:
    """Whether ``cap_tasks`` holds here: a forked probe in a user namespace of its own, capped at one task
    (itself), tries to fork."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if new_pid_namespace() is None:
                cap_tasks(1)
                try:
                    child = os.fork()
                except OSError:
                    code = 0          # refused: the kernel counts this job's tasks
                else:
                    if child == 0:
                        os._exit(0)
                    os.waitpid(child, 0)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def threads_of(pid: int) -> int:
    """How many threads ``pid`` has (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def landlock_abi() -> tuple[int, str]:
    """The kernel's Landlock ABI version (0 with the reason when there is none)."""
    try:
        abi = _libc().syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                              ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError) as exc:
        return 0, f"no libc syscall: {exc}"
    if abi < 1:
        err = ctypes.get_errno()
        return 0, f"the kernel has no Landlock ({os.strerror(err) if err else 'unknown'})"
    return int(abi), ""


def confine_job(job_dir: str, writable: list[str], readable: list[str] | None = None) -> str | None:
    """Put this (single-threaded) process in a Landlock domain of its own: read only beneath the
    ``readable`` paths (the sandbox's allow-list: system, interpreter, verifier package, ``/proc``) and
    the job folder, never in the jobs root's other entries; write, create, remove and rename only
    beneath ``job_dir`` and on the ``writable`` paths (device nodes) that do not hold
    the jobs root; no TCP; (ABI 6) no signals or abstract Unix sockets beyond the domain. The domain
    also keeps the process from attaching to (ptrace, /proc/PID/mem) any process outside it. Reading
    folders (listing names) is not restricted. ``readable`` None: read anywhere but in the jobs root.
    Returns None on success or why it is unavailable."""
    abi, why = landlock_abi()
    if not abi:
        return why
    libc = _libc()
    handled = _LL_V1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    file_rights = _LL_WRITE_FILE | _LL_READ_FILE | (_LL_TRUNCATE if abi >= 3 else 0)
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, _LL_NET_TCP, _LL_SCOPES)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, _LL_NET_TCP)
    else:
        attr = struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), buf, ctypes.c_size_t(len(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"

    def allow(path: str, rights: int) -> bool:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not os.path.isdir(path):
                rights &= file_rights
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
            return int(libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                                    ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0))) == 0
        finally:
            os.close(fd)

    def allow_reads_around(top: str, job: str) -> None:
        """Reads beneath every entry of every folder from ``top`` down to the job's, except the next
        one down, so the jobs root's other entries (other jobs) stay unreadable. Entries created later
        in those few folders are unreadable too."""
        parts = job.strip("/").split("/")
        start = len(top.strip("/").split("/")) if top.strip("/") else 0
        for depth in range(start, len(parts)):
            folder = "/" + "/".join(parts[:depth])
            try:
                names = os.listdir(folder)
            except OSError:  # the jobs root itself: not listable, nothing else there to allow
                continue
            for name in names:
                if name != parts[depth]:
                    allow(os.path.join(folder, name), _LL_READ_FILE)

    try:
        job = os.path.realpath(job_dir)
        jobs_root = os.path.dirname(job)
        if not allow(job, handled):
            return f"landlock_add_rule failed for the job folder: {os.strerror(ctypes.get_errno())}"
        for path in (["/"] if readable is None else readable):
            real = os.path.realpath(path)
            if _contains(real, jobs_root):
                allow_reads_around(real, job)
            elif os.path.exists(real):
                allow(real, _LL_READ_FILE)
        for path in [*_STD_DEVICES, *writable]:
            real = os.path.realpath(path)
            if os.path.exists(real) and not _contains(real, jobs_root):
                allow(real, handled)
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
            return f"no_new_privs failed: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return None


def _contains(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def limit(which: int, value: int) -> None:
    """Set the soft and hard limit ``which`` to ``value`` (to the hard limit where it is lower and cannot be
    raised)."""
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            resource.setrlimit(which, (min(value, hard), hard))


def set_death_signal(sig: int) -> None:
    """Have the kernel send ``sig`` to this process when its parent of the moment ends (PR_SET_PDEATHSIG)."""
    _prctl(_PR_SET_PDEATHSIG, int(sig))


def set_subreaper() -> None:
    """Make this process the reaper of its descendants whose parent ended (PR_SET_CHILD_SUBREAPER)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def pause_group(group: int, stop: bool, pid: int, wait_s: float = 0.5) -> bool:
    """Stop (SIGSTOP) or continue (SIGCONT) the job's process group. A stop returns once every thread of
    the job's process ``pid`` is seen stopped in /proc (the signal is asynchronous: a thread running on
    another core stops at its next kernel entry), so nothing of the job runs while the caller times
    another process."""
    try:
        os.killpg(group, signal.SIGSTOP if stop else signal.SIGCONT)
    except OSError:
        return False
    if not stop:
        return True
    return wait_stopped(pid, time.monotonic() + wait_s)


def wait_stopped(pid: int, deadline: float) -> bool:
    """Whether every thread of ``pid`` is (or, polling until ``deadline``, comes to be) stopped or gone."""
    while True:
        try:
            states = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                    states.append(f.read().rsplit(b")", 1)[1].split()[0])
        except OSError:
            return False
        if all(state in (b"T", b"t", b"Z", b"X") for state in states):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.00002)


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` (the process alone where it leads no group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
