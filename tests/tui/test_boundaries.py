"""The arrows point one way: evotui -> core -> {verifier, store}. The workbench imports core only,
and nothing below it imports Textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_workbench_reaches_the_engine_through_core_only():
    """The app, its screens and widgets, and the headless commands alike."""
    workbench = list((ROOT / "evotui").rglob("*.py"))
    assert len(workbench) > 20
    offenders = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & {"store", "verifier"}) for p in workbench}
    assert {p: bad for p, bad in offenders.items() if bad} == {}


def test_core_never_imports_textual():
    code = ("import sys\nimport core.session, core.attempts, core.engine, core.watcher, core.memory, core.report\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'evotui'))))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_themes_are_textual_css_files_shipped_as_package_data():
    from evotui import appearance

    names = appearance.theme_names()
    assert names[:1] == ["dark"] and "light" in names
    for path in appearance.css_paths():
        text = Path(path).read_text()
        assert Path(path).suffix == ".tcss" and f"App.-theme-{appearance.PREFIX}{Path(path).stem}" in text
