"""Issue 27, item 2: the README's command lines run as written on a fresh clone. Every `make` line
names a target of the Makefile, every `evokernel` line parses with the real command's parser (its
subcommand, options and choices exist), and the README puts `evokernel` on the PATH (activating the
virtual environment `make` creates) before its first `evokernel` line."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent


def command_lines() -> list[str]:
    """The command lines of the README's shell blocks, in order (a `$ ` prompt dropped, output lines skipped)."""
    text = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        prompted = any(line.startswith("$ ") for line in block.splitlines())
        for line in block.splitlines():
            if prompted and not line.startswith("$ "):
                continue   # output of a command shown with its prompt
            line = line.removeprefix("$ ").split("  #")[0].split(" # ")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def variants(line: str) -> list[list[str]]:
    """argv lists a usage line stands for: `[optional ...]` and `...` dropped, `a|b` each in turn."""
    words = shlex.split(re.sub(r"\[[^\]]*\]|\.\.\.", "", line))[1:]
    choices = [w.split("|") if "|" in w and not w.startswith("-") else [w] for w in words]
    return [list(c) for c in itertools.product(*choices)]


def test_every_make_line_names_a_target():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    used = [line.split()[1] for line in command_lines() if line.startswith("make ")]
    assert used and all(t in targets for t in used), (used, targets)


def test_every_evokernel_line_parses_with_the_real_command():
    from evotui.cli import build_parser

    lines = [line for line in command_lines() if line.startswith("evokernel")]
    assert len(lines) >= 10
    for line in lines:
        for argv in variants(line):
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"README: `{line}` does not parse as `evokernel {' '.join(argv)}`")


def test_evokernel_is_on_the_path_before_the_first_example():
    lines = command_lines()
    venv = re.search(r"^VENV\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    first = next(i for i, line in enumerate(lines) if line.startswith("evokernel"))
    activate = [i for i, line in enumerate(lines) if line in (f". {venv}/bin/activate", f"source {venv}/bin/activate")]
    assert activate and activate[0] < first, "the README never puts evokernel on the PATH before using it"
