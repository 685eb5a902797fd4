"""The harness's side of the sandbox's fork server (verifier.sandbox.forkserver): starting it inside the
sandbox (verifier.sandbox), sending it jobs with their limits, and turning how each job ended (a
result, a timeout, a crash, a signal) into a ``JobExit``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier import priority
from verifier.errors import SandboxError
from verifier.processes import kill_group
from verifier.sandbox import procs
from verifier.sandbox.isolation import (
    bwrap_argv,
    bwrap_hardening,
    bwrap_status,
    can_join_groups,
    device_groups,
    device_refusal,
    sandbox_view,
)
from verifier.sandbox.seccomp import CPU_NEEDS, RuntimeNeeds, describe, phase_filters

# ----------------------------------------------------------------------------- fork server client

CLOSE_WAIT_S = 0.3
"""How long ``ForkServer.close`` lets the server end its jobs itself before it ends the server and them."""


JOB_TASKS = 64 + 16 * (os.cpu_count() or 1)
"""How many threads and processes one job may have at once (its ``tasks`` limit): OpenMP's and torch's
pools (one thread per CPU each), a device runtime's own threads, with a wide margin. A job starting more
fails to start them (or, where the kernel does not count a job's tasks, is killed): the fork server,
the harness and the jobs beside it keep the machine's pids (``/proc/sys/kernel/pid_max``, shared by
every process of the machine)."""

JOB_DISK_FILES = 3
"""A job's writable space (its ``disk_mb`` limit, everything under its folder together) in file-size limits:
its outputs, their temporary copy while they are replaced, and what the harness put there, with room to
spare. Many files each under the file-size limit otherwise fill the jobs' filesystem (``/dev/shm``: memory)."""
JOB_DISK_INPUTS_MB = 1024
"""Added to a job's writable space for what the harness itself puts in its folder: a timing side's inputs
(``inputs.bin``: at most 2^26 elements in all, 512 MiB at 8 bytes each) and the library."""


@dataclass
class JobLimits:
    """Resource limits of one sandboxed job."""

    cpu_seconds: int | None   # None: no CPU-time limit, the wall-clock timeout alone (a sizing probe, whose
    #                           clock is the CPU time of a call: an RLIMIT_CPU makes that clock move in ticks)
    address_space_mb: int | None
    file_size_mb: int
    open_files: int = 256
    tasks: int = JOB_TASKS  # threads and processes at once (JOB_TASKS)
    disk_mb: int = 0        # everything under the job's folder; 0: JOB_DISK_FILES file-size limits + JOB_DISK_INPUTS_MB
    nice: int = 0           # nice steps below the fork server (which runs at normal priority): what is
    #                         not timed (correctness trials, reference outputs) yields to what is

    def __post_init__(self) -> None:
        self.disk_mb = self.disk_mb or JOB_DISK_FILES * self.file_size_mb + JOB_DISK_INPUTS_MB

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (``/proc/vmstat``), or None."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


@dataclass
class JobExit:
    """How a sandboxed job ended."""

    status: str            # "exited" | "signaled" | "timeout" | "lost"
    code: int | None = None
    signal: int | None = None
    seconds: float = 0.0
    detail: str = ""
    tampered: str = ""      # what of the fork server changed while the job ran (its limits): the job's failure
    machine_oom: bool = False   # killed (SIGKILL) while the system's out-of-memory killer killed something
    over_tasks: int = 0     # killed by the fork server's watch: this many threads, over its ``tasks`` limit
    over_disk_mb: int = 0   # stopped by the fork server's watch: this much under its folder, over ``disk_mb``
    closed: bool = False        # ended by its sandbox worker's close (the verifier closing, a worker taken down)

    @property
    def tool(self) -> str:
        """Why this ending is the tool's and not the job's own (the sandbox worker lost or closed under it,
        the machine out of memory), or "" when it is the job's."""
        if self.status == "lost":
            return f"the sandbox worker was lost ({self.detail})"
        if self.closed:
            return "the sandbox worker was closed while the job ran (the verifier closing, or the worker taken down)"
        if self.machine_oom:
            return ("the machine ran out of memory and the system killed the job (not its own limit: its "
                    "address-space limit fails an allocation instead)")
        return ""

    def describe(self) -> str:
        if self.closed:
            return "was stopped: its sandbox worker was closed (the verifier closing, or the worker taken down)"
        if self.machine_oom:
            return "was killed by the system: the machine ran out of memory"
        if self.over_disk_mb:
            return (f"was stopped: it wrote {self.over_disk_mb} MiB under its folder, over the job's writable "
                    "space (the sandbox's disk limit; many files count together)")
        if self.over_tasks:
            return (f"was killed: it ran {self.over_tasks} threads at once, over the job's limit on threads and "
                    "processes (the sandbox's tasks limit)")
        if self.status == "signaled" and self.signal:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            meaning = {"SIGSEGV": "segmentation fault: an out-of-bounds or null pointer access",
                       "SIGBUS": "bus error: misaligned or unmapped memory",
                       "SIGFPE": "arithmetic exception (integer division by zero?)",
                       "SIGABRT": "aborted (assertion failure, or out of memory in C++)",
                       "SIGKILL": "killed (memory or CPU-time limit)",
                       "SIGXCPU": "CPU-time limit exceeded",
                       "SIGXFSZ": "file-size limit exceeded (outputs too large)",
                       "SIGSYS": "a forbidden system call"}.get(name, "")
            return f"crashed with {name}" + (f" ({meaning})" if meaning else "")
        if self.status == "timeout":
            return f"did not finish within {self.seconds:.0f} s and was killed"
        if self.status == "lost":
            return f"was lost with the sandbox worker ({self.detail})"
        return f"exited with code {self.code}"


