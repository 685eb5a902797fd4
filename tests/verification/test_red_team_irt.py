"""Red team irt (an hour against dfd7ef0, after issue #48), white box: candidates that get through are kept here as
tests that assert the exploit is refused, marked ``xfail(strict=True)`` while it is not (the lead fixes, then drops the
mark; a strict xfail that starts passing fails the run, so a fix is seen).

1. Load-time code the link check does not count: the C runtime's own start files call two hooks *by weak symbol*
   when a library is loaded: crti's ``_init`` calls ``__gmon_start__`` through the GOT when that symbol resolves, and
   crtbegin's ``frame_dummy`` calls ``_ITM_registerTMCloneTable`` when the library's ``.tm_clone_table`` is not
   empty. A library that defines the hook itself has its function run by the loader at ``dlopen``: the same
   ``.init``, ``.init_array`` and dynamic tags as the empty build (``load_time_problem`` compares sizes and counts),
   no IFUNC. ``__gmon_start__`` needs no attribute at all, so it passes the static rules too: the #48 dynamic
   initializer's exploit (Python at load, the op trace off, PyTorch computing every output, the kernel doing
   nothing) is feasible again with every gate on.
2. The candidate phase counted, not read: load-time code that installs the phase's empty marker twice itself and then
   replaces the phase's two filter functions with no-ops leaves every thread with the phase's count of filters; the
   harness's reading from ``/proc`` agrees and continues the job, whose calls then open ``job.json``. (docs/verifier.md
   names "the phase check counts filters" as open; with 1. it is reachable from a real candidate.)

Fixed for 1. (the tests of 1. now assert it is refused): in ``verifier.toolchain.linkage``, every weak undefined dynamic symbol of the empty
build (``__gmon_start__``, ``_ITM_registerTMCloneTable``, ``_ITM_deregisterTMCloneTable``, ``__cxa_finalize``) must
still be an undefined symbol of the candidate's library (a library that defines one, even hidden, has the start
files call its code); ``readelf --dyn-syms``, already read, lists them (``UND``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import candidates as C

# the #48 exploits' parts (libc's in-memory symbol table, the load-time Python), from their own test file
_spec = importlib.util.spec_from_file_location("out_of_reach", Path(__file__).with_name("test_out_of_reach.py"))
assert _spec is not None and _spec.loader is not None
R = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(R)
LIBC_SYMBOL, PYTORCH_AT_LOAD, _c_string = R.LIBC_SYMBOL, R.PYTORCH_AT_LOAD, R._c_string


# ----------------------------------------------------------------------------- 1. the start files' hooks

# #48's dynamic-initializer exploit, its load-time Python run from crti's hook instead: every gate on.
GMON_AT_LOAD = LIBC_SYMBOL + r'''
extern "C" void __gmon_start__(void) { run_python(PYTHON); }
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    (void)x; (void)out; (void)n;
}
'''.replace("PYTHON", _c_string(PYTORCH_AT_LOAD))


@pytest.mark.slow
def test_a_library_defining_gmon_start_is_load_time_code(verifier, suite, make_candidate):
    """On dfd7ef0: "feasible; 1.062 ms, 1.90x slower than the reference", the kernel doing nothing (PyTorch computing
    every output from load-time Python, the op trace off), static rules on."""
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(GMON_AT_LOAD)), fresh=True)
    assert out.failed_gate == "build", (out.failed_gate, out.message)
    assert "load" in out.message, out.message


# Each defines a hook of the start files; ``was_seen`` says whether the loader ran it.
HOOKS = {
    "__gmon_start__": 'extern "C" void __gmon_start__(void) { seen = 42; }\n',
    "hidden __gmon_start__": 'extern "C" __attribute__((visibility("hidden"))) void __gmon_start__(void) '
                             "{ seen = 42; }\n",
    "_ITM_registerTMCloneTable": 'extern "C" void _ITM_registerTMCloneTable(void*, unsigned long) { seen = 42; }\n'
                                 '__attribute__((section(".tm_clone_table"), used)) static void* pair[2] = '
                                 "{(void*)&seen, (void*)&seen};\n",
}
HOOK_LIBRARY = '#include <cstdint>\nstatic volatile int seen = 0;\nHOOK\nextern "C" int was_seen(void) { return seen; }\n' + R.LAUNCHER


@pytest.mark.slow
@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_the_start_files_run_a_hook_the_library_defines(tmp_path, hook):
    """The mechanism, seen (passes): built with the link check's load-time rule off, the library's hook has run once
    ``dlopen`` returns (in a plain subprocess: the code is the test's own)."""
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    with C.without_load_time_check():
        built = build_candidate(get_backend("cpu"), {"kernel.cpp": HOOK_LIBRARY.replace("HOOK", HOOKS[hook])},
                                tmp_path / "cache")
    assert built.ok and built.library is not None, built.log
    ran = subprocess.run([sys.executable, "-c", f"import ctypes; print(ctypes.CDLL({str(built.library)!r}).was_seen())"],
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "42", (ran.stdout, ran.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_a_library_defining_a_start_file_hook_is_refused(tmp_path, hook):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    built = build_candidate(get_backend("cpu"), {"kernel.cpp": HOOK_LIBRARY.replace("HOOK", HOOKS[hook])},
                            tmp_path / "cache")
    assert not built.ok and "when it is loaded" in built.log, (hook, built.log)


# ----------------------------------------------------------------------------- 2. the phase's filters counted, not read

# Load-time Python that installs the phase's empty marker twice itself, then replaces both of the phase's filters with
# functions that do nothing: every thread has the phase's count of filters, none of them the allow-list. Its calls
# add 1000 to every output where opening ``job.json`` works (what the phase refuses); ``open`` and ``close`` are found
# through libc's in-memory symbol table, so the static rules see no banned name.
TWO_MARKERS_AT_LOAD = r'''
import sys

seccomp = sys.modules["verifier.sandbox.seccomp"]
seccomp._marker()
seccomp._marker()
seccomp.candidate_filter = seccomp._marker = lambda *args: None
'''

OPENS_IN_ITS_CALLS = LIBC_SYMBOL + r'''
BOOT
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    typedef int (*Opener)(const char*, int, ...);
    typedef int (*Closer)(int);
    float mark = 0.f;
    Opener opener = (Opener)libc_symbol("open");
    Closer closer = (Closer)libc_symbol("close");
    int fd = opener ? opener("job.json", 0) : -1;
    if (fd >= 0) { mark = 1000.f; closer(fd); }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
}
'''
GMON_BOOT = 'extern "C" void __gmon_start__(void) { run_python(PYTHON); }'
INITIALIZER_BOOT = "static int boot() { return run_python(PYTHON); }\nstatic int booted = boot();"


def _opens(boot: str) -> str:
    return OPENS_IN_ITS_CALLS.replace("BOOT", boot).replace("PYTHON", _c_string(TWO_MARKERS_AT_LOAD))


@pytest.mark.slow
def test_two_markers_installed_at_load_do_not_pass_for_the_phase(verifier, suite, make_candidate):
    """On dfd7ef0, every gate on: "correctness: trial 1 ..., the same instance's call 3: the output: 262144 of 262144
    values differ; worst at (0, 0): got 1000.24, expected 0.240367": the calls opened job.json, the phase was off."""
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(_opens(GMON_BOOT))), fresh=True)
    assert "got 1000" not in out.message, out.message


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="the phase's filters are counted, not read (docs/verifier.md: open)")
def test_two_markers_past_the_link_check_do_not_pass_for_the_phase(tmp_path, fast_config, suite, make_candidate):
    """The same past the link check (a C++ dynamic initializer, its load-time rule off), rules off: what the harness's
    count of filters holds by itself."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}), cache_dir=tmp_path / "cache")
    try:
        with C.without_load_time_check():
            out = v.verify(suite.get("relu").spec(), make_candidate(C.elementwise(_opens(INITIALIZER_BOOT))),
                           fresh=True)
    finally:
        v.close()
    assert "got 1000" not in out.message, out.message


# ----------------------------------------------------------------------------- 3. the tool blamed for the side's own thread

# A thread of the kernel's own (``pthread_create`` found through libc's in-memory symbol table) that maps 2 GiB with
# ``MAP_POPULATE`` and unmaps it, over and over: a thread inside that one system call does not enter the group stop
# until the call returns (only a fatal signal cuts a populate short), so the harness's SIGSTOP after a timed call
# does not find every thread stopped within its wait, and the window calls that "lost with the sandbox worker": the
# tool's failure (not judged: no reward, never cached), where the thread is the candidate's own. The relu itself is
# right. What it gains: a verdict it would have earned (slower, refused) becomes no verdict.
STAYS_IN_THE_KERNEL = R.LIBC_SYMBOL + r'''
typedef void* (*Mapper)(void*, size_t, int, int, int, long);
typedef int (*Unmapper)(void*, size_t);
typedef int (*Starter)(unsigned long*, const void*, void* (*)(void*), void*);
static void* busy(void*) {
    Mapper mapper = (Mapper)libc_symbol("mmap");
    Unmapper unmapper = (Unmapper)libc_symbol("munmap");
    const size_t size = (size_t)2048 << 20;
    for (;;) {
        void* p = mapper(nullptr, size, 3, 0x22 | 0x8000, -1, 0);   // PROT_READ|WRITE; PRIVATE|ANONYMOUS|POPULATE
        if (p != (void*)-1) unmapper(p, size);
    }
    return nullptr;
}
static int started = 0;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (!started) {
        started = 1;
        unsigned long t;
        Starter starter = (Starter)libc_symbol("pthread_create");
        if (starter) starter(&t, nullptr, busy, nullptr);
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_side_whose_thread_will_not_stop_is_its_own_failure(tmp_path, fast_config, suite, make_candidate):
    """On dfd7ef0 (``evokernel verify``, default settings, load 5.7): "performance: the candidate was lost with the
    sandbox worker (the sandbox worker did not stop the timing process)", its gate's ``tool`` set: not judged."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"memory_limit_mb": 8192, "run_timeout_s": 60}), cache_dir=tmp_path / "cache")
    try:
        out = v.verify(suite.get("relu").spec(), make_candidate(C.elementwise(STAYS_IN_THE_KERNEL)), fresh=True)
    finally:
        v.close()
    assert out.gate("correctness").passed, out.message
    # the harness sent the stop itself: a side that stops late is timed as it is (its thread's system call was the
    # side's own time), one that does not stop within the grace fails; never the tool's failure, never faster
    assert not out.not_judged and out.failed_gate in (None, "performance"), (out.not_judged, out.message)
    assert out.failed_gate == "performance" or out.vs_reference != "faster", out.message


