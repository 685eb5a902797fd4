"""Every integer status of an Ascend binding is read as a status (issue #50, finding 2). The custom-op binding
returns what ``aclnn<Op>GetWorkspaceSize`` or ``aclnn<Op>`` returned; only ``aclrtlaunch_*`` entries used to be
checked, so a missing kernel binary for the SoC, a tiling failure or a wrong OPP path left the output's
``empty_like`` garbage and read as "values differ". MultiKernelBench's ``EXEC_NPU_CMD`` checks both calls and
reports ``aclGetRecentErrMsg()``; so does the runtime now, with whose failure it is, and the job's CANN log tail
goes with any device failure.

Stand-ins: a binding built for the host that returns an aclnn status, and a ``libascendcl.so`` that answers
``aclGetRecentErrMsg`` as CANN's does (a C string, the last error of the calling thread)."""

from __future__ import annotations

import ctypes
import subprocess

import pytest
import torch

from verifier.backends.ascend import AscendRuntime, cann_log_tail
from verifier.runtime import KernelCallError, KernelLibrary

BINDING = r'''
#include <cstdint>
typedef void* aclrtStream;
// the status the stand-in's aclnn call returns: 0, or what the test sets
static uint32_t next_status = 0;
extern "C" void set_status(uint32_t status) { next_status = status; }
extern "C" uint32_t run_add_custom(aclrtStream stream, const uint16_t* x, const uint16_t* y, uint16_t* z, uint32_t n) {
    if (next_status) return next_status;          // aclnnAddCustomGetWorkspaceSize failed: z never written
    for (uint32_t i = 0; i < n; ++i) z[i] = x[i];
    return 0;
}
'''

ASCENDCL = r'''
extern "C" const char* aclGetRecentErrMsg() {
    return "EZ9999: Inner Error! TilingFunc of AddCustom returned GRAPH_FAILED: totalLength 100 is not a multiple of 48";
}
'''


@pytest.fixture(scope="module")
def binding(tmp_path_factory):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    result = build_candidate(get_backend("cpu"), {"binding.cpp": BINDING}, tmp_path_factory.mktemp("aclnn"))
    assert result.ok, result.log
    return str(result.library), [s.to_dict() for s in result.signatures]


STANDIN = "libi50_standin_ascendcl.so"


@pytest.fixture
def ascendcl(tmp_path_factory, monkeypatch):
    """The stand-in ACL library, loaded as torch_npu loads CANN's (before any binding call) and found by its soname as
    the runtime finds ``libascendcl.so``. A name of its own: a stand-in under CANN's soname would stand in for the
    other tests' stand-in ACL libraries in this process too."""
    from verifier.backends import ascend

    folder = tmp_path_factory.mktemp("ascendcl")
    (folder / "acl.cpp").write_text(ASCENDCL)
    subprocess.run(["g++", "-shared", "-fPIC", f"-Wl,-soname,{STANDIN}", "acl.cpp", "-o", STANDIN], cwd=folder,
                   check=True)
    monkeypatch.setattr(ascend, "ASCENDCL", STANDIN)
    return ctypes.CDLL(str(folder / STANDIN))


def test_a_binding_s_non_zero_status_fails_the_call_with_cann_s_message(binding, ascendcl, on_host):
    lib = KernelLibrary(*binding, on_host(AscendRuntime))
    x = torch.zeros(8, dtype=torch.float16)
    z = torch.full_like(x, 7.0)
    assert lib.run_add_custom(x, x, z, 8) == 0 and torch.equal(z, x)
    lib.set_status(561002)
    with pytest.raises(KernelCallError) as info:
        lib.run_add_custom(x, x, z, 8)
    text = str(info.value)
    assert "run_add_custom() returned 561002" in text and "ACLNN_ERR_INNER_TILING_ERROR" in text
    assert "TilingFunc" in text and "not the kernel's" in text
    assert "not a multiple of 48" in text          # aclGetRecentErrMsg(), through ctypes from libascendcl


def test_each_status_says_whose_failure_it_is(binding, ascendcl, on_host):
    lib = KernelLibrary(*binding, on_host(AscendRuntime))
    x = torch.zeros(8, dtype=torch.float16)
    said = {}
    for status in (161002, 561003, 561107, 507035):
        lib.set_status(status)
        with pytest.raises(KernelCallError) as info:
            lib.run_add_custom(x, x, torch.empty_like(x), 8)
        said[status] = str(info.value)
    assert "the binding's" in said[161002]
    assert "AddConfig" in said[561003] and "not the kernel's" in said[561003]
    assert "the setup's" in said[561107] and "ASCEND_CUSTOM_OPP_PATH" in said[561107]
    assert "the kernel's" in said[507035] and "not the kernel's" not in said[507035]


def test_the_job_s_cann_log_tail_is_read_from_its_folder(tmp_path):
    """CANN writes its errors to the job's stdout (ASCEND_SLOG_PRINT_TO_STDOUT=1, set for jobs) or, where that is
    not honoured, under the job's $HOME/ascend/log: the last error lines of either go with a device failure."""
    (tmp_path / "stdout.txt").write_text("ordinary output\n[ERROR] ASCENDCL(1,python):2026-01-01 aclnn failed\n")
    plog = tmp_path / "ascend/log/debug/plog"
    plog.mkdir(parents=True)
    (plog / "plog-1_2026.log").write_text("[INFO] RUNTIME(1) started\n[ERROR] RUNTIME(1) rtKernelLaunch failed, "
                                          "retCode=0x7020008\n")
    tail = cann_log_tail(tmp_path)
    assert "aclnn failed" in tail and "rtKernelLaunch failed" in tail and "started" not in tail
    assert cann_log_tail(tmp_path / "absent") == ""


def test_jobs_print_cann_s_log_where_the_harness_reads_it():
    from verifier.backends.ascend import AscendBackend

    env = AscendBackend(env={}, probe_torch=False).worker_env()
    assert env["ASCEND_SLOG_PRINT_TO_STDOUT"] == "1" and env["ASCEND_GLOBAL_LOG_LEVEL"] == "3"


def test_a_device_failure_s_outcome_carries_the_log_tail(tmp_path):
    from verifier.backends.ascend import AscendBackend
    from verifier.harness.job_runner import JobRunner

    class Logged:
        name = "ascend"

        def explain(self, text: str) -> str:
            return ""

        log_tail = staticmethod(AscendBackend.log_tail)

    (tmp_path / "stdout.txt").write_text("[ERROR] RUNTIME(9) device 0 lost\n")
    runner = JobRunner.__new__(JobRunner)
    runner.backend = Logged()
    assert "CANN log: [ERROR] RUNTIME(9) device 0 lost" in runner.explained("forward raised ...", tmp_path)


def test_the_log_tail_never_follows_a_link_out_of_the_job_s_folder(tmp_path):
    """The job's folder is the candidate's: a link there must not bring a host file into the outcome."""
    outside = tmp_path / "host"
    (outside / "log").mkdir(parents=True)
    (outside / "log" / "secret.log").write_text("[ERROR] host secret\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "ascend").symlink_to(outside)
    (job / "stdout.txt").symlink_to(outside / "log" / "secret.log")
    assert cann_log_tail(job) == ""
