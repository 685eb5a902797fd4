"""The workbench's themes: each ``<name>.tcss`` here is a Textual CSS theme, switchable at run time.

A theme file scopes its rules under ``App.-theme-evokernel-<name>`` (the class Textual gives the app
while that theme is active), so every file can be loaded at start and switching is instant.
"""

from pathlib import Path

THEMES_DIR = Path(__file__).parent


def theme_files() -> dict[str, Path]:
    """Theme name -> its .tcss file, dark first."""
    found = {p.stem: p for p in sorted(THEMES_DIR.glob("*.tcss"))}
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "dark", kv[0])))
