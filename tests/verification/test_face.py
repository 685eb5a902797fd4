"""The verifier's face (verifier/__init__.py): every name it exports resolves to the object its module holds, the
names above the bottom layer are imported on first use only, and what the type checker is told (the TYPE_CHECKING
imports) is what the lazy table loads. Core imports nothing else of the verifier (import-linter, pyproject.toml)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import verifier

INIT = Path(verifier.__file__)


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """name -> (module, its name there), from the ``if TYPE_CHECKING:`` block of verifier/__init__.py."""
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                for alias in stmt.names:
                    found[alias.asname or alias.name] = (stmt.module, alias.name)
    return found


def test_every_exported_name_is_its_modules_object():
    assert len(verifier.__all__) == len(set(verifier.__all__))
    for name in verifier.__all__:
        assert getattr(verifier, name) is not None, name
    for name, (module, attribute) in verifier._LAZY.items():
        assert getattr(verifier, name) is getattr(importlib.import_module(module), attribute), name


def test_the_type_checker_is_told_what_the_lazy_table_loads():
    assert _type_checking_imports() == verifier._LAZY
    eager = set(verifier.__all__) - set(verifier._LAZY)
    assert eager and all(name in vars(verifier) for name in eager)


def test_an_unknown_name_is_an_attribute_error():
    try:
        verifier.not_a_name  # noqa: B018
    except AttributeError as exc:
        assert "not_a_name" in str(exc)
    else:
        raise AssertionError("verifier.not_a_name resolved")


def test_importing_the_face_imports_neither_torch_nor_the_rooms_above_the_bottom_layer():
    # what every job, fork server and `import verifier.runtime` pays: the bottom layer only
    code = ("import sys, verifier\n"
            "loaded = [m for m in ('torch', 'numpy', 'verifier.harness', 'verifier.sandbox', 'verifier.backends',\n"
            "                      'verifier.machine', 'verifier.sizing', 'verifier.gates') if m in sys.modules]\n"
            "print(','.join(loaded))")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert ran.stdout.strip() == ""
