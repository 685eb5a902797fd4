"""Where EvoKernel keeps what belongs to this user and machine rather than to a workspace, as the platform
wants it (platformdirs: ``$XDG_CACHE_HOME/evokernel``, else ``~/.cache/evokernel`` on Linux):

- ``cache_dir()``: builds, references and outcomes of a verifier made outside a workspace (a workspace
  keeps its own in ``.evokernel/cache``); the roofline's ceilings and task counts of every verifier (facts
  of the machine and of a task's source: ``verifier.machine.roofline.RooflineMeter``); the machine lock where
  no private runtime folder exists (``verifier.machine.lock``);
- ``crash_dir()``: the tracebacks of the commands' own crashes (``evotui.cli``).
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP = "evokernel"


def cache_dir() -> Path:
    """This user's EvoKernel cache folder (not created here)."""
    return platformdirs.user_cache_path(APP, appauthor=False)


def crash_dir() -> Path:
    """Where a command's crash report goes (not created here)."""
    return cache_dir() / "crashes"
