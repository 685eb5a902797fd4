"""Turning an LLM answer into candidate files, and reading which memory items it says it used.

The model answers with fenced blocks that name their file (```cpp file=kernel.cpp). Common variants
are accepted too: ``title="kernel.cpp"``, a ``// kernel.cpp`` first line, or a heading / bold name /
``File: kernel.cpp`` on the line before the fence. Unnamed blocks are named by content (a Python
block defining ``ModelNew`` is ``model.py``; C++ blocks are ``kernel.cpp``, ``kernel_2.cpp``...).
A name keeps its folders (``file=op_host/add_custom.cpp``: a custom-op project's layout, which the format
gate checks); an absolute one, one with ``..`` or odd characters is refused
(``verifier.candidate_files.name_problem``).
An answer with no usable code is a ``Parsed`` with a ``problem``, never an exception. The answer's
one-line ``Change: ...`` summary (asked for by every prompt) is kept in ``Parsed.change``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.workspace_files import candidate_suffixes
from verifier import declared_suffixes, name_problem

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.M)
_NAME_IN_INFO = re.compile(r"(?:file|filename|title|name|path)\s*[=:]\s*[\"']?([^\s\"'`]+)[\"']?")
_CHANGE = re.compile(r"^[ \t>*_#-]*(?:\*\*|__)?change(?:\*\*|__)?\s*(?:\*\*|__)?\s*:\s*(?:\*\*|__)?\s*(?P<text>\S.*)$",
                     re.I | re.M)
MAX_CHANGE_CHARS = 240
_CITATION = re.compile(r"\bmem:([0-9a-zA-Z_-]{4,40})")
_LANG_SUFFIX = {"python": ".py", "py": ".py", "cpp": ".cpp", "c++": ".cpp", "cc": ".cpp", "cxx": ".cpp",
                "c": ".cpp", "cuda": ".cu", "cu": ".cu", "h": ".h", "hpp": ".hpp"}


@dataclass
class Parsed:
    files: dict[str, str] = field(default_factory=dict)
    cited: list[str] = field(default_factory=list)
    problem: str = ""
    change: str = ""      # the answer's one-line "Change:" summary ("" when it gave none)

    @property
    def ok(self) -> bool:
        return not self.problem


def _blocks(text: str) -> tuple[list[tuple[str, str, str]], bool]:
    """(info, body, text before the fence) for each block, and whether the last block is unclosed."""
    blocks: list[tuple[str, str, str]] = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            return blocks, False
        fence = m.group("fence")
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        end = close.search(text, m.end() + 1)
        before = text[max(0, m.start() - 200): m.start()]
        if not end:
            blocks.append((m.group("info").strip(), text[m.end() + 1:], before))
            return blocks, True
        blocks.append((m.group("info").strip(), text[m.end() + 1: end.start()], before))
        pos = end.end()


def _file_name_pattern() -> str:
    """A regex matching a file name with a suffix some backend in the table declares (or ``.py``)."""
    suffixes = sorted({s.lstrip(".") for s in candidate_suffixes()}, key=len, reverse=True)
    return rf"[\w-]+\.(?:{'|'.join(map(re.escape, suffixes))})"


def _lang_suffix(lang: str) -> str | None:
    """The suffix a fence's language stands for: the usual names, else a declared suffix written bare."""
    known = _LANG_SUFFIX.get(lang)
    if known or not lang:
        return known
    return f".{lang}" if f".{lang}" in candidate_suffixes() else None


def _name_for(info: str, body: str, before: str) -> str | None:
    m = _NAME_IN_INFO.search(info)
    if m:
        return m.group(1)
    names = _file_name_pattern()
    first = body.lstrip().splitlines()[0] if body.strip() else ""
    m = re.match(rf"^(?://|#)\s*(?:file:?\s*)?({names})\s*$", first.strip(), re.I)
    if m:
        return m.group(1)
    last_line = before.rstrip().splitlines()[-1] if before.strip() else ""
    m = re.search(rf"(?:^|[\s`*#:])({names})\b", last_line)
    if m and len(last_line) < 120:
        return m.group(1)
    return None


