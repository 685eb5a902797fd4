"""The fork server: runs inside the sandbox, imports torch once, forks a locked-down child per job.

Protocol (JSON lines): the harness writes ``{"id", "job", "limits"}`` (and ``"env"``, variables the job's
library needs, when it has any) to start a job or
``{"id", "kill": true}`` to kill one, or ``{"id", "pause": true|false}`` to stop (SIGSTOP) or continue
(SIGCONT) one while another process is being timed; the server answers ``{"ready": true, ...}`` once,
then ``{"id", "pid"}`` when a child starts, ``{"id", "paused": bool, "ok": bool}`` once a pause or a
continue has taken effect (every thread of the job stopped, for a pause) and ``{"id", "exit", "signal"}``
when it ends. The server
stays single-threaded (forking a threaded process is unsafe) and exits when its stdin closes.

Run as ``python -m verifier.sandbox.forkserver '{"entry": "verifier.worker:run_job", "preload": ["torch",
"verifier.worker"]}'``: ``entry`` names the job code each child runs (``module:function``, called with
the job folder). The server resolves it by name and never imports job code itself, so the sandbox sits
below the jobs it runs.

With ``"spawn": true`` (device backends) the server imports nothing heavy and each forked child,
after taking its session, limits and output files, execs a fresh interpreter
(``python -m verifier.sandbox.forkserver --job JOB_DIR``) that imports torch (and ``job_preload``, e.g.
torch_npu), installs the seccomp filter on all its threads, then runs the job. A device runtime is
therefore never inherited through fork, and a device error dies with its own process.

Across candidates: the server and every job are non-dumpable (``PR_SET_DUMPABLE`` 0: no job can open
the server's or another job's ``/proc/PID/mem``, ``environ`` or ``fd``) and set ``no_new_privs``. With
``"confine"`` each job's first process moves into a user namespace of its own and forks the job as
PID 2 of a PID namespace of its own (``new_pid_namespace``; PID 1 only waits), then exits; the server,
a child subreaper, adopts the job and answers ``{"id", "pid"}`` with the job's pid, and kills what is
left of its process group when it ends. No system call of the job can name the server or another job.
With ``"confine": true`` (candidate jobs) the server drops every capability, and each child enters
its own Landlock domain before any candidate code runs (where the kernel has Landlock): it may read only
the paths named in ``"readable"`` (the sandbox's allow-list) and its job folder, write only in
its job folder (plus the device nodes named in ``"writable"``; never the shared ``/tmp``), read nothing
in its siblings' folders, and attach to no process outside its domain; and its seccomp filter refuses
``chmod``, so the unlistable jobs root (see ``verifier.sandbox``) stays unlistable.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import select
import shutil
import signal
import struct
import sys
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the server imports little before it forks; these are for annotations only
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

# ----------------------------------------------------------------------------- process hardening

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


WATCH_S = 0.05
"""How often, while confined jobs run, the server checks the free space of the jobs' filesystem (one
``statvfs``; each running job's folder is measured only when that space shrank by ``DISK_CHECK_MB`` since the
last measure, and once more when the job ends) and, where the kernel does not count a job's tasks
(``task_cap_works``: root's, whose ``RLIMIT_NPROC`` it never enforces), each job's threads. A job over its
``disk_mb`` or ``tasks`` limit is killed: a bound by the rate of writes or thread starts, not a wall."""
DISK_CHECK_MB = 4


def folder_bytes(folder: str) -> int:
    """What the files beneath ``folder`` take on their filesystem (allocated blocks; links not followed)."""
    total = 0
    stack = [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def free_bytes(folder: str) -> int:
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def cap_tasks(tasks: int) -> None:
    """At most ``tasks`` threads and processes in this job (``RLIMIT_NPROC``). Called in the job's own user
    namespace, after it was made: since Linux 5.14 the kernel counts RLIMIT_NPROC per (user namespace, uid)
    (ucounts), and the level above is held to the limit the namespace's creator had when it made it (the
    server's), so the count is this job's alone, never the server's nor its siblings'. The kernel never
    enforces it for root (uid 0 of the initial namespace): there the server watches (``WATCH_S``)."""
    _limit(resource.RLIMIT_NPROC, tasks)


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


def _limit(which: int, value: int) -> None:
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            resource.setrlimit(which, (min(value, hard), hard))


_PROBE_BYTES = 4096
_probe: list[int] = []   # the page's address (never unmapped): every job forked from the server has its copy


def probe_page(address: int = 0, token: str = "") -> dict[str, Any] | None:
    """One page of this process's memory holding a random token, made before any job runs (the server's; a spawned
    job makes it again at the server's address, ``address``, with its ``token``, before the job's code runs): every
    job has it at the same address from its start, before any candidate code. The harness reads it there to see that
    it can read the job's memory (``verifier.window.harness.Side.probe_memory``), where how the jobs were started says
    it should. Returns ``{"address", "token"}``, or None where it could not be made."""
    import mmap

    token = token or os.urandom(16).hex()
    libc = _libc()
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (0x100000 if address else 0)   # MAP_FIXED_NOREPLACE
    at = libc.mmap(ctypes.c_void_p(address or None), _PROBE_BYTES, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if at in (None, ctypes.c_void_p(-1).value) or (address and at != address):
        return None
    ctypes.memmove(at, bytes.fromhex(token), 16)
    _probe.append(at)
    return {"address": int(at), "token": token}


def _lock_down(config: dict[str, Any], *, all_threads: bool, deny_chmod: bool) -> None:
    """The job's seccomp filter (``verifier.sandbox.seccomp``), unless ``[verifier] seccomp`` turned it off; a
    candidate's job (``deny_chmod``) is also asked to narrow it once its set-up is done (``phase_filter``)."""
    if not config.get("seccomp", True):
        return
    from verifier.sandbox.seccomp import RuntimeNeeds, lock_down, phase_filter

    needs = RuntimeNeeds.from_dict(config.get("needs"))
    problem = lock_down(os.getpid(), needs, all_threads=all_threads, deny_chmod=deny_chmod)
    if problem:
        print(f"evokernel sandbox: {problem}", file=sys.stderr)
    elif deny_chmod:
        phase_filter(needs)


