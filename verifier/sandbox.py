"""Where untrusted candidate code runs, and how the harness runs its own subprocesses.

Layers, outermost first:

* **bubblewrap** (when installed): no network, private PID/IPC namespaces (the fork server is PID 1:
  no helper process a job could attach to), no capabilities (a user namespace where the kernel allows
  one), and a filesystem built from an allow-list (``sandbox_view``): the system's programs,
  libraries and headers (``/usr``, ``/lib*``, ``/bin``), the few ``/etc`` files the loader, the
  compiler and Python's user lookup read, the CPU topology from ``/sys``, the Python installation,
  the ``verifier`` package, toolchains on ``PATH``, read-only; the job or build folder read-write; a
  private ``/tmp``, ``/dev`` and ``/proc``. Everything else (homes, checkouts, ``/var``, ``/opt``,
  ``/work``, the workspace and its cache) is absent, not merely read-only.
* **a fork server** started inside it with a scrubbed environment (no API keys, tokens or endpoint
  credentials) and PyTorch already imported, so a candidate job starts in milliseconds. It is
  non-dumpable (no job can open its ``/proc/PID/mem``, ``environ`` or ``fd``) and holds no
  capabilities. For device backends (``spawn``) the server imports nothing heavy and each job's child
  execs a fresh interpreter instead: a CUDA or CANN runtime must never be inherited through fork.
* **per job**, the forked child gets its own session, resource limits (CPU time, address space,
  file size, open files, no core dumps), a Landlock domain where the kernel has Landlock (files are
  read only on the same allow-list, and written only in the job's own folder and a few device nodes;
  no other job's folder is readable; no access to other processes' memory), and a seccomp filter:
  no fork, exec, sockets other than Unix ones, ptrace or signals to other processes. A wall-clock timeout kills
  it. Job folders have unpredictable names in a jobs root the sandbox can enter but not list.

A hang, segfault, fork bomb or memory hog ends as a ``JobExit`` the verifier turns into an Outcome.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verifier.errors import SandboxError

# Variables a worker may inherit from the host, before the secret filter below.
_ENV_ALLOW = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|LD_LIBRARY_PATH|"
    r"CUDA_VISIBLE_DEVICES|CUDA_HOME|CUDA_PATH|NVIDIA_VISIBLE_DEVICES|ASCEND_[A-Z_]+|ASCEND_RT_VISIBLE_DEVICES|"
    r"TORCH_DEVICE_BACKEND_AUTOLOAD|TASK_QUEUE_ENABLE)$"
)
# Anything that looks like a credential never passes, allow-listed or not.
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.I)

# Files and folders under $HOME that hold credentials. The whole home is hidden (see home_roots);
# these stay hidden even inside a folder bound back from it.
HOME_SECRETS = (".ssh", ".aws", ".azure", ".config", ".netrc", ".git-credentials", ".gnupg", ".docker",
                ".kube", ".pypirc", ".npmrc", ".cache/evokernel", ".gitconfig", ".claude", ".cargo/credentials",
                ".cargo/credentials.toml", ".bash_history", ".python_history", ".local/share/keyrings")
# Never hidden as a "home": the system itself.
_SYSTEM_DIRS = ("/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/var", "/tmp", "/dev", "/proc",
                "/sys", "/run", "/srv", "/mnt", "/media", "/boot")
# Environment variables whose values are paths (or path lists) the worker or compiler reads.
_PATH_VARS = re.compile(r"^(PATH|LD_LIBRARY_PATH|PYTHONPATH|CUDA_HOME|CUDA_PATH|TOOLCHAIN_HOME|ASCEND_[A-Z_]+)$")


def scrubbed_env(extra: dict[str, str] | None = None, home: str | None = None) -> dict[str, str]:
    """The environment a worker or compiler gets: an allow-list, minus anything secret-looking."""
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _SECRET.search(k)}
    project_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if home:
        env["HOME"] = env["TMPDIR"] = home
    for k, v in (extra or {}).items():
        if not _SECRET.search(k):
            env[k] = v
    return env


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap works here (installed and allowed to create namespaces), and why not."""
    exe = shutil.which("bwrap")
    if not exe:
        return False, ("bubblewrap (bwrap) is not installed: candidates run without network isolation and with the "
                       "host's filesystem (Landlock, where the kernel has it, still limits reads to the allow-list)")
    try:
        probe = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
             "--die-with-parent", "true"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, (f"bubblewrap failed to start ({exc}): candidates run without network isolation and with the "
                       "host's filesystem (Landlock, where the kernel has it, still limits reads to the allow-list)")
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return False, (f"bubblewrap cannot create namespaces here ({reason}): candidates run without network "
                       "isolation and with the host's filesystem (Landlock, where the kernel has it, still limits "
                       "reads to the allow-list)")
    return True, ("bubblewrap: no network, private /tmp, a filesystem of the system's programs and libraries, "
                  "the interpreter and the job's own folder only")


