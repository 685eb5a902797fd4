"""The CUDA build recipe: launchers (host functions, not __global__ kernels), the nvcc command line,
and — where nvcc is installed, GPU or not — real builds of the GPU check's candidates, with the
launch-error hook the runtime calls after each launch."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from verifier.backends.base import BuildPlanError
from verifier.backends.cuda import CHECK_SYMBOL, CudaBackend, CudaRuntime
from verifier.toolchain.cdecl import DeclarationError

ROOT = Path(__file__).resolve().parents[2]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc is not installed")


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_launchers_are_host_functions_not_kernels():
    src = gpu_check().CANDIDATES["softmax"]["correct"][0]["kernel.cu"]
    src += '\nextern "C" __global__ void __launch_bounds__(256) exported_kernel(float* x) {}\n'
    src += 'extern "C" __device__ float device_helper(float v) { return v; }\n'
    src += 'extern "C" __host__ __device__ int both(int v) { return v; }\n'
    sigs = CudaBackend(probe_torch=False).launchers({"kernel.cu": src})
    assert [s.describe() for s in sigs] == [
        "void softmax_forward(float* x, float* out, int64_t rows, int64_t cols, cudaStream_t* stream)",
        "int both(int v)"]


def test_only_kernels_is_an_actionable_error():
    with pytest.raises(DeclarationError, match=r'no extern "C" host launcher found.*<<<blocks, 256, 0, stream>>>'):
        CudaBackend(probe_torch=False).launchers({"k.cu": 'extern "C" __global__ void k(float* x) {}'})


def test_no_device_no_arch_no_plan(tmp_path):
    backend = CudaBackend({"PATH": str(tmp_path)}, system_root=str(tmp_path), probe_torch=False)
    with pytest.raises(BuildPlanError, match="EVOKERNEL_CUDA_ARCH"):
        backend.build_plan(["k.cu"], tmp_path)


def test_generated_file_name_is_reserved(tmp_path):
    with pytest.raises(BuildPlanError, match="rename"):
        CudaBackend(arch="sm_90", probe_torch=False).build_plan(["_evokernel_check.cu"], tmp_path)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("task", ["relu", "softmax", "matmul"])
def test_gpu_check_candidates_build_with_nvcc(tmp_path, task):
    from verifier.build import build_candidate

    backend = CudaBackend(arch="sm_90", probe_torch=False)
    for kind, (files, _) in gpu_check().CANDIDATES[task].items():
        result = build_candidate(backend, files, tmp_path / "cache")
        assert result.ok, f"{task} {kind}: {result.log}"
        assert result.cached or result.command[-2:] == ["kernel.cu", "_evokernel_check.cu"]
        assert all(s.params[-1].ctype == "cudaStream_t" for s in result.signatures)


@needs_nvcc
@pytest.mark.slow
def test_compile_errors_come_back_with_the_source_line(tmp_path):
    from verifier.build import build_candidate

    files = dict(gpu_check().CANDIDATES["relu"]["correct"][0])
    files["kernel.cu"] = files["kernel.cu"].replace("const float v = x[i];", "const float v = x[i]")
    result = build_candidate(CudaBackend(arch="sm_90", probe_torch=False), files, tmp_path / "cache")
    assert not result.ok
    assert 'kernel.cu(' in result.log and "error" in result.log
    assert "out[i] =" in result.log  # nvcc's quoted source line is kept


@needs_nvcc
@pytest.mark.slow
def test_launch_error_hook_is_exported_and_checked(tmp_path, on_host):
    """The library exports the last-error hook; the runtime calls it after each launcher. Without a
    GPU driver the hook reports CUDA's own error, which the runtime raises with CUDA's words."""
    from verifier.build import build_candidate
    from verifier.runtime import KernelCallError, KernelLibrary

    files = gpu_check().CANDIDATES["relu"]["correct"][0]
    result = build_candidate(CudaBackend(arch="sm_90", probe_torch=False), files, tmp_path / "cache")
    assert result.ok, result.log
    import ctypes

    assert hasattr(ctypes.CDLL(str(result.library)), CHECK_SYMBOL)
    lib = KernelLibrary(str(result.library), [s.to_dict() for s in result.signatures], on_host(CudaRuntime))
    try:
        lib.relu_forward(None, None, 0)  # n = 0: launches nothing
    except KernelCallError as exc:       # no usable driver here
        assert "relu_forward(): CUDA error" in str(exc)
