"""How far correct and wrong row sums land from PyTorch's, in units of the reference's own noise.

    .venv/bin/python bench/tolerance_margin.py [--rows 64] [--trials 4]

The correctness gate allows ``atol + rtol |expected| + k noise`` per value, where ``noise`` is the
RMS rounding error of the float32 reference against float64 (``verifier.compare.noise_allowed``
picks ``k``). PyTorch sums long rows in cascades; a kernel's plain loop accumulates in order and
rounds more. This builds row-sum kernels with g++ (in order, 8 and 16 lanes, 4 chunks, and two
wrong ones: a dropped term, inputs rounded to bfloat16), runs them on float32 rows of 1K to 4M
values (normal, normal x10, uniform, positive) and prints, per kernel, the largest ``k`` any value
needed to pass in each setting (its excess over ``atol + rtol |expected|`` divided by the noise;
negative: inside the tolerance without any noise allowance), beside the allowance's ``k``. The
correct kernels must stay below it in every setting; the wrong ones far above it wherever ``rtol``
does not already hide them (one term dropped from a million positive values is within rtol 1e-4).
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verifier.compare import noise_allowed  # noqa: E402

SOURCE = r"""
#include <cstdint>
#include <cstring>
static inline float bf16(float v) { uint32_t u; std::memcpy(&u, &v, 4); u &= 0xFFFF0000u; std::memcpy(&v, &u, 4); return v; }
extern "C" void in_order(const float* x, float* o, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; ++r) { float s = 0; for (int64_t c = 0; c < C; ++c) s += x[r * C + c]; o[r] = s; } }
extern "C" void lanes8(const float* x, float* o, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; ++r) { const float* p = x + r * C; float a[8] = {0}; int64_t c = 0;
        for (; c + 8 <= C; c += 8) for (int k = 0; k < 8; ++k) a[k] += p[c + k];
        float s = 0; for (; c < C; ++c) s += p[c];
        o[r] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + s; } }
extern "C" void lanes16(const float* x, float* o, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; ++r) { const float* p = x + r * C; float a[16] = {0}; int64_t c = 0;
        for (; c + 16 <= C; c += 16) for (int k = 0; k < 16; ++k) a[k] += p[c + k];
        float s = 0; for (int k = 0; k < 16; ++k) s += a[k]; for (; c < C; ++c) s += p[c]; o[r] = s; } }
extern "C" void chunks4(const float* x, float* o, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; ++r) { const float* p = x + r * C; float t = 0; int64_t n = C / 4;
        for (int k = 0; k < 4; ++k) { float s = 0; for (int64_t c = k * n; c < (k == 3 ? C : (k + 1) * n); ++c) s += p[c]; t += s; }
        o[r] = t; } }
extern "C" void wrong_dropped_term(const float* x, float* o, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; ++r) { double s = 0; for (int64_t c = 1; c < C; ++c) s += x[r * C + c]; o[r] = (float)s; } }
extern "C" void wrong_bf16_inputs(const float* x, float* o, int64_t R, int64_t C) {
    for (int64_t r = 0; r < R; ++r) { double s = 0; for (int64_t c = 0; c < C; ++c) s += bf16(x[r * C + c]); o[r] = (float)s; } }
"""
KERNELS = ("in_order", "lanes8", "lanes16", "chunks4", "wrong_dropped_term", "wrong_bf16_inputs")
ATOL = RTOL = 1e-4   # the CPU backend's float32 defaults


def build(folder: Path) -> ctypes.CDLL:
    (folder / "sums.cpp").write_text(SOURCE)
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-o", str(folder / "sums.so"), str(folder / "sums.cpp")],
                   check=True)
    return ctypes.CDLL(str(folder / "sums.so"))


def inputs(dist: str, rows: int, cols: int) -> torch.Tensor:
    if dist == "uniform":
        return torch.rand(rows, cols) * 2 - 1
    if dist == "positive":
        return torch.rand(rows, cols)
    return torch.randn(rows, cols) * (10.0 if dist == "normal x10" else 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(Path(tmp))
        per_config: dict[str, list[float]] = {k: [] for k in KERNELS}   # per (length, distribution): max k
        allowed_k = float("inf")
        for cols in (1 << 10, 1 << 13, 1 << 16, 1 << 20, 1 << 22):
            rows = args.rows if cols <= 1 << 16 else 8
            for dist in ("normal", "normal x10", "uniform", "positive"):
                here = {k: float("-inf") for k in KERNELS}
                for _ in range(args.trials if cols <= 1 << 16 else 1):
                    x = inputs(dist, rows, cols)
                    expected = x.sum(1)
                    noise = float((expected.double() - x.double().sum(1)).pow(2).mean().sqrt())
                    rms = float(expected.pow(2).mean().sqrt())
                    allowed_k = min(allowed_k, noise_allowed(noise, rms) / noise)
                    for name in KERNELS:
                        got = torch.empty(rows)
                        getattr(lib, name)(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(got.data_ptr()),
                                           ctypes.c_int64(rows), ctypes.c_int64(cols))
                        excess = float(((got - expected).abs() - RTOL * expected.abs() - ATOL).max())
                        here[name] = max(here[name], excess / noise)
                for name in KERNELS:
                    per_config[name].append(here[name])
        print(f"allowance: k = {allowed_k:.0f} x the reference's noise (the smallest over these outputs)")
        legit = wrong = 0.0
        for name in KERNELS:
            ks = per_config[name]
            if name.startswith("wrong"):
                caught = [k for k in ks if k > 0]   # k <= 0: inside atol + rtol already, whatever the noise
                wrong = min(caught) if not wrong else min(wrong, min(caught))
                print(f"{name:20s} refused in {sum(k > allowed_k for k in ks)} of {len(ks)} settings; where "
                      f"rtol does not already cover it, it needs k >= {min(caught):10.1f}")
            else:
                legit = max(legit, max(ks))
                print(f"{name:20s} passes in {sum(k <= allowed_k for k in ks)} of {len(ks)} settings; "
                      f"the worst needs k = {max(ks):6.1f}")
        print(f"margin: allowance / worst correct = {allowed_k / legit:.1f}x; smallest wrong / allowance = "
              f"{wrong / allowed_k:.0f}x")


if __name__ == "__main__":
    main()
