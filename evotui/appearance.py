"""Themes: every ``themes/<name>.tcss`` is a theme named ``evokernel-<name>``, made of a Textual colour
palette (the variables built-in widgets use) and the file's own rules (our widgets' colours). All
files are loaded at start; switching is setting ``App.theme``."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from textual.theme import Theme

from themes import theme_files

PREFIX = "evokernel-"

PALETTES: dict[str, dict[str, Any]] = {
    "dark": dict(primary="#7aa2f7", secondary="#bb9af7", accent="#ff9e64", foreground="#c0caf5",
                 background="#1a1b26", surface="#1f2335", panel="#292e42", success="#9ece6a",
                 warning="#e0af68", error="#f7768e", dark=True),
    "light": dict(primary="#2f5da8", secondary="#7a4fb0", accent="#b4530c", foreground="#1f2328",
                  background="#fbfbfc", surface="#f1f2f4", panel="#dde1e7", success="#1a7f37",
                  warning="#8a5d00", error="#c4212b", dark=False),
}


def theme_names() -> list[str]:
    """The short names of the themes in themes/ ("dark", "light", ...), dark first."""
    return list(theme_files())


def css_paths() -> list[str | PurePath]:
    """Every theme's .tcss file, for ``App.CSS_PATH``."""
    return [str(p) for p in theme_files().values()]


def textual_themes() -> list[Theme]:
    """A Textual Theme per theme file (files without a palette of their own get the dark one)."""
    return [Theme(name=PREFIX + name, **PALETTES.get(name, PALETTES["dark"])) for name in theme_names()]


def full_name(short: str) -> str:
    return PREFIX + short


def short_name(name: str) -> str:
    return name[len(PREFIX):] if name.startswith(PREFIX) else name
