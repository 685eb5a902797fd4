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
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from verifier.locations import cache_dir

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

    def _flock(self, fh: IO[str], mode: int) -> None:
        """``flock``, waiting in short steps so that ``abandon`` can end the wait."""
        while True:
            if self._abandoned.is_set():
                raise LockAbandoned(f"gave up waiting for {self.path}: its owner is closing")
            try:
                fcntl.flock(fh, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                self._abandoned.wait(POLL_S)

    def _open(self, path: Path) -> IO[str]:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a")

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold while computing: waits while a timing runs or waits to run."""
        with self._open(self.turnstile) as gate:
            self._flock(gate, fcntl.LOCK_EX)       # pass the turnstile...
            fh = self._open(self.path)
            try:
                self._flock(fh, fcntl.LOCK_SH)
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


@contextlib.contextmanager
def held(path: str | os.PathLike[str] | None, mode: str) -> Iterator[None]:
    """``MachineLock(path).shared()`` or ``.exclusive()``; nothing when ``path`` is None."""
    if not path:
        yield
        return
    lock = MachineLock(os.fspath(path))
    with (lock.exclusive() if mode == "exclusive" else lock.shared()):
        yield
