"""The correct relu candidate the benchmarks verify (a parallel SIMD loop and its ModelNew), shared by
verify_latency.py, timing_stability.py and cluster_overhead.py."""

from __future__ import annotations

KERNEL = """
#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
"""

MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel())
        return out
"""


def candidate(tag: str) -> dict[str, str]:
    """The candidate with a distinct constant: different code (a new build), the same kernel."""
    return {"model.py": MODEL, "kernel.cpp": KERNEL + f'\nstatic const char* kTag = "{tag}";\n'}


# Exactly twice the work: two passes over the data, the second reading what the first wrote (a
# dependency the compiler cannot drop), one output. Its speedup should be about half the plain one's.
KERNEL_TWICE = """
#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    #pragma omp parallel
    {
        #pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? -x[i] : 0.f;
        #pragma omp for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? -out[i] : 0.f;
    }
}
"""


def candidate_twice(tag: str) -> dict[str, str]:
    """The same candidate doing twice the work."""
    return {"model.py": MODEL, "kernel.cpp": KERNEL_TWICE + f'\nstatic const char* kTag = "{tag}";\n'}
