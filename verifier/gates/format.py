"""Gate 1, format: the candidate has the files its backend needs, of sane names and sizes, and a
``model.py`` that parses and defines ``ModelNew``.

A backend takes one or more forms (its ``forms``), each recognised by its files: "kernel-launch", flat kernel
sources with ``extern "C"`` launchers, is every backend's and checked here; a form of a backend's own (Ascend's
"custom-op", a CANN custom-operator project under ``op_host/`` and ``op_kernel/``) is recognised by whichever
backend declares it (``Backend.form_of``) and its layout checked by that backend (``Backend.layout_problem``)."""

from __future__ import annotations

import ast
import re

from verifier.backends import candidate_form
from verifier.backends.base import FORM_KERNEL_LAUNCH, Backend

MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 1024 * 1024
MAX_FILES = 16
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def check_format(files: dict[str, str], backend: Backend) -> str | None:
    """None when the candidate is well-formed in one of ``backend``'s forms, else what is wrong (one actionable
    sentence)."""
    if "model.py" not in files:
        return "model.py is missing: it must define ModelNew and call the kernels through verifier.runtime.load()"
    form = candidate_form(files)
    if form not in backend.forms:
        return (f"the files are in the {form} form ({', '.join(n for n in files if '/' in n)[:120]}), which this "
                f"backend does not take; it takes: {', '.join(backend.forms)}")
    if form != FORM_KERNEL_LAUNCH:
        return _sizes(files) or backend.layout_problem(form, files) or _model(files)
    source_suffixes, header_suffixes = backend.source_suffixes, backend.header_suffixes
    sources = [n for n in files if n.endswith(source_suffixes)]
    if not sources:
        return f"no kernel source: add at least one {' or '.join(source_suffixes)} file with extern \"C\" launchers"
    if len(files) > MAX_FILES:
        return f"{len(files)} files; at most {MAX_FILES} are allowed"
    allowed = (".py", *source_suffixes, *header_suffixes)
    for name in files:
        if not _NAME.match(name):
            return f"file name {name!r} is not allowed (letters, digits, '_', '.', '-'; no folders)"
        if not name.endswith(allowed):
            return f"{name}: unexpected file type; allowed: {', '.join(allowed)}"
        if name.endswith(".py") and name != "model.py":
            return f"{name}: only model.py may be Python"
    return _sizes(files) or _model(files)


def _sizes(files: dict[str, str]) -> str | None:
    total = 0
    for name, text in files.items():
        size = len(text.encode())
        total += size
        if size > MAX_FILE_BYTES:
            return f"{name} is over {MAX_FILE_BYTES // 1024} KiB; a file may be at most {MAX_FILE_BYTES // 1024} KiB"
        if "\0" in text:
            return f"{name} contains NUL bytes"
    if total > MAX_TOTAL_BYTES:
        return f"the candidate is {total // 1024} KiB in all; at most {MAX_TOTAL_BYTES // 1024} KiB"
    return None


def _model(files: dict[str, str]) -> str | None:
    try:
        tree = ast.parse(files["model.py"], "model.py")
    except SyntaxError as exc:
        return f"model.py line {exc.lineno}: syntax error: {exc.msg}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "model.py defines no class ModelNew at module level"
    return None
