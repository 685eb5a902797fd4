"""The fork server: runs inside the sandbox, imports torch once, forks a locked-down child per job.

Protocol (JSON lines): the harness writes ``{"id", "job", "limits"}`` (and ``"env"``, variables the job's
library needs, when it has any) to start a job or
``{"id", "kill": true}`` to kill one, or ``{"id", "pause": true|false}`` to stop (SIGSTOP) or continue
(SIGCONT) one while another process is being timed; the server answers ``{"ready": true, ...}`` once,
then ``{"id", "pid"}`` when a child starts, ``{"id", "paused": bool, "ok": bool}`` once a pause or a
continue has taken effect (every thread of the job stopped, for a pause) and ``{"id", "exit", "signal"}``
when it ends. The server
stays single-threaded (forking a threaded process is unsafe) and exits when its stdin closes. Its loop is
``Server.run``: wait for a command, a child's end or the watch's tick; watch the jobs' disk and tasks; reap the
jobs that ended; answer the commands. The Linux primitives it applies to itself and to each job (hardening,
capabilities, namespaces, Landlock, limits, stopping a group) are ``verifier.sandbox.lockdown``'s.

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

import importlib
import json
import os
import resource
import select
import shutil
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from verifier.sandbox.lockdown import (
    cap_tasks,
    confine_job,
    drop_capabilities,
    harden_process,
    kill_group,
    landlock_abi,
    limit,
    new_pid_namespace,
    pause_group,
    pid_namespaces_work,
    set_death_signal,
    set_subreaper,
    task_cap_works,
    threads_of,
)

if TYPE_CHECKING:  # the server imports little before it forks; these are for annotations only
    from collections.abc import Callable
    from pathlib import Path


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
    set_death_signal(signal.SIGKILL)
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
    limit(resource.RLIMIT_CORE, 0)
    if limits.get("cpu_seconds") is not None:
        limit(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    limit(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    limit(resource.RLIMIT_NOFILE, int(limits.get("open_files", 256)))
    if limits.get("address_space_mb"):
        limit(resource.RLIMIT_AS, int(limits["address_space_mb"]) << 20)
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


_PROBE_BYTES = 4096
_probe: list[int] = []   # the page's address (never unmapped): every job forked from the server has its copy


def probe_page(address: int = 0, token: str = "") -> dict[str, Any] | None:
    """One page of this process's memory holding a random token, made before any job runs (the server's; a spawned
    job makes it again at the server's address, ``address``, with its ``token``, before the job's code runs): every
    job has it at the same address from its start, before any candidate code. The harness reads it there to see that
    it can read the job's memory (``verifier.window.harness.Side.probe_memory``), where how the jobs were started says
    it should (``verifier.sandbox.procs.memory_access``). Returns ``{"address", "token"}``, or None where it could not
    be made."""
    import ctypes
    import mmap

    token = token or os.urandom(16).hex()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (0x100000 if address else 0)   # MAP_FIXED_NOREPLACE
    at = libc.mmap(ctypes.c_void_p(address or None), _PROBE_BYTES, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if at in (None, ctypes.c_void_p(-1).value) or (address and at != address):
        return None
    ctypes.memmove(at, bytes.fromhex(token), 16)
    _probe.append(at)
    return {"address": int(at), "token": token}


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


class Server:
    """The fork server's state and loop (see the module's docstring): the jobs it started, by their process,
    what the watch holds them to, and the protocol's two ends (stdin, stdout)."""

    def __init__(self, config: dict[str, Any]):
        self.entry: str = config["entry"]
        self.filter_config = {"seccomp": config.get("seccomp", True), "needs": config.get("needs")}
        self.probe = probe_page()   # before any job: every job has it from its start (verifier.window.harness reads it)
        self.spawn = ({"job_preload": config.get("job_preload", []), "entry": self.entry, **self.filter_config,
                       "probe": self.probe} if config.get("spawn") else None)
        self.landlock, self.landlock_error = landlock_abi()
        self.confine = ({"writable": config.get("writable", []), "readable": config.get("readable"),
                         "landlock": self.landlock} if config.get("confine") else None)
        # candidates only: each job in a PID namespace of its own, where the kernel lets this user make one
        self.pid_namespace, self.pid_namespace_error = (pid_namespaces_work() if config.get("confine")
                                                        else (False, ""))
        # where the kernel does not count a job's tasks (root's; no namespace of its own), the server counts them
        self.watch_tasks = bool(config.get("confine")) and not (self.pid_namespace and task_cap_works())
        self.children: dict[int, int] = {}    # the job's process -> job id
        self.task_caps: dict[int, int] = {}   # the job's process -> its tasks limit (watched)
        self.over: dict[int, int] = {}        # the job's process -> the threads it had when the watch killed it
        self.disks: dict[int, tuple[str, int]] = {}   # the job's process -> its folder and its disk limit in bytes
        self.over_disk: dict[int, int] = {}   # the job's process -> the bytes beneath its folder when stopped
        self.groups: dict[int, int] = {}      # the job's process -> its process group (its first process's session)
        self.helpers: set[int] = set()        # first processes of jobs in PID namespaces of their own: exit at once
        self.jobs_fs = os.getcwd()            # the jobs root (the server's working folder)
        self.measured_free = free_bytes(self.jobs_fs)
        self.buffer = b""
        self.stdin_open = True
        self.owner = os.getppid()   # the verifier's process (bubblewrap's, under bubblewrap: it dies with its parent)
        self.wake_r, self.wake_w = os.pipe()

    def ready(self) -> dict[str, Any]:
        """The first line the server sends: its pid and threads, and which layers work here."""
        try:
            import pyseccomp  # noqa: F401

            seccomp_ok, seccomp_error = True, ""
        except Exception as exc:
            seccomp_ok, seccomp_error = False, str(exc)
        if not self.filter_config["seccomp"]:
            seccomp_ok, seccomp_error = False, "off by configuration ([verifier] seccomp = false)"
        return {"ready": True, "pid": os.getpid(), "threads": len(os.listdir("/proc/self/task")),
                "seccomp": seccomp_ok, "seccomp_error": seccomp_error, "landlock": self.landlock,
                "landlock_error": self.landlock_error, "pid_namespace": self.pid_namespace,
                "pid_namespace_error": self.pid_namespace_error, "watch_tasks": self.watch_tasks, "probe": self.probe}

    def run(self) -> int:
        """The loop, until stdin is closed and every job ended: wait, watch, reap, answer."""
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        _send(self.ready())
        set_subreaper()   # a job whose first process exited is the server's to reap
        while self.stdin_open or self.children:
            readable = self._wait()
            self._watch()
            if self.stdin_open and os.getppid() != self.owner:
                # The verifier died, yet its end of stdin may live on in a process forked from it: end as at EOF
                readable = [r for r in readable if r != 0]
                self._close_input()
            if self.wake_r in readable:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
            self._reap()
            if 0 in readable:
                self._read_commands()
        return 0

    def _wait(self) -> list[int]:
        """What is readable: a command, or a child's end (the SIGCHLD wake-up pipe), within the watch's tick."""
        watching = self.watch_tasks and bool(self.task_caps)
        readable, _, _ = select.select([0, self.wake_r] if self.stdin_open else [self.wake_r], [], [],
                                       WATCH_S if watching or self.disks else 1.0)
        return list(readable)

    def _watch(self) -> None:
        """Every running job's folder measured when the jobs' filesystem shrank by ``DISK_CHECK_MB``, and (where
        the kernel does not count them) its threads counted: a job over a limit is killed."""
        if self.disks:
            free = free_bytes(self.jobs_fs)
            if self.measured_free - free >= DISK_CHECK_MB << 20:
                for pid in list(self.disks):
                    self._measure_disk(pid, kill=True)
                free = free_bytes(self.jobs_fs)
            self.measured_free = free
        if self.watch_tasks and self.task_caps:
            for pid, cap in self.task_caps.items():
                n = threads_of(pid)
                if n > cap and pid not in self.over:
                    self.over[pid] = n
                    kill_group(self.groups.get(pid, pid))

    def _measure_disk(self, pid: int, kill: bool) -> None:
        folder, cap = self.disks[pid]
        used = folder_bytes(folder)
        if used > cap and pid not in self.over_disk:
            self.over_disk[pid] = used
            if kill:
                kill_group(self.groups.get(pid, pid))

    def _reap(self) -> None:
        """Every job that ended, reported (its exit or signal, and a limit the watch held it to)."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in self.helpers:
                self.helpers.discard(pid)
                continue
            job_id = self.children.pop(pid, None)
            group = self.groups.pop(pid, None)
            self.task_caps.pop(pid, None)
            if pid in self.disks:
                self._measure_disk(pid, kill=False)   # what it left (a job may write fast and end between checks)
                self.disks.pop(pid, None)
            if group is not None:
                kill_group(group)                     # what is left of the job: its namespace's first process
            ended: dict[str, Any] = {"id": job_id, "exit": None, "signal": os.WTERMSIG(status)}
            if not os.WIFSIGNALED(status):
                ended.update({"exit": os.WEXITSTATUS(status), "signal": None})
            if pid in self.over:
                ended["tasks"] = self.over.pop(pid)
            if pid in self.over_disk:
                # rounded up: a job just over a cap of 8 MiB reads 9, not 8
                ended["disk_mb"] = -(-self.over_disk.pop(pid) // (1 << 20))
            _send(ended)

    def _close_input(self) -> None:
        """The verifier is gone: no more commands, and every job killed."""
        self.stdin_open = False
        for pid in self.children:
            kill_group(self.groups.get(pid, pid))

    def _read_commands(self) -> None:
        chunk = os.read(0, 65536)
        if not chunk:
            self._close_input()
            return
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            self._command(msg)

    def _command(self, msg: dict[str, Any]) -> None:
        """One command: kill a job, pause or continue it, or start one."""
        if msg.get("kill"):
            for pid, job_id in self.children.items():
                if job_id == msg["id"]:
                    kill_group(self.groups.get(pid, pid))
            return
        if "pause" in msg:
            pids = [pid for pid, job_id in self.children.items() if job_id == msg["id"]]
            ok = bool(pids) and all(pause_group(self.groups.get(pid, pid), bool(msg["pause"]), pid) for pid in pids)
            _send({"id": msg["id"], "paused": bool(msg["pause"]), "ok": ok})
            return
        self._start(msg)

    def _start(self, msg: dict[str, Any]) -> None:
        """Fork the job's child (``_child``), read which process is the job's, and answer with its pid."""
        report_r, report_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(report_r)
            os.close(report_w)
            _send({"id": msg["id"], "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            code = 70
            try:
                os.close(report_r)
                code = _child(msg["job"], msg["limits"], [self.wake_r, self.wake_w], self.spawn, self.confine,
                              entry=self.entry, env=msg.get("env"), filter_config=self.filter_config,
                              report=report_w, pid_namespace=self.pid_namespace)
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
            self.helpers.update((pid, first))
            started["pid"] = job_pid
            self.groups[job_pid] = pid
        elif answer.startswith("error"):
            started["namespace_error"] = answer[6:]
        self.children[started["pid"]] = msg["id"]
        limits = msg["limits"]
        if self.watch_tasks and limits.get("tasks"):
            self.task_caps[started["pid"]] = int(limits["tasks"])
        if self.confine is not None and limits.get("disk_mb"):
            self.disks[started["pid"]] = (msg["job"], int(limits["disk_mb"]) << 20)
            self.measured_free = free_bytes(self.jobs_fs)
        _send(started)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--job":
        return _spawned(sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
    if len(sys.argv) > 3 and sys.argv[1] == "--confine":
        return confined_exec(json.loads(sys.argv[2]), sys.argv[3:])
    harden_process()
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if config.get("confine"):
        drop_capabilities()  # candidates only: a trusted reference job may need the caller's rights
    server = Server(config)
    for name in config.get("preload", []):
        importlib.import_module(name)
    return server.run()


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


if __name__ == "__main__":
    sys.exit(main())
