"""Ray is an optional extra: without it everything but cluster verification works, and asking for a
cluster says in one line what to install. The configuration's [cluster] table is checked like the rest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_RAY = textwrap.dedent("""
    import sys

    class NoRay:
        def find_spec(self, name, path=None, target=None):
            if name == "ray" or name.startswith("ray."):
                raise ImportError("No module named 'ray' (hidden by the test)")
            return None

    sys.meta_path.insert(0, NoRay())
    from evotui.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-c", WITHOUT_RAY, "--workspace", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_without_ray_the_cluster_command_says_what_to_install(tmp_path):
    result = _cli(tmp_path, "cluster", "local")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "evokernel: cluster verification needs Ray: pip install 'evokernel[cluster]'"


def test_without_ray_everything_else_still_works(tmp_path):
    result = _cli(tmp_path, "tasks", "--level", "1")
    assert result.returncode == 0, result.stderr
    assert "relu" in result.stdout.lower()


def test_cluster_address_is_read_from_the_config_and_the_environment(tmp_path, monkeypatch):
    from core.config import load_config
    from core.errors import ConfigError

    path = tmp_path / "evokernel.toml"
    path.write_text('[cluster]\naddress = "ray://head:10001"\n')
    monkeypatch.delenv("EVOKERNEL_CLUSTER", raising=False)
    assert load_config(path).cluster.address == "ray://head:10001"
    assert load_config(None).cluster.address is None       # default: verification stays in-process
    monkeypatch.setenv("EVOKERNEL_CLUSTER", "auto")
    assert load_config(path).cluster.address == "auto"
    path.write_text('[cluster]\nadress = "auto"\n')
    try:
        load_config(path)
    except ConfigError as exc:
        assert "cluster.adress" in str(exc)
    else:
        raise AssertionError("a misspelt [cluster] key was accepted")
