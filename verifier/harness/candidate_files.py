"""A candidate as files: read from its folder (bounded, hidden files and build products skipped) and
named by the hash of its contents."""

from __future__ import annotations

import hashlib
from pathlib import Path

MAX_READ_BYTES = 1024 * 1024


def read_candidate(folder: Path) -> dict[str, str]:
    """The candidate's files (top level of ``folder``; hidden files, caches and ``best/`` skipped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"candidate folder {folder} does not exist")
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.startswith(".") and path.suffix not in (".pyc", ".so", ".o"):
            data = path.read_bytes()[: MAX_READ_BYTES + 1]
            files[path.name] = data.decode("utf-8", errors="replace")
    return files


def candidate_hash(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]
