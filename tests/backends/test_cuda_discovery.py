"""CUDA discovery on fake toolkits: where nvcc is looked for, its version and targets, the device's
compute capability (nvidia-smi) and the ``-arch`` chosen from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier.toolchain.discovery import (
    choose_cuda_arch,
    discover_cuda,
    find_nvcc,
    nvcc_arches,
    nvcc_version,
    parse_compute_caps,
)

from fake_toolchains import make_cuda, write_script


def test_nvcc_search_order(tmp_path, bare_env, tool_bin):
    home = make_cuda(tmp_path / "cuda-home")
    path_one = make_cuda(tmp_path / "on-path")
    system = make_cuda(tmp_path / "sys/usr/local/cuda")
    env = {**bare_env, "PATH": f"{path_one / 'bin'}"}
    assert find_nvcc({**env, "CUDA_HOME": str(home)}, tmp_path / "sys")[0] == home / "bin/nvcc"
    assert find_nvcc({**env, "CUDA_PATH": str(home)}, tmp_path / "sys")[0] == home / "bin/nvcc"
    assert find_nvcc(env, tmp_path / "sys")[0] == path_one / "bin/nvcc"
    assert find_nvcc(bare_env, tmp_path / "sys")[0] == system / "bin/nvcc"
    nvcc, looked = find_nvcc(bare_env, tmp_path / "nowhere")
    assert nvcc is None
    assert looked == ["$CUDA_HOME (unset)", "$CUDA_PATH (unset)", "PATH", str(tmp_path / "nowhere/usr/local/cuda/bin/nvcc")]


def test_cuda_home_without_nvcc_falls_through(tmp_path, bare_env):
    (tmp_path / "empty-cuda/bin").mkdir(parents=True)
    system = make_cuda(tmp_path / "sys/usr/local/cuda")
    assert find_nvcc({**bare_env, "CUDA_HOME": str(tmp_path / "empty-cuda")}, tmp_path / "sys")[0] == system / "bin/nvcc"


def test_version_and_targets_from_the_fake_nvcc(tmp_path):
    nvcc = make_cuda(tmp_path / "cuda", release="12.4") / "bin/nvcc"
    short, line = nvcc_version(nvcc)
    assert short == "12.4" and line == "Cuda compilation tools, release 12.4, V12.4.131"
    assert nvcc_arches(nvcc) == [50, 60, 70, 75, 80, 86, 89, 90]


def test_arch_choice():
    assert parse_compute_caps("9.0\n8.6\n") == [90, 86]
    assert choose_cuda_arch(90, [80, 86, 90]) == ("sm_90", "")
    assert choose_cuda_arch(86, []) == ("sm_86", "")           # nvcc without --list-gpu-arch: trust the device
    assert choose_cuda_arch(None, [90], override="sm_89") == ("sm_89", "")
    assert choose_cuda_arch(None, [90], override="8.9") == ("sm_89", "")
    arch, problem = choose_cuda_arch(100, [75, 80, 90])
    assert arch is None and "sm_100, newer than this nvcc knows" in problem and "sm_75..sm_90" in problem
    arch, problem = choose_cuda_arch(60, [75, 80, 90])
    assert arch is None and "no longer supported" in problem
    arch, problem = choose_cuda_arch(None, [90])
    assert arch is None and "EVOKERNEL_CUDA_ARCH" in problem


def test_discovery_with_a_fake_gpu(tmp_path, bare_env, tool_bin):
    make_cuda(tmp_path / "cuda")
    write_script(tool_bin / "nvidia-smi", 'echo "9.0"\n')
    f = discover_cuda({**bare_env, "CUDA_HOME": str(tmp_path / "cuda")}, system_root=tmp_path, probe_torch=False)
    assert f.nvcc == tmp_path / "cuda/bin/nvcc" and f.version == "12.4"
    assert f.smi_caps == [90] and f.arch == "sm_90"
    assert f.toolchain_problems == [] and f.device_problems == []


def test_discovery_names_each_missing_piece(tmp_path, bare_env):
    f = discover_cuda(bare_env, system_root=tmp_path, probe_torch=False)
    assert f.toolchain_problems[0].startswith("nvcc missing: not found in $CUDA_HOME (unset), $CUDA_PATH (unset), PATH")
    assert "install the CUDA toolkit or set CUDA_HOME" in f.toolchain_problems[0]
    assert f.device_problems == ["no CUDA device: nvidia-smi not found (no NVIDIA driver?)"]


def test_device_newer_than_nvcc(tmp_path, bare_env, tool_bin):
    make_cuda(tmp_path / "cuda")
    write_script(tool_bin / "nvidia-smi", 'echo "10.0"\n')
    f = discover_cuda({**bare_env, "CUDA_HOME": str(tmp_path / "cuda")}, system_root=tmp_path, probe_torch=False)
    assert f.arch is None
    assert any("sm_100, newer than this nvcc knows" in p for p in f.device_problems)


def test_torch_probe_of_a_cpu_only_build(tmp_path, bare_env):
    fake_python = write_script(tmp_path / "python",
                               'echo \'EVOKERNEL-PROBE {"torch": "2.5.1+cpu", "cuda": null, "available": false}\'\n')
    make_cuda(tmp_path / "cuda")
    f = discover_cuda({**bare_env, "CUDA_HOME": str(tmp_path / "cuda")}, system_root=tmp_path, python=str(fake_python))
    assert f.device_problems[0] == ("no CUDA device usable: PyTorch 2.5.1+cpu is a CPU-only build; "
                                    "install a CUDA build of torch")


def test_torch_probe_gives_the_device_and_arch(tmp_path, bare_env):
    fake_python = write_script(tmp_path / "python", 'echo \'EVOKERNEL-PROBE {"torch": "2.5.1", "cuda": "12.4", '
                               '"available": true, "count": 1, "name": "NVIDIA H200", "capability": 90}\'\n')
    make_cuda(tmp_path / "cuda")
    from verifier.backends.cuda import CudaBackend

    backend = CudaBackend({**bare_env, "CUDA_HOME": str(tmp_path / "cuda")}, system_root=str(tmp_path),
                          python=str(fake_python))
    tc = backend.toolchain()
    assert tc.available and tc.device == "NVIDIA H200 (sm_90)" and tc.details["arch"] == "sm_90"
    plan = backend.build_plan(["kernel.cu", "more.cu"], tmp_path)
    assert plan.commands == [[str(tmp_path / "cuda/bin/nvcc"), "-O3", "-Xcompiler", "-fPIC", "-shared", "-std=c++17",
                              "-arch=sm_90", "-o", "libcandidate.so", "kernel.cu", "more.cu", "_evokernel_check.cu"]]
    assert plan.library == "libcandidate.so" and "_evokernel_check.cu" in plan.files


@pytest.mark.parametrize("release", ["11.8", "12.4", "13.0"])
def test_build_key_follows_the_toolkit(tmp_path, bare_env, tool_bin, release):
    from verifier.backends.cuda import CudaBackend

    make_cuda(tmp_path / "cuda", release=release)
    key = CudaBackend({**bare_env, "CUDA_HOME": str(tmp_path / "cuda")}, system_root=str(tmp_path), arch="sm_90",
                      probe_torch=False).build_key()
    assert f"release {release}" in key and "sm_90" in key and str(Path(tmp_path / "cuda/bin/nvcc")) in key
