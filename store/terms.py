"""Terms: how text and code become the lexical tokens the retrieval index counts.

Identifiers are lower-cased and also split at underscores and camelCase boundaries, so
``blockDim``, ``block_dim`` and ``BLOCK_DIM`` all share the terms ``block`` and ``dim`` while keeping
their compound form (``blockdim``) for exact matches. English stop words (bm25s's list) and
one-character tokens are dropped.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import Any

from bm25s.stopwords import STOPWORDS_EN

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STOP = frozenset(STOPWORDS_EN)

# A document's code contributes at most this many characters: beyond it, kernels repeat themselves
# and the index only grows.
MAX_CODE_CHARS = 12_000


@lru_cache(maxsize=200_000)
def _expand(word: str) -> tuple[str, ...]:
    """The terms one identifier or number stands for (cached: code reuses a small vocabulary)."""
    whole = word.strip("_").lower()
    if len(whole) < 2 or whole in _STOP:
        return ()
    if whole.isdigit():
        return (whole,)
    parts = [p.lower() for p in _PARTS.findall(word)]
    parts = [p for p in parts if len(p) > 1 and p not in _STOP and p != whole]
    return (whole, *parts)


def terms(text: str) -> list[str]:
    """The terms of ``text`` in order, with repeats (what BM25 counts)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        out.extend(_expand(word))
    return out


def term_counts(text: str) -> Counter[str]:
    """Each distinct term of ``text`` with how often it occurs (the document length is the sum)."""
    return Counter(terms(text))


def document_text(body: dict[str, Any], files: dict[str, str]) -> str:
    """The text an experience is indexed by: task text, op names, title, lesson, error, code."""
    sig = body.get("signature") or {}
    outcome = body.get("outcome") or {}
    parts = [
        str(body.get("task_id", "")),
        str(sig.get("text", "")),
        " ".join(map(str, sig.get("ops", []) or [])),
        str(sig.get("category", "")),
        str(sig.get("kind_terms", "")),          # family_gemm regime_compute dtype_float32 (core.kinship)
        " ".join(map(str, sig.get("traced_ops", []) or [])),
        str(body.get("title", "")),
        str(body.get("text", "")),
    ]
    if outcome:
        parts.append(str(outcome.get("failed_gate") or ""))
        parts.append(str(outcome.get("message") or ""))
    budget = MAX_CODE_CHARS
    for name in sorted(files):
        if budget <= 0:
            break
        content = files[name][:budget]
        budget -= len(content)
        parts.append(content)
    return "\n".join(p for p in parts if p)
