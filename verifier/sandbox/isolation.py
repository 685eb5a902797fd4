"""What a sandboxed process sees and which isolation layers work on this machine: the allow-list view
of the filesystem (``sandbox_view``: the system's programs and libraries, the interpreter, the
``verifier`` package, toolchains), the homes hidden whole, the bubblewrap command line that builds that
view (``bwrap_argv``), and whether bubblewrap, Landlock and seccomp work here (what ``doctor`` and
``Verifier.isolation`` say). The layers themselves are described in ``verifier.sandbox``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

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


_NO_BWRAP = ("candidates run without network isolation and with the host's filesystem (Landlock, where the kernel has "
             "it, still limits reads to the allow-list)")


def _bwrap_probe(flags: tuple[str, ...] = ()) -> str | None:
    """Run ``true`` under bubblewrap with ``flags`` and the sandbox's own namespaces (no network, its own PIDs, a
    read-only root): None when it ran, else why not (one clause: not installed, failed to start, or the kernel's
    refusal in bubblewrap's words)."""
    exe = shutil.which("bwrap")
    if not exe:
        return "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run(
            [exe, *flags, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
             "--die-with-parent", "true"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap failed to start ({exc})"
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return f"bubblewrap cannot create namespaces here ({reason})"
    return None


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap works here (installed and allowed to create namespaces), and why not."""
    problem = _bwrap_probe()
    if problem:
        return False, f"{problem}: {_NO_BWRAP}"
    return True, ("bubblewrap: no network, private /tmp, a filesystem of the system's programs and libraries, "
                  "the interpreter and the job's own folder only")


@functools.lru_cache(maxsize=1)
def bwrap_hardening() -> tuple[str, ...]:
    """The strongest capability settings bubblewrap accepts here: a user namespace with every capability
    dropped (bounding set included), else every capability dropped; () if neither works. Running as root,
    a job with CAP_SYS_PTRACE could otherwise read and write any process's memory, dumpable or not."""
    if not bwrap_status()[0]:
        return ()
    for flags in (("--unshare-user", "--cap-drop", "ALL"), ("--cap-drop", "ALL")):
        if _bwrap_probe(flags) is None:
            return flags
    return ()


@functools.lru_cache(maxsize=1)
def bwrap_as_pid_1() -> bool:
    """Whether bubblewrap can run the command as PID 1 of its namespace (no reaper process of its own)."""
    return bwrap_status()[0] and _bwrap_probe((*bwrap_hardening(), "--as-pid-1")) is None


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
    checkout = os.path.realpath(Path(__file__).resolve().parents[2])  # scrubbed_env's PYTHONPATH entry
    package = str(Path(__file__).resolve().parents[1])
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
    from verifier.sandbox.lockdown import landlock_abi

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
    return True, "seccomp: no fork, exec, non-Unix sockets, ptrace, signals to other processes or timers"


def bwrap_argv(writable: list[str], hidden: list[str], devices: list[str], cwd: str, *,
               env: dict[str, str] | None = None, readable: list[str] | tuple[str, ...] = (),
               as_pid_1: bool = False, tmp_read_only: bool = False) -> list[str]:
    """The bubblewrap prefix for a sandboxed command. The root is empty but for ``sandbox_view(env,
    readable, devices)`` bound read-only, a private ``/dev`` (with ``devices`` bound in), ``/proc`` and
    ``/tmp``; then ``hidden`` and the home's credential files are hidden where a bound folder holds
    them, and ``writable`` is bound read-write. ``as_pid_1``: the command is PID 1 of the namespace (the
    fork server, which reaps its own children), so no bubblewrap helper process is visible to a job.
    ``tmp_read_only``: the private ``/tmp`` stays empty and ``/dev``'s own folders (``/dev/shm``) read-only
    (the fork server's: every job of the sandbox would share them, so one could leave files for the next;
    a job writes only its own folder, TMPDIR; device nodes stay writable on a read-only mount)."""
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
    if tmp_read_only:   # not recursive: what is bound beneath (a writable folder, a device) keeps its mode
        argv += ["--remount-ro", "/tmp", "--remount-ro", "/dev"]
    return argv + ["--remount-ro", "/", "--chdir", cwd, "--"]


# ----------------------------------------------------------------------------- device nodes and their group
# A candidate's job holds no capability (bubblewrap's --cap-drop ALL, the fork server's drop_capabilities), so
# root's job opens a device node by its permission bits like anyone else's: Ascend's nodes are
# HwHiAiUser:HwHiAiUser 0660 (vllm-project/vllm-ascend#9490), and root without CAP_DAC_OVERRIDE gets "Can't get
# ascend_hal device count" (Project-HAMi/ascend-device-plugin#139). The harness gives the fork server the nodes'
# group before the sandbox starts (a supplementary group survives the user namespace, the capability drop and
# setgroups "deny"); where it cannot, the sandbox refuses at start, naming the group to join.

_CAP_SETGID = 6


def _opens(st: os.stat_result, uid: int, groups: list[int] | set[int]) -> bool:
    """Whether a process with ``uid`` and ``groups`` and no capability may open the file read-write: the owner's
    bits for its owner, the group's for a member, the others' for the rest (the kernel's order; ACLs not read)."""
    if uid == st.st_uid:
        bits = st.st_mode >> 6
    elif st.st_gid in groups:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & 6 == 6


def _ids(uid: int | None, groups: list[int] | None) -> tuple[int, set[int]]:
    return (os.geteuid() if uid is None else uid,
            set(os.getgroups() if groups is None else groups) | ({os.getegid()} if groups is None else set()))


def device_groups(devices: list[str] | tuple[str, ...], *, uid: int | None = None,
                  groups: list[int] | None = None) -> list[int]:
    """The groups a confined job needs besides ``groups`` to open the device nodes ``devices`` read-write with no
    capability, where a group is what opens them (this process's ids when ``uid``/``groups`` are None)."""
    uid_, have = _ids(uid, groups)
    needed: list[int] = []
    for dev in devices:
        try:
            st = os.stat(dev)
        except OSError:
            continue
        if not _opens(st, uid_, have) and _opens(st, uid_, have | {st.st_gid}) and st.st_gid not in needed:
            needed.append(st.st_gid)
    return needed


def device_refusal(devices: list[str] | tuple[str, ...], *, uid: int | None = None,
                   groups: list[int] | None = None) -> str:
    """"" when a process with ``uid`` and ``groups`` and no capability opens every node of ``devices`` read-write;
    else one sentence naming the first it cannot open, its owner and mode, and the group to join."""
    import grp
    import pwd

    uid_, have = _ids(uid, groups)
    for dev in devices:
        try:
            st = os.stat(dev)
        except OSError:
            continue
        if _opens(st, uid_, have):
            continue
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        return (f"candidates' jobs run with no capability and cannot open {dev} ({owner}:{group}, mode "
                f"{st.st_mode & 0o7777:04o}) with user {uid_} and groups {sorted(have)}: run evokernel as a member "
                f"of group {group} (gid {st.st_gid}; usermod -aG {group} $USER, then log in again), or as root, "
                "which gives the sandbox that group itself")
    return ""


def can_join_groups() -> bool:
    """Whether this process may give a child supplementary groups (``CAP_SETGID`` in its effective set: root)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SETGID & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0
