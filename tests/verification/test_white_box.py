"""A white-box attacker (issue #18): candidates written against the verifier's own source.

1. Re-entry into the host process: a kernel that declares libpython's functions itself (or looks
   them up through the loader) and runs Python inside the worker: computing with PyTorch unseen by
   the op trace, or replacing the clock the timing loop reads. Refused at the build, symbol named.
2. Reads outside the job: a sentinel file in a fresh folder outside every home and outside the job
   folder, read from the kernel (glibc's ``__open_2``/``read``, ``open``, ``fopen``, a raw
   ``syscall``), from ``model.py`` or ``#include``d by the build: absent, and in no output.
3. Honest candidates (the fixtures and the shipped examples) still pass.

4. Recognisable checked calls: a kernel that knows the inputs of the old fixed seeds (1000 + i) does
   the whole work only on them. Seeds now come from the operating system: it fails. (Spot checks
   over a few timed calls, the fourth class, are covered beside the timing code that closes them:
   ``test_paired_timing.py::test_a_kernel_that_cheats_in_the_middle_of_the_timing_is_caught``.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

import candidates as C

pytestmark = pytest.mark.slow

SECRET = "SENTINEL_" + "b7e1" * 4


def _bwrap() -> tuple[bool, str]:
    from verifier.sandbox import bwrap_status

    return bwrap_status()


# ----------------------------------------------------------------------------- 1. back into Python

# Computes relu with torch.nn.functional through the interpreter the worker already runs, with the
# worker's op trace switched off around it.
PY_RELU = r'''
#include <cstdint>
#include <cstdio>
extern "C" {
{decl} int PyGILState_Ensure(void);
{decl} void PyGILState_Release(int);
{decl} int PyRun_SimpleString(const char* command);
}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    static char code[1024];
    snprintf(code, sizeof code,
             "import ctypes, torch\n"
             "from torch.utils._python_dispatch import _disable_current_modes\n"
             "with _disable_current_modes():\n"
             "    x = torch.frombuffer((ctypes.c_float * %lld).from_address(%llu), dtype=torch.float32)\n"
             "    o = torch.frombuffer((ctypes.c_float * %lld).from_address(%llu), dtype=torch.float32)\n"
             "    o.copy_(torch.nn.functional.relu(x))\n",
             (long long)n, (unsigned long long)(uintptr_t)x, (long long)n, (unsigned long long)(uintptr_t)out);
    {guard}
    int state = PyGILState_Ensure();
    PyRun_SimpleString(code);
    PyGILState_Release(state);
}
'''

# Does the work itself, but on its first call makes the timing loop's clock run at 0.4x.
PY_CLOCK = r'''
#include <cstdint>
extern "C" {
int PyGILState_Ensure(void);
void PyGILState_Release(int);
int PyRun_SimpleString(const char* command);
}
static bool patched = false;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (!patched) {
        patched = true;
        int state = PyGILState_Ensure();
        PyRun_SimpleString("import time\n"
                           "real = time.perf_counter_ns\n"
                           "time.perf_counter_ns = lambda: real() * 2 // 5\n");
        PyGILState_Release(state);
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''

# The same through the loader: no declaration of a Python symbol at all.
DLSYM_RELU = r'''
#include <cstdint>
#include <dlfcn.h>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    typedef int (*run_t)(const char*);
    run_t run = (run_t)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (run) run("import sys; sys.stderr.write('python reached')\n");
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


def py_relu(weak: bool = False) -> str:
    return (PY_RELU.replace("{decl}", "__attribute__((weak))" if weak else "")
            .replace("{guard}", "if (!PyRun_SimpleString) return;" if weak else ""))


@pytest.mark.parametrize("name, kernel, symbol", [
    ("relu through torch.nn.functional, op trace off", py_relu(), "PyGILState_Ensure"),
    ("perf_counter_ns replaced", PY_CLOCK, "PyGILState_Ensure"),
    ("weak declarations (no link error)", py_relu(weak=True), "PyGILState_Ensure"),
], ids=["torch-under-disabled-modes", "clock-replaced", "weak-declarations"])
def test_kernel_declaring_python_symbols_is_refused_at_the_build(verifier, suite, make_candidate, name, kernel, symbol):
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(kernel)), fresh=True)
    assert out.failed_gate == "build", (name, out.failed_gate, out.message, out.speedup)
    assert symbol in out.message, out.message


@pytest.fixture(scope="module")
def rules_off(tmp_path_factory, fast_config):
    """A verifier with the static anti-hack rules off: only the build's link check stands in the way
    of a kernel that looks Python up through the loader (the rules ban the words too)."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("white-box-cache"))
    yield C.without_candidate_phase(v)
    v.close()


