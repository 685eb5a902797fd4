"""Gate 1, format: the candidate has the files its backend needs, of sane names and sizes, and a
``model.py`` that parses and defines ``ModelNew``.

A backend takes one or more forms (its ``forms``; "kernel-launch" when it declares none), each recognised by
its files: "kernel-launch", flat kernel sources with ``extern "C"`` launchers; "custom-op" (Ascend), a CANN
custom-operator project with its sources under ``op_host/`` and ``op_kernel/``
(``verifier.backends.ascend_project``)."""

from __future__ import annotations

import ast
import re

MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 1024 * 1024
MAX_FILES = 16
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def candidate_form(files: dict[str, str] | list[str]) -> str:
    """The form a candidate's files are written in: "custom-op" when it has sources under op_host/ or
    op_kernel/, else "kernel-launch"."""
    from verifier.backends.ascend_project import FORM_CUSTOM_OP, FORM_KERNEL_LAUNCH, is_project

    return FORM_CUSTOM_OP if is_project(files) else FORM_KERNEL_LAUNCH


def check_format(files: dict[str, str], source_suffixes: tuple[str, ...],
                 header_suffixes: tuple[str, ...], forms: tuple[str, ...] = ("kernel-launch",),
                 target: str | None = None) -> str | None:
    """None when the candidate is well-formed in one of ``forms`` (the backend's), else what is wrong (one
    actionable sentence). ``target``: the device the build targets (Ascend: the SoC), for the rules that depend
    on it (a custom op's AddConfig)."""
    if "model.py" not in files:
        return "model.py is missing: it must define ModelNew and call the kernels through verifier.runtime.load()"
    form = candidate_form(files)
    if form not in forms:
        return (f"the files are in the {form} form ({', '.join(n for n in files if '/' in n)[:120]}), which this "
                f"backend does not take; it takes: {', '.join(forms)}")
    if form == "custom-op":
        from verifier.backends.ascend_project import check_project_layout

        return _sizes(files) or check_project_layout(files, target) or _model(files)
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
