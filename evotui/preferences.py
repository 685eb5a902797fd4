"""What the workbench remembers per workspace (the theme), in ``.evokernel/ui.json``.

Kept apart from ``evokernel.toml``: that file is the person's, and the workbench never rewrites it.
A missing or unreadable file means defaults.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

FILE_NAME = "ui.json"


@dataclass
class Preferences:
    """The workbench's remembered choices."""

    theme: str | None = None

    @classmethod
    def load(cls, state_dir: Path) -> Preferences:
        try:
            data = json.loads((state_dir / FILE_NAME).read_text())
        except (OSError, ValueError):
            return cls()
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}) if isinstance(data, dict) else cls()

    def save(self, state_dir: Path) -> None:
        """Write atomically (a crash never leaves half a file)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = state_dir / f".{FILE_NAME}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, state_dir / FILE_NAME)