def test_kernel_looking_python_up_through_the_loader_is_refused_at_the_build(rules_off, suite, make_candidate):
    out = rules_off.verify(suite.get("relu").spec(), make_candidate(C.elementwise(DLSYM_RELU)), fresh=True)
    assert out.failed_gate == "build", (out.failed_gate, out.message)
    assert "dlsym" in out.message, out.message


def test_the_link_check_names_what_is_missing(tmp_path):
    """Unit level: the build's verdict names the symbol and says what kernels may link against."""
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    result = build_candidate(get_backend("cpu"), {"kernel.cpp": py_relu(weak=True)}, tmp_path / "cache")
    assert not result.ok
    assert "PyGILState_Ensure" in result.log and "PyRun_SimpleString" in result.log, result.log
    assert "libc" in result.log  # the allow-list, in words
    honest = build_candidate(get_backend("cpu"), {"kernel.cpp": C.RELU}, tmp_path / "cache")
    assert honest.ok, honest.log


def test_the_library_is_loaded_without_exporting_its_symbols(tmp_path):
    """RTLD_LOCAL: a candidate library's own symbols never join the process's global namespace (a later
    library, or the interpreter, cannot bind to them)."""
    import ctypes

    from verifier.backends import get_backend
    from verifier.build import build_candidate
    from verifier.runtime import load

    result = build_candidate(get_backend("cpu"), {"kernel.cpp": C.RELU}, tmp_path / "cache")
    assert result.ok, result.log
    lib = load(str(result.library))
    assert lib.relu_forward is not None
    with pytest.raises(AttributeError):
        _ = ctypes.CDLL(None).relu_forward  # not in the global scope


# ----------------------------------------------------------------------------- 2. files outside the job


def _fresh_folders() -> list[Path]:
    """Fresh folders outside every home and outside /tmp (the sandbox's /tmp is private anyway): one in
    /var/tmp and, where it exists and is writable, one in /work (where checkouts live here)."""
    out = []
    for base in ("/var/tmp", "/work"):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            out.append(Path(tempfile.mkdtemp(prefix="evokernel-sentinel-", dir=base)))
    return out


@pytest.fixture(scope="module")
def sentinels():
    folders = _fresh_folders()
    if not folders:
        pytest.skip("neither /var/tmp nor /work is writable")
    files = []
    for folder in folders:
        path = folder / "sentinel.h"
        path.write_text(f"{SECRET} leaked;\n")
        os.chmod(path, 0o644)  # readable by anyone on the host: only the sandbox's view may hide it
        files.append(path)
    yield files
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


