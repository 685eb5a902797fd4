"""How a job's process handles signals, compared before and after candidate code runs (a kernel may not
install handlers or arm timers to interrupt the harness's code in its own process)."""

from __future__ import annotations

import ctypes
import signal

_ITIMERS = ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
_sigaction = None


def _handler_of(sig: int) -> int | None:
    """The address of ``sig``'s handler (0 default, 1 ignored), queried from libc; None where libc does
    not answer (glibc's own real-time signals)."""
    global _sigaction
    if _sigaction is None:
        _sigaction = ctypes.CDLL(None, use_errno=True).sigaction
        _sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    old = ctypes.create_string_buffer(512)      # a struct sigaction, whatever its size: the handler is first
    if _sigaction(sig, None, old) != 0:
        return None
    return ctypes.c_void_p.from_buffer(old).value or 0


def _proc_dispositions() -> dict[int, int] | None:
    """{signal: 1 ignored, 2 caught} from /proc/self/status (SigIgn, SigCgt), or None."""
    try:
        fields = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        ignored, caught = int(fields["SigIgn"], 16), int(fields["SigCgt"], 16)
    except (OSError, KeyError, ValueError):
        return None
    return {n: 2 if caught >> (n - 1) & 1 else 1 if ignored >> (n - 1) & 1 else 0 for n in range(1, signal.NSIG)}


def signal_dispositions() -> tuple[tuple[str, str], ...]:
    """How this process handles signals now, for comparing before and after candidate code runs: a
    tuple of (what, state) pairs, in signal order: ``("SIGALRM", "default" | "ignored" | "caught 0x...")``
    (the handler's address, so a replaced handler shows too), ``("SIGUSR2", "blocked")`` for each signal
    the calling thread blocks, ``("ITIMER_REAL", "armed")`` for each armed interval timer. Two results
    are equal unless a handler, the mask or a timer changed in between; ``signal_changes`` says how.
    Handlers are queried from libc (about 64 sigaction calls, tens of microseconds); without it from
    /proc/self/status (caught or not, no address), else from ``signal.getsignal`` (Python's own view)."""
    names = {s.value: s.name for s in signal.Signals}
    state: list[tuple[str, str]] = []
    proc = None
    for sig in range(1, signal.NSIG):
        name = names.get(sig, f"signal {sig}")
        try:
            handler = _handler_of(sig)
        except (OSError, AttributeError):
            proc = proc if proc is not None else _proc_dispositions() or {}
            handler = proc.get(sig)
            if handler is None and sig in names:
                python = signal.getsignal(sig)
                handler = 0 if python in (signal.SIG_DFL, None) else 1 if python == signal.SIG_IGN else id(python)
        if handler is not None:
            state.append((name, "default" if handler == 0 else "ignored" if handler == 1 else f"caught {handler:#x}"))
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    state += [(names.get(int(s), f"signal {int(s)}"), "blocked") for s in sorted(blocked)]
    state += [(t, "armed") for t in _ITIMERS if signal.getitimer(getattr(signal, t)) != (0.0, 0.0)]
    return tuple(state)


def signal_changes(before: tuple[tuple[str, str], ...], after: tuple[tuple[str, str], ...]) -> list[str]:
    """What changed between two ``signal_dispositions()``, in words: ``SIGALRM now caught``, ``SIGINT's
    handler replaced``, ``SIGTERM now ignored``, ``SIGUSR2 now blocked``, ``ITIMER_REAL now armed`` (and
    ``... no longer ...``); empty when nothing did."""
    def split(state: tuple[tuple[str, str], ...]) -> tuple[dict[str, str], list[str], list[str]]:
        handlers = {k: v for k, v in state if v not in ("blocked", "armed")}
        return handlers, [k for k, v in state if v == "blocked"], [k for k, v in state if v == "armed"]

    (h0, b0, t0), (h1, b1, t1) = split(before), split(after)
    changes = []
    for name, now in h1.items():
        was = h0.get(name, "default")
        if now != was:
            kind, old_kind = now.split()[0], was.split()[0]
            changes.append(f"{name}'s handler replaced" if kind == old_kind == "caught" else f"{name} now {kind}")
    changes += [f"{name} now blocked" for name in b1 if name not in b0]
    changes += [f"{name} no longer blocked" for name in b0 if name not in b1]
    changes += [f"{name} now armed" for name in t1 if name not in t0]
    changes += [f"{name} no longer armed" for name in t0 if name not in t1]
    return changes
