"""store/ knows nothing of LLMs, Textual, torch or the verifier, and opening it does not load the index."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("textual", "torch", "openai", "evotui", "core", "verifier")


def test_store_imports_nothing_from_other_layers(tmp_path):
    code = (
        "import sys\n"
        "import store, store.store, store.index, store.transfer, store.values, store.terms\n"
        "from store import Store, Experience\n"
        f"s = Store.open({str(tmp_path / 'm.lmdb')!r})\n"
        "s.add_experience(Experience(task_id='t', kind='rule', backend='', text='tile the loop'))\n"
        "s.retrieve('tile', k=1)\n"
        "s.close()\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_opening_the_store_does_not_import_the_index_machinery(tmp_path):
    code = (
        "import sys\n"
        "from store import Store\n"
        f"Store.open({str(tmp_path / 'm.lmdb')!r}).close()\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('bm25s', 'numpy'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_store_satisfies_the_memory_protocol():
    import inspect

    from store import Store
    from store.protocol import Memory

    for name, member in inspect.getmembers(Memory, inspect.isfunction):
        if name.startswith("_"):
            continue
        ours = inspect.signature(getattr(Store, name)).parameters
        theirs = inspect.signature(member).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == \
            [(p.name, p.kind, p.default) for p in theirs.values()], name
