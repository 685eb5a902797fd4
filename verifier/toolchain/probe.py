"""Running the commands and probes that toolchain discovery uses (see verifier.toolchain.discovery)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.processes import run_process

# ----------------------------------------------------------------------------- running commands


@dataclass
class Ran:
    """How a probe command ended: ``code`` is None when it could not start or timed out."""

    code: int | None
    out: str


def run(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 30.0) -> Ran:
    """Run a probe command (``verifier.processes.run_process``: its group killed at the deadline); never
    raises."""
    ran = run_process(argv, timeout=timeout, env=env, background=False, output_limit=1_000_000)
    if ran.timed_out:
        return Ran(None, f"{Path(argv[0]).name} did not answer within {timeout:.0f} s")
    if not ran.started:
        return Ran(None, f"could not run {argv[0]}: {ran.output.removeprefix(f'could not start {argv[0]}: ')}")
    return Ran(ran.returncode, ran.output)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


PROBE_MARK = "EVOKERNEL-PROBE "


def probe_python(code: str, *, python: str | None = None, env: Mapping[str, str] | None = None,
                 timeout: float = 120.0) -> dict[str, Any]:
    """Run ``code`` in a fresh Python (never in this process: importing a device runtime can break or
    poison it) and return the JSON it printed after ``PROBE_MARK``; ``{"error": ...}`` on failure."""
    ran = run([python or sys.executable, "-c", code], env=env, timeout=timeout)
    for line in reversed(ran.out.splitlines()):
        if line.startswith(PROBE_MARK):
            try:
                found: dict[str, Any] = json.loads(line[len(PROBE_MARK):])
                return found
            except ValueError:
                break
    tail = [line for line in ran.out.strip().splitlines() if line.strip()]
    return {"error": tail[-1].strip() if tail else f"the probe exited with {ran.code}"}


def probe_env(env: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a torch probe runs in: the host's, without autoloading device plugins (a broken
    torch_npu would otherwise make ``import torch`` itself fail)."""
    out = dict(os.environ if env is None else env)
    out.update(extra or {})
    out["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return out