def _bwrap_accepts(flags: tuple[str, ...]) -> bool:
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        probe = subprocess.run(
            [exe, *flags, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
             "--die-with-parent", "true"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@functools.lru_cache(maxsize=1)
def bwrap_hardening() -> tuple[str, ...]:
    """The strongest capability settings bubblewrap accepts here: a user namespace with every capability
    dropped (bounding set included), else every capability dropped; () if neither works. Running as root,
    a job with CAP_SYS_PTRACE could otherwise read and write any process's memory, dumpable or not."""
    if not bwrap_status()[0]:
        return ()
    for flags in (("--unshare-user", "--cap-drop", "ALL"), ("--cap-drop", "ALL")):
        if _bwrap_accepts(flags):
            return flags
    return ()


@functools.lru_cache(maxsize=1)
def bwrap_as_pid_1() -> bool:
    """Whether bubblewrap can run the command as PID 1 of its namespace (no reaper process of its own)."""
    return bwrap_status()[0] and _bwrap_accepts((*bwrap_hardening(), "--as-pid-1"))


def home_roots() -> list[str]:
    """The folders holding users' files, hidden whole from the sandbox: ``$HOME`` (this process's: a
    sandboxed command's own HOME is a scratch folder), the account's home, ``/root`` and ``/home``
    (real paths; nested ones folded into the outer one; system folders never)."""
    found: list[str] = []
    candidates = [os.environ.get("HOME"), os.path.expanduser("~"), "/root", "/home"]
    try:
        import pwd

        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):
        pass
    for cand in candidates:
        if not cand or not os.path.isabs(cand):
            continue
        path = os.path.realpath(cand)
        if not os.path.isdir(path) or any(path == d or d.startswith(path.rstrip("/") + "/") for d in _SYSTEM_DIRS):
            continue
        found.append(path)
    return sorted({p for p in found if not any(_under(p, q) and p != q for q in found)})


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# What every sandboxed process sees of the system, read-only: programs, libraries and headers.
SYSTEM_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# From /etc only what the loader (its cache and configuration), the compiler (alternatives),
# Python's user lookup (torch asks for the user name) and the CANN runtime (where its driver is) read.
# No shadow, no keys, no host names.
ETC_VIEW = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
            "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ascend_install.info")
# From /sys the CPU topology (thread counts, cache sizes); device backends get all of /sys, which
# their drivers read.
SYS_VIEW = ("/sys/devices/system/cpu", "/sys/devices/system/node")


