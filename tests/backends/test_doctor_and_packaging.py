"""What a machine without accelerators sees: ``evokernel doctor`` (JSON and text), a CUDA or Ascend
verification attempt ending in one clear line, the GPU check's clean refusal, and the packaging
(installing EvoKernel never pulls torch_npu)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def evokernel(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evotui.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def doctor(tmp_path_factory) -> dict:
    proc = evokernel("doctor", "--json", cwd=tmp_path_factory.mktemp("doctor"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def test_doctor_reports_every_backend(doctor):
    assert set(doctor["backends"]) == {"cpu", "cuda", "ascend"}
    for entry in doctor["backends"].values():
        assert set(entry) >= {"available", "toolchain", "device", "reason", "problems", "details"}
        assert entry["available"] == (not entry["problems"])
        if not entry["available"]:
            assert entry["reason"] and all(p.strip() for p in entry["problems"])


def test_doctor_cpu_is_present(doctor):
    cpu = doctor["backends"]["cpu"]
    assert cpu["available"] and cpu["toolchain"]["present"] and cpu["device"]["present"]
    assert cpu["toolchain"]["version"]


def test_doctor_explains_a_missing_gpu(doctor):
    cuda = doctor["backends"]["cuda"]
    if cuda["available"]:
        pytest.skip("this machine has a usable GPU")
    assert not cuda["device"]["present"]
    text = " ".join(cuda["problems"])
    assert "nvcc missing" in text or "no CUDA device" in text
    if not cuda["toolchain"]["present"]:
        assert "install the CUDA toolkit or set CUDA_HOME" in text


def test_doctor_explains_a_missing_npu(doctor):
    ascend = doctor["backends"]["ascend"]
    if ascend["available"]:
        pytest.skip("this machine has a usable NPU")
    text = " ".join(ascend["problems"])
    assert "CANN not found" in text or "CANN at" in text or "cmake" in text or "SoC" in text
    assert "torch_npu not importable" in text or "no NPU device" in text


def test_doctor_reports_the_sandbox(doctor):
    for layer in ("bubblewrap", "seccomp"):
        assert isinstance(doctor["sandbox"][layer]["available"], bool) and doctor["sandbox"][layer]["detail"]


def test_doctor_text_and_single_backend(tmp_path):
    proc = evokernel("doctor", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "cpu" in proc.stdout and "cuda" in proc.stdout and "ascend" in proc.stdout
    proc = evokernel("doctor", "--json", "--backend", "cpu", cwd=tmp_path)
    assert proc.returncode == 0 and list(json.loads(proc.stdout)["backends"]) == ["cpu"]
    proc = evokernel("doctor", "--backend", "tpu", cwd=tmp_path)
    assert proc.returncode == 2 and "choose one of: cpu, cuda, ascend" in proc.stderr


def test_doctor_never_imports_device_runtimes_itself():
    code = ("import sys; from core.doctor import diagnose; diagnose(); "
            "print(sorted(m for m in ('torch', 'torch_npu') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("backend", ["cuda", "ascend"])
def test_verifier_refuses_a_backend_that_cannot_run_here(backend, tmp_path):
    from verifier.backends import get_backend
    from verifier.errors import ToolchainMissing
    from verifier.harness.verify import Verifier

    if get_backend(backend).toolchain().available:
        pytest.skip(f"{backend} can run here")
    with pytest.raises(ToolchainMissing, match=f"the {backend} backend cannot run here: "):
        Verifier(backend, cache_dir=tmp_path)


def test_cli_verify_on_cuda_ends_in_one_clear_line(tmp_path):
    from verifier.backends import get_backend

    if get_backend("cuda").toolchain().available:
        pytest.skip("cuda can run here")
    cand = tmp_path / "cand"
    cand.mkdir()
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench/gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    for name, text in gpu_check.CANDIDATES["relu"]["correct"][0].items():
        (cand / name).write_text(text)
    proc = evokernel("verify", str(cand), "--task", "relu", "--backend", "cuda", cwd=tmp_path,
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evokernel: the cuda backend cannot run here: ")


def test_gpu_check_fails_cleanly_without_a_gpu():
    from verifier.backends import get_backend

    if get_backend("cuda").toolchain().available:
        pytest.skip("cuda can run here: the script would run for real")
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    out = proc.stdout.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("gpu_check: the CUDA backend cannot run here: ")


def _default_requirements(requires: list[str]) -> list[str]:
    """Requirements without an extra marker: what ``pip install evokernel`` installs."""
    return [r for r in requires if "extra ==" not in r]


def test_installing_evokernel_does_not_pull_torch_npu():
    requires = metadata.requires("evokernel") or []
    default = _default_requirements(requires)
    assert default, "the installed metadata lists no requirements"
    assert not [r for r in default if r.lower().replace("-", "_").startswith("torch_npu")]
    assert any(r.lower().replace("-", "_").startswith("torch_npu") and 'extra == "npu"' in r for r in requires)


def test_pyproject_keeps_torch_npu_an_optional_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().replace("-", "_").startswith("torch_npu")]
    assert project["optional-dependencies"]["npu"] == ["torch_npu==2.13.0"]


def test_npu_extra_is_pinned_to_the_projects_torch():
    """torch_npu wheels require one exact torch: the extra must name the release for the torch the
    Makefile installs, and the doctor's pairing table must agree."""
    from verifier.toolchain.discovery import PROJECT_TORCH, TORCH_NPU_PAIRING

    torch_pin = re.search(r"^TORCH\s*\?=\s*torch==(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["npu"]
    assert extra == [f"torch_npu=={torch_pin}"]
    assert PROJECT_TORCH == torch_pin and TORCH_NPU_PAIRING[torch_pin][0] == torch_pin


def test_npu_check_fails_cleanly_without_an_npu(tmp_path):
    """Exit 2 and no traceback; the report (#50: written in every case) in the folder it was run from."""
    from verifier.backends import get_backend

    if get_backend("ascend").toolchain().available:
        pytest.skip("ascend can run here: the script would run for real")
    proc = subprocess.run([sys.executable, str(ROOT / "bench/npu_check.py")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    said = next(line for line in proc.stdout.splitlines() if line.startswith("BAD "))
    assert said.startswith(("BAD no NPU found: ", "BAD the Ascend backend cannot run here: "))
    assert "CANN not found" in said or "torch_npu" in said or "no NPU device" in said
    assert (tmp_path / "evokernel-npu-check.json").is_file()


def test_npu_check_candidates_pass_the_static_gates():
    """The check's correct, wrong and faulting kernels are real candidates: the gates before the build
    accept them, so on an NPU their outcomes come from the build and the device."""
    from verifier.backends.ascend import AscendBackend, find_kernels
    from verifier.gates.antihack import check_candidate, check_model
    from verifier.gates.format import check_format

    spec = importlib.util.spec_from_file_location("npu_check", ROOT / "bench/npu_check.py")
    npu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(npu_check)
    kinds = {(task, kind) for task, entry in npu_check.CANDIDATES.items() for kind in entry}
    assert kinds == {("add", "correct"), ("add", "wrong"), ("add", "faulting"), ("softmax", "correct"),
                     ("softmax", "wrong")}
    for task, entry in npu_check.CANDIDATES.items():
        for kind, (files, _) in entry.items():
            assert check_model(files["model.py"]) is None, (task, kind)
            assert check_format(files, AscendBackend(probe_torch=False)) is None, (task, kind)
            assert check_candidate(files, (".cpp",), (".h",), "ascend") is None, (task, kind)
            assert find_kernels({"kernel.cpp": files["kernel.cpp"]})
        assert entry["wrong"][0]["kernel.cpp"] != entry["correct"][0]["kernel.cpp"]
