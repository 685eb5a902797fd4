"""The ``evokernel`` command: the workbench with no arguments, headless subcommands otherwise.

Each subcommand lives in its own ``evotui/cmd_*.py`` module exposing ``register(subparsers)``; a
handler returns the process exit code. Errors of our own (``EvoKernelError`` subclasses) become one
line on stderr and exit code 2; they never reach the user as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

# Subcommand modules, imported lazily so `evokernel tasks` never pays for Textual or torch.
COMMANDS = ("cmd_tasks", "cmd_verify", "cmd_inspect", "cmd_run", "cmd_report", "cmd_memory", "cmd_doctor",
            "cmd_cluster", "cmd_ui")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evokernel",
        description="EvoKernel: LLM-driven kernel synthesis with a value-driven memory. "
        "With no command, opens the workbench on the current directory's workspace.",
    )
    parser.add_argument("--workspace", "-w", default=None, help="workspace directory (default: current directory)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"evotui.{name}")
        except ModuleNotFoundError as exc:  # a command not built yet
            if exc.name == f"evotui.{name}":
                continue
            raise
        module.register(sub)
    return parser


# torch loads every installed device extension at `import torch` (the "torch.backends" entry points): with torch_npu
# installed and CANN's set_env.sh not sourced, that import raises ("libhccl.so: cannot open shared object file") and
# every command, the CPU's included, died with it. The Ascend backend imports torch_npu itself where it uses the NPU
# (its probes, its jobs): the command turns the autoload off unless the user set it.
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault(AUTOLOAD, "0")   # before anything imports torch
    from core.errors import user_errors

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # no command: the workbench, when it is installed
        args = parser.parse_args([*(argv if argv is not None else sys.argv[1:]), "ui"])
    try:
        return int(args.func(args) or 0)
    except user_errors() as exc:
        print(f"evokernel: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evokernel: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file we could not read or write: say which, and why
        where = f": {exc.filename}" if exc.filename else ""
        print(f"evokernel: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # our own bug: one line here, the traceback kept for a report
        log = _save_crash_report()
        print(f"evokernel: internal error ({type(exc).__name__}: {exc}); details in {log}", file=sys.stderr)
        return 1


def _save_crash_report() -> str:
    """Write the traceback being handled to a log under the user's cache; returns its path."""
    import tempfile
    import time
    import traceback

    from core.workspace import crash_dir

    base = crash_dir()
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        base = Path(tempfile.gettempdir())
    path = base / time.strftime("crash-%Y%m%d-%H%M%S.log")
    try:
        path.write_text(f"evokernel {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
    except OSError:
        return "(could not be saved)"
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