def system_view(devices: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The system paths a sandboxed process sees (those that exist here)."""
    paths = [*SYSTEM_VIEW, *ETC_VIEW, *(("/sys",) if devices else SYS_VIEW)]
    return [p for p in paths if os.path.lexists(p)]


def _pth_paths() -> list[str]:
    """Folders that ``.pth`` files in the site-packages folders put on ``sys.path``."""
    import site

    out: list[str] = []
    try:
        sitedirs = site.getsitepackages()
    except AttributeError:
        sitedirs = []
    for sitedir in sitedirs:
        try:
            names = [n for n in os.listdir(sitedir) if n.endswith(".pth")]
        except OSError:
            continue
        for name in names:
            try:
                lines = Path(sitedir, name).read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    out.append(os.path.join(sitedir, line))
    return out


def _with_prefix(path: str, roots: list[str]) -> list[str]:
    """``path``, plus the installation prefix it belongs to when it is a ``bin`` or ``lib`` folder (a
    toolchain needs its whole prefix), unless that prefix is a home itself or a dot-folder right under
    one (``~/.local``, ``~/.cargo``: those hold more than programs); and a version manager's root for
    its ``shims`` folder (``~/.pyenv/shims`` runs ``~/.pyenv/libexec/pyenv``)."""
    out = [path]
    name = os.path.basename(path)
    if name in ("bin", "lib", "lib64", "shims"):
        prefix = os.path.dirname(path)
        parent = os.path.dirname(prefix)
        if not any(prefix == r or (name != "shims" and parent == r and os.path.basename(prefix).startswith("."))
                   for r in roots):
            out.append(prefix)
    return out


def sandbox_readable(env: Mapping[str, str] | None = None, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """What a sandboxed worker or compiler reads besides the system view: the Python installation
    (``sys.prefix``, ``sys.base_prefix``, the interpreter), the ``verifier`` package (the package
    folder only, not the whole checkout: a ``.env`` or ``.git/config`` beside it may hold a token),
    ``.pth`` folders, the path-valued variables of ``env`` (``PATH``, ``LD_LIBRARY_PATH``,
    ``PYTHONPATH``, ``CUDA_HOME``, ``ASCEND_*``...) and ``extra``. Never a home itself, a top-level
    folder (``/work``, ``/opt``), ``/tmp``, or a folder holding the checkout: those would show
    everything in them."""
    environ: Mapping[str, str] = os.environ if env is None else env
    roots = [*home_roots(), "/tmp"]
    checkout = os.path.realpath(Path(__file__).resolve().parent.parent)  # scrubbed_env's PYTHONPATH entry
    package = str(Path(__file__).resolve().parent)
    interpreter = {os.path.normpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                                 os.path.dirname(os.path.realpath(sys.executable)))}
    wanted = [*interpreter, *_pth_paths()]
    for key, value in environ.items():
        if _PATH_VARS.match(key):
            wanted += [p for p in value.split(os.pathsep) if os.path.isabs(p)]
    wanted += [p for p in extra if p and os.path.isabs(p)]
    system = system_view()

    def allowed(q: str) -> bool:
        if not os.path.exists(q) or any(_under(q, s) for s in system):
            return False  # absent, or already in the system view
        if q == "/" or any(_under(r, q) for r in roots) or _under(checkout, q):
            return False  # a home, /tmp, or a folder above them or above the checkout
        # a top-level folder (/work, /opt) only when it is the interpreter's own prefix
        return q.count("/") >= 2 or q in interpreter

    out: list[str] = [package]
    for path in wanted:
        for p in _with_prefix(os.path.normpath(path), roots):
            for q in dict.fromkeys((p, os.path.realpath(p))):
                if allowed(q):
                    out.append(q)
    out = sorted(set(out), key=len)
    return [p for i, p in enumerate(out) if not any(_under(p, q) for q in out[:i])]  # outermost only


def sandbox_view(env: dict[str, str] | None = None, readable: list[str] | tuple[str, ...] = (),
                 devices: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every path a sandboxed process may read (besides its own folder, ``/dev`` and ``/proc``): the
    system view and ``sandbox_readable``. Bubblewrap binds exactly these; Landlock allows reads
    beneath exactly these (so without bubblewrap the same list holds where the kernel has Landlock)."""
    return [*system_view(devices), *sandbox_readable(env, readable)]


def landlock_status() -> tuple[bool, str]:
    """Whether each job gets its own Landlock domain here (the file allow-list without bubblewrap too)."""
    from verifier.forkserver import landlock_abi

    abi, why = landlock_abi()
    if not abi:
        return False, (f"no Landlock ({why}): without bubblewrap, files outside a job's folder are protected only "
                       "by their permissions")
    return True, (f"Landlock ABI {abi}: a job reads only the allow-list and its own folder, and writes only its own "
                  "folder")


@functools.lru_cache(maxsize=1)
def seccomp_status() -> tuple[bool, str]:
    """Whether the per-job seccomp filter can be installed here (libseccomp binding and kernel support)."""
    try:
        import pyseccomp

        pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)  # builds a filter context; loads nothing
    except Exception as exc:
        return False, f"seccomp unavailable ({type(exc).__name__}: {exc}): candidates may fork, exec and open sockets"
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    if status and "Seccomp:" not in status:
        return False, "the kernel has no seccomp support: candidates may fork, exec and open sockets"
    return True, "seccomp: no fork, exec, non-Unix sockets, ptrace or signals to other processes"


