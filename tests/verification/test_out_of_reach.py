"""Issue #48: nothing the candidate's process can reach decides a verdict. A fourth white-box review found five
candidates that earned verdicts by changing what the harness decided from inside the candidate's own process;
each is a regression test here, seen passing the verifier on main (9022ba0) before its fix:

1. the memory probe: a candidate maps a still-empty file below everything else, the harness's one-byte probe of the
   side's first mapping fails, and from then on the side picks its own checked values (its Python patched to do the
   work after the clock);
2. load-time code the source rules miss: a C++ dynamic initializer (``static int booted = boot();``) reaches Python
   when the library is loaded, turns the op trace off and has PyTorch compute every output;
3. the candidate phase switched off from inside: load-time Python replaces the function that enters it;
4. and 5. a recorded verdict served to code that behaves differently: the outcome cache keyed by the comment-blind
   identity (a C kernel that reads ``__LINE__``, a ``model.py`` with a coding declaration).

What closes each, and the tests that show it (docs/verifier.md's threat table has a row per finding):

1. whether the harness reads a job's memory follows from how the job was started (``verifier.sandbox.procs.
   memory_access``), a probe page the fork server made before any job ran must read back in every side, a failed
   read is the side's failure, and on the CPU no window runs without that reading;
2. the link check refuses a library whose load-time code is more than a library of the same files, each empty, built
   the same way (``verifier.toolchain.linkage.load_time_problem``), whatever the source spells (g++ and nvcc);
3. the phase is entered through a name bound before the library loads, and the harness counts every thread's seccomp
   filters from ``/proc`` while the job is stopped there (``verifier.sandbox.client.JobHandle.check_phase``); tested
   past the link check (``candidates.without_load_time_check``), since nothing of the candidate's runs before it now;
4. and 5. recorded verdicts served to the exact bytes only (``verifier.candidate_files.exact_digest``).

Their static rules are off (``unguarded``) where the exploit needs a word they refuse: the rules are a friendly first
filter, never the wall; what is tested is what holds without them (a kernel that reaches Python the way exploit 1 does
passed them, docs/verifier.md's "can still run native code" row). A flag as a verdict (no reward, best or parent):
``tests/engine/test_loop_fast.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import candidates as C


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    """Static rules off: what the sandbox, the build's link check and the harness do without them."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("reach-cache"))
    yield v
    v.close()


# Finds a symbol of libc by name in libc's own in-memory symbol table (no loader lookup the link check could see):
# from an address inside libc (qsort's, through the library's own GOT) back to libc's ELF header, then its dynamic
# section's symbol and string tables. With ``dlsym`` found, the interpreter's C API is one lookup away.
LIBC_SYMBOL = r'''
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <elf.h>
static void* libc_symbol(const char* name) {
    uintptr_t base = (uintptr_t)(void*)&qsort & ~(uintptr_t)4095;
    while (std::memcmp((const void*)base, ELFMAG, SELFMAG) != 0) base -= 4096;
    const Elf64_Ehdr* eh = (const Elf64_Ehdr*)base;
    const Elf64_Phdr* ph = (const Elf64_Phdr*)(base + eh->e_phoff);
    const Elf64_Dyn* dyn = nullptr;
    for (int i = 0; i < eh->e_phnum; ++i)
        if (ph[i].p_type == PT_DYNAMIC) dyn = (const Elf64_Dyn*)(base + ph[i].p_vaddr);
    const Elf64_Sym* symbols = nullptr;
    const char* names = nullptr;
    for (; dyn && dyn->d_tag != DT_NULL; ++dyn) {
        uintptr_t at = dyn->d_un.d_ptr < base ? base + dyn->d_un.d_ptr : dyn->d_un.d_ptr;
        if (dyn->d_tag == DT_SYMTAB) symbols = (const Elf64_Sym*)at;
        if (dyn->d_tag == DT_STRTAB) names = (const char*)at;
    }
    if (!symbols || !names) return nullptr;
    for (const Elf64_Sym* s = symbols; (const char*)s < names; ++s)
        if (s->st_name && s->st_value && !std::strcmp(names + s->st_name, name)) return (void*)(base + s->st_value);
    return nullptr;
}
typedef void* (*Lookup)(void*, const char*);
static int run_python(const char* code) {
    Lookup lookup = (Lookup)libc_symbol("dlsym");
    if (!lookup) return -1;
    int (*ensure)(void) = (int (*)(void))lookup(nullptr, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))lookup(nullptr, "PyGILState_Release");
    int (*run)(const char*) = (int (*)(const char*))lookup(nullptr, "PyRun_SimpleString");
    if (!ensure || !release || !run) return -1;
    int state = ensure();
    int rc = run(code);
    release(state);
    return rc;
}
'''