@dataclass
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    exit: JobExit | None = None
    paused: threading.Event = field(default_factory=threading.Event)   # a pause/continue was answered
    pause_ok: bool = False
    server: Any = None    # the fork server's process it was sent to: only that server's end loses it


class JobHandle:
    """A job started with ``ForkServer.submit``: wait for it, kill it, or pause it while another
    process is being timed (``pause(True)`` returns once every thread of the job is stopped). Where the
    harness can name the job's process (``host_pid``), it stops and continues it itself and reads its
    settings (``verifier.sandbox.procs``); else the fork server stops it."""

    def __init__(self, server: ForkServer, job_id: int, pending: _Pending, timeout: float, closes: int):
        self._server, self.id, self._pending = server, job_id, pending
        self._oom_kills = oom_kills()
        self._started = time.perf_counter()
        self._deadline = self._started + timeout
        self._exit: JobExit | None = None
        self._host: tuple[int, int] | None = None     # (pid, process group) as the harness names them
        self._closes = closes   # the server's closes when the job was sent: one more, and a close ended it

    @property
    def done(self) -> bool:
        return self._pending.event.is_set()

    def host_pid(self) -> int | None:
        """The job's process as this process names it (None if it cannot be found: the job has ended)."""
        if self._host is None:
            server = self._server.host_pid()
            ns_pid = self._pending.pid
            if server is None or ns_pid is None:
                return None
            pid = procs.host_pid(server, ns_pid)
            group = procs.process_group(pid) if pid is not None else None
            if pid is None or group is None:
                return None
            self._host = (pid, group)
        return self._host[0]

    def settings(self) -> procs.Settings | None:
        """The job's scheduling settings and limits now (``verifier.sandbox.procs.settings``)."""
        pid = self.host_pid()
        return procs.settings(pid) if pid is not None else None

    def pause(self, stop: bool, timeout: float = 5.0) -> bool:
        """Stop (``True``) or continue (``False``) the job; False when that failed (the job ended)."""
        if self.host_pid() is not None and self._host is not None and not self.done:
            pid, group = self._host
            return procs.stop(group, pid) if stop else procs.resume(group)
        pending = self._pending
        pending.paused.clear()
        if pending.event.is_set() or not self._server._send({"id": self.id, "pause": stop}):
            return False
        if not pending.paused.wait(timeout):
            return False
        return pending.pause_ok

    def kill(self) -> None:
        self._server._send({"id": self.id, "kill": True})

    def check_phase(self, filters: int) -> str:
        """Wait for the job to stop itself at its candidate phase (``verifier.sandbox.seccomp.enter_candidate_phase``,
        before any of the candidate's code runs), count every thread's seccomp filters from ``/proc`` and continue it
        when each has ``filters`` (``ForkServer.phase_filters``): "" then; "ended" when the job ended first (its own
        failure in its set-up, or a job that never entered its phase: the caller refuses what it left); else why it is
        refused, the job killed. The count is the harness's own reading: the job's word about its phase decides
        nothing (issue #48: load-time Python replaced the function that enters it)."""
        while True:
            if self.done:
                return "ended"
            pid = self.host_pid()
            if pid is not None and procs.stopped_alive(pid) and not self.done:
                break
            if time.perf_counter() > self._deadline:
                self.kill()
                return "did not reach its candidate phase within its time limit"
            time.sleep(0.0005)
        counts = procs.seccomp_filters(pid)
        if not counts or any(n != filters for n in counts.values()):
            self.kill()
            seen = sorted({"unknown" if n is None else str(n) for n in counts.values()}) or ["none"]
            return (f"had {' and '.join(seen)} seccomp filter(s) where its candidate phase has {filters} on every "
                    "thread: something in the job kept the phase off (load-time code?), so none of its code may run")
        assert self._host is not None
        if not procs.resume(self._host[1]):
            return "ended"
        return ""

    def wait(self, timeout: float | None = None) -> JobExit:
        """How the job ended; a job still running at its deadline (or ``timeout``) is killed."""
        if self._exit is not None:
            return self._exit
        limit = self._deadline - time.perf_counter() if timeout is None else timeout
        try:
            if not self._pending.event.wait(max(limit, 0.0)):
                self._server._send({"id": self.id, "kill": True})
                if not self._pending.event.wait(5):
                    self._server.close(restartable=True)  # unresponsive: take the whole sandbox down
                self._exit = JobExit("timeout", seconds=time.perf_counter() - self._started)
                return self._exit
            result = self._pending.exit or JobExit("lost", detail="no exit status")
            result.seconds = time.perf_counter() - self._started
            if result.status == "signaled" and result.signal == signal.SIGKILL and self._oom_kills is not None:
                result.machine_oom = (oom_kills() or 0) > self._oom_kills
            # The server kills every job it runs when it is closed (quitting during a verification): that
            # ending is the tool's, never the job's own crash, so its verdict is not the kernel's (#37).
            result.closed = result.status == "signaled" and self._server._closes != self._closes
            result.tampered = self._server.check_limits()   # after: a change closes the server (for a new one)
            self._exit = result
            return result
        finally:
            with self._server._lock:
                self._server._pending.pop(self.id, None)


