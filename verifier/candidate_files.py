"""A candidate as files: read from its folder (bounded, hidden files and build products skipped) and
named by the hash of its contents.

A file's name is its path relative to the candidate's folder, with ``/`` between folders: flat for the
kernel-launch form (``kernel.cpp``), in folders for a custom-op project (``op_host/add_custom.cpp``).
``name_problem`` is the one rule for such names wherever they come from (an answer, a folder)."""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
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
    """The candidate's files, byte for byte (the record of what was verified): ``exact_digest``'s first 16 digits."""
    return exact_digest(files)[:16]


def exact_digest(files: dict[str, str]) -> str:
    """The whole SHA-256 of the candidate's files exactly as the build and the import read them (every name and every
    byte, each length-prefixed so no two sets of files share a digest): what a recorded verdict or build is served
    to. A comment can change what the compiler or Python reads (``__LINE__``, a coding declaration on model.py's
    first line), so nothing that drops comments (``candidate_identity``) may serve a verdict."""
    h = hashlib.sha256()
    for name in sorted(files):
        for part in (name.encode(), files[name].encode()):
            h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


C_LIKE = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl")


def candidate_identity(files: dict[str, str]) -> str:
    """The candidate's code, comments and spacing aside (``code_text``): for display only (the workbench's "the
    same code as #N", the memory's near-duplicates), never to serve a verdict: a comment can change what a compiler
    or Python reads (``__LINE__``, a coding declaration), so a recorded verdict goes only to the same bytes
    (``exact_digest``)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + code_text(name, files[name]).encode() + b"\0")
    return h.hexdigest()[:16]


def code_text(name: str, text: str) -> str:
    """``text`` as its language reads it: Python as its tokens (comments and blank lines out, indentation
    kept as structure), C and C++ through the one C lexer (``verifier.toolchain.csource``: comments out,
    literals kept whole, spacing collapsed, a preprocessor line kept on its own line); any other file, or
    one that does not tokenize (a typo: its own verdict), exactly as it is."""
    try:
        if name.endswith(".py"):
            return _python_tokens(text)
        if name.endswith(C_LIKE):
            return _c_tokens(text)
    except (SyntaxError, ValueError, tokenize.TokenError):   # a broken file: as it is
        pass
    return text


def _python_tokens(text: str) -> str:
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER)
    words = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in skip:
            continue
        words.append({tokenize.INDENT: "<indent>", tokenize.DEDENT: "<dedent>", tokenize.NEWLINE: "\n"}
                     .get(tok.type, tok.string))
    return " ".join(words)


_SPACE = re.compile(r"\s+")
# Two characters that a space keeps apart as two tokens but that would read as one without it (or start a
# comment): the only spaces between punctuation that the identity keeps.
_FUSE = {"++", "--", "<<", ">>", "&&", "||", "==", "!=", "<=", ">=", "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=",
         "^=", "::", "##", ".*", "//", "/*", "*/", "..", "<:", ":>", "<%", "%>", "%:"}


def _squeeze(words: str) -> str:
    """C tokens with only the spaces that separate two words (``int n``) or would otherwise fuse (``a - -b``)."""
    out: list[str] = []
    for i, ch in enumerate(words):
        if ch == " " and 0 < i < len(words) - 1:
            before, after = words[i - 1], words[i + 1]
            if not ((before.isalnum() or before == "_") and (after.isalnum() or after == "_")) \
                    and before + after not in _FUSE:
                continue
        out.append(ch)
    return "".join(out)


def _c_tokens(text: str) -> str:
    from verifier.toolchain.csource import scan, splice

    spliced, _ = splice(text)
    scanned = scan(spliced, stop_at_open=False)
    if scanned.open_at is not None:
        raise ValueError("an unterminated literal")
    chunks: list[str] = []
    run: list[str] = []
    for line in scanned.code.split("\n"):
        words = _SPACE.sub(" ", line).strip()
        if words.startswith("#"):   # a directive ends at its line, and its spacing can matter: F(x) vs F (x)
            chunks.append(_squeeze(" ".join(run)))
            chunks.append(words)
            run = []
        elif words:
            run.append(words)
    chunks.append(_squeeze(" ".join(run)))
    return "\n".join(c for c in chunks if c) + "\0" + "\0".join(literal for _, literal in scanned.literals)
