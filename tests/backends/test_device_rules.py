"""Device anti-hack rules on kernel sources, and what reaches the candidate: a CUDA launch on anything
but the given stream, streams/graphs/events/allocation of its own, ACL runtime calls on Ascend."""

from __future__ import annotations

import pytest

from verifier.gates.antihack import check_kernel_source

LAUNCHER = 'extern "C" void f(float* x, cudaStream_t stream) {{ {body} }}'


@pytest.mark.parametrize("body, words", [
    ("k<<<1, 32>>>(x);", "names no stream"),
    ("k<<<1, 32, 0>>>(x);", "names no stream"),
    ("k<<<1, 32, 0, 0>>>(x);", "on stream 0"),
    ("k<<<1, 32, 0, nullptr>>>(x);", "on stream nullptr"),
    ("k<<<1, 32, 0, cudaStreamPerThread>>>(x);", "cudaStreamPerThread is not allowed"),
    ("cudaStream_t s; cudaStreamCreate(&s); k<<<1, 32, 0, s>>>(x);", "cudaStreamCreate is not allowed"),
    ("cudaStream_t s; cudaStreamCreateWithFlags(&s, 1);", "cudaStreamCreateWithFlags is not allowed"),
    ("cudaGraph_t g; cudaGraphCreate(&g, 0);", "(graphs)"),
    ("cudaEvent_t e; cudaEventCreate(&e);", "the verifier does the timing"),
    ("float* tmp; cudaMalloc(&tmp, 4);", "allocate buffers in model.py"),
    ("cudaDeviceReset();", "the device belongs to the verifier"),
])
def test_cuda_rules(body, words):
    problem = check_kernel_source("k.cu", LAUNCHER.format(body=body), set(), "cuda")
    assert problem is not None and words in problem


def test_cuda_launch_on_the_given_stream_passes():
    src = '#include <cuda_runtime.h>\n#include "cuda_fp16.h"\n' + LAUNCHER.format(
        body="k<<<dim3(4, 2), dim3(32, 8), 1024, stream>>>(x); cudaStreamSynchronize(stream);")
    assert check_kernel_source("k.cu", src, set(), "cuda") is None


def test_cuda_includes():
    assert "thrust" in check_kernel_source("k.cu", "#include <thrust/sort.h>\n", set(), "cuda")
    assert "BLAS" in check_kernel_source("k.cu", "#include <cublas_v2.h>\n", set(), "cuda")
    assert check_kernel_source("k.cu", "#include <cuda_runtime.h>\n#include <cstdint>\n", set(), "cuda") is None


def test_ascend_rules():
    ok = '#include "kernel_operator.h"\n#include "lib/matmul_intf.h"\nextern "C" __global__ __aicore__ void k(GM_ADDR x) {}\n'
    assert check_kernel_source("k.cpp", ok, set(), "ascend") is None
    assert "ACL runtime" in check_kernel_source("k.cpp", "void f() { aclrtSynchronizeDevice(); }", set(), "ascend")
    assert "ACL runtime" in check_kernel_source("k.cpp", "void f(void* s) { aclrtMemcpy(0, 0, 0, 0, 0); }", set(), "ascend")
    assert "device code" in check_kernel_source("k.cpp", '#include "acl/acl.h"\n', set(), "ascend")


def test_cpu_rules_are_unchanged():
    # a CANN header is not the candidate's own file on the CPU backend
    assert "only the candidate's own files" in check_kernel_source("k.cpp", '#include "kernel_operator.h"\n', set())
    # the timer rule still holds, without catching headers that merely end in "time.h"
    assert "no timers" in check_kernel_source("k.cpp", "#include <time.h>\n", set())
    assert "no timers" in check_kernel_source("k.cpp", "#include <sys/time.h>\n", set())
    assert check_kernel_source("k.cpp", "#include <runtime.h>\n", set()) is None


def test_a_backend_declares_its_own_kernel_rules():
    # The device rules come from the backend's own module, found through the backend table by name; a
    # backend object passed directly brings its own (how a new backend adds rules without touching the gate).
    from verifier.backends import KernelRules, backend_class
    from verifier.gates.antihack import kernel_rules

    assert kernel_rules("cuda") is backend_class("cuda").kernel_rules
    assert kernel_rules("cpu") is None and kernel_rules("not-a-backend") is None

    from verifier.backends.cpu import CpuBackend

    class ToyBackend(CpuBackend):
        name = "toy"
        kernel_rules = KernelRules(words={"toy runtime": (("toyMalloc",), "allocate buffers in model.py")})

    src = 'extern "C" void f(float* x) { toyMalloc(4); }'
    assert check_kernel_source("k.cpp", src, set()) is None
    problem = check_kernel_source("k.cpp", src, set(), ToyBackend())
    assert problem == "k.cpp line 1: toyMalloc is not allowed in kernels (toy runtime): allocate buffers in model.py"