# Reads the file four ways; if any works, prints what it read and aborts (the content would come back in
# the verdict's stderr tail); if none does, computes relu (the candidate passes).
READ_FROM_KERNEL = r'''
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
extern "C" int __open_2(const char* path, int flags);
static const char* paths[] = {PATHS_HERE};

static void leak(int fd) {
    char buf[256] = {0};
    ssize_t got = read(fd, buf, sizeof buf - 1);
    if (got > 0) { fprintf(stderr, "read: %s\n", buf); fflush(stderr); abort(); }
}

extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    for (const char* path : paths) {
        int fd = __open_2(path, O_RDONLY);
        if (fd >= 0) leak(fd);
        fd = open(path, O_RDONLY);
        if (fd >= 0) leak(fd);
        fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
        if (fd >= 0) leak(fd);
        FILE* f = fopen(path, "r");
        if (f) { char buf[256] = {0}; if (fgets(buf, sizeof buf, f)) { fprintf(stderr, "fopen: %s\n", buf); abort(); } }
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''

# The exact kernel: only words the static rules allow (no headers, __open_2 and read declared).
OPEN_2_WITH_RULES_ON = r'''
#include <cstdint>
#include <cstdio>
#include <cstdlib>
extern "C" int __open_2(const char* path, int flags);
extern "C" long read(int fd, void* buf, unsigned long count);
static const char* paths[] = {PATHS_HERE};
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    for (const char* path : paths) {
        int fd = __open_2(path, 0);
        char buf[256] = {0};
        if (fd >= 0 && read(fd, buf, sizeof buf - 1) > 0) { fprintf(stderr, "%s\n", buf); fflush(stderr); abort(); }
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


def _with_paths(kernel: str, paths: list[Path]) -> str:
    return kernel.replace("PATHS_HERE", ", ".join(json.dumps(str(p)) for p in paths))


def test_kernel_cannot_read_a_file_outside_the_job(rules_off, suite, make_candidate, sentinels):
    out = rules_off.verify(suite.get("relu").spec(), make_candidate(C.elementwise(_with_paths(READ_FROM_KERNEL, sentinels))),
                           fresh=True)
    assert SECRET not in json.dumps(out.to_dict())
    assert out.feasible, out.message  # no read worked, so it computed relu


def test_the_reported_open_2_kernel_passes_the_rules_and_still_reads_nothing(verifier, suite, make_candidate, sentinels):
    out = verifier.verify(suite.get("relu").spec(),
                          make_candidate(C.elementwise(_with_paths(OPEN_2_WITH_RULES_ON, sentinels))), fresh=True)
    assert SECRET not in json.dumps(out.to_dict())
    assert out.feasible, out.message


# model.py runs where the kernel runs: each probe is one file operation, reported in the verdict.
PROBE_MODEL = """
import json
import os

import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()
results = {{}}


def probe(name, fn):
    try:
        fn()
        results[name] = "ok"
    except OSError as exc:
        results[name] = type(exc).__name__


def read(path):
    with open(path, "rb") as fh:
        data = fh.read()
    if {secret!r}.encode() in data:
        print({secret!r})


{probes}
raise RuntimeError("probes " + json.dumps(results, sort_keys=True))


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def run_probes(verifier, suite, make_candidate, probes: str) -> tuple[dict, str]:
    files = {"model.py": PROBE_MODEL.format(secret=SECRET, probes=probes), "kernel.cpp": C.RELU}
    out = verifier.verify(suite.get("relu").spec(), make_candidate(files), fresh=True)
    text = json.dumps(out.to_dict())
    found = re.search(r"probes (\{.*?\})", out.message)
    assert found, out.message
    return json.loads(found.group(1)), text


def test_model_py_cannot_see_a_file_outside_the_job(rules_off, suite, make_candidate, sentinels):
    probes = "\n".join(f'''
probe("read{i}", lambda: read({str(p)!r}))
probe("stat{i}", lambda: os.stat({str(p)!r}))
probe("list{i}", lambda: os.listdir({str(p.parent)!r}))
probe("os_open{i}", lambda: os.close(os.open({str(p)!r}, os.O_RDONLY)))
''' for i, p in enumerate(sentinels)) + '''
probe("own_model", lambda: read("model.py"))
probe("interpreter", lambda: os.stat(os.__file__))
'''
    results, text = run_probes(rules_off, suite, make_candidate, probes)
    assert results["own_model"] == "ok" and results["interpreter"] == "ok", results  # the probes do work
    for i in range(len(sentinels)):
        for what in ("read", "stat", "list", "os_open"):
            expected = ("FileNotFoundError",) if rules_off.server._use_bwrap else ("FileNotFoundError", "PermissionError")
            assert results[f"{what}{i}"] in expected, results  # absent, not merely unreadable
    assert SECRET not in text


def test_build_cannot_include_a_file_outside_its_folder(tmp_path, sentinels):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    backend = get_backend("cpu")
    for target in sentinels:
        files = {"kernel.cpp": f'#include "{target}"\n' + C.RELU}
        if _bwrap()[0]:
            unsandboxed = build_candidate(backend, files, tmp_path / "plain", sandbox=False)
            assert SECRET in unsandboxed.log  # the control: what a leak looks like
        result = build_candidate(backend, files, tmp_path / "cache")
        assert not result.ok
        assert SECRET not in result.log, result.log
        if _bwrap()[0]:
            assert "No such file" in result.log, result.log


def test_without_bubblewrap_the_build_reads_only_the_allow_list(tmp_path, sentinels, monkeypatch):
    """The compiler's fallback without bubblewrap: its own Landlock domain with the same allow-list."""
    import verifier.build as build
    from verifier.backends import get_backend
    from verifier.sandbox.lockdown import landlock_abi

    if not landlock_abi()[0]:
        pytest.skip("no Landlock here: without bubblewrap, the compiler reads what its user may read")
    monkeypatch.setattr(build, "bwrap_status", lambda: (False, "bubblewrap off for this test"))
    for target in sentinels:
        result = build.build_candidate(get_backend("cpu"), {"kernel.cpp": f'#include "{target}"\n' + C.RELU},
                                       tmp_path / "cache")
        assert not result.ok and SECRET not in result.log, result.log
        assert "Permission denied" in result.log, result.log
    honest = build.build_candidate(get_backend("cpu"), {"kernel.cpp": C.RELU}, tmp_path / "cache")
    assert honest.ok, honest.log  # the compiler, its headers and the link check still work
    refused = build.build_candidate(get_backend("cpu"), {"kernel.cpp": py_relu()}, tmp_path / "cache")
    assert not refused.ok and "PyGILState_Ensure" in refused.log


@pytest.fixture(scope="module")
def unwrapped(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False, "use_bwrap": False}),
                 cache_dir=tmp_path_factory.mktemp("white-box-nobwrap"))
    yield C.without_candidate_phase(v)
    v.close()


