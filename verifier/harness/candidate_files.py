"""A candidate as files: read from its folder (bounded, hidden files and build products skipped) and
named by the hash of its contents.

A file's name is its path relative to the candidate's folder, with ``/`` between folders: flat for the
kernel-launch form (``kernel.cpp``), in folders for a custom-op project (``op_host/add_custom.cpp``).
``name_problem`` is the one rule for such names wherever they come from (an answer, a folder)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

MAX_READ_BYTES = 1024 * 1024
MAX_DEPTH = 3            # op_kernel/erf/x.h: the deepest a real custom-op answer goes
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a candidate file's name (one line), or None: names are relative to the
    candidate's folder, at most ``MAX_DEPTH`` parts, each of letters, digits and ``_ . -`` (not
    starting with a dot), with no ``..``."""
    if name.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", name):
        return f"file name {name!r} is an absolute path: name each file relative to the kernel folder (op_host/x.cpp)"
    parts = name.split("/")
    if ".." in parts:
        return f"file name {name!r} climbs out of the kernel folder ('..'): name each file inside it"
    if len(parts) > MAX_DEPTH:
        return f"file name {name!r} is {len(parts) - 1} folders deep; at most {MAX_DEPTH - 1}"
    if not all(_PART.match(p) for p in parts):
        return (f"file name {name!r} is not allowed: letters, digits, '_', '.' and '-' only, folders "
                "separated by '/', no part starting with '.'")
    return None


def candidate_paths(folder: Path) -> Iterator[tuple[str, Path]]:
    """(name, path) of every regular file of the candidate in ``folder``, sorted: the top level and the
    folders a backend's form keeps sources in (``candidate_folders``: a custom-op project's ``op_host/`` and
    ``op_kernel/``, with their sub-folders) down to ``MAX_DEPTH``; nothing hidden, and no other folder
    (``best/``, a person's build or notes). Symbolic links, to files or folders, are never followed: a
    candidate is what lies in its folder."""
    from verifier.backends import declared_suffixes

    folders = declared_suffixes("candidate_folders")

    def walk(here: Path, prefix: str, depth: int) -> Iterator[tuple[str, Path]]:
        for path in sorted(here.iterdir()):
            if path.name.startswith(".") or path.is_symlink():
                continue
            name = prefix + path.name
            if path.is_dir():
                if depth + 1 < MAX_DEPTH and (depth > 0 or path.name in folders):
                    yield from walk(path, name + "/", depth + 1)
            elif path.is_file():   # an odd name is read: the format gate says what is wrong with it
                yield name, path
    yield from walk(Path(folder), "", 0)


def read_candidate(folder: Path) -> dict[str, str]:
    """The candidate's files (``candidate_paths``; build products skipped), each read up to just past
    ``MAX_READ_BYTES``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"candidate folder {folder} does not exist")
    files = {}
    for name, path in candidate_paths(folder):
        if path.suffix not in (".pyc", ".so", ".o"):
            data = path.read_bytes()[: MAX_READ_BYTES + 1]
            files[name] = data.decode("utf-8", errors="replace")
    return files


def candidate_hash(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]