def bwrap_argv(writable: list[str], hidden: list[str], devices: list[str], cwd: str, *,
               env: dict[str, str] | None = None, readable: list[str] | tuple[str, ...] = (),
               as_pid_1: bool = False) -> list[str]:
    """The bubblewrap prefix for a sandboxed command. The root is empty but for ``sandbox_view(env,
    readable, devices)`` bound read-only, a private ``/dev`` (with ``devices`` bound in), ``/proc`` and
    ``/tmp``; then ``hidden`` and the home's credential files are hidden where a bound folder holds
    them, and ``writable`` is bound read-write. ``as_pid_1``: the command is PID 1 of the namespace (the
    fork server, which reaps its own children), so no bubblewrap helper process is visible to a job."""
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-net", "--unshare-ipc", "--unshare-pid",
            "--unshare-uts", *bwrap_hardening()]
    if as_pid_1 and bwrap_as_pid_1():
        argv.append("--as-pid-1")
    system = system_view(devices)
    for path in system:
        if os.path.islink(path) and os.path.dirname(path) == "/":
            argv += ["--symlink", os.readlink(path), path]  # /bin -> usr/bin on merged-/usr systems
        else:
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for dev in devices:
        if os.path.exists(dev):
            argv += ["--dev-bind", dev, dev]
    bound = sandbox_readable(env, readable)
    for path in bound:
        argv += ["--ro-bind", path, path]

    def visible(path: str) -> bool:
        path = os.path.realpath(path)
        return any(_under(path, b) for b in (*system, *bound))

    homes = dict.fromkeys([os.path.expanduser("~"), *home_roots()])
    secrets = [os.path.join(home, s) for home in homes for s in HOME_SECRETS]
    for path in dict.fromkeys([*hidden, *secrets]):
        if not visible(path):
            continue
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in writable:
        argv += ["--bind", path, path]
    return argv + ["--remount-ro", "/", "--chdir", cwd, "--"]


@dataclass
class ProcResult:
    """How a harness subprocess (a build, the reference) ended."""

    returncode: int | None
    timed_out: bool
    seconds: float
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run_process(argv: list[str], *, cwd: str | Path, env: dict[str, str], timeout: float,
                output_limit: int = 64_000) -> ProcResult:
    """Run ``argv`` in its own process group; on timeout kill the whole group. Output is combined
    stdout and stderr, the last ``output_limit`` characters."""
    log_path = Path(cwd) / f".proc-{os.getpid()}-{threading.get_ident()}.log"
    started = time.perf_counter()
    with open(log_path, "w+b") as log:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return ProcResult(None, False, 0.0, f"could not start {argv[0]}: {exc}")
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - output_limit))
        output = log.read().decode(errors="replace")
    log_path.unlink(missing_ok=True)
    return ProcResult(proc.returncode, timed_out, time.perf_counter() - started, output)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----------------------------------------------------------------------------- fork server client


@dataclass
class JobLimits:
    """Resource limits of one sandboxed job."""

    cpu_seconds: int
    address_space_mb: int | None
    file_size_mb: int
    open_files: int = 256

    def to_dict(self) -> dict:
        return self.__dict__.copy()


@dataclass
class JobExit:
    """How a sandboxed job ended."""

    status: str            # "exited" | "signaled" | "timeout" | "lost"
    code: int | None = None
    signal: int | None = None
    seconds: float = 0.0
    detail: str = ""

    def describe(self) -> str:
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
            return f"the sandbox worker was lost ({self.detail})"
        return f"exited with code {self.code}"


@dataclass
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    exit: JobExit | None = None


