"""One machine-wide lock that keeps timings clean: work that computes (builds, correctness trials,
reference outputs) holds it *shared*; a timing holds it *exclusive*, so nothing of ours runs beside
a measurement, across threads and processes (two workbenches, a CLI verify and a run).

There is one lock per machine and user, not per workspace: ``machine_lock_path()`` is
``$EVOKERNEL_LOCK_DIR/timing.lock`` when set (tests), else under ``/dev/shm/evokernel-<uid>/`` (a
folder the sandbox's fresh ``/dev`` does not show), else ``$XDG_RUNTIME_DIR/evokernel/``, else the
temporary folder; every EvoKernel process of the user (workbench, CLI, engine, reference workers)
finds the same file whatever its workspace.

Timing has priority: a waiting timing blocks new shared holders (a turnstile), so a busy engine
cannot starve it. Each holder takes an ``flock`` on its own open of the files, so the same lock
works from threads of one process and from the reference worker process, by path.

A wait is said, with who holds the lock (``on_wait``, ``holders``: the processes ``/proc/locks`` shows holding
the lock's files, by their command line): a save verified while another workspace times showed "edit build"
for 24 s, with nothing saying it waited or on what (#51).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO

from verifier.locations import cache_dir

Waiting = Callable[[str], None]
"""``on_wait(who)``: called once when a wait for the lock begins, ``who`` the holders in words."""

LOCK_DIR_ENV = "EVOKERNEL_LOCK_DIR"
POLL_S = 0.02   # a waiter tries again this often (what an abandoned wait can take to end)


def _private_dir(path: Path) -> bool:
    """Make ``path`` (mode 0700) or accept it when it is already ours, a real folder, private."""
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    # Another user could pre-create the name (in /dev/shm or /tmp) as a symlink or an open folder.
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The folder of this user's machine-wide locks (see the module docstring)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    if env.get(LOCK_DIR_ENV):
        path = Path(env[LOCK_DIR_ENV])
        path.mkdir(parents=True, exist_ok=True)
        return path
    candidates = []
    if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
        candidates.append(Path("/dev/shm") / f"evokernel-{os.getuid()}")
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir() and os.access(runtime, os.W_OK):
        candidates.append(Path(runtime) / "evokernel")
    candidates.append(Path(tempfile.gettempdir()) / f"evokernel-{os.getuid()}")
    for path in candidates:
        if _private_dir(path):
            return path
    fallback = cache_dir()
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def machine_lock_path(env: dict[str, str] | None = None) -> Path:
    """The timing lock every EvoKernel process of this user on this machine shares."""
    return lock_dir(env) / "timing.lock"


class LockAbandoned(OSError):
    """The lock's owner is closing (``MachineLock.abandon``): what waited for the lock does not run."""


class MachineLock:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.turnstile = self.path.with_name(self.path.name + ".turnstile")
        self._abandoned = threading.Event()

    def abandon(self) -> None:
        """Its owner is closing: every wait for the lock through this object ends (LockAbandoned) within
        ``POLL_S``, so a closing verifier never waits on another process's timing to finish."""
        self._abandoned.set()

    def _flock(self, fh: IO[str], mode: int, on_wait: Waiting | None = None) -> None:
        """``flock``, waiting in short steps so that ``abandon`` can end the wait; ``on_wait`` told once if it waits."""
        told = False
        while True:
            if self._abandoned.is_set():
                raise LockAbandoned(f"gave up waiting for {self.path}: its owner is closing")
            try:
                fcntl.flock(fh, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if on_wait is not None and not told:
                    told = True
                    try:
                        on_wait(self.who())
                    except Exception:  # noqa: BLE001 - a listener's failure never stops the lock
                        pass
                self._abandoned.wait(POLL_S)

    def who(self) -> str:
        """Who holds the lock (or waits at its turnstile to time), in words: "evokernel run (pid 1234)"; "another
        process" when ``/proc/locks`` does not say."""
        mine = os.getpid()
        pids = [p for p in holders(self.path) + holders(self.turnstile) if p != mine]
        said = list(dict.fromkeys(describe_process(p) for p in pids))
        return ", ".join(said[:3]) + (" and others" if len(said) > 3 else "") if said else "another process"

    def _open(self, path: Path) -> IO[str]:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a")

    @contextlib.contextmanager
    def shared(self, on_wait: Waiting | None = None) -> Iterator[None]:
        """Hold while computing: waits while a timing runs or waits to run (``on_wait``: told who holds it)."""
        with self._open(self.turnstile) as gate:
            self._flock(gate, fcntl.LOCK_EX, on_wait)       # pass the turnstile...
            fh = self._open(self.path)
            try:
                self._flock(fh, fcntl.LOCK_SH, on_wait)
            except LockAbandoned:
                fh.close()
                raise
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)    # ...and let the next one through
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold while timing: waits for the computing holders to finish, blocks new ones."""
        gate = self._open(self.turnstile)
        try:
            self._flock(gate, fcntl.LOCK_EX)        # new shared holders now wait at the turnstile
        except LockAbandoned:
            gate.close()
            raise
        fh = self._open(self.path)
        gate_open = True
        try:
            self._flock(fh, fcntl.LOCK_EX)          # the current ones drain
            fcntl.flock(gate, fcntl.LOCK_UN)
            gate.close()
            gate_open = False
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()
            if gate_open:
                fcntl.flock(gate, fcntl.LOCK_UN)
                gate.close()


def holders(path: str | os.PathLike[str]) -> list[int]:
    """The processes ``/proc/locks`` shows holding an ``flock`` on ``path`` (none where it cannot be read)."""
    try:
        st = os.stat(path)
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == ident and fields[4].isdigit():
            pids.append(int(fields[4]))
    return list(dict.fromkeys(pids))


def describe_process(pid: int) -> str:
    """A process in a few words: "evokernel run (pid 1234, in /home/me/ws)", from its command line and folder."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        words = [a.decode(errors="replace") for a in argv if a]
    except OSError:
        return f"pid {pid}"
    where = ""
    try:
        where = f", in {os.readlink(f'/proc/{pid}/cwd')}"
    except OSError:
        pass
    names = [Path(w).name for w in words[:6]]
    if "evokernel" in names:
        k = names.index("evokernel")
        command = " ".join(["evokernel", *[w for w in words[k + 1:k + 3] if not w.startswith("-")][:1]])
    elif "evotui.cli" in words:
        k = words.index("evotui.cli")
        command = " ".join(["evokernel", *[w for w in words[k + 1:k + 3] if not w.startswith("-")][:1]])
    elif any("pytest" in n for n in names):
        command = "a test run (pytest)"
    elif any("forkserver" in w or "verifier" in w for w in words[:4]):
        command = "an EvoKernel verifier process"
    else:
        command = " ".join(names[:2]) or "a process"
    return f"{command} (pid {pid}{where})"


@contextlib.contextmanager
def held(path: str | os.PathLike[str] | None, mode: str) -> Iterator[None]:
    """``MachineLock(path).shared()`` or ``.exclusive()``; nothing when ``path`` is None."""
    if not path:
        yield
        return
    lock = MachineLock(os.fspath(path))
    with (lock.exclusive() if mode == "exclusive" else lock.shared()):
        yield
