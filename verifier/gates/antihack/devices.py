"""Device anti-hack rules on kernel sources: each backend declares its own (``kernel_rules``, a
``verifier.backends.KernelRules``) and this module finds them through the backend table and applies
them, so adding a backend adds its rules in its own module."""

from __future__ import annotations

import re

from verifier.backends import backend_class
from verifier.backends.base import Backend, KernelRules
from verifier.errors import UnknownBackend
from verifier.toolchain.csource import split_top_level


def kernel_rules(backend: str | Backend, place: str | None = None) -> KernelRules | None:
    """The kernel rules ``backend`` (a backend or its name in the table) adds to the common ones; None
    for a backend that adds none, or a name the table does not know (a test's stand-in backend). A
    ``place`` in a custom-op project (its first folder, "op_host"; "" for its top level) gets the rules the
    backend declares for it (``project_rules``) when it declares any."""
    if isinstance(backend, str):
        try:
            cls: Backend | type[Backend] = backend_class(backend)
        except UnknownBackend:
            return None
    else:
        cls = backend
    rules = cls.kernel_rules
    if place is not None:
        rules = cls.project_rules.get(place, rules)
    return rules


def device_problem(name: str, code: str, rules: KernelRules, line_of: list[int]) -> str | None:
    """The first of ``rules`` that ``code`` (comments and literals blanked) breaks, else None."""
    for what, (words, why) in rules.words.items():
        for word in words:
            m = re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", code)   # named anywhere, not only called
            if m:
                lineno = line_of[m.start()]
                return f"{name} line {lineno}: {word} is not allowed in kernels ({what}): {why}"
    for pattern, why in rules.prefixes:
        m = re.search(rf"(?<![\w.])(?:{pattern})", code)
        if m:
            lineno = line_of[m.start()]
            return f"{name} line {lineno}: {m.group(0).rstrip('( ')} is not allowed in kernels: {why}"
    if rules.launch_needs_stream:
        for m in re.finditer(r"<<<(.*?)>>>", code, re.S):
            parts = [p.strip() for p in split_top_level(m.group(1), "()[]{}")]
            lineno = line_of[m.start()]
            if len(parts) < 4:
                return (f"{name} line {lineno}: kernel launch <<<{m.group(1).strip()}>>> names no stream: pass the "
                        "launcher's cudaStream_t as the fourth launch parameter, "
                        "<<<grid, block, shared_bytes, stream>>>")
            if parts[3] in ("0", "nullptr", "NULL", "0L", "cudaStreamDefault"):
                return (f"{name} line {lineno}: kernel launch on stream {parts[3]}: pass the launcher's "
                        "cudaStream_t as the fourth launch parameter")
    return None