class ForkServer:
    """A long-lived sandboxed Python with torch imported that forks one child per job.

    Thread-safe: jobs may be submitted from several threads; each waits for its own child.
    """

    def __init__(self, jobs_root: Path, *, env: dict[str, str], preload: list[str], use_bwrap: bool,
                 hidden: list[str], devices: list[str], spawn: bool = False, job_preload: list[str] | None = None,
                 confine: bool = True):
        """``confine``: jobs are untrusted candidates (each gets a Landlock domain; the jobs root is made
        unlistable while the server runs). Off for the trusted reference server, whose jobs take the
        machine lock outside their folder."""
        self.jobs_root = Path(jobs_root)
        self._confine = confine
        self._env = env
        self._preload = preload
        self._spawn = spawn
        self._job_preload = list(job_preload or [])
        self._use_bwrap = use_bwrap and bwrap_status()[0]
        self._hidden = hidden
        self._devices = devices
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._ready = threading.Event()
        self._info: dict = {}
        self._stderr_path = self.jobs_root / "forkserver.stderr"

    @property
    def isolation(self) -> str:
        if not self._info:
            return "not started (no candidate code has run in this process)"
        layers = ["scrubbed environment", "rlimits", "non-dumpable processes"]
        if self._spawn:
            layers.append("a fresh process per job")
        if self._info.get("seccomp"):
            layers.append("seccomp (no fork/exec/network sockets)")
        else:
            layers.append(f"no seccomp ({self._info.get('seccomp_error', 'unavailable')})")
        if self._confine:
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
            if self._proc is not None and self._proc.poll() is None:
                return
            self._ready.clear()
            config = {"preload": self._preload, "spawn": self._spawn, "job_preload": self._job_preload,
                      "confine": self._confine,
                      # what a confined job may write besides its folder: device nodes, and the private /tmp
                      "writable": [*self._devices, *(["/tmp"] if self._use_bwrap else [])],
                      # and read: the same allow-list bubblewrap binds (with or without bubblewrap)
                      "readable": [*sandbox_view(self._env, devices=self._devices), "/proc"]}
            argv = [sys.executable, "-m", "verifier.forkserver", json.dumps(config)]
            if self._confine and not self._use_bwrap:
                # Without a PID namespace a job can see this process (which holds the API key in its
                # environment): make it non-dumpable, so a job without capabilities cannot read
                # /proc/<this>/environ or its memory. (It also turns off core dumps of this process; no
                # no_new_privs here, which would stop a setuid bubblewrap for the builds.)
                from verifier.forkserver import make_non_dumpable

                make_non_dumpable()
            if self._use_bwrap:
                argv = bwrap_argv([str(self.jobs_root)], self._hidden, self._devices, str(self.jobs_root),
                                  env=self._env, as_pid_1=True) + argv
            if self._confine:
                # search and create, never list: no job can find another's folder by name (the sandbox
                # has no capability to override it, and seccomp refuses chmod)
                try:
                    os.chmod(self.jobs_root, 0o300)
                except OSError:
                    pass
            stderr = open(self._stderr_path, "ab")
            try:
                self._proc = subprocess.Popen(argv, env=self._env, cwd=self.jobs_root, stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
            except OSError as exc:
                raise SandboxError(f"could not start the sandbox worker: {exc}") from exc
            finally:
                stderr.close()
            threading.Thread(target=self._read, args=(self._proc,), name="forkserver-reader", daemon=True).start()
        if not self._ready.wait(120) or not self._info.get("ready"):
            tail = self._stderr_tail()
            self.close()
            raise SandboxError(f"the sandbox worker did not start: {tail or 'no output'}")

    def _stderr_tail(self) -> str:
        try:
            text = self._stderr_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return text[-1] if text else ""

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if msg.get("ready"):
                self._info = msg
                self._ready.set()
                continue
            pending = self._pending.get(msg.get("id"))
            if pending is None:
                continue
            if "pid" in msg and "exit" not in msg:
                pending.pid = msg["pid"]
            elif "exit" in msg:
                sig = msg.get("signal")
                pending.exit = JobExit("signaled" if sig else "exited", code=msg.get("exit"), signal=sig)
                pending.event.set()
            elif "error" in msg:
                pending.exit = JobExit("lost", detail=msg["error"])
                pending.event.set()
        # EOF: the server died; everything in flight is lost.
        self._ready.set()
        for pending in list(self._pending.values()):
            if not pending.event.is_set():
                pending.exit = JobExit("lost", detail="the fork server exited")
                pending.event.set()

    def _send(self, msg: dict) -> bool:
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

    def run(self, job_dir: Path, limits: JobLimits, timeout: float) -> JobExit:
        """Run the job in ``job_dir`` (inside ``jobs_root``) in a fresh child; wait at most ``timeout``."""
        self.start()
        with self._lock:
            self._next_id += 1
            job_id = self._next_id
            pending = self._pending[job_id] = _Pending()
        started = time.perf_counter()
        try:
            if not self._send({"id": job_id, "job": str(job_dir), "limits": limits.to_dict()}):
                return JobExit("lost", detail="could not reach the fork server")
            if not pending.event.wait(timeout):
                self._send({"id": job_id, "kill": True})
                if not pending.event.wait(5):
                    self.close()  # unresponsive: take the whole sandbox down
                return JobExit("timeout", seconds=timeout)
            result = pending.exit or JobExit("lost", detail="no exit status")
            result.seconds = time.perf_counter() - started
            return result
        finally:
            with self._lock:
                self._pending.pop(job_id, None)

    def close(self) -> None:
        with self._lock:
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
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
