"""End-to-end check of the CUDA backend on a machine with an NVIDIA GPU.

For three built-in tasks (relu, softmax, matmul) it verifies one correct and one incorrect CUDA
candidate through the whole verifier (format, anti-hack, nvcc build, sandboxed correctness trials,
event-timed performance against the PyTorch reference) and prints each outcome and speedup.

    .venv/bin/python bench/gpu_check.py [--tasks relu,softmax,matmul] [--json PATH] [--keep DIR]

Exit status: 0 when every correct candidate is feasible and every incorrect one fails at the
correctness gate; 1 otherwise; 2, with a one-line reason, when the CUDA backend cannot run here (no
nvcc, a CPU-only PyTorch, no GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ELEMENTWISE_MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel())   # the stream is filled in by the runtime
        return out
"""

RELU = """
#include <cstdint>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        out[i] = v > 0.f ? v : __SLOPE__;
    }
}

extern "C" void relu_forward(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;   // grid-stride loop covers the rest
    relu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, out, n);
}
"""

SOFTMAX_MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        lib.softmax_forward(x, out, rows, cols)
        return out
"""

SOFTMAX = """
#include <cstdint>
#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Reduce one value per thread over the block; every thread gets the result.
template <bool MAX>
__device__ float block_reduce(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : (MAX ? -INFINITY : 0.f);
        w = MAX ? warp_max(w) : warp_sum(w);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    const float result = scratch[0];
    __syncthreads();  // scratch is reused by the next reduction
    return result;
}

// One block per row: max, then sum of exp(x - max), then the normalised values.
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
    __shared__ float scratch[32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* dst = out + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce<true>(m, scratch);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(row[c] - m);
    __SUM__
    const float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = __expf(row[c] - m) * inv;
}

extern "C" void softmax_forward(const float* x, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    softmax_rows<<<(unsigned)rows, 512, 0, stream>>>(x, out, cols);
}
"""

MATMUL_MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        m, k = a.shape
        n = b.shape[1]
        out = torch.empty(m, n, device=a.device, dtype=a.dtype)
        lib.matmul_forward(a, b, out, m, n, k)
        return out
"""

MATMUL = """
#include <cstdint>
#include <cuda_runtime.h>

#define TILE 32

// C[M,N] = A[M,K] B[K,N], row-major; one 32x32 output tile per block, K walked in shared-memory tiles.
__global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                             int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(int64_t)row * K + ka] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? __B_LOAD__ : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(int64_t)row * N + col] = acc;
}

extern "C" void matmul_forward(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                               cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    const dim3 block(TILE, TILE);
    const dim3 grid((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    matmul_tiled<<<grid, block, 0, stream>>>(A, B, C, (int)M, (int)N, (int)K);
}
"""

# task -> kind -> (files, what the candidate does)
CANDIDATES: dict[str, dict[str, tuple[dict[str, str], str]]] = {
    "relu": {
        "correct": ({"model.py": ELEMENTWISE_MODEL, "kernel.cu": RELU.replace("__SLOPE__", "0.f")},
                    "grid-stride ReLU"),
        "incorrect": ({"model.py": ELEMENTWISE_MODEL, "kernel.cu": RELU.replace("__SLOPE__", "0.01f * v")},
                      "leaky ReLU (slope 0.01) instead of ReLU"),
    },
    "softmax": {
        "correct": ({"model.py": SOFTMAX_MODEL, "kernel.cu": SOFTMAX.replace("__SUM__", "s = block_reduce<false>(s, scratch);")},
                    "one block per row, warp-shuffle reductions"),
        "incorrect": ({"model.py": SOFTMAX_MODEL, "kernel.cu": SOFTMAX.replace("__SUM__", "// (missing block reduction)")},
                      "each thread divides by its own partial sum"),
    },
    "matmul": {
        "correct": ({"model.py": MATMUL_MODEL, "kernel.cu": MATMUL.replace("__B_LOAD__", "B[(int64_t)kb * N + col]")},
                    "32x32 shared-memory tiles"),
        "incorrect": ({"model.py": MATMUL_MODEL, "kernel.cu": MATMUL.replace("__B_LOAD__", "B[(int64_t)col * K + kb]")},
                      "reads B as if it were transposed"),
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="relu,softmax,matmul", help="comma-separated built-in task ids")
    parser.add_argument("--json", default=None, help="also write the outcomes to this JSON file")
    parser.add_argument("--keep", default=None, help="write candidates and caches here (default: a temp folder)")
    args = parser.parse_args(argv)

    from verifier.backends import get_backend

    backend = get_backend("cuda")
    toolchain = backend.toolchain()
    if not toolchain.available:
        print(f"gpu_check: the CUDA backend cannot run here: {toolchain.reason}")
        return 2

    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in CANDIDATES]
    if unknown:
        print(f"gpu_check: no candidates for {', '.join(unknown)}; choose from {', '.join(CANDIDATES)}")
        return 2
    suite = load_suite("builtin")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="evokernel-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"device: {toolchain.device}; nvcc: {toolchain.version}; -arch={toolchain.details.get('arch')}")
    rows, ok = [], True
    started = time.perf_counter()
    with Verifier(backend, VerifyConfig(), cache_dir=work / "cache") as verifier:
        print(f"sandbox: {verifier.isolation}")
        for task_id in tasks:
            spec = suite.get(task_id).spec()
            for kind, (files, what) in CANDIDATES[task_id].items():
                folder = work / f"{task_id}-{kind}"
                folder.mkdir(exist_ok=True)
                for name, text in files.items():
                    (folder / name).write_text(text)
                outcome = verifier.verify(spec, folder)
                expected = outcome.feasible if kind == "correct" else outcome.failed_gate == "correctness"
                ok &= expected
                row = {"task": task_id, "candidate": kind, "what": what, "expected": expected,
                       "feasible": outcome.feasible, "failed_gate": outcome.failed_gate,
                       "latency_ms": outcome.latency_ms, "reference_ms": outcome.reference_ms,
                       "speedup": outcome.speedup, "flags": outcome.flags, "message": outcome.message,
                       "gates": [(g.name, g.status, round(g.seconds, 2)) for g in outcome.gates]}
                rows.append(row)
                verdict = "feasible" if outcome.feasible else f"failed at {outcome.failed_gate}"
                timing = (f"{outcome.latency_ms:.3f} ms vs {outcome.reference_ms:.3f} ms, speedup {outcome.speedup:.2f}x"
                          if outcome.speedup is not None else "-")
                print(f"{'ok ' if expected else 'BAD'} {task_id:8} {kind:9} {verdict:24} {timing}")
                print(f"      {what}: {outcome.message.splitlines()[0][:300]}")
                for flag in outcome.flags:
                    print(f"      flag: {flag}")
    print(f"{'all as expected' if ok else 'SOME OUTCOMES NOT AS EXPECTED'} in {time.perf_counter() - started:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": toolchain.device, "nvcc": toolchain.version, "rows": rows},
                                              indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
