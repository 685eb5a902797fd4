"""Fingerprints: when two experiences count as near-duplicates.

Two experiences are near-duplicates when they share task, kind and backend and their code (or,
without code, their title and text) is the same once normalised: comments dropped, whitespace
collapsed. ``#pragma`` and ``#include`` lines are code in C-like files and are kept.
"""

from __future__ import annotations

import hashlib
import re

_C_BLOCK = re.compile(r"/\*.*?\*/", re.S)
_C_LINE = re.compile(r"//[^\n]*")
_PY_LINE = re.compile(r"(?m)^\s*#[^\n]*$|\s#\s[^\n]*$")
_SPACE = re.compile(r"\s+")


def normalise_code(name: str, content: str) -> str:
    """``content`` without comments and with runs of whitespace collapsed to one space."""
    if name.endswith(".py"):
        content = _PY_LINE.sub("", content)
    else:
        content = _C_LINE.sub("", _C_BLOCK.sub("", content))
    return _SPACE.sub(" ", content).strip()


def normalise_text(text: str) -> str:
    """``text`` lower-cased with whitespace collapsed."""
    return _SPACE.sub(" ", text).strip().lower()


def fingerprint(task_id: str, kind: str, backend: str, files: dict[str, str], title: str, text: str,
                code_id: str = "") -> bytes:
    """The 32-byte near-duplicate key of an experience: by ``code_id`` when the caller gives its code's
    identity (the verifier's, which reads each language as it is read: core passes it), else by
    ``normalise_code``."""
    h = hashlib.sha256()
    for part in (task_id, kind, backend):
        h.update(part.encode())
        h.update(b"\x00")
    if files and code_id:
        h.update(b"c\x00" + code_id.encode())
    elif files:
        for name in sorted(files):
            h.update(b"f\x00" + name.encode() + b"\x00")
            h.update(normalise_code(name, files[name]).encode())
            h.update(b"\x00")
    else:
        h.update(b"t\x00" + normalise_text(title).encode() + b"\x00" + normalise_text(text).encode())
    return h.digest()