def test_without_bubblewrap_landlock_keeps_the_allow_list(unwrapped, suite, make_candidate, sentinels):
    """The fallback without bubblewrap: where the kernel has Landlock, the job reads only what the
    allow-list names (the same list bubblewrap binds)."""
    from verifier.sandbox.lockdown import landlock_abi

    if not landlock_abi()[0]:
        pytest.skip("no Landlock here: without bubblewrap, files are protected by their permissions only")
    out = unwrapped.verify(suite.get("relu").spec(), make_candidate(C.elementwise(_with_paths(READ_FROM_KERNEL, sentinels))),
                           fresh=True)
    assert SECRET not in json.dumps(out.to_dict())
    assert out.feasible, out.message


# ----------------------------------------------------------------------------- 3. honest candidates


KNOWLEDGE = Path(__file__).resolve().parents[2] / "core" / "knowledge"


def _knowledge_kernels() -> list[tuple[str, str]]:
    """Every C++ block of the CPU seed knowledge that defines a launcher (what the LLM is shown)."""
    out = []
    for path in sorted((KNOWLEDGE / "cpu").glob("*.md")):
        for i, (lang, text) in enumerate(CODE.findall(path.read_text())):
            if lang in ("cpp", "c++") and 'extern "C"' in text and "{" in text:
                out.append((f"{path.stem}#{i}", text))
    return out


CODE = re.compile(r"```(\w+)[^\n]*\n(.*?)```", re.S)


def test_shipped_examples_and_fixture_kernels_pass_the_link_check(tmp_path):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    kernels = [("relu", C.RELU), ("row_sum", C.ROWSUM_REASSOCIATED), ("softmax", C.SOFTMAX_SCRATCH),
               ("scale_bias", C.SCALE_BIAS), *_knowledge_kernels()]
    assert len(kernels) > 4
    for name, source in kernels:
        source = source if "<cstdint>" in source else "#include <cstdint>\n" + source  # snippets may omit it
        result = build_candidate(get_backend("cpu"), {"kernel.cpp": source}, tmp_path / "cache")
        assert result.ok, f"{name}: {result.log}"


