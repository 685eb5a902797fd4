"""What would stop a first run on an NPU workstation before any kernel runs (issue #50, finding 6), each against a
stand-in that fails where the real thing does:

* ``evokernel`` started without CANN's ``set_env.sh`` died at ``import torch``: torch loads every installed device
  extension at import (``TORCH_DEVICE_BACKEND_AUTOLOAD``), and torch_npu without CANN's libraries raises;
* the build set HOME to its own folder and showed only the build command's folder, so CANN's Python packages
  installed with ``pip install --user`` vanished for msopgen and build.sh;
* doctor neither checked CANN's binary operator package nor ran a device op in a candidate's confined job, and
  accepted a range of CANN releases where torch_npu pairs with one (``test_ascend_review``);
* on x86 a plain ``pip install torch`` brings the CUDA build;
* HAVE_WORKSPACE / HAVE_TILING were set only for parameters named exactly ``workspace`` / ``tiling`` (the official
  samples say ``tilingGm``): CANN takes them by position."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.backends.ascend import AscendBackend, Kernel, compile_definitions, launch_signature, workspace_index
from verifier.backends.cpu import CpuBackend
from verifier.toolchain.cann import discover_ascend
from verifier.toolchain.cdecl import Param

from fake_toolchains import NPU_SMI_910B2, make_cann, make_custom_op_cann, make_toolkit_python, write_script

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_turns_torch_s_device_autoload_off_itself(tmp_path):
    """A stand-in torch_npu registered as torch does register it (a "torch.backends" entry point), failing on import
    as torch_npu does without CANN's libraries: the command's process still imports torch."""
    site = tmp_path / "site"
    (site / "broken_npu-1.0.dist-info").mkdir(parents=True)
    (site / "broken_npu-1.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: broken_npu\nVersion: 1.0\n")
    (site / "broken_npu-1.0.dist-info/entry_points.txt").write_text("[torch.backends]\nnpu = broken_npu:autoload\n")
    (site / "broken_npu.py").write_text("raise ImportError('libhccl.so: cannot open shared object file')\n")
    code = ("from evotui.cli import main\n"
            "try:\n    main(['doctor', '--help'])\nexcept SystemExit:\n    pass\n"
            "import torch\nprint('imported torch', torch.__version__)\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site)])
    plain = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "libhccl.so" in plain.stderr     # the stand-in fails as torch_npu would
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and "imported torch" in ran.stdout, ran.stderr[-2000:]
    kept = subprocess.run([sys.executable, "-c", code], env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"},
                          capture_output=True, text=True, timeout=300)
    assert kept.returncode != 0                                       # a user's own setting stays theirs


@pytest.mark.skipif(not shutil.which("g++"), reason="the stand-in build.sh compiles with g++")
def test_the_build_finds_the_toolkit_python_s_user_site(tmp_path):
    """CANN's Python requirements installed with ``pip install --user`` (under the user's home, found from HOME):
    the build gate's build (HOME its own folder, a sandboxed view) still finds them."""
    from test_ascend_real_toolchain import project

    from verifier.build import build_candidate

    home = tmp_path / "home"
    root = make_custom_op_cann(tmp_path / "cann")
    toolkit = make_toolkit_python(tmp_path / "toolkit", user_home=home)
    env = {"ASCEND_HOME_PATH": str(root), "PATH": f"{toolkit}:/usr/bin:/bin", "HOME": str(home)}
    backend = AscendBackend(env, home=str(home), system_root=str(tmp_path), machine="x86_64", soc="Ascend910B2",
                            probe_torch=False)
    assert backend.findings.python_problem == ""                     # doctor's probe finds them (the user's HOME)
    result = build_candidate(backend, project(), tmp_path / "cache")
    assert result.ok, result.log[-3000:]


def test_doctor_says_when_the_operator_package_is_missing(tmp_path, bare_env, tool_bin):
    write_script(tool_bin / "npu-smi", f"/bin/cat <<'EOF'\n{NPU_SMI_910B2}EOF\n")
    write_script(tool_bin / "cmake", "echo cmake version 3.28\n")
    root = make_cann(tmp_path / "root", opp_kernels=False)
    env = {**bare_env, "ASCEND_HOME_PATH": str(root)}
    found = discover_ascend(env, home=tmp_path, system_root=tmp_path, machine="x86_64", probe_torch=False)
    (problem,) = [p for p in found.device_problems if "operator package" in p]
    assert "for ascend910b is not installed" in problem and "op_impl/ai_core/tbe/kernel/ascend910b" in problem
    whole = make_cann(tmp_path / "whole")
    found = discover_ascend({**env, "ASCEND_HOME_PATH": str(whole)}, home=tmp_path, system_root=tmp_path,
                            machine="x86_64", probe_torch=False)
    assert not [p for p in found.device_problems if "operator package" in p]


class SpawningCpu(CpuBackend):
    """The CPU with a device backend's process model, for the confined device op."""

    process_model = "spawn"


@pytest.mark.slow
def test_doctor_runs_one_device_op_in_a_candidate_s_confined_job():
    from verifier.harness.device_check import confined_device_op

    ok, said = confined_device_op(SpawningCpu())
    assert ok, said
    assert "gave 2 in a candidate's confined job" in said and "a fresh process per job" in said
    # the Ascend runtime in the same job, with no torch_npu here: the stage and the error, not a crash
    ok, said = confined_device_op(AscendBackend(env={"PATH": "/usr/bin:/bin"}, probe_torch=False))
    assert not ok and "before it reported (in its trusted imports" in said, said
    assert said.endswith("No module named 'torch_npu'"), said


def test_setup_installs_torch_from_the_cpu_wheel_index_on_x86(tmp_path):
    ran = subprocess.run(["make", "-n", "-B", f"VENV={tmp_path / 'venv'}", f"{tmp_path / 'venv'}/.installed"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    line = next(ln for ln in ran.stdout.splitlines() if '"torch==' in ln)
    if platform.machine() == "x86_64":
        assert "--index-url https://download.pytorch.org/whl/cpu" in line, line
    else:
        assert "--index-url" not in line, line


@pytest.mark.parametrize(("names", "want"), [
    (["a", "b", "c", "workspace", "tilingGm"], (True, True)),     # the official matmul samples
    (["x", "y", "usrWorkspace"], (True, False)),
    (["x", "y", "z", "workspace", "tiling"], (True, True)),
    (["x", "y", "z", "n"], (False, False)),
])
def test_workspace_and_tiling_are_found_by_position_whatever_their_names(names, want):
    params = tuple(Param(n, "uint8_t", True) if n != "n" else Param(n, "uint32_t", False) for n in names)
    kernel = Kernel("k", params, "kernel.cpp")
    assert kernel.workspace_tiling == want
    defined = compile_definitions([kernel])
    assert ("HAVE_WORKSPACE" in defined, "HAVE_TILING" in defined) == want
    at = workspace_index(launch_signature(kernel))
    assert (at is not None) == want[0]
    if at is not None:
        assert launch_signature(kernel).params[at].name.lower().endswith("workspace")
