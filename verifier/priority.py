"""CPU priority of the processes this tool starts: what is timed runs at the priority the process
started with, everything else ``BACKGROUND_NICENESS`` steps lower.

Timed (normal priority): the fork servers (every timed run is forked from one), the perf jobs they
fork, the reference's own timing and the roofline's ceilings. Not timed (lower priority): compilers
and the build's binutils, correctness trials and reference outputs (``JobLimits.nice``, applied in
the fork server's child), the sizing probes (``verifier.sizing``) and the roofline's counting.

Why not simply lower the engine's thread, as the workbench once did to keep the interface quick? On
Linux nice is per thread, inherited by every thread and process started from it, and without
privileges never raised again: the fork server, started lazily from whichever thread verifies first,
and every timed run forked from it, then yielded to any other process on the machine, and a window
could be preempted in every round. So priority is given where it is wanted instead: the interface
stays responsive because the work that fills the cores (builds on every core, trials, probes) runs
lower; a timing window is short and runs alone (``verifier.machine.lock``).

How, without privileges and without ``preexec_fn`` (unsafe in a threaded process): two launcher
threads, made when this module is first imported, start every process. A child inherits the nice
value of the thread that starts it, so the *normal* launcher, made at import, keeps the importing
thread's priority (the process's, when imported from the main thread: ``evotui.engine_host`` imports
this module before it starts the engine's thread), and the *background* launcher lowers its own.
The caller waits for its process as usual. Elsewhere than Linux (nice is per process there) the
caller starts processes itself and background processes get ``nice`` through their command line.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

BACKGROUND_NICENESS = 10
"""How much lower than a timing what is not timed runs (Linux nice steps, 0..19): at 10 a compiler
gets about a tenth of a core that a normal-priority process also wants (the kernel's weights for
nice 0 and 10 are 1024 and 110)."""

PER_THREAD = sys.platform.startswith("linux")


def thread_niceness() -> int:
    """The calling thread's nice value (Linux: per thread; elsewhere the process's)."""
    who = threading.get_native_id() if PER_THREAD else 0
    return os.getpriority(os.PRIO_PROCESS, who)


class _Launcher:
    """One daemon thread that runs the calls given to it (process starts), at its own priority."""

    def __init__(self, name: str, lower_by: int = 0):
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._lower_by = lower_by
        self._started = threading.Event()
        self.niceness = 0
        threading.Thread(target=self._main, name=name, daemon=True).start()
        self._started.wait()

    def _main(self) -> None:
        if self._lower_by:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), thread_niceness() + self._lower_by)
            except OSError:
                pass
        self.niceness = thread_niceness()
        self._started.set()
        while True:
            call, done = self._jobs.get()
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(call())
            except BaseException as exc:  # handed to the caller, who raises it
                done.set_exception(exc)

    def call(self, fn: Callable[[], T]) -> T:
        done: Future[T] = Future()
        self._jobs.put((fn, done))
        return done.result()


_NORMAL: _Launcher | None = None
_BACKGROUND: _Launcher | None = None
_guard = threading.Lock()


def _launchers() -> tuple[_Launcher, _Launcher]:
    global _NORMAL, _BACKGROUND
    with _guard:
        if _NORMAL is None or _BACKGROUND is None:
            _NORMAL = _Launcher("evokernel-launcher")
            _BACKGROUND = _Launcher("evokernel-launcher-background", BACKGROUND_NICENESS)
        return _NORMAL, _BACKGROUND


_started: dict[subprocess.Popen[Any], str] = {}   # running processes -> the name of the thread that asked
_ended: set[str] = set()                          # thread-name prefixes whose owner closed: they start nothing
_started_lock = threading.Lock()


def popen(argv: list[str], *, background: bool, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **kwargs)`` at normal priority, or ``BACKGROUND_NICENESS`` lower. A thread of
    an owner that has ended its processes (``end_started_by``) starts none: OSError."""
    asked_by = threading.current_thread().name
    with _started_lock:
        if any(asked_by.startswith(prefix) for prefix in _ended):
            raise OSError(f"not started: {asked_by}'s owner is closing")
    if not PER_THREAD:
        if background and shutil.which("nice"):
            argv = ["nice", "-n", str(BACKGROUND_NICENESS), *argv]
        proc = subprocess.Popen(argv, **kwargs)
    else:
        normal, low = _launchers()
        proc = (low if background else normal).call(lambda: subprocess.Popen(argv, **kwargs))
    with _started_lock:
        for done in [p for p in _started if p.poll() is not None]:
            del _started[done]
        _started[proc] = asked_by
    return proc


def end_started_by(prefix: str) -> int:
    """Kill (with its process group when it has one of its own) every process still running that a thread
    whose name starts with ``prefix`` started, and start none for such a thread from now on: a verifier
    closing ends what its own threads were running (a reference being counted, the ceilings measured)
    instead of waiting on it. Returns how many were running."""
    import signal

    with _started_lock:
        _ended.add(prefix)
        mine = [p for p, name in _started.items() if name.startswith(prefix) and p.poll() is None]
    for proc in mine:
        try:
            if os.getpgid(proc.pid) == proc.pid:   # a session or group of its own: all of it
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except OSError:
            pass
    return len(mine)


if PER_THREAD:
    _launchers()  # now, in the importing thread: see the module docstring