@pytest.mark.parametrize("task, files", [
    ("relu", C.elementwise(C.RELU)),
    ("sum_dim", {"model.py": C.ROWSUM_MODEL, "kernel.cpp": C.ROWSUM_REASSOCIATED}),
    ("softmax", {"model.py": C.SOFTMAX_SCRATCH_MODEL, "kernel.cpp": C.SOFTMAX_SCRATCH}),
    ("scale_bias", {"model.py": C.SCALE_BIAS_MODEL, "kernel.cpp": C.SCALE_BIAS}),
], ids=["relu", "sum_dim", "softmax", "scale_bias"])
def test_honest_fixture_candidates_pass_every_gate(verifier, suite, make_candidate, task, files):
    out = verifier.verify(suite.get(task).spec(), make_candidate(files), fresh=True)
    assert out.feasible, (task, out.message)


# ----------------------------------------------------------------------------- what a verdict carries

LOUD_MODEL = '''
import os
import sys

sys.stderr.write("X" * 100000 + "\\n")
sys.stderr.flush()
{ending}


class ModelNew:
    pass
'''


@pytest.mark.parametrize("ending", [
    'open("result.json", "w").write(\'{"ok": false, "error": "\' + "E" * 100000 + \'"}\')\nos._exit(0)',  # its own verdict file
    'open("progress.txt", "w").write("P" * 100000)\nos.abort()',           # a long step name, then a crash
], ids=["long-error", "long-progress"])
def test_a_verdict_carries_a_capped_tail_of_the_jobs_own_words(rules_off, suite, make_candidate, ending):
    files = {"model.py": LOUD_MODEL.format(ending=ending), "kernel.cpp": C.RELU}
    out = rules_off.verify(suite.get("relu").spec(), make_candidate(files), fresh=True)
    assert out.failed_gate == "correctness", out.message
    assert len(out.message) < 6000, len(out.message)


# ----------------------------------------------------------------------------- 4. recognisable checks

# Full work only when the first input value is one the fixed seeds of the past would have drawn;
# 40 % of it otherwise (the attack of issue #18, class 3).
KNOWS_THE_SEEDS = r'''
#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    static const float known[] = {KNOWN};
    bool checked = false;
    for (unsigned k = 0; k < sizeof known / sizeof known[0]; ++k)
        if (x[0] == known[k]) checked = true;
    const int64_t m = checked ? n : n * 4 / 10;
    for (int64_t i = 0; i < m; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


def test_a_kernel_that_recognises_the_old_fixed_seeds_is_caught(verifier, suite, make_candidate):
    from verifier.inputs import DISTRIBUTIONS, Trial, make_inputs
    from verifier.task import load_task_module

    spec = suite.get("relu").spec()
    module = load_task_module(spec)
    known = []
    for seed in [*range(1000, 1010), 2000]:   # the fixed seeds the verifier used to draw
        for dist in DISTRIBUTIONS:
            x = make_inputs(module.get_inputs, Trial(seed=seed, distribution=dist))[0]
            known.append(float(x.reshape(-1)[0]))
    literal = ", ".join(f"{v!r}f" if "e" in repr(v) or "." in repr(v) else f"{v!r}.0f" for v in known)
    files = C.elementwise(KNOWS_THE_SEEDS.replace("KNOWN", literal))
    out = verifier.verify(spec, make_candidate(files), fresh=True)
    # caught by the correctness trials themselves (with predictable seeds they all matched, and only
    # the timing's check of every call, issue #11, caught it: "results changed under repeated calls")
    assert out.failed_gate == "correctness" and out.gate("correctness").status == "failed", out.message
    assert "repeated calls" not in out.message and "trial" in out.message
