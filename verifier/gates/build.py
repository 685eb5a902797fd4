"""Gate 3, build: the candidate's sources compiled by the backend's toolchain (verifier.build does the
compiling and caching), and the verdict in words: a failure carries the trimmed diagnostics. A ``model.py`` that
calls a launcher no source defines (``lib.relu_fp16`` beside ``relu_f16``) fails here too, with the names the
library has: a misspelt name is a slip like a typo, not a wrong kernel (#51: it was a correctness failure,
reward -1, the parent's Q2 moved, and its message ended with an empty excerpt)."""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from verifier.backends.base import Backend
from verifier.build import BuildResult, build_candidate


@dataclass
class BuildVerdict:
    passed: bool
    message: str
    build: BuildResult


def check_build(backend: Backend, files: dict[str, str], cache_dir: Path, *, timeout: float, sandbox: bool,
                hidden: list[str], slow_timeout: float | None = None) -> BuildVerdict:
    """Build ``files`` (cached by content) and say what happened (``slow_timeout``: see ``build_candidate``)."""
    build = build_candidate(backend, files, cache_dir, timeout=timeout, sandbox=sandbox, hidden=hidden,
                            slow_timeout=slow_timeout)
    if not build.ok:
        return BuildVerdict(False, f"the build failed:\n{build.log}", build)
    names = [s.name for s in build.signatures]
    unknown = unknown_launchers(files.get("model.py", ""), names, backend.device_runtime.entry_prefix)
    if unknown:
        return BuildVerdict(False, launcher_words(unknown, names), build)
    return BuildVerdict(True, "cached" if build.cached else f"built in {build.seconds:.2f} s", build)


def unknown_launchers(model: str, launchers: Iterable[str], prefix: str = "") -> list[tuple[str, int]]:
    """The functions ``model.py`` calls on the library ``load()`` returned (``lib.name``, ``getattr(lib, "name")``)
    that no launcher of the build answers to (``prefix`` + name: a device runtime's launch entries), with their
    lines; a name built at run time is not known here and not listed."""
    try:
        tree = ast.parse(model)
    except SyntaxError:
        return []   # the format gate said so
    known = set(launchers)
    libs = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _calls_load(node.value)
            for t in node.targets if isinstance(t, ast.Name)}
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in libs:
            name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in libs
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name = node.args[1].value
        if name and not name.startswith("_") and name not in known and f"{prefix}{name}" not in known:
            found.setdefault(name, getattr(node, "lineno", 0))
    return sorted(found.items(), key=lambda kv: kv[1])


def _calls_load(value: ast.expr) -> bool:
    func = value.func if isinstance(value, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == "load") or (isinstance(func, ast.Attribute)
                                                                    and func.attr == "load")


def launcher_words(unknown: list[tuple[str, int]], launchers: list[str]) -> str:
    """The unknown calls in words, each with the launcher it likely meant, and the fix."""
    said = []
    for name, line in unknown:
        close = difflib.get_close_matches(name, launchers, n=1, cutoff=0.6)
        said.append(f"lib.{name} (model.py line {line})" + (f", did you mean {close[0]}?" if close else ""))
    return (f"model.py calls {'; '.join(said)}: no kernel source defines {'it' if len(unknown) == 1 else 'them'} as "
            f"an extern \"C\" launcher; the library has {', '.join(sorted(launchers)) or 'none'}. Rename the call or "
            "the launcher (a slip, like a typo: no experiment)")
