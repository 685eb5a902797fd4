"""Candidate files in the workspace: ``kernels/<task>/`` (what a person edits) and its ``best/`` copy.

The engine never overwrites a person's work: it writes a new best to ``best/`` always, and to the
task folder only when that folder is empty or still holds exactly what the engine last wrote there
(recorded by hash in ``.evokernel-written``). The watcher uses the same record to tell a person's
saves from the engine's own writes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from verifier.backends import declared_suffixes
from verifier.harness.candidate_files import candidate_paths, name_problem

MARK = ".evokernel-written"
EDIT_MARK = ".evokernel-edit"
PENDING_MARK = ".evokernel-pending"


def candidate_suffixes() -> tuple[str, ...]:
    """``.py`` and every kernel-source and header suffix a backend in the table declares, and the other
    files a backend's forms hold (``extra_files``: a custom-op project's op JSON and CMakeLists.txt)."""
    return (".py", *declared_suffixes("source_suffixes"), *declared_suffixes("header_suffixes"),
            *declared_suffixes("extra_files"))


def read_candidate_files(folder: Path) -> dict[str, str]:
    """The candidate files in ``folder``, named by their path in it (``kernel.cpp``, ``op_host/x.cpp``): its
    non-hidden files and the folders a backend's form keeps sources in (op_host/, op_kernel/), never best/,
    no symbolic links
    (``verifier.harness.candidate_files.candidate_paths``)."""
    if not folder.is_dir():
        return {}
    suffixes = candidate_suffixes()
    return {name: p.read_text(errors="replace") for name, p in candidate_paths(folder) if name.endswith(suffixes)}


def files_hash(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]


def engine_wrote(folder: Path) -> str | None:
    """The hash of what the engine last wrote to ``folder`` (None if it never did)."""
    try:
        return (folder / MARK).read_text().split()[0]
    except (OSError, IndexError):
        return None


def _write_all(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in read_candidate_files(folder):
        if old not in files:
            (folder / old).unlink()
            for parent in (folder / old).parents:   # sub-folders the old files leave empty
                if parent == folder or any(parent.iterdir()):
                    break
                parent.rmdir()
    for name, text in files.items():
        if name_problem(name):   # never outside the folder, whatever a stored attempt holds
            continue
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)


def write_candidate(folder: Path, files: dict[str, str], attempt_id: str | None = None) -> None:
    """Put ``files`` in ``folder`` as the engine's, noting which attempt they are (a person's edits
    after this one descend from it, not from their earlier edits)."""
    _write_all(folder, files)
    (folder / MARK).write_text(f"{files_hash(files)} {attempt_id or ''}\n")
    (folder / EDIT_MARK).unlink(missing_ok=True)


def note_edit(folder: Path, files: dict[str, str], attempt_id: str) -> None:
    """Record that a person's save of ``files`` in ``folder`` was logged as attempt ``attempt_id``:
    their next save is its child."""
    tmp = folder / f"{EDIT_MARK}.tmp"
    tmp.write_text(f"{files_hash(files)} {attempt_id}\n")
    os.replace(tmp, folder / EDIT_MARK)


def note_pending(folder: Path, digest: str) -> None:
    """Record that a person's save (``digest``, its ``files_hash``) is being verified: if the workbench
    closes before its verdict is recorded, the next opening verifies it instead of taking it as seen.
    A folder that cannot take the note (removed meanwhile, read-only) is verified all the same."""
    tmp = folder / f"{PENDING_MARK}.tmp"
    try:
        tmp.write_text(f"{digest}\n")
        os.replace(tmp, folder / PENDING_MARK)
    except OSError:
        pass


def pending_in(folder: Path) -> str | None:
    """The hash of the save in ``folder`` whose verification did not finish (None if none)."""
    try:
        return (folder / PENDING_MARK).read_text().split()[0]
    except (OSError, IndexError):
        return None


def clear_pending(folder: Path) -> None:
    """The save being verified in ``folder`` has its verdict (or its failure) recorded."""
    try:
        (folder / PENDING_MARK).unlink()
    except OSError:   # gone already, or its folder with it
        pass


def edit_in(folder: Path) -> str | None:
    """The attempt a person's last logged save in ``folder`` became (None if none since the engine
    last wrote there)."""
    try:
        parts = (folder / EDIT_MARK).read_text().split()
        return parts[1] if len(parts) > 1 else None
    except OSError:
        return None


def parent_of_edit(folder: Path) -> str | None:
    """The parent of a person's next save in ``folder``: their previous logged edit, else the attempt
    the engine put there (promoted, or the best written there), else none (a new root)."""
    return edit_in(folder) or attempt_in(folder)


def attempt_in(folder: Path) -> str | None:
    """The attempt id the engine last put in ``folder`` (the parent of a person's edit)."""
    try:
        parts = (folder / MARK).read_text().split()
        return parts[1] if len(parts) > 1 else None
    except OSError:
        return None


def write_best(folder: Path, files: dict[str, str], attempt_id: str | None = None) -> bool:
    """Write a new best: always to ``best/``; to ``folder`` unless a person changed it. Returns
    whether the task folder was updated."""
    _write_all(folder / "best", files)
    current = read_candidate_files(folder)
    if current and files_hash(current) != engine_wrote(folder):
        return False
    write_candidate(folder, files, attempt_id)
    return True


def write_best_only(folder: Path, files: dict[str, str]) -> None:
    """Copy a person's new best to ``best/`` (their own folder already holds it)."""
    _write_all(folder / "best", files)


STARTER_KERNEL = '''// {task_id}: write the kernel here. Launchers are extern "C" functions taking pointers and numbers.
#include <cstdint>

extern "C" void {task_id}_forward(const float* x, float* out, int64_t n) {{
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];  // TODO: compute {task_id}
}}
'''

STARTER_MODEL = '''import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    """{task_id}: the same constructor arguments as the reference Model."""

    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.{task_id}_forward(x, out, x.numel())
        return out
'''


def starter_candidate(task_id: str) -> dict[str, str]:
    """A first candidate for a person to edit (CPU contract; compiles, but is not correct yet)."""
    ident = "".join(c if c.isalnum() else "_" for c in task_id)
    return {"kernel.cpp": STARTER_KERNEL.format(task_id=ident), "model.py": STARTER_MODEL.format(task_id=ident)}