def _c_string(text: str) -> str:
    """``text`` as a C string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ----------------------------------------------------------------------------- 1. the memory probe

# Run from ModelNew.__init__ (before the side says it is ready, so before the harness's probe of its memory), in a
# timing window's candidate side only (the one job with the side's input file open): maps that still-empty file
# read-only at the lowest address a process may map, so the side's first mapping is one the harness cannot read a
# byte of; turns the kernel's window mode on (its timed calls only note their arguments); and wraps the side's own
# ``pick`` (what the side reports of a call where the harness cannot read its memory) so that the noted call is
# computed first, after the clock.
TAKES_OVER_THE_PICK = r'''
import ctypes
import os
import sys

found = -1
for fd in range(3, 512):
    try:
        if os.readlink("/pr" "oc/self/fd/%d" % fd).endswith("/inputs.bin"):
            found = fd
            break
    except OSError:
        pass
if found >= 0:
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mmap(0x10000, 4096, 1, 0x100001, found, 0)       # PROT_READ; MAP_SHARED | MAP_FIXED_NOREPLACE
    ctypes.CFUNCTYPE(None)(ENABLE)()
    side = sys.modules["verifier.window.side"]
    work = ctypes.CFUNCTYPE(None)(FINISH)
    real = side.pick

    def pick(*args, **kwargs):
        work()
        return real(*args, **kwargs)

    side.pick = pick
'''


PROBE_FAILS = LIBC_SYMBOL + r'''
#include <cstdio>
static int window = 0;
static const float* noted_x = nullptr;
static float* noted_out = nullptr;
static int64_t noted_n = 0;
static void relu(const float* x, float* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
static void enable(void) { window = 1; }
static void finish(void) { if (noted_out) relu(noted_x, noted_out, noted_n); }
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (window) { noted_x = x; noted_out = out; noted_n = n; return; }
    relu(x, out, n);
}
extern "C" void boot() {
    static bool done = false;
    if (done) return;
    done = true;
    static char code[8192];
    std::snprintf(code, sizeof code, PYTHON, (unsigned long)(uintptr_t)&enable, (unsigned long)(uintptr_t)&finish);
    run_python(code);
}
'''.replace("PYTHON", _c_string(TAKES_OVER_THE_PICK.replace("%", "%%").replace("ENABLE", "%lu")
                                  .replace("FINISH", "%lu")))

BOOTS_IN_INIT = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        lib.boot()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel())
        return out
'''


@pytest.mark.slow
def test_a_side_cannot_turn_the_harnesss_reading_of_its_memory_off(unguarded, suite, make_candidate):
    """Before (main 9022ba0): the harness's probe read one byte of the side's first mapping, the candidate's empty
    file, and failed; the side then reported its own picks, which its patched ``pick`` computed after the clock:
    "feasible; 0.774 ms, 17.91x faster than the reference" with a review flag nothing read. After: whether the harness
    reads a job's memory follows from how the job was started (here: root, or bubblewrap's user namespace), so it
    reads the outputs of every timed call where the side says they lie, the moment it reports done: the work its
    timed calls skipped is missing there."""
    out = unguarded.verify(suite.get("relu").spec(), make_candidate({"model.py": BOOTS_IN_INIT, "kernel.cpp": PROBE_FAILS}),
                           fresh=True)
    assert not out.feasible, out.message
    assert out.failed_gate == "correctness" and "taken the moment it reported done" in out.message, out.message


# The same, and the page every job has from its start (the fork server's probe page, found where the server's Python
# keeps its address: the server runs as __main__) made unreadable: where the harness reads a job's memory, a read
# that fails is the side's failure.
HIDES_THE_PROBE_PAGE = TAKES_OVER_THE_PICK + """
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for name in ("__main__", "verifier.sandbox.forkserver"):
        for page in getattr(sys.modules.get(name), "_probe", []):
            libc.mprotect(page, 4096, 0)
