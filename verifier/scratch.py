"""Scratch folders of one process, in memory where the machine has it (``/dev/shm``): where a verifier's jobs and the
sizing probes exchange their files. Nothing is left there after any exit:

- ``close`` of their owner removes each (``Verifier.close``, ``ProbeSandbox.close``);
- an exit that runs Python's exit handlers removes what this process made (``atexit``), and so does
  ``core.session.leave``, which ends the workbench with ``os._exit`` (no handlers run: #51 found a
  ``/dev/shm/evokernel-probes-*`` folder left after quitting during sizing);
- a process killed outright (``SIGKILL``) leaves its folders, named with its pid: the next EvoKernel process that
  makes a scratch folder removes those whose process is gone (``sweep``).

The machine's timing lock lives in ``/dev/shm/evokernel-<uid>/`` (``verifier.machine.lock``): one small folder
every EvoKernel process of the user shares, which must outlive any one of them (a lock file removed while another
process holds it would split the lock), so it stays.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

_NAME = re.compile(r"^evokernel-(?P<kind>[a-z]+)-(?P<pid>\d+)-")
_made: list[tuple[int, Path]] = []   # (the pid that made it, the folder): a forked child never removes its parent's
_guard = threading.Lock()


def base_dir() -> Path | None:
    """Where scratch folders go: ``/dev/shm`` when the machine has it writable, else None (the temporary folder)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def scratch_dir(kind: str) -> Path:
    """A new folder ``evokernel-<kind>-<pid>-XXXX`` for this process (``kind``: jobs, probes), removed at its exit
    (see the module's docstring); first the folders of processes that are gone are removed."""
    sweep()
    folder = Path(tempfile.mkdtemp(prefix=f"evokernel-{kind}-{os.getpid()}-", dir=base_dir()))
    with _guard:
        _made.append((os.getpid(), folder))
    return folder


def release(folder: Path) -> None:
    """Remove ``folder`` now (its owner closed) and forget it."""
    shutil.rmtree(folder, ignore_errors=True)
    with _guard:
        _made[:] = [(pid, f) for pid, f in _made if f != folder]


def remove_all() -> None:
    """Remove every scratch folder this process made (at exit, and before ``os._exit``)."""
    me = os.getpid()
    with _guard:
        made = [f for pid, f in _made if pid == me]
        _made[:] = [(pid, f) for pid, f in _made if pid != me]
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def sweep(where: Path | None = None) -> list[Path]:
    """Remove the scratch folders in ``where`` (default ``base_dir()``) whose process is gone; the ones removed."""
    root = where or base_dir() or Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _NAME.match(entry.name)
        if not m or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or process_alive(pid):
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (one this process may not signal exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


atexit.register(remove_all)
