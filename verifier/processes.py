"""The harness's own child processes: one runner for every command it starts with a deadline (a build, a
toolchain probe, the sizing probe, the roofline's counting and ceilings), and one secret scrub for the
environments they get.

``run_process`` starts a command in a process group of its own, at normal or background priority
(``verifier.priority``), kills the whole group at its deadline (a compiler's or a reference's
children die with it), keeps the last ``output_limit`` characters of its combined output in an unnamed
file (a command that prints gigabytes costs no memory, and nothing it runs can see or replace the file),
and never raises: a command that cannot start is a ``ProcResult`` that says why.

``scrubbed_env`` is the environment of every child that runs code not ours (a build, a reference, a
sandboxed job): an allow-list of the host's variables, minus anything that looks like a credential
(``SECRET``); ``declared_env`` the few a backend declares on top; ``without_secrets`` the host's whole
environment minus the same credentials, for the harness's own tools.

The fork server's jobs are children of the fork server, not of this runner (``verifier.sandbox.client``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Variables a child may inherit from the host, before the secret filter below.
_ENV_ALLOW = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|LD_LIBRARY_PATH|"
    r"CUDA_VISIBLE_DEVICES|CUDA_HOME|CUDA_PATH|NVIDIA_VISIBLE_DEVICES|ASCEND_[A-Z_]+|ASCEND_RT_VISIBLE_DEVICES|"
    r"TORCH_DEVICE_BACKEND_AUTOLOAD|TASK_QUEUE_ENABLE)$"
)

SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.I)
"""A variable whose name matches never reaches a child, allow-listed or not."""

PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
"""The checkout that runs: what a child's PYTHONPATH starts with, so jobs run this code."""


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less every variable that looks like a credential (``SECRET``)."""
    return {k: v for k, v in env.items() if not SECRET.search(k)}


def scrubbed_env(extra: dict[str, str] | None = None, home: str | None = None) -> dict[str, str]:
    """The environment a worker, a reference or a compiler gets: an allow-list, minus anything
    secret-looking, with this checkout first on PYTHONPATH; ``home``: its HOME and TMPDIR; ``extra`` on
    top (secret-looking names dropped there too)."""
    env = without_secrets({k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k)})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if home:
        env["HOME"] = env["TMPDIR"] = home
    env.update(without_secrets(extra or {}))
    return env


def declared_env(env: Mapping[str, str], names: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The part of ``env`` a job may get on top of its sandbox's environment: the variables a backend
    declares (``names``), never one that looks like a credential, values without NUL bytes."""
    return {k: v for k, v in without_secrets(env).items() if k in names and "\0" not in v}


@dataclass
class ProcResult:
    """How a child ended: ``returncode`` None when it could not start (``output`` says why); ``timed_out``
    when it was killed at its deadline."""

    returncode: int | None
    timed_out: bool
    seconds: float
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def started(self) -> bool:
        return self.returncode is not None

    def describe(self) -> str:
        """How it ended, in a few words: "exited with status 2", "killed by signal 9", "timed out"."""
        if self.timed_out:
            return f"ran over its deadline ({self.seconds:.0f} s) and was killed"
        if self.returncode is None:
            return self.output or "could not start"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exited with status {self.returncode}"

    def last_line(self, limit: int = 300) -> str:
        """Its output's last non-empty line (the error a failing tool ends with), at most ``limit`` characters."""
        lines = [line.strip() for line in self.output.strip().splitlines() if line.strip()]
        return lines[-1][:limit] if lines else ""


def run_process(argv: list[str], *, timeout: float, cwd: str | Path | None = None,
                env: Mapping[str, str] | None = None, output_limit: int = 64_000, background: bool = True,
                limits: Callable[[], None] | None = None, stderr: bool = True) -> ProcResult:
    """Run ``argv`` in its own process group; at ``timeout`` kill the whole group. Its stdin is empty;
    its output is combined stdout and stderr (``stderr`` False: stdout alone, for a tool whose stdout is
    parsed), the last ``output_limit`` characters. ``background``: at lower CPU priority (builds, probes,
    counting: nothing that is timed; see verifier.priority). ``limits``: called in the child before
    it executes (resource limits)."""
    from verifier import priority

    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:   # unnamed: nothing the command runs can reach it
        try:
            proc = priority.popen(argv, background=background, cwd=cwd, env=dict(env) if env is not None else None,
                                  stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
                                  start_new_session=True, preexec_fn=limits)
        except OSError as exc:
            return ProcResult(None, False, 0.0, f"could not start {argv[0]}: {exc.strerror or exc}")
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            proc.wait()
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - output_limit))
        output = log.read().decode(errors="replace")
    return ProcResult(proc.returncode, timed_out, time.perf_counter() - started, output)


def kill_group(pid: int) -> None:
    """Kill the process group ``pid`` leads (or the process alone, when it leads none)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