"""


@pytest.mark.slow
def test_a_side_that_makes_its_memory_unreadable_fails(unguarded, suite, make_candidate):
    kernel = PROBE_FAILS.replace(_c_string(TAKES_OVER_THE_PICK.replace("%", "%%").replace("ENABLE", "%lu")
                                           .replace("FINISH", "%lu")),
                                 _c_string(HIDES_THE_PROBE_PAGE.replace("%", "%%").replace("ENABLE", "%lu")
                                           .replace("FINISH", "%lu")))
    out = unguarded.verify(suite.get("relu").spec(), make_candidate({"model.py": BOOTS_IN_INIT, "kernel.cpp": kernel}),
                           fresh=True)
    assert out.failed_gate == "performance", (out.failed_gate, out.message)
    assert "memory it had from its start unreadable" in out.message and not out.not_judged, out.message


def test_whether_the_harness_reads_a_jobs_memory_follows_from_how_the_job_was_started(monkeypatch):
    """``procs.memory_access``: root with CAP_SYS_PTRACE, or the owner of the jobs' user namespace, then the server's
    probe page read back (here this process stands for the fork server); neither, and it says why."""
    import os

    from verifier.sandbox import forkserver, procs

    probe = forkserver.probe_page()
    assert probe is not None
    assert procs.memory_access(os.getpid(), probe, user_namespace=True) == ""
    assert "another token" in procs.memory_access(os.getpid(), {**probe, "token": "00" * 16}, user_namespace=True)
    assert "no probe page" in procs.memory_access(os.getpid(), None, user_namespace=True)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "neither root" in procs.memory_access(os.getpid(), probe, user_namespace=False)
    assert procs.memory_access(os.getpid(), probe, user_namespace=True) == ""


@pytest.mark.slow
def test_on_the_cpu_no_window_runs_where_the_harness_cannot_read_a_jobs_memory(tmp_path, fast_config, suite,
                                                                               monkeypatch):
    """Never the side's own picks on the CPU: the performance gate is not judged (the tool's limit, said), no window."""
    from verifier.harness.verify import Verifier
    from verifier.sandbox import procs

    monkeypatch.setattr(procs, "memory_access", lambda *args: "the harness cannot read a job's memory here (a test)")
    v = Verifier("cpu", fast_config, cache_dir=tmp_path / "cache")
    try:
        out = v.verify(suite.get("relu").spec(), C.elementwise(C.RELU), fresh=True)
    finally:
        v.close()
    assert out.gate("correctness").passed and out.failed_gate == "performance", out.message
    assert "a test" in out.not_judged and "no speed verdict" in out.message, out.message


# ----------------------------------------------------------------------------- 2. load-time code

# A C++ dynamic initializer: code in the library's .init_array with no attribute, section or "constructor" word the
# source rules look for. Run when the library is loaded (in the job's set-up, before the candidate phase), it reaches
# Python and makes every call of relu_forward compute with PyTorch (counted as a library call, its op trace off); the
# kernel itself does nothing.
PYTORCH_AT_LOAD = r'''
import sys

import torch

runtime = sys.modules["verifier.runtime"]
call = runtime.KernelFunction.__call__


def forward(self, *args):
    if self.signature.name != "relu_forward":
        return call(self, *args)
    runtime._calls["relu_forward"] = runtime._calls.get("relu_forward", 0) + 1
    torch.clamp(args[0], min=0, out=args[1])


runtime.KernelFunction.__call__ = forward
sys.modules["verifier.job.op_trace"].OpTrace.forbidden = lambda self: {}
'''

DYNAMIC_INITIALIZER = LIBC_SYMBOL + r'''
static int boot() { return run_python(PYTHON); }
static int booted = boot();
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    (void)x; (void)out; (void)n;
}
'''.replace("PYTHON", _c_string(PYTORCH_AT_LOAD))


@pytest.mark.slow
def test_a_dynamic_initializer_is_load_time_code(unguarded, suite, make_candidate):
    """Before (main 9022ba0): feasible, PyTorch computing every output. After: the link check refuses a library
    with load-time code beyond the toolchain's own, whatever the source spells."""
    out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(DYNAMIC_INITIALIZER)), fresh=True)
    assert out.failed_gate == "build", (out.failed_gate, out.message)
    assert "load" in out.message, out.message


