"""Can a kernel that replays results earn a speedup? Issue #24's matmul: a kernel that recognises its
inputs by the direction of a few sampled values and, on a match, returns f^2 C from a cache
(C(fA, fB) = f^2 C(A, B)) instead of multiplying. Verified beside the same kernel without the cache,
in one run, alternating; printed: each one's speedup over PyTorch and the ratio of the two.

When every timed round rescaled one of two fixed input sets, the replay hit on every call after the
first two and measured 8.7x where the honest kernel measured 0.22x. With fresh draws every round
(verifier.window.harness) it never hits: the ratio should be about 1.

    .venv/bin/python bench/forgery_check.py [--repeats 2] [--size 384]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = """
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        lib.matmul(a, b, out, a.shape[0], a.shape[1], b.shape[1])
        return out
"""

HONEST = """
#include <cstdint>
extern "C" void matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) c[i * n + j] = 0.f;
        for (int64_t p = 0; p < k; ++p) {
            const float x = a[i * k + p];
            for (int64_t j = 0; j < n; ++j) c[i * n + j] += x * b[p * n + j];
        }
    }
}
"""

# Two cached results, keyed by eight sampled values of each input; a match up to one scale factor per
# input replays f_a * f_b * C.
REPLAY = """
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
struct Entry { float* c = nullptr; float ka[8], kb[8]; int64_t size = 0; };
static Entry saved[2];
static int next_slot = 0;
static void sample(const float* x, int64_t count, float* key) {
    for (int s = 0; s < 8; ++s) key[s] = x[(s * 7919 + 13) % count];
}
static bool scaled(const float* key, const float* now, float& f) {
    f = now[0] / key[0];
    for (int s = 0; s < 8; ++s)
        if (std::fabs(now[s] - f * key[s]) > 1e-4f * std::fabs(now[s]) + 1e-12f) return false;
    return true;
}
extern "C" void matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
    float ka[8], kb[8];
    sample(a, m * k, ka);
    sample(b, k * n, kb);
    for (Entry& e : saved) {
        float fa, fb;
        if (e.c && e.size == m * n && scaled(e.ka, ka, fa) && scaled(e.kb, kb, fb)) {
            const float f = fa * fb;
            #pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < m * n; ++i) c[i] = f * e.c[i];
            return;
        }
    }
""" + HONEST.split("{", 1)[1].rsplit("}", 1)[0] + """
    Entry& e = saved[next_slot++ % 2];
    if (e.size != m * n) { std::free(e.c); e.c = (float*)std::malloc(sizeof(float) * m * n); e.size = m * n; }
    std::memcpy(e.c, c, sizeof(float) * m * n);
    std::memcpy(e.ka, ka, sizeof ka);
    std::memcpy(e.kb, kb, sizeof kb);
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--size", type=int, default=384, help="M = K = N of the built-in matmul task")
    args = parser.parse_args()

    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    task = load_suite("builtin").get("matmul")
    task = dataclasses.replace(task, size_overrides={"M": args.size, "K": args.size, "N": args.size})
    spec = task.spec()
    seen: dict[str, list[float]] = {"honest": [], "replay": []}
    with tempfile.TemporaryDirectory() as cache, Verifier("cpu", VerifyConfig(), cache_dir=cache) as verifier:
        for r in range(args.repeats):
            for name, kernel in (("honest", HONEST), ("replay", REPLAY)):
                files = {"model.py": MODEL, "kernel.cpp": kernel + f"\n// {name} {r} {time.time_ns()}\n"}
                out = verifier.verify(spec, files)
                if not out.feasible:
                    print(f"{name}: {out.message[:300]}")
                    continue
                seen[name].append(float(out.speedup or 0.0))
                print(f"{r + 1} {name:6s} {out.latency_ms:8.3f} ms  {out.speedup:6.2f}x vs PyTorch "
                      f"[{out.speedup_ci[0]:.2f}, {out.speedup_ci[1]:.2f}] {out.vs_reference}", flush=True)
    if seen["honest"] and seen["replay"]:
        ratio = statistics.median(seen["replay"]) / statistics.median(seen["honest"])
        print(f"replay / honest speedup: {ratio:.2f}x  (a replay that pays off reads >> 1; fresh draws: about 1)")


if __name__ == "__main__":
    main()
