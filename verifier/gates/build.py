"""Gate 3, build: the candidate's sources compiled by the backend's toolchain (verifier.build does the
compiling and caching), and the verdict in words: a failure carries the trimmed diagnostics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verifier.backends.base import Backend
from verifier.build import BuildResult, build_candidate


@dataclass
class BuildVerdict:
    passed: bool
    message: str
    build: BuildResult


def check_build(backend: Backend, files: dict[str, str], cache_dir: Path, *, timeout: float, sandbox: bool,
                hidden: list[str], slow_timeout: float | None = None) -> BuildVerdict:
    """Build ``files`` (cached by content) and say what happened (``slow_timeout``: see ``build_candidate``)."""
    build = build_candidate(backend, files, cache_dir, timeout=timeout, sandbox=sandbox, hidden=hidden,
                            slow_timeout=slow_timeout)
    if not build.ok:
        return BuildVerdict(False, f"the build failed:\n{build.log}", build)
    return BuildVerdict(True, "cached" if build.cached else f"built in {build.seconds:.2f} s", build)