# ----------------------------------------------------------------------------- 3. the candidate phase

# Load-time Python (the dynamic initializer above) that replaces the function the job enters the candidate phase by
# with one that does nothing: on main, model.py was then imported, and every call made, under the job's wider filter
# (one seccomp filter, not three: job.json could be opened). Its calls mark every output where that open works.
PHASE_OFF_AT_LOAD = r'''
import sys

sys.modules["verifier.job.candidate"].enter_candidate_phase = lambda: None
'''

SKIPS_THE_PHASE = LIBC_SYMBOL + r'''
#include <fcntl.h>
#include <unistd.h>
static int boot() { return run_python(PYTHON); }
static int booted = boot();
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    float mark = 0.f;
    int fd = open("job.json", O_RDONLY);           // what the candidate phase refuses
    if (fd >= 0) { mark = 1000.f; close(fd); }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
}
'''


def _skips(python: str) -> str:
    return SKIPS_THE_PHASE.replace("PYTHON", _c_string(python))


@pytest.mark.slow
def test_load_time_code_cannot_switch_the_candidate_phase_off(unguarded, suite, make_candidate):
    """Before (main 9022ba0): the phase was off ("got 1000, expected 0": its open of job.json worked). After: refused
    at the build (load-time code); and were it past the link check, the phase is entered through a name bound before
    the library is loaded, so replacing the module's function changes nothing (feasible: its open was refused)."""
    relu = suite.get("relu").spec()
    out = unguarded.verify(relu, make_candidate(C.elementwise(_skips(PHASE_OFF_AT_LOAD))), fresh=True)
    assert out.failed_gate == "build", (out.failed_gate, out.message)
    with C.without_load_time_check():   # other bytes: the refused build above is kept for those
        past = unguarded.verify(relu, make_candidate(C.elementwise("// past the link check\n" +
                                                                    _skips(PHASE_OFF_AT_LOAD))), fresh=True)
    assert past.feasible, past.message


# Past the link check, a stronger attacker: the phase's filters themselves replaced by functions that do nothing, so
# the job enters its "phase" with the job's filter alone. The harness counts every thread's filters from /proc while
# the job is stopped there, before any candidate code of model.py runs.
FILTERS_OFF_AT_LOAD = r'''
import sys

seccomp = sys.modules["verifier.sandbox.seccomp"]
seccomp.candidate_filter = seccomp._marker = lambda *args: None
'''


@pytest.mark.slow
def test_the_harness_counts_the_candidate_phases_filters_from_outside(unguarded, suite, make_candidate):
    """Before (main 9022ba0, where the job counted its own filters inside the function load-time code replaced): its
    open of job.json worked. After: the job stops at its phase and the harness reads ``Seccomp_filters`` of every
    thread from ``/proc``: one short of the phase's, the job is refused before model.py runs."""
    with C.without_load_time_check():
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(_skips(FILTERS_OFF_AT_LOAD))),
                               fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "seccomp filter(s) where its candidate phase has" in out.message, out.message


# Every way the review and the C++ standard offer to run code when a library is loaded (or unloaded), each built by
# the CPU backend's own g++ and read by its link check: refused, whatever the source spells. Beside them, honest
# ways to keep state (a function's static local, made at its first call; constant data) still pass.
LAUNCHER = 'extern "C" void relu_forward(const float* x, float* out, int64_t n) { for (int64_t i = 0; i < n; ++i) ' \
           'out[i] = x[i] > 0.f ? x[i] : 0.f; }\n'