def change_line(text: str) -> str:
    """The ``Change: ...`` summary written outside the code blocks, on one line, at most
    ``MAX_CHANGE_CHARS`` characters (cut at a word), or ""."""
    outside, pos = [], 0
    for m in _FENCE.finditer(text or ""):
        outside.append(text[pos:m.start()])
        fence = m.group("fence")
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        end = close.search(text, m.end() + 1)
        if not end:
            pos = len(text)
            break
        pos = end.end()
    outside.append((text or "")[pos:])
    found = _CHANGE.search("".join(outside))
    if not found:
        return ""
    m = found
    line = " ".join(m.group("text").replace("**", "").replace("`", "").split())
    if len(line) > MAX_CHANGE_CHARS:
        line = line[:MAX_CHANGE_CHARS].rsplit(" ", 1)[0] + " ..."
    return line


def parse_answer(text: str, *, source_suffix: str = ".cpp", truncated: bool = False,
                 max_tokens: int | None = None) -> Parsed:
    """Candidate files in ``text``. ``truncated``: the endpoint said the answer hit its length limit (the answer
    budget, ``max_tokens`` when known); an unclosed block in an answer that stopped by itself is said as such."""
    parsed = _parse(text, source_suffix=source_suffix, truncated=truncated, max_tokens=max_tokens)
    parsed.change = change_line(text) if text else ""
    return parsed


def _parse(text: str, *, source_suffix: str, truncated: bool, max_tokens: int | None = None) -> Parsed:
    if not text or not text.strip():
        return Parsed(problem="the answer was empty")
    blocks, unclosed = _blocks(text)
    if not blocks:
        return Parsed(problem="the answer has no fenced code blocks; answer with ```cpp file=kernel.cpp ... ``` "
                              "and ```python file=model.py ... ``` blocks")
    files: dict[str, str] = {}
    unnamed = 0
    for info, body, before in blocks:
        if not body.strip():
            continue
        name = _name_for(info, body, before)
        if name is None:
            lang = info.split()[0].lower() if info else ""
            if "class ModelNew" in body:
                name = "model.py"
            elif _lang_suffix(lang) == ".py" or (not lang and "import torch" in body):
                continue  # a Python snippet that is not the model: usage examples, tests
            else:
                suffix = _lang_suffix(lang) or source_suffix
                if suffix == ".py":
                    continue
                unnamed += 1
                name = f"kernel{suffix}" if unnamed == 1 else f"kernel_{unnamed}{suffix}"
        while name.startswith("./"):
            name = name[2:]
        problem = name_problem(name)
        if problem:
            return Parsed(files=files, problem=problem)
        files[name] = body if body.endswith("\n") else body + "\n"
    if truncated:
        last = f"inside {list(files)[-1]}" if files and unclosed else "before its code was complete"
        budget = f"its budget of {max_tokens:,} tokens" if max_tokens else "the length limit"
        return Parsed(files=files, problem=f"the answer was cut off {last}: it reached {budget}; write a shorter "
                                           "kernel")
    if unclosed:
        last = list(files)[-1] if files else "the last code block"
        return Parsed(files=files, problem=f"the answer stopped with {last} unclosed (no closing ``` line): close "
                                           "every code block")
    if not files:
        return Parsed(problem="the answer's code blocks are empty")
    if "model.py" not in files:
        return Parsed(files=files, problem="the answer has no model.py (a Python block defining ModelNew)")
    if not any(n.endswith((source_suffix, *declared_suffixes("source_suffixes"))) for n in files):
        return Parsed(files=files, problem=f"the answer has no kernel source ({source_suffix})")
    return Parsed(files=files, cited=cited_ids(text))


def cited_ids(text: str) -> list[str]:
    """Memory ids the answer cites (``mem:<id>``), in order, without repeats."""
    seen: list[str] = []
    for m in _CITATION.finditer(text):
        if m.group(1) not in seen:
            seen.append(m.group(1))
    return seen