def _placeholder() -> list[str]:
    """What runs as PID 1 of a job's PID namespace: a process that only waits (the job is PID 2, so signals
    it sends itself, ``abort()``'s SIGABRT among them, act as anywhere else: a namespace's PID 1 ignores
    those it has no handler for)."""
    sleep = shutil.which("sleep", path="/usr/bin:/bin")
    return [sleep, "infinity"] if sleep else [sys.executable, "-S", "-c", "import signal\nwhile 1: signal.pause()"]


def parent_pid() -> int:
    """This process's parent as /proc names it (``os.getppid()`` reads 0 in a PID namespace of its own whose
    parent is outside it; /proc, mounted by the server's namespace, names it there)."""
    with open("/proc/self/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def die_with(server: int, wait_s: float = 5.0) -> bool:
    """SIGKILL this process when ``server``, the fork server, dies (PR_SET_PDEATHSIG); whether it is set with
    ``server`` still its parent. A job's process in a PID namespace of its own waits first to be adopted by
    the server (the process that forked it exits at once: the death signal is armed for the parent of the
    moment, and would fire at that exit). The parent is read again after the signal is armed: a server
    that died in between left this process with another parent and no signal to come."""
    deadline = time.monotonic() + wait_s
    while parent_pid() != server:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    return parent_pid() == server


def _job_process(report: int, pid_namespace: bool, server: int) -> None:
    """Make the job's process. With ``pid_namespace`` this process (the job's session leader) moves into a
    user namespace of its own whose next child is PID 1 of a PID namespace of its own, starts a process that
    only waits there (``_placeholder``), forks the job as PID 2, reports both to the server on ``report``
    and exits at once: the server, a child subreaper, adopts and reaps them (the placeholder is killed with
    the job's process group when the job ends). Returns in the job's process only. Without, this process is
    the job (0 is reported).

    Both the placeholder and the job die with the server (``die_with``): the server killed alone must not
    leave a job running (a namespace's PID 1 dying takes every process of the namespace with it)."""
    if not pid_namespace:
        os.write(report, b"0\n")
        os.close(report)
        if not die_with(server):
            os._exit(72)
        return
    problem = new_pid_namespace()
    if problem:
        os.write(report, f"error {problem}\n".encode())
        os._exit(71)
    argv = _placeholder()
    try:
        first = os.fork()
    except OSError as exc:
        os.write(report, f"error could not start the namespace's first process: {exc}\n".encode())
        os._exit(71)
    if first == 0:
        try:
            os.close(report)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            if die_with(server):         # the death signal stays armed across the exec
                os.execve(argv[0], argv, {})
        finally:
            os._exit(72)
    pid = os.fork()
    if pid == 0:
        os.close(report)
        if not die_with(server):
            os._exit(72)
        return
    os.write(report, f"{pid} {first}\n".encode())
    os._exit(0)


def _child(job_dir: str, limits: dict[str, Any], fds: list[int], spawn: dict[str, Any] | None = None,
           confine: dict[str, Any] | None = None, *, entry: str, env: dict[str, str] | None = None,
           filter_config: dict[str, Any] | None = None, report: int = -1, pid_namespace: bool = False) -> int:
    server = parent_pid()
    os.setsid()
    if int(limits.get("nice", 0)) > 0:
        os.nice(min(int(limits["nice"]), 19))  # not timed: yields to what is (verifier.priority)
    harden_process()
    if report >= 0:
        _job_process(report, pid_namespace, server)
    if pid_namespace:
        drop_capabilities()                # every capability the job's own user namespace gave it
        if limits.get("tasks"):
            cap_tasks(int(limits["tasks"]))   # counted in the job's own user namespace: its tasks alone
    for fd in fds:
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    out = os.open(os.path.join(job_dir, "stdout.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(os.path.join(job_dir, "stderr.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (null, out, err):
        os.close(fd)
    os.chdir(job_dir)
    os.environ["HOME"] = os.environ["TMPDIR"] = job_dir
    # what the call of this job's library needs (a custom op's private vendor), as the harness filtered it;
    # set before the exec of a spawned job, so its loader and runtime see it from the start
    for key, value in (env or {}).items():
        if isinstance(key, str) and isinstance(value, str) and key not in ("HOME", "TMPDIR"):
            os.environ[key] = value
    _limit(resource.RLIMIT_CORE, 0)
    if limits.get("cpu_seconds") is not None:
        _limit(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    _limit(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    _limit(resource.RLIMIT_NOFILE, int(limits.get("open_files", 256)))
    if limits.get("address_space_mb"):
        _limit(resource.RLIMIT_AS, int(limits["address_space_mb"]) << 20)
    if confine is not None:
        problem = confine_job(job_dir, confine.get("writable", []), confine.get("readable"))
        if problem and confine.get("landlock"):  # the server found Landlock, yet it failed here
            print(f"evokernel sandbox: {problem}", file=sys.stderr)
    deny_chmod = confine is not None
    if spawn is not None:
        # A fresh interpreter: nothing of this process (or a device runtime) is inherited but the
        # session, limits, working folder (the job folder: not on the command line, where any process
        # could read it), output files and Landlock domain set above.
        argv = [sys.executable, "-m", "verifier.sandbox.forkserver", "--job", ".",
                json.dumps({**spawn, "deny_chmod": deny_chmod})]
        os.execv(sys.executable, argv)
    _lock_down(filter_config or {}, all_threads=False, deny_chmod=deny_chmod)
    from pathlib import Path

    return _entry(entry)(Path(job_dir))


def _entry(name: str) -> Callable[[Path], int]:
    """The job entry point the config names (``module:function``, called with the job folder and
    returning the job's exit code), imported now."""
    module, _, function = name.partition(":")
    run: Callable[[Path], int] = getattr(importlib.import_module(module), function)
    return run


def _send(msg: dict[str, Any]) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def _spawned(job_dir: str, config: dict[str, Any]) -> int:
    """A spawned job's process: trusted imports, the seccomp filter on every thread, then the job."""
    harden_process()  # the exec made this process dumpable again
    if job_dir == ".":
        job_dir = os.getcwd()
    probe = config.get("probe") or {}
    if probe:   # the server's probe page, at its address, before anything of the job runs (no fork to inherit it)
        probe_page(int(probe["address"]), str(probe["token"]))
    run_job = _entry(config["entry"])
    for name in config.get("job_preload", []):
        importlib.import_module(name)
    _lock_down(config, all_threads=True, deny_chmod=bool(config.get("deny_chmod")))
    from pathlib import Path

    return run_job(Path(job_dir))


def confined_exec(config: dict[str, Any], argv: list[str]) -> int:
    """Without bubblewrap, a build command runs through here: its own Landlock domain (reads only on the
    allow-list and in its folder, writes only in its folder), then exec. Exits 126 with the reason when
    the domain cannot be set up, so no build runs unconfined by surprise."""
    harden_process()
    problem = confine_job(config["folder"], [], config.get("readable"))
    if problem:
        print(f"evokernel sandbox: {problem}", file=sys.stderr)
        return 126
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"could not start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    return 127  # not reached


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--job":
        return _spawned(sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
    if len(sys.argv) > 3 and sys.argv[1] == "--confine":
        return confined_exec(json.loads(sys.argv[2]), sys.argv[3:])
    harden_process()
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if config.get("confine"):
        drop_capabilities()  # candidates only: a trusted reference job may need the caller's rights
    entry = config["entry"]
    filter_config = {"seccomp": config.get("seccomp", True), "needs": config.get("needs")}
    probe = probe_page()    # before any job: every job has it from its start (verifier.window.harness reads it)
    spawn = ({"job_preload": config.get("job_preload", []), "entry": entry, **filter_config, "probe": probe}
             if config.get("spawn") else None)
    landlock, landlock_error = landlock_abi()
    confine = ({"writable": config.get("writable", []), "readable": config.get("readable"), "landlock": landlock}
               if config.get("confine") else None)
    # candidates only: each job in a PID namespace of its own, where the kernel lets this user make one
    pid_namespace, pid_namespace_error = pid_namespaces_work() if config.get("confine") else (False, "")
    # where the kernel does not count a job's tasks (root's; no namespace of its own), the server counts them
    watch_tasks = bool(config.get("confine")) and not (pid_namespace and task_cap_works())
    for name in config.get("preload", []):
        importlib.import_module(name)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    try:
        import pyseccomp  # noqa: F401

        seccomp_ok, seccomp_error = True, ""
    except Exception as exc:
        seccomp_ok, seccomp_error = False, str(exc)
    if not filter_config["seccomp"]:
        seccomp_ok, seccomp_error = False, "off by configuration ([verifier] seccomp = false)"
    _send({"ready": True, "pid": os.getpid(), "threads": len(os.listdir("/proc/self/task")),
           "seccomp": seccomp_ok, "seccomp_error": seccomp_error, "landlock": landlock,
           "landlock_error": landlock_error, "pid_namespace": pid_namespace,
           "pid_namespace_error": pid_namespace_error, "watch_tasks": watch_tasks, "probe": probe})
    children: dict[int, int] = {}  # the job's process -> job id
    task_caps: dict[int, int] = {}  # the job's process -> its tasks limit (watched)
    over: dict[int, int] = {}       # the job's process -> the threads it had when the watch killed it
    disks: dict[int, tuple[str, int]] = {}  # the job's process -> its folder and its disk limit in bytes
    over_disk: dict[int, int] = {}  # the job's process -> the bytes beneath its folder when the watch stopped it
    jobs_fs = os.getcwd()           # the jobs root (the server's working folder)
    measured_free = free_bytes(jobs_fs)

    def measure_disk(pid: int, kill: bool) -> None:
        folder, cap = disks[pid]
        used = folder_bytes(folder)
        if used > cap and pid not in over_disk:
            over_disk[pid] = used
            if kill:
                _kill(groups.get(pid, pid))
    groups: dict[int, int] = {}    # the job's process -> its process group (the session its first process made)
    helpers: set[int] = set()      # first processes of jobs in PID namespaces of their own: they exit at once
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # a job whose first process exited is the server's to reap
    buffer = b""
    stdin_open = True
    owner = os.getppid()  # the verifier's process (bubblewrap's, under bubblewrap: it dies with its parent)
    while stdin_open or children:
        watching = watch_tasks and bool(task_caps)
        readable, _, _ = select.select([0, wake_r] if stdin_open else [wake_r], [], [],
                                       WATCH_S if watching or disks else 1.0)
        if disks:
            free = free_bytes(jobs_fs)
            if measured_free - free >= DISK_CHECK_MB << 20:
                for pid in list(disks):
                    measure_disk(pid, kill=True)
                free = free_bytes(jobs_fs)
            measured_free = free
        if watching:
            for pid, cap in task_caps.items():
                n = threads_of(pid)
                if n > cap and pid not in over:
                    over[pid] = n
                    _kill(groups.get(pid, pid))
        if stdin_open and os.getppid() != owner:
            # The verifier died, yet its end of stdin may live on in a process forked from it: end as at EOF
            readable, stdin_open = [r for r in readable if r != 0], False
            for pid in children:
                _kill(groups.get(pid, pid))
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in helpers:
                helpers.discard(pid)
                continue
            job_id = children.pop(pid, None)
            group = groups.pop(pid, None)
            task_caps.pop(pid, None)
            if pid in disks:
                measure_disk(pid, kill=False)  # what it left (a job may write fast and end between two checks)
                disks.pop(pid, None)
            if group is not None:
                _kill(group)                   # what is left of the job: its namespace's first process
            ended: dict[str, Any] = {"id": job_id, "exit": None, "signal": os.WTERMSIG(status)}
            if not os.WIFSIGNALED(status):
                ended.update({"exit": os.WEXITSTATUS(status), "signal": None})
            if pid in over:
                ended["tasks"] = over.pop(pid)
            if pid in over_disk:
                # rounded up: a job just over a cap of 8 MiB reads 9, not 8
                ended["disk_mb"] = -(-over_disk.pop(pid) // (1 << 20))
            _send(ended)
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            stdin_open = False
            for pid in children:
                _kill(groups.get(pid, pid))
            continue
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("kill"):
                for pid, job_id in children.items():
                    if job_id == msg["id"]:
                        _kill(groups.get(pid, pid))
                continue
            if "pause" in msg:
                pids = [pid for pid, job_id in children.items() if job_id == msg["id"]]
                ok = bool(pids) and all(_pause(groups.get(pid, pid), bool(msg["pause"]), pid) for pid in pids)
                _send({"id": msg["id"], "paused": bool(msg["pause"]), "ok": ok})
                continue
            report_r, report_w = os.pipe()
            try:
                pid = os.fork()
            except OSError as exc:
                os.close(report_r)
                os.close(report_w)
                _send({"id": msg["id"], "error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                code = 70
                try:
                    os.close(report_r)
                    code = _child(msg["job"], msg["limits"], [wake_r, wake_w], spawn, confine, entry=entry,
                                  env=msg.get("env"), filter_config=filter_config, report=report_w,
                                  pid_namespace=pid_namespace)
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(code)
            os.close(report_w)
            answer = _read_report(report_r)
            os.close(report_r)
            started: dict[str, Any] = {"id": msg["id"], "pid": pid}
            if answer[:1].isdigit() and int(answer.split()[0]):   # the job's own process, in a namespace of its own
                job_pid, first = (int(v) for v in answer.split())
                helpers.update((pid, first))
                started["pid"] = job_pid
                groups[job_pid] = pid
            elif answer.startswith("error"):
                started["namespace_error"] = answer[6:]
            children[started["pid"]] = msg["id"]
            if watch_tasks and msg["limits"].get("tasks"):
                task_caps[started["pid"]] = int(msg["limits"]["tasks"])
            if confine is not None and msg["limits"].get("disk_mb"):
                disks[started["pid"]] = (msg["job"], int(msg["limits"]["disk_mb"]) << 20)
                measured_free = free_bytes(jobs_fs)
            _send(started)
    return 0


def _read_report(fd: int) -> str:
    """The line a new job's process reports (its job's pid, 0, or ``error ...``); "" if it died first."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 512)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _pause(group: int, stop: bool, pid: int, wait_s: float = 0.5) -> bool:
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


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
