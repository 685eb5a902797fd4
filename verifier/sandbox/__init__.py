"""Where untrusted candidate code runs. The filesystem view and the checks of which layers work here are
``verifier.sandbox.isolation``; the fork server ``verifier.sandbox.client`` (harness side) and
``verifier.sandbox.forkserver`` (inside the sandbox: its loop); the Linux primitives it applies (hardening,
capabilities, namespaces, Landlock, limits, a group stopped or killed) ``verifier.sandbox.lockdown``; the seccomp
filter ``verifier.sandbox.seccomp``; what the harness reads of a job from outside ``verifier.sandbox.procs``; a
child's scrubbed environment ``verifier.processes``.

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
* **per job**, the forked child gets its own session, a PID namespace of its own (candidates: it can
  name no process but its own threads), resource limits (CPU time, address space, file size, open
  files, no core dumps), a Landlock domain where the kernel has Landlock (files are read only on the
  same allow-list, and written only in the job's own folder and a few device nodes; no other job's
  folder is readable; no access to other processes' memory), and a seccomp filter
  (``verifier.sandbox.seccomp``): no fork, exec, sockets other than Unix ones, ptrace, signals to
  other processes or signalling timers, scheduling and limits of the caller only; narrowed once the
  job's set-up is done (no open, no descriptor duplicated, no socket while the candidate's code runs).
  A wall-clock timeout kills it. Job folders have unpredictable names in a jobs root the sandbox can
  enter but not list. The harness reads what it can of a job from outside (``verifier.sandbox.procs``:
  its settings, its memory while stopped) rather than asking it, and reads back only the plain files
  a job left (``verifier.sandbox.client.plain_files_only``).

A hang, segfault, fork bomb or memory hog ends as a ``JobExit`` the verifier turns into an Outcome.

The sizing probe, which runs a task's reference (a suite may come from anywhere), is such a confined job
too (``verifier.sizing.launch.ProbeSandbox``), without the candidate phase and without a CPU-time limit.
"""

from __future__ import annotations

# The package's public names, from the modules that hold them: the view and the isolation layers
# (verifier.sandbox.isolation), a child's environment (verifier.processes: one secret scrub for every child).
from verifier.processes import declared_env, scrubbed_env
from verifier.sandbox.isolation import (
    bwrap_argv,
    bwrap_status,
    home_roots,
    landlock_status,
    sandbox_readable,
    sandbox_view,
    seccomp_status,
    system_view,
)

__all__ = ["bwrap_argv", "bwrap_status", "declared_env", "home_roots", "landlock_status", "sandbox_readable",
           "sandbox_view", "scrubbed_env", "seccomp_status", "system_view"]
