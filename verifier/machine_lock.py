"""One machine-wide lock that keeps timings clean: work that computes (builds, correctness trials,
reference outputs) holds it *shared*; a timing holds it *exclusive*, so nothing of ours runs beside
a measurement, across threads and processes (two workbenches, a CLI verify and a run).

Timing has priority: a waiting timing blocks new shared holders (a turnstile), so a busy engine
cannot starve it. Each holder takes an ``flock`` on its own open of the files, so the same lock
works from threads of one process and from the reference worker process, by path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


class MachineLock:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.turnstile = self.path.with_name(self.path.name + ".turnstile")

    def _open(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a")

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold while computing: waits while a timing runs or waits to run."""
        with self._open(self.turnstile) as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)       # pass the turnstile...
            fh = self._open(self.path)
            fcntl.flock(fh, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)        # ...and let the next one through
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold while timing: waits for the computing holders to finish, blocks new ones."""
        gate = self._open(self.turnstile)
        fcntl.flock(gate, fcntl.LOCK_EX)            # new shared holders now wait at the turnstile
        fh = self._open(self.path)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)          # the current ones drain
            fcntl.flock(gate, fcntl.LOCK_UN)
            gate.close()
            gate = None
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()
            if gate is not None:
                fcntl.flock(gate, fcntl.LOCK_UN)
                gate.close()


@contextlib.contextmanager
def held(path: str | os.PathLike | None, mode: str) -> Iterator[None]:
    """``MachineLock(path).shared()`` or ``.exclusive()``; nothing when ``path`` is None."""
    if not path:
        yield
        return
    lock = MachineLock(path)
    with (lock.exclusive() if mode == "exclusive" else lock.shared()):
        yield