LOAD_TIME_SPELLINGS = {   # each with an effect (a volatile write): an empty one the compiler drops, a constant it folds
    "dynamic initializer": "static int boot() { return ++seen; }\nstatic int booted = boot();\n",
    "object with a constructor": "#include <vector>\nstatic std::vector<float> table(1024, 1.f);\n",
    "constructor attribute": "__attribute__((constructor)) static void boot() { seen = 1; }\n",
    "constructor priority": "__attribute__((constructor(101))) static void boot() { seen = 1; }\n",
    "destructor attribute": "__attribute__((destructor)) static void bye() { seen = 2; }\n",
    "init_array section": "static void boot() { seen = 1; }\n"
                          "__attribute__((section(\".init_array\"), used)) static void (*at)() = boot;\n",
    "ctors section": "static void boot() { seen = 1; }\n__attribute__((section(\".ctors\"), used)) static void (*at)() = boot;\n",
    "code in .init": "__attribute__((section(\".init\"), used)) static void boot() { seen = 1; }\n",
    "exported ifunc": 'extern "C" void real(float* x) { x[0] = 1; }\nextern "C" void* pick() { return (void*)real; }\n'
                      'extern "C" void chosen(float*) __attribute__((ifunc("pick")));\n',
    "local ifunc": 'static void real(float* x) { x[0] = 1; }\nextern "C" void* pick() { return (void*)real; }\n'
                   'static void chosen(float*) __attribute__((ifunc("pick")));\n'
                   'extern "C" void use(float* x) { chosen(x); }\n',
    "init_priority": "struct S { S() { seen = 3; } };\nS s __attribute__((init_priority(200)));\n",
}
HONEST_STATE = {
    "static local": '#include <vector>\nextern "C" void warm(float* x) { static std::vector<float> t(8, 1.f); x[0] = t[0]; }\n',
    "constant data": "static const float table[4] = {1.f, 2.f, 3.f, 4.f};\nconstexpr int width = 16;\n"
                     'extern "C" void first(float* x) { x[0] = table[0] * width; }\n',
    "plain globals": 'static float scratch[1024];\nstatic int calls = 0;\nextern "C" void keep(float* x) { '
                     "scratch[calls++ % 1024] = x[0]; }\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("spelling", sorted(LOAD_TIME_SPELLINGS))
def test_a_library_with_load_time_code_is_refused_however_it_is_spelled(tmp_path, spelling):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    source = "#include <cstdint>\nstatic volatile int seen = 0;\n" + LOAD_TIME_SPELLINGS[spelling] + LAUNCHER
    result = build_candidate(get_backend("cpu"), {"kernel.cpp": source}, tmp_path / "cache")
    assert not result.ok and "runs code of its own when it is loaded" in result.log, (spelling, result.log)


@pytest.mark.slow
def test_honest_state_passes_the_load_time_check(tmp_path):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    for name, state in HONEST_STATE.items():
        result = build_candidate(get_backend("cpu"), {"kernel.cpp": "#include <cstdint>\n" + state + LAUNCHER},
                                 tmp_path / "cache")
        assert result.ok, (name, result.log)
    # the toolchain's own, measured once per build key and file names: an empty library's
    assert len(list((tmp_path / "cache" / "builds" / "load-time").glob("*.json"))) == 1


CUDA_LAUNCHER = """#include <cstdint>
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void twice_kernel(float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] *= 2.f;
}
extern "C" void relu_forward(const float* x, float* out, int64_t n, cudaStream_t stream) {
    relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, out, n);
}
"""


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()), reason="no nvcc")
def test_the_cuda_link_check_refuses_load_time_code_beyond_nvccs_own(tmp_path):
    """nvcc's own load-time code (each translation unit's registration of its kernels, the static CUDA runtime's)
    is what a library of the same files, each empty, has too: an honest library with two kernels in one file, or in
    two, passes; a dynamic initializer in either refused. No GPU needed: the libraries are built and read, not run."""
    from verifier.backends.cuda import CudaBackend
    from verifier.build import build_candidate

    backend = CudaBackend(arch="sm_90", probe_torch=False)
    cache = tmp_path / "cache"
    honest = build_candidate(backend, {"kernel.cu": CUDA_LAUNCHER}, cache)
    assert honest.ok, honest.log
    split, launcher = CUDA_LAUNCHER.index("__global__ void twice_kernel"), CUDA_LAUNCHER.index('extern "C"')
    two = {"kernel.cu": CUDA_LAUNCHER[:split] + CUDA_LAUNCHER[launcher:],
           "more.cu": "#include <cstdint>\n#include <cuda_runtime.h>\n" + CUDA_LAUNCHER[split:launcher]
                      + 'extern "C" void twice(float* out, int64_t n, cudaStream_t stream) {\n'
                        "    twice_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(out, n);\n}\n"}
    assert build_candidate(backend, two, cache).ok
    booted = CUDA_LAUNCHER + "static volatile int seen;\nstatic int boot() { return ++seen; }\nstatic int booted = boot();\n"
    refused = build_candidate(backend, {"kernel.cu": booted}, cache)
    assert not refused.ok and "runs code of its own when it is loaded" in refused.log, refused.log
    later = "static volatile int seen;\nstatic int boot() { return ++seen; }\nstatic int booted = boot();\n"
    refused = build_candidate(backend, {**two, "more.cu": two["more.cu"] + later}, cache)
    assert not refused.ok and "runs code of its own when it is loaded" in refused.log, refused.log


