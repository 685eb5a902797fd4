"""The one lexer for C and C++ sources: line splicing, comment and literal blanking, and the top-level
comma split. Both readers of kernel sources use it, so they read the text as the compiler does and never
disagree with each other: the anti-hack kernel rules (``verifier.gates.antihack.kernel``) and the
``extern "C"`` declaration reader (``verifier.toolchain.cdecl``).

It lives beside ``cdecl`` rather than inside the anti-hack package because ``cdecl`` is imported by the
runtime and the backends, which the anti-hack gate itself reads (its device rules come from the backend
table): the lexer sits below both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPLICE = re.compile(r"\\[ \t\r]*\n")


def splice(text: str) -> tuple[str, list[int]]:
    """``text`` with backslash-newlines joined, as the compiler reads it, and each character's line
    (one entry more than the text has characters, for the position just past the end)."""
    pieces: list[str] = []
    lines: list[int] = []
    pos, line = 0, 1
    for m in [*_SPLICE.finditer(text), None]:
        stop = m.start() if m else len(text)
        segment = text[pos:stop]
        pieces.append(segment)
        for ch in segment:
            lines.append(line)
            line += ch == "\n"
        if m:
            line += 1
            pos = m.end()
    lines.append(line)
    return "".join(pieces), lines


@dataclass(frozen=True)
class Scanned:
    """A spliced source read once: positions in every field are positions in the spliced text."""

    code: str                        # comments and the insides of string/char literals blanked
    no_comments: str                 # comments blanked, literals kept
    literals: list[tuple[int, str]]  # (position, text); adjacent string literals joined as the compiler joins them
    open_at: int | None              # where a literal does not close on its own line, or None


def scan(text: str, *, stop_at_open: bool = True) -> Scanned:
    """Blank the comments of ``text`` (already spliced), keeping line breaks and positions.

    A literal that does not close on its own line is where a text scanner and the compiler could
    disagree about what is code: with ``stop_at_open`` the scan stops there (the rest is left as it is
    and ``open_at`` says where), otherwise the literal is taken to end at its line's end and the scan
    goes on (``open_at`` still names the first one)."""
    blank, keep = list(text), list(text)
    found: list[tuple[int, str]] = []
    open_at: int | None = None
    i, n, last = 0, len(text), -1
    while i < n:
        if text.startswith("//", i) or text.startswith("/*", i):
            if text[i + 1] == "/":
                j = text.find("\n", i)
                j = n if j < 0 else j
            else:
                j = text.find("*/", i + 2)
                j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    blank[k] = keep[k] = " "
            i = j
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] != quote:
                open_at = i if open_at is None else open_at
                if stop_at_open:
                    break
                j = min(j, n)
                for k in range(i + 1, j):
                    blank[k] = " "
                i = j
                continue
            for k in range(i + 1, j):
                blank[k] = " "
            literal = text[i:j + 1]
            if quote == '"' and found and found[-1][1].startswith('"') and last >= 0 and not text[last:i].strip():
                found[-1] = (found[-1][0], found[-1][1][:-1] + literal[1:])   # "a" "b" is one literal "ab"
            else:
                found.append((i, literal))
            i = last = j + 1
        else:
            i += 1
    return Scanned("".join(blank), "".join(keep), found, open_at)


def split_top_level(text: str, brackets: str = "()[]{}") -> list[str]:
    """``text`` split at the commas outside brackets; ``brackets`` lists open/close pairs (a declaration
    reader counts ``<>`` for templates, a launch configuration must not: ``a < b ? x : y``). The parts
    are returned as they are, not stripped."""
    opens, closes = brackets[0::2], brackets[1::2]
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts
