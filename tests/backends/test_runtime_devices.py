"""The runtime contract on device backends, exercised on the CPU with hand-built libraries: the stream
filled in wherever it is declared, Ascend's entry names and status returns, timing by events."""

from __future__ import annotations

import pytest
import torch

from verifier.backends import backend_for
from verifier.backends.ascend import AscendRuntime
from verifier.backends.cuda import CudaRuntime
from verifier.runtime import KernelCallError, KernelLibrary

SOURCE = r'''
#include <cstdint>
typedef void* aclrtStream;
typedef void* cudaStream_t;
static int64_t last_stream = -1;
extern "C" int64_t seen_stream() { return last_stream; }
extern "C" void scale_tail(const float* x, float* y, float a, int64_t n, cudaStream_t stream) {
    last_stream = (int64_t)stream;
    for (int64_t i = 0; i < n; ++i) y[i] = a * x[i];
}
extern "C" uint32_t aclrtlaunch_scale(uint32_t blockDim, aclrtStream stream, uint8_t* x, uint8_t* y, float a, uint32_t n) {
    last_stream = (int64_t)stream;
    for (uint32_t i = 0; i < n; ++i) ((float*)y)[i] = a * ((const float*)x)[i];
    return blockDim == 0 ? 507015u : 0u;   // pretend a zero-core launch fails
}
'''


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    result = build_candidate(get_backend("cpu"), {"k.cpp": SOURCE}, tmp_path_factory.mktemp("rt-dev"))
    assert result.ok, result.log
    return str(result.library), [s.to_dict() for s in result.signatures]


def test_trailing_stream_is_filled_in(lib_path, on_host):
    lib = KernelLibrary(*lib_path, on_host(CudaRuntime, lambda: 1234))
    x = torch.randn(10)
    y = torch.empty_like(x)
    lib.scale_tail(x, y, 2.0, x.numel())
    assert torch.equal(y, 2 * x) and lib.seen_stream() == 1234


def test_ascend_entry_by_kernel_name_with_the_stream_in_second_place(lib_path, on_host):
    lib = KernelLibrary(*lib_path, on_host(AscendRuntime, lambda: 77))
    x = torch.randn(10)
    y = torch.empty_like(x)
    assert lib.scale(8, x, y, 3.0, x.numel()) == 0
    assert torch.allclose(y, 3 * x) and lib.seen_stream() == 77
    lib.aclrtlaunch_scale(8, 5, x, y, 3.0, x.numel())  # all arguments given: the stream is the caller's
    assert lib.seen_stream() == 5


def test_failed_ascend_launch_raises_with_its_code(lib_path, on_host):
    lib = KernelLibrary(*lib_path, on_host(AscendRuntime))
    x = torch.randn(4)
    with pytest.raises(KernelCallError, match=r"aclrtlaunch_scale\(\) returned 507015"):
        lib.scale(0, x, torch.empty_like(x), 1.0, 4)


def test_wrong_argument_count_mentions_the_optional_stream(lib_path, on_host):
    lib = KernelLibrary(*lib_path, on_host(AscendRuntime))
    with pytest.raises(KernelCallError, match=r"takes 6 arguments .* got 3 \(the stream may be left out\)"):
        lib.scale(1, torch.zeros(1), torch.zeros(1))


def test_tensors_on_the_wrong_device_are_refused(lib_path):
    lib = KernelLibrary(*lib_path, AscendRuntime())
    with pytest.raises(KernelCallError, match="tensor is on cpu, the kernel needs npu"):
        lib.aclrtlaunch_scale(1, 0, torch.zeros(4), torch.zeros(4), 1.0, 4)   # the stream given: no torch_npu


def test_the_host_runtime_fills_in_no_stream_and_knows_no_entry_names(lib_path):
    """What the stream and entry names mean is the device runtime's: the host's declares neither."""
    lib = KernelLibrary(*lib_path)
    with pytest.raises(KernelCallError, match=r"takes 5 arguments .* got 4$"):
        lib.scale_tail(torch.zeros(1), torch.zeros(1), 1.0, 1)
    with pytest.raises(AttributeError, match="no extern \"C\" function 'scale'"):
        _ = lib.scale


def test_load_outside_the_verifier_picks_the_backend_from_the_sources():
    assert backend_for({"kernel.cu": "", "model.py": ""}) == "cuda"
    assert backend_for({"kernel.cpp": "extern \"C\" __global__ __aicore__ void k(GM_ADDR x) {}"}) == "ascend"
    assert backend_for({"kernel.cpp": "extern \"C\" void k(float* x) {}"}) == "cpu"


class FakeEvent:
    clock = [0.0]

    def __init__(self):
        self.t = None

    def record(self):
        FakeEvent.clock[0] += 1.0
        self.t = FakeEvent.clock[0]

    def elapsed_time(self, other):
        return (other.t - self.t) * 0.25


def test_event_timing_keeps_the_wall_clock_beside():
    from verifier.window.in_process import time_calls

    timing = time_calls(lambda: None, lambda i: None, warmup=1, max_calls=5, budget_s=1.0,
                        events=lambda: (FakeEvent(), FakeEvent()))
    assert timing.clock == "events" and timing.calls == 5
    assert timing.median_ms == 0.25 and timing.wall_median_ms is not None
    assert time_calls(lambda: None, lambda i: None, warmup=0, max_calls=3, budget_s=1.0).clock == "wall"


def test_escaped_work_is_flagged_by_the_gap_between_events_and_wall_clock():
    from verifier.gates.performance import flag
    from verifier.outcome import Outcome
    from verifier.reference import Reference

    out = Outcome.start("t", "cuda")
    ref = Reference([], [], [])
    flag(ref, out, {"clock": "events", "median_ms": 0.01, "wall_median_ms": 2.5})
    assert out.flags and "outside the current stream" in out.flags[0]
    ok = Outcome.start("t", "cuda")
    flag(ref, ok, {"clock": "events", "median_ms": 1.0, "wall_median_ms": 1.03})
    assert ok.flags == []


def test_worker_flush_size_per_device():
    from verifier.backends import backend_runtime
    from verifier.backends.ascend import DEFAULT_L2_BYTES

    assert backend_runtime("cpu").flush_bytes(12345) == 12345
    assert backend_runtime("ascend").flush_bytes(1) == 2 * DEFAULT_L2_BYTES   # no torch_npu here: the largest L2


def test_each_backend_declares_its_device_runtime_and_jobs_carry_it():
    """The device knowledge (stream type, entries, preloaded modules) is the backend's runtime's; a job
    names it by ``module:Class`` and the worker makes that one."""
    from verifier.backends import DeviceRuntime, backend_class, load_runtime, runtime_target

    assert runtime_target(backend_class("cpu")) == "verifier.backends.base:DeviceRuntime"
    cuda, ascend = (load_runtime(runtime_target(backend_class(n))) for n in ("cuda", "ascend"))
    assert (cuda.device, cuda.stream_type, cuda.entry_prefix, cuda.modules) == ("cuda", "cudaStream_t", "", ())
    assert (ascend.device, ascend.stream_type, ascend.modules) == ("npu", "aclrtStream", ("torch_npu",))
    assert ascend.entry_prefix == "aclrtlaunch_"
    assert type(load_runtime("")) is DeviceRuntime and DeviceRuntime().events() is None
    with pytest.raises(ImportError, match="no_such_module:Runtime cannot be imported"):
        load_runtime("no_such_module:Runtime")
    with pytest.raises(ImportError, match="is not a device runtime"):
        load_runtime("verifier.backends.cpu:CpuBackend")