# ----------------------------------------------------------------------------- 4. and 5. the outcome cache


@pytest.fixture
def guarded(tmp_path, fast_config):
    """Every gate on, with an outcome cache of its own."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config, cache_dir=tmp_path / "cache")
    yield v
    v.close()


# ReLU over the whole input where this line's number is odd, over half of it where it is even: a comment line
# added above it (which the comment-blind identity does not see) changes what the compiler reads.
BY_LINE = '''#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    const int64_t end = (__LINE__ % 2) ? n : n / 2;
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < end; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''
BY_LINE_HALF = BY_LINE.replace("#include <cstdint>\n", "#include <cstdint>\n// one line more\n")

# The number of characters of a string literal: 1 where model.py is read as UTF-8 (Python's default), 2 where its
# first line declares Latin-1 (the two bytes of "é" read as two characters): half the output left unwritten.
BY_CODING = C.ELEMENTWISE_MODEL.replace("lib.{fn}(x, out, x.numel())", 'lib.{fn}(x, out, x.numel() // len("é"))')
BY_CODING_HALF = "# -*- coding: latin-1 -*-\n" + BY_CODING.lstrip("\n")


@pytest.mark.slow
@pytest.mark.parametrize("honest,wrong", [
    ({"model.py": C.ELEMENTWISE_MODEL.format(fn="relu_forward"), "kernel.cpp": BY_LINE},
     {"model.py": C.ELEMENTWISE_MODEL.format(fn="relu_forward"), "kernel.cpp": BY_LINE_HALF}),
    ({"model.py": BY_CODING.format(fn="relu_forward"), "kernel.cpp": C.RELU},
     {"model.py": BY_CODING_HALF.format(fn="relu_forward"), "kernel.cpp": C.RELU}),
], ids=["__LINE__", "coding"])
def test_a_recorded_verdict_is_served_only_to_the_bytes_it_was_made_from(guarded, suite, make_candidate, honest, wrong):
    """Before (main 9022ba0): the outcome cache was keyed by the comment-blind identity, so the wrong kernel got the
    honest one's recorded "feasible" (``from_cache``) while computing half its output, and, the other way round, once
    the wrong one was verified, the honest one its refusal. After: keyed by the exact bytes the build and the import
    read."""
    from verifier.candidate_files import candidate_identity

    assert candidate_identity(honest) == candidate_identity(wrong)     # the same code, comments and spacing aside
    relu = suite.get("relu").spec()
    first = guarded.verify(relu, make_candidate(honest), fresh=True)
    assert first.feasible, first.message
    served = guarded.verify(relu, make_candidate(wrong))
    assert not served.from_cache and served.failed_gate == "correctness", (served.from_cache, served.message)
    refused = guarded.verify(relu, make_candidate(wrong), fresh=True)
    assert refused.failed_gate == "correctness", refused.message
    again = guarded.verify(relu, make_candidate(honest))
    assert again.feasible, (again.from_cache, again.message)