# ----------------------------------------------------------------------------- 4. work finished after done

# A copy (``x.clone()``, a data-movement task written here) whose timed calls copy nothing themselves: the first call
# starts a thread of its own (bound off the calling thread's CPU) and every call hands it the output and returns once
# it has entered ``preadv`` on the side's own input file (the side keeps it open; ``readlink`` finds it), one system
# call that copies the whole input into the output. A thread inside a system call enters the group stop only when the
# call returns, so the harness's SIGSTOP after ``done`` waits for the copy to finish (up to its 0.5 s wait) before it
# reads the outputs, which are then right. In the correctness job (no input file) the kernel copies with memcpy.
# On dfd7ef0 (load 6-8, this 2-core machine): "feasible; 9.715 ms, 1.42x slower than the reference". A scratch variant
# that counted the calls whose copy ended after the kernel's call had returned, and said so by spoiling one value after
# the window, read "got 12356": 11 calls' copies ended after their call returned, and their outputs passed. No speed
# was gained here (8.6-17 ms against the honest OpenMP copy's 6.2-9.7 ms: the copying thread shared two loaded cores
# with everything else); whether the copy ends past the harness's clock needs a machine with a free core.
COPY_TASK = '''"""A copy of a (batch, dim) tensor: a data-movement operator (red team irt)."""
import torch
import torch.nn as nn

CATEGORY = "memory"


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


batch_size = 2048
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

COPIES_AFTER_DONE = R.LIBC_SYMBOL + "#include <cstdio>\n" + r'''
struct Span { void* base; size_t len; };
typedef long (*Reader)(int, const Span*, int, long);
typedef long (*Linker)(const char*, char*, unsigned long);
typedef int (*Yielder)(void);
typedef int (*Binder)(int, unsigned long, const unsigned long*);
typedef int (*Starter)(unsigned long*, const void*, void* (*)(void*), void*);
static volatile int ticket = 0;
static volatile int entered = 0;
static int served = 0;
static float* late_out = nullptr;
static long late_bytes = 0;
static int late_fd = -1;
static unsigned main_cpu = 0;
static void* copier(void*) {
    Reader reader = (Reader)libc_symbol("preadv");
    unsigned long everywhere[16] = {~(1ul << main_cpu)};
    ((Binder)libc_symbol("sched_setaffinity"))(0, sizeof everywhere, everywhere);
    for (;;) {
        int t;
        static Yielder yielder = (Yielder)libc_symbol("sched_yield");
        while ((t = ticket) == served) yielder();
        Span v = {late_out, (size_t)late_bytes};
        entered = t;
        reader(late_fd, &v, 1, 0);      // the whole copy, in one system call the group stop waits for
        served = t;
    }
    return nullptr;
}
static int looked = 0;
typedef int (*CpuOf)(unsigned*, unsigned*, void*);
static int find_inputs(void) {
    Linker linker = (Linker)libc_symbol("readlink");
    char path[64], target[256];
    for (int fd = 3; fd < 512; ++fd) {
        std::snprintf(path, sizeof path, "/%s/self/fd/%d", "pr" "oc", fd);
        long n = linker(path, target, sizeof target - 1);
        if (n > 10) { target[n] = 0; if (!std::strcmp(target + n - 10, "inputs.bin")) return fd; }
    }
    return -1;
}
extern "C" void copy_forward(const float* x, float* out, int64_t n) {
    if (!looked) {
        looked = 1;
        late_fd = find_inputs();
        if (late_fd >= 0) {
            ((CpuOf)libc_symbol("getcpu"))(&main_cpu, nullptr, nullptr);
            unsigned long t;
            ((Starter)libc_symbol("pthread_create"))(&t, nullptr, copier, nullptr);
        }
    }
    if (late_fd < 0) { std::memcpy(out, x, (size_t)n * sizeof(float)); return; }
    const int64_t early = 0;     // nothing copied inside the clock
    std::memcpy(out, x, (size_t)early * sizeof(float));
    late_out = out; late_bytes = (long)(n * sizeof(float));
    const int t = ticket + 1;
    ticket = t;
    static Yielder yielder = (Yielder)libc_symbol("sched_yield");
    while (entered != t) yielder();
}
'''


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="the harness reads the outputs once every thread stopped, which waits for a system call "
                          "a thread of the candidate's entered before done")
def test_work_finished_after_done_inside_one_system_call_is_refused(tmp_path, verifier, make_candidate):
    from core.tasks import load_suite

    (tmp_path / "suite" / "level1").mkdir(parents=True)
    (tmp_path / "suite" / "level1" / "copy.py").write_text(COPY_TASK)
    task = load_suite(tmp_path / "suite").get("copy").spec()
    out = verifier.verify(task, make_candidate(C.elementwise(COPIES_AFTER_DONE, fn="copy_forward")), fresh=True)
    assert out.gate("correctness").passed, out.message
    assert out.failed_gate == "performance" and "reported done" in out.message, out.message