def plain_files_only(job_dir: Path) -> None:
    """Once a job is over, keep only the plain files and folders it left in ``job_dir``: what it left is the
    candidate's, and only plain files are read back (a symlink, ``result.json -> ~/.ssh/id_rsa``, would have
    the harness read a host file into the verdict; a FIFO would block it for ever). The folder itself must
    still be the one made for the job: if its name now points elsewhere, the name goes and nothing is read."""
    try:
        fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # replaced (by a symlink?): drop the name, read nothing
        try:
            if job_dir.is_symlink():
                job_dir.unlink()
        except OSError:
            pass
        return
    try:
        for entry in os.scandir(fd):
            try:
                if entry.is_symlink() or not (entry.is_file(follow_symlinks=False)
                                              or entry.is_dir(follow_symlinks=False)):
                    os.unlink(entry.name, dir_fd=fd)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(fd)


class ForkServer:
    """A long-lived sandboxed Python with torch imported that forks one child per job.

    Thread-safe: jobs may be submitted from several threads; each waits for its own child.
    """

    def __init__(self, jobs_root: Path, *, entry: str, env: dict[str, str], preload: list[str], use_bwrap: bool,
                 hidden: list[str], devices: list[str], spawn: bool = False, job_preload: list[str] | None = None,
                 confine: bool = True, needs: RuntimeNeeds = CPU_NEEDS, seccomp: bool = True):
        """``entry``: the job code each child runs, named ``module:function`` (see verifier.sandbox.forkserver).
        ``confine``: jobs are untrusted candidates (each gets a Landlock domain; the jobs root is made
        unlistable while the server runs). Off for the trusted reference server, whose jobs take the
        machine lock outside their folder. ``needs``: what the backend's runtime needs from the kernel
        (``verifier.sandbox.seccomp``); ``seccomp``: False runs jobs without the filter (``[verifier] seccomp``)."""
        self.jobs_root = Path(jobs_root)
        self._confine = confine
        self._entry = entry
        self._env = env
        self._preload = preload
        self._spawn = spawn
        self._job_preload = list(job_preload or [])
        self._use_bwrap = use_bwrap and bwrap_status()[0]
        self._hidden = hidden
        self._devices = devices
        self.needs = needs
        self._seccomp = seccomp
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._ready = threading.Event()
        self._info: dict[str, Any] = {}  # the server's ready message
        self._stderr_path = self.jobs_root / "forkserver.stderr"
        self._host_pid: int | None = None             # the server's process as the harness names it
        self._limits: dict[str, tuple[str, str]] = {}  # the server's own resource limits at start
        self._closed = False    # closed for good: nothing starts it again (a pool thread finishing late)
        self._closes = 0        # how many times close() began: a job running across one was ended by it
        self.memory = "not started"   # "" where the harness reads and writes its jobs' memory, else why not
        self._filters: int | None = None   # the server's own seccomp filters, as the harness reads them
        self._device_groups: list[int] = []   # the device nodes' groups given to the server and its jobs

    @property
    def isolation(self) -> str:
        if not self._info:
            return "not started (no candidate code has run in this process)"
        layers = ["scrubbed environment", "rlimits", "non-dumpable processes"]
        if self._spawn:
            layers.append("a fresh process per job")
        if self._info.get("seccomp"):
            layers.append(describe(self.needs))
        elif not self._seccomp:
            layers.append(describe(self.needs, enabled=False))
        else:
            layers.append(f"no seccomp ({self._info.get('seccomp_error', 'unavailable')})")
        if self._device_groups:
            layers.append(f"the device nodes' group{'s' * (len(self._device_groups) > 1)} "
                          f"{', '.join(map(str, self._device_groups))} given to jobs (no capability opens them)")
        if self._confine:
            layers.append("each job in a PID namespace of its own" if self._info.get("pid_namespace") else
                          f"jobs share the sandbox's PID namespace ({self._info.get('pid_namespace_error') or 'off'})")
            if self._info.get("landlock"):
                layers.append(f"Landlock ABI {self._info['landlock']} (a job writes only in its own folder and "
                              "reads no other job's)")
            else:
                layers.append(f"no Landlock ({self._info.get('landlock_error', 'unavailable')}): job folders "
                              "are only unlisted, with unpredictable names")
        available, text = bwrap_status()
        layers.append(text if self._use_bwrap or not available else "bubblewrap disabled by configuration")
        if self._use_bwrap:
            flags = bwrap_hardening()
            layers.append("no capabilities" + (" (user namespace)" if "--unshare-user" in flags else "")
                          if "--cap-drop" in flags else "capabilities not dropped by bubblewrap")
        return "; ".join(layers)

    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox worker was closed: the verifier is closing")
            if self._proc is not None and self._proc.poll() is None:
                return
            # a new server's own ready flag and message: the last server's reader, which sets its flag at that
            # server's end, must not pass its old message (its probe page's address, its pid) off as this one's
            ready = self._ready = threading.Event()
            self._info = {}
            groups = self._job_groups()     # before anything changes: it may refuse
            config = {"preload": self._preload, "spawn": self._spawn, "job_preload": self._job_preload,
                      "confine": self._confine, "entry": self._entry,
                      "seccomp": self._seccomp, "needs": self.needs.to_dict(),
                      # what a confined job may write besides its folder: device nodes. Never /tmp, which
                      # every job of this sandbox shares (one could leave files there for the next).
                      "writable": list(self._devices),
                      # and read: the same allow-list bubblewrap binds (with or without bubblewrap)
                      "readable": [*sandbox_view(self._env, devices=self._devices), "/proc"]}
            argv = [sys.executable, "-m", "verifier.sandbox.forkserver", json.dumps(config)]
            if self._confine and not self._use_bwrap:
                # Without a PID namespace a job can see this process (which holds the API key in its
                # environment): make it non-dumpable, so a job without capabilities cannot read
                # /proc/<this>/environ or its memory. (It also turns off core dumps of this process; no
                # no_new_privs here, which would stop a setuid bubblewrap for the builds.)
                from verifier.sandbox.lockdown import make_non_dumpable

                make_non_dumpable()
            if self._use_bwrap:
                argv = bwrap_argv([str(self.jobs_root)], self._hidden, self._devices, str(self.jobs_root),
                                  env=self._env, as_pid_1=True, tmp_read_only=self._confine) + argv
            if self._confine:
                # search and create, never list: no job can find another's folder by name (the sandbox
                # has no capability to override it, and seccomp refuses chmod)
                try:
                    os.chmod(self.jobs_root, 0o300)
                except OSError:
                    pass
            stderr = open(self._stderr_path, "ab")
            try:
                # At normal priority whatever thread starts it: every timed run is forked from it
                # (verifier.priority).
                self._proc = priority.popen(argv, background=False, env=self._env, cwd=self.jobs_root,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                            start_new_session=True, **groups)
            except OSError as exc:
                raise SandboxError(f"could not start the sandbox worker: {exc}") from exc
            finally:
                stderr.close()
            threading.Thread(target=self._read, args=(self._proc, ready), name="forkserver-reader",
                             daemon=True).start()
        if not ready.wait(120) or not self._info.get("ready"):
            tail = self._stderr_tail()
            self.close()
            raise SandboxError(f"the sandbox worker did not start: {tail or 'no output'}")
        with self._lock:
            self._host_pid = None
            found = self.host_pid()
            server = procs.settings(found) if found is not None else None
            self._limits = dict(server.limits) if server is not None else {}
            # decided here, from how the jobs are started, before any job runs (procs.memory_access)
            self.memory = (procs.memory_access(found, self._info.get("probe"), self.user_namespace)
                           if found is not None else "the harness cannot find its fork server's process")
            self._filters = procs.seccomp_filters(found).get(found) if found is not None else None

    @property
    def user_namespace(self) -> bool:
        """Whether this process started the server in a user namespace of its own (bubblewrap's ``--unshare-user``),
        whose owner holds every capability in it: its jobs' memory among them."""
        return self._use_bwrap and "--unshare-user" in bwrap_hardening()

    @property
    def probe(self) -> dict[str, Any] | None:
        """The server's probe page (``verifier.sandbox.forkserver.probe_page``): every job has it at this address from
        its start, before any candidate code runs."""
        probe = self._info.get("probe")
        return probe if isinstance(probe, dict) else None

    def phase_filters(self) -> int | None:
        """How many seccomp filters a candidate job of this server has on every thread once it entered its phase
        (``verifier.sandbox.seccomp.phase_filters``, from the server's own count as the harness reads it), None where
        no phase is asked (the trusted reference's jobs, or the filter off or unavailable)."""
        if not (self._confine and self._info.get("seccomp")) or self._filters is None:
            return None
        return phase_filters(self._filters, self.needs)

    def _job_groups(self) -> dict[str, Any]:
        """What the server's start adds so its confined jobs, with no capability, open the device nodes: the nodes'
        groups as supplementary groups (``extra_groups``: only a process with CAP_SETGID, root, gives them; the
        sandbox's other walls are unchanged). Raises SandboxError, naming the group to join, when the jobs still
        could not open them (issue #50: otherwise every candidate would fail at set_device, the reference not)."""
        self._device_groups = []
        if not self._confine or not self._devices:
            return {}
        groups = os.getgroups()
        needed = device_groups(self._devices)
        if needed and can_join_groups():
            self._device_groups = needed
            groups = [*groups, *needed]
        refusal = device_refusal(self._devices, groups=[*groups, os.getegid()])
        if refusal:
            raise SandboxError(refusal)
        return {"extra_groups": groups} if self._device_groups else {}

    def host_pid(self) -> int | None:
        """The fork server's process as this process names it (bubblewrap's child under bubblewrap)."""
        proc = self._proc
        if self._host_pid is None and proc is not None and self._info:
            inner = str(self._info.get("pid"))
            for pid in (proc.pid, *procs._children(proc.pid)):
                if (procs._status(pid).get("NSpid", "").split() or [""])[-1] == inner:
                    self._host_pid = pid
                    break
        return self._host_pid

    def check_limits(self) -> str:
        """Whether the fork server's own resource limits are still those it started with (a job that could
        reach it would break every later job, issue #35); on a change the server is taken down, so the next
        job starts a new one, and the change is returned in words ("" when none)."""
        pid = self._host_pid
        if pid is None or not self._limits:
            return ""
        now = procs.settings(pid)
        if now is None:
            return ""
        changed = [f"{name} {'/'.join(self._limits[name])} -> {'/'.join(v)}" for name, v in now.limits.items()
                   if name in self._limits and self._limits[name] != v]
        if not changed:
            return ""
        self.close(restartable=True)
        return "the sandbox's fork server had its limits changed while the job ran (" + ", ".join(changed) + \
            "): no job may reach another process; the sandbox was restarted"

    def _stderr_tail(self) -> str:
        try:
            text = self._stderr_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return text[-1] if text else ""

    def _read(self, proc: subprocess.Popen[bytes], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if msg.get("ready"):
                if self._proc is proc:
                    self._info = msg
                ready.set()
                continue
            pending = self._pending.get(msg.get("id"))
            if pending is None:
                continue
            if "paused" in msg:
                pending.pause_ok = bool(msg.get("ok"))
                pending.paused.set()
            elif "pid" in msg and "exit" not in msg:
                pending.pid = msg["pid"]
            elif "exit" in msg:
                sig = msg.get("signal")
                pending.exit = JobExit("signaled" if sig else "exited", code=msg.get("exit"), signal=sig,
                                       over_tasks=int(msg.get("tasks") or 0),
                                       over_disk_mb=int(msg.get("disk_mb") or 0))
                pending.event.set()
            elif "error" in msg:
                pending.exit = JobExit("lost", detail=msg["error"])
                pending.event.set()
        # EOF: the server died; everything in flight is lost.
        ready.set()
        for pending in list(self._pending.values()):
            if pending.server is proc and not pending.event.is_set():
                pending.exit = JobExit("lost", detail="the fork server exited")
                pending.event.set()

    def _send(self, msg: dict[str, Any]) -> bool:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return False
        with self._write_lock:
            try:
                proc.stdin.write((json.dumps(msg) + "\n").encode())
                proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                return False

    def run(self, job_dir: Path, limits: JobLimits, timeout: float, env: dict[str, str] | None = None) -> JobExit:
        """Run the job in ``job_dir`` (inside ``jobs_root``) in a fresh child; wait at most ``timeout``."""
        handle = self.submit(job_dir, limits, timeout, env)
        return handle if isinstance(handle, JobExit) else handle.wait()

    def run_candidate(self, job_dir: Path, limits: JobLimits, timeout: float, env: dict[str, str] | None = None,
                      ) -> tuple[JobExit, str]:
        """Run a candidate's job (one that enters its candidate phase) and wait for it: (how it ended, "" or why its
        phase refused it). The job stops at its candidate phase, before any of the candidate's code runs, and goes on
        only once the harness has counted its seccomp filters from outside (``JobHandle.check_phase``); "ended": it
        ended without stopping there, so what it left does not count."""
        handle = self.submit(job_dir, limits, timeout, env)
        if isinstance(handle, JobExit):
            return handle, ""
        filters = self.phase_filters()
        refused = handle.check_phase(filters) if filters is not None else ""
        return handle.wait(), refused

    def submit(self, job_dir: Path, limits: JobLimits, timeout: float,
               env: dict[str, str] | None = None) -> JobHandle | JobExit:
        """Start the job in ``job_dir`` and return at once: a ``JobHandle``, or the ``JobExit`` of a job
        that could not be started. The job is killed if it still runs ``timeout`` seconds from now.
        ``env``: variables set in the job's process before anything of it runs (before the exec of a
        spawned job), on top of the server's scrubbed environment (the caller filters them:
        ``verifier.sandbox.declared_env``)."""
        if self._closed:   # a verification still in flight while the verifier closes (quitting): no verdict
            return JobExit("lost", detail="the verifier is closing")
        self.start()
        with self._lock:
            self._next_id += 1
            job_id = self._next_id
            pending = self._pending[job_id] = _Pending(server=self._proc)
            closes = self._closes
        msg: dict[str, Any] = {"id": job_id, "job": str(job_dir), "limits": limits.to_dict()}
        if env:
            msg["env"] = dict(env)
        if not self._send(msg):
            with self._lock:
                self._pending.pop(job_id, None)
            return JobExit("lost", detail="could not reach the fork server")
        return JobHandle(self, job_id, pending, timeout, closes)

    def close(self, *, restartable: bool = False) -> None:
        """Stop the server and every job it runs. For good, unless ``restartable`` (an unresponsive server
        taken down: the next job starts a new one): a thread that submits or starts later (a reference made
        ahead, the warm-up) gets a lost job or SandboxError instead of a new server outliving its owner."""
        with self._lock:
            self._closed = self._closed or not restartable
            self._closes += 1
            proc, self._proc = self._proc, None
        if self._confine:
            try:
                os.chmod(self.jobs_root, 0o700)  # listable again, so the owner can remove it
            except OSError:
                pass
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            # It kills its jobs as soon as it reads the end of its input; its own exit (an interpreter with
            # torch loaded, tearing down) takes a second more, which nobody needs to wait for.
            proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            if not self._use_bwrap:   # its jobs run in sessions of their own: end any it has not reached yet
                with self._lock:
                    pids = [p.pid for p in self._pending.values() if p.pid]
                for pid in pids:
                    kill_group(pid)
            kill_group(proc.pid)      # (with bubblewrap its PID namespace ends with it, every job inside)
            proc.wait()
