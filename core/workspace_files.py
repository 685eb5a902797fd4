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

from verifier import candidate_paths, declared_suffixes, name_problem

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
    (``verifier.candidate_files.candidate_paths``)."""
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


STARTER_KERNEL = '''// {name}: write the kernel here. Launchers are extern "C" functions taking pointers and numbers;
// one per input dtype of the task ({dtypes}), chosen in model.py by the tensor's dtype.
#include <cstdint>
{launchers}'''

STARTER_LAUNCHER = '''
extern "C" void {launcher}(const {ctype}* x, {ctype}* out, int64_t n) {{{note}
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];  // TODO: compute {name}
}}
'''

STARTER_MODEL = '''import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()
LAUNCHERS = {{   # the kernel's launcher for each input dtype
{table}
}}


class ModelNew(nn.Module):
    """{name}: the same constructor arguments as the reference Model."""

    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, x, *rest):
        x = x.contiguous()
        out = torch.empty_like(x)
        LAUNCHERS[x.dtype](x, out, x.numel())
        return out
'''

# The C element type of each dtype's pointer (verifier.toolchain.cdecl.POINTER_DTYPES accepts each): fp16 and
# bf16 as their 16 bits, which the starter copies as they are.
STARTER_CTYPES = {"float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t",
                  "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t",
                  "bool": "bool"}


def c_identifier(name: str) -> str:
    """A C identifier made from a task id: ``4_abs`` -> ``op_4_abs``, ``19_ReLU`` -> ``op_19_ReLU``,
    ``conv2d-3x3`` -> ``conv2d_3x3`` (letters, digits and ``_``, never a digit first)."""
    ident = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name) or "task"
    return f"op_{ident}" if ident[0].isdigit() else ident


def starter_candidate(name: str, dtypes: tuple[str, ...] = ("float32",)) -> dict[str, str]:
    """A first candidate for a person to edit, for task ``name`` whose inputs come in ``dtypes`` (CPU contract:
    it builds and runs for every dtype, copying its first input; it is not correct yet)."""
    ident = c_identifier(name)
    wanted = [d for d in dict.fromkeys(dtypes) if d in STARTER_CTYPES] or ["float32"]
    launchers = "".join(STARTER_LAUNCHER.format(launcher=f"{ident}_{d}", ctype=STARTER_CTYPES[d], name=name,
                                                note="" if STARTER_CTYPES[d] != "uint16_t" else
                                                f"  // {d}: its 16 bits")
                        for d in wanted)
    table = "\n".join(f"    torch.{d}: lib.{ident}_{d}," for d in wanted)
    return {"kernel.cpp": STARTER_KERNEL.format(name=name, dtypes=", ".join(wanted), launchers=launchers),
            "model.py": STARTER_MODEL.format(name=name, table=table)}
