"""The fork server: runs inside the sandbox, imports torch once, forks a locked-down child per job.

Protocol (JSON lines): the harness writes ``{"id", "job", "limits"}`` to start a job or
``{"id", "kill": true}`` to kill one; the server answers ``{"ready": true, ...}`` once, then
``{"id", "pid"}`` when a child starts and ``{"id", "exit", "signal"}`` when it ends. The server
stays single-threaded (forking a threaded process is unsafe) and exits when its stdin closes.

Run as ``python -m verifier.forkserver '{"preload": ["torch", "verifier.worker"]}'``.

With ``"spawn": true`` (device backends) the server imports nothing heavy and each forked child,
after taking its session, limits and output files, execs a fresh interpreter
(``python -m verifier.forkserver --job JOB_DIR``) that imports torch (and ``job_preload``, e.g.
torch_npu), installs the seccomp filter on all its threads, then runs the job. A device runtime is
therefore never inherited through fork, and a device error dies with its own process.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import resource
import select
import signal
import sys
import traceback

# syscalls a candidate never needs; each fails with EPERM.
_DENY = ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kill", "tkill",
         "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "unshare", "setns", "mount", "umount2", "pivot_root",
         "chroot", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "io_uring_setup",
         "io_uring_enter", "io_uring_register", "userfaultfd", "setsid", "setpgid", "reboot", "kexec_load",
         "init_module", "finit_module", "delete_module", "swapon", "swapoff", "acct", "settimeofday",
         "clock_settime", "sethostname", "setdomainname")
_AF_UNIX = 1
_CLONE_THREAD = 0x00010000


def lock_down(pid: int, all_threads: bool = False) -> str | None:
    """Install the seccomp filter in this process; threads created later inherit it. With
    ``all_threads`` the filter also goes onto threads that already exist (TSYNC), else the process
    must be single-threaded. Returns None on success or the reason it is unavailable."""
    try:
        import pyseccomp as seccomp
    except Exception as exc:  # library or libseccomp.so missing
        return f"pyseccomp unavailable: {exc}"
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        if all_threads:
            f.set_attr(seccomp.Attr.CTL_TSYNC, 1)
        for name in _DENY:
            try:
                f.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except Exception:  # syscall absent on this architecture
                pass
        # New processes: clone without CLONE_THREAD is a fork; clone3 falls back to clone.
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        # Sockets: Unix only (no network even without bubblewrap).
        f.add_rule(seccomp.ERRNO(errno.EPERM), "socket", seccomp.Arg(0, seccomp.NE, _AF_UNIX))
        # Signals to threads of other processes.
        f.add_rule(seccomp.ERRNO(errno.EPERM), "tgkill", seccomp.Arg(0, seccomp.NE, pid))
        f.add_rule(seccomp.ERRNO(errno.EPERM), "rt_sigqueueinfo", seccomp.Arg(0, seccomp.NE, pid))
        f.add_rule(seccomp.ERRNO(errno.EPERM), "rt_tgsigqueueinfo", seccomp.Arg(0, seccomp.NE, pid))
        f.load()
    except Exception as exc:
        return f"seccomp filter failed: {exc}"
    return None


def _limit(which: int, value: int) -> None:
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            resource.setrlimit(which, (min(value, hard), hard))


def _child(job_dir: str, limits: dict, fds: list[int], spawn: dict | None = None) -> int:
    os.setsid()
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
    os.chdir(job_dir)
    os.environ["HOME"] = os.environ["TMPDIR"] = job_dir
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    _limit(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    _limit(resource.RLIMIT_NOFILE, int(limits.get("open_files", 256)))
    if limits.get("address_space_mb"):
        _limit(resource.RLIMIT_AS, int(limits["address_space_mb"]) << 20)
    if spawn is not None:
        # A fresh interpreter: nothing of this process (or a device runtime) is inherited but the
        # session, limits, working folder and output files set above.
        argv = [sys.executable, "-m", "verifier.forkserver", "--job", job_dir, json.dumps(spawn)]
        os.execv(sys.executable, argv)
    problem = lock_down(os.getpid())
    if problem:
        print(f"evokernel sandbox: {problem}", file=sys.stderr)
    from verifier.worker import run_job
    from pathlib import Path

    return run_job(Path(job_dir))


def _send(msg: dict) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def _spawned(job_dir: str, config: dict) -> int:
    """A spawned job's process: trusted imports, the seccomp filter on every thread, then the job."""
    for name in ["verifier.worker", *config.get("job_preload", [])]:
        importlib.import_module(name)
    problem = lock_down(os.getpid(), all_threads=True)
    if problem:
        print(f"evokernel sandbox: {problem}", file=sys.stderr)
    from pathlib import Path

    from verifier.worker import run_job

    return run_job(Path(job_dir))


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--job":
        return _spawned(sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    spawn = {"job_preload": config.get("job_preload", [])} if config.get("spawn") else None
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
    _send({"ready": True, "pid": os.getpid(), "threads": len(os.listdir("/proc/self/task")),
           "seccomp": seccomp_ok, "seccomp_error": seccomp_error})
    children: dict[int, int] = {}  # pid -> job id
    buffer = b""
    stdin_open = True
    while stdin_open or children:
        readable, _, _ = select.select([0, wake_r] if stdin_open else [wake_r], [], [], 1.0)
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
            job_id = children.pop(pid, None)
            if os.WIFSIGNALED(status):
                _send({"id": job_id, "exit": None, "signal": os.WTERMSIG(status)})
            else:
                _send({"id": job_id, "exit": os.WEXITSTATUS(status), "signal": None})
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            stdin_open = False
            for pid in children:
                _kill(pid)
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
                        _kill(pid)
                continue
            try:
                pid = os.fork()
            except OSError as exc:
                _send({"id": msg["id"], "error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                code = 70
                try:
                    code = _child(msg["job"], msg["limits"], [wake_r, wake_w], spawn)
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(code)
            children[pid] = msg["id"]
            _send({"id": msg["id"], "pid": pid})
    return 0


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
