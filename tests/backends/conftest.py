"""Fixtures of the backend tests; the fake toolchain builders live in ``fake_toolchains``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import fake_toolchains`


@pytest.fixture
def bare_env(tmp_path) -> dict[str, str]:
    """An environment whose PATH is one empty folder of our own: nothing real is found unless a test
    puts it there."""
    (tmp_path / "bin").mkdir()
    return {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path / "home")}


@pytest.fixture
def tool_bin(bare_env) -> Path:
    return Path(bare_env["PATH"])


@pytest.fixture
def on_host():
    """``on_host(AscendRuntime, stream=...)``: a device runtime's declarations (its stream type, entry
    names, status returns, workspace) with the host's tensors and a given stream getter, for device
    libraries built for the CPU by the fake toolchains."""
    from verifier.backends.base import DeviceRuntime

    def make(runtime: type[DeviceRuntime], stream=lambda: 0) -> DeviceRuntime:
        class Host(runtime):  # type: ignore[valid-type, misc]
            device = "cpu"

            def current_stream(self):
                return stream

        return Host()

    return make
