"""Issue #24: a speed verdict forged by a candidate whose author read our source. Each exploit below
was replayed against the verifier before its fix and passed a layer it should not have:

* kernel rules: a banned function named in a spelling the call-only words did not see (``(signal)(...)``,
  ``(open)(...)``, ``auto f = (setitimer);``, ``= open;``, a macro), and the timer/signal family
  (``setitimer``, ``alarm``, ``timer_create``, ...) that was not banned at all;
* seccomp: with the static rules off, a kernel arming an interval timer;
* model.py: ``out @= b`` (augmented assignment) where ``out = out @ b`` is refused;
* signal dispositions: a kernel that installs a handler (the rules and seccomp aside);
* the shared /tmp: one candidate's outputs replayed by the next from a file;
* seeds reused across verifications of a task.
"""

from __future__ import annotations

import pytest

from verifier.gates.antihack import check_kernel_source

import candidates as C

RELU = C.RELU

# ----------------------------------------------------------------------------- kernel rules

# Spellings of a banned function that are not `name(`: each names the function all the same.
NOT_A_PLAIN_CALL = [
    ("(signal)(SIGALRM, h)", 'typedef void (*H)(int);\nextern "C" H (signal)(int, H);\n'
                             "void arm(H h) { (signal)(14, h); }\n", "signal"),
    ("(open)(path, 0)", 'extern "C" int (open)(const char*, int, ...);\nint g() { return (open)("x", 0); }\n', "open"),
    ("auto f = (setitimer);", "auto f = (setitimer);\n", "setitimer"),
    ("&open", "static auto p = &open;\n", "open"),
    ("open decays to a pointer", "static int (*p)(const char*, int, ...) = open;\n", "open"),
    ("open passed as an argument", "void use(int (*)(const char*, int, ...));\nvoid g() { use(open); }\n", "open"),
    ("open through a macro", '#define OPEN_IT open\nint g() { return OPEN_IT("x", 0); }\n', "open"),
    ("clock through a macro", "#define NOW clock\nlong g() { return NOW(); }\n", "clock"),
    ("time as a pointer", "static auto now = time;\n", "time"),
    ("kill as a pointer", "static auto k = kill;\n", "kill"),
    ("num_threads through a macro", "#define NT num_threads\n" + RELU.replace(
        "#pragma omp parallel for simd", "#pragma omp parallel for NT(64) simd"), "num_threads"),
]

# Timers and signals: a handler and a timer interrupt the harness's own code in the job's process.
TIMER_SIGNAL_FAMILY = ["setitimer", "getitimer", "alarm", "ualarm", "timer_create", "timer_settime",
                       "timer_delete", "timer_gettime", "timerfd_create", "timerfd_settime", "sigaction",
                       "__sigaction", "__libc_sigaction", "signal", "ssignal", "gsignal", "sigset", "bsd_signal",
                       "sysv_signal", "__sysv_signal", "sigvec", "sigqueue", "pthread_sigqueue", "raise",
                       "pthread_sigmask", "sigprocmask", "sigblock", "sigsetmask", "sigaltstack", "signalfd",
                       "tgkill", "tkill", "pthread_kill"]


@pytest.mark.parametrize("name, prefix, word", NOT_A_PLAIN_CALL, ids=[r[0] for r in NOT_A_PLAIN_CALL])
def test_a_banned_function_is_refused_in_any_spelling(name, prefix, word):
    problem = check_kernel_source("kernel.cpp", prefix + RELU, {"kernel.cpp"})
    assert problem is not None and f"{word} is not allowed" in problem, (name, problem)


@pytest.mark.parametrize("word", TIMER_SIGNAL_FAMILY)
def test_timer_and_signal_functions_are_refused_at_any_mention(word):
    for spelling in (f"static auto p = &{word};\n", f"static auto p = ({word});\n", f'extern "C" int {word}();\n'):
        problem = check_kernel_source("kernel.cpp", spelling + RELU, {"kernel.cpp"})
        assert problem is not None and f"{word} is not allowed" in problem, (spelling, problem)


def test_a_variable_named_like_a_banned_function_is_refused_with_a_hint_to_rename():
    """Decision: a common word (time, clock, signal, open...) is refused at every mention, a variable of
    that name too: `auto f = open;`, `use(open)` and a macro body look exactly like a variable's use,
    so telling them apart needs C++ name lookup. The message says to rename it."""
    kernel = RELU.replace("for (int64_t i", "float time = 0.f; (void)time;\n    for (int64_t i")
    problem = check_kernel_source("kernel.cpp", kernel, {"kernel.cpp"})
    assert problem is not None and "time is not allowed" in problem and "rename" in problem, problem


def test_honest_openmp_thread_queries_still_pass():
    """num_threads means something only as an OpenMP clause: a variable of that name passes."""
    ok = ('#include <cstdint>\n#include <omp.h>\nextern "C" void f(float* x, int64_t n) {\n'
          "  int num_threads = omp_get_max_threads(); float sigma = 1.f; int nthreads = num_threads;\n"
          "  (void)nthreads;\n  #pragma omp parallel for\n  for (int64_t i = 0; i < n; ++i) x[i] = sigma;\n}\n")
    assert check_kernel_source("k.cpp", ok, set()) is None


# ----------------------------------------------------------------------------- model.py rules

MODEL_HEAD = "import torch\nimport torch.nn as nn\nfrom verifier.runtime import load\n\nlib = load()\n\n\n"


def _model(forward: str) -> str:
    return MODEL_HEAD + "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        " + forward + "\n"


@pytest.mark.parametrize("forward", [
    "out = a.clone()\n        out @= b\n        lib.f(a, out)\n        return out",
    "out = a.clone()\n        lib.f(a, out)\n        out = out @ b\n        return out",
], ids=["out @= b", "out = out @ b"])
def test_augmented_matmul_is_refused_like_the_operator(forward):
    from verifier.gates.antihack import check_model

    problem = check_model(_model(forward))
    assert problem is not None and "@" in problem, problem


def test_integer_bookkeeping_with_augmented_assignment_still_passes():
    from verifier.gates.antihack import check_model

    forward = ("n = 0\n        for d in a.shape:\n            n += d\n        n *= 2\n        n //= 2\n"
               "        out = torch.empty_like(a)\n        lib.f(a, b, out, n)\n        return out")
    assert check_model(_model(forward)) is None


# ----------------------------------------------------------------------------- the sandbox, rules off


@pytest.fixture(scope="module")
def rules_off(tmp_path_factory, fast_config):
    """A verifier with the static rules off: only the sandbox and the worker's own checks stand."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("forgery-cache"))
    yield C.without_candidate_phase(v)   # the layers beneath (bubblewrap's /tmp, Landlock, the job's filter)
    v.close()


# Arms a timer that would fire long after the job (so no handler is needed): where the timer is armed
# the kernel computes ReLU and passes; where the system call is refused every output is its errno.
ARM_TIMER = '''
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <sys/time.h>
#include <unistd.h>
static int arm() {
    ARM
}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    int rc = arm();
    float e = (float)errno;
    for (int64_t i = 0; i < n; ++i) out[i] = rc == 0 ? (x[i] > 0.f ? x[i] : 0.f) : e;
}
'''
ARMS = {
    "setitimer": "struct itimerval t = {{0, 0}, {1000, 0}}; return setitimer(ITIMER_REAL, &t, nullptr);",
    "alarm": "errno = 0; alarm(1000); return errno == 0 && alarm(1000) != 0 ? 0 : -1;",
    "timer_create": "struct sigevent ev = {}; ev.sigev_notify = SIGEV_SIGNAL; ev.sigev_signo = SIGALRM;\n"
                    "    timer_t id; if (timer_create(CLOCK_MONOTONIC, &ev, &id) != 0) return -1;\n"
                    "    struct itimerspec t = {{0, 0}, {1000, 0}}; return timer_settime(id, 0, &t, nullptr);",
}


@pytest.mark.parametrize("how", list(ARMS))
def test_a_kernel_cannot_arm_a_timer_even_with_the_rules_off(rules_off, suite, make_candidate, how):
    kernel = ARM_TIMER.replace("ARM", ARMS[how])
    assert check_kernel_source("kernel.cpp", kernel, {"kernel.cpp"}) is not None  # the rules refuse it
    out = rules_off.verify(suite.get("relu").spec(), make_candidate(C.elementwise(kernel)), fresh=True)
    assert out.failed_gate == "correctness", (how, out.failed_gate, out.message)
    assert "got 1, expected" in out.message, out.message   # errno EPERM from seccomp, a recorded verdict
    out = rules_off.verify(suite.get("relu").spec(), make_candidate(C.elementwise(RELU)), fresh=True)
    assert out.feasible, out.message                      # and the verifier goes on


# ----------------------------------------------------------------------------- signal dispositions

# Installs a handler (SIGALRM, or replaces SIGINT's: Python's own) and computes ReLU correctly: with the
# rules off only the worker's comparison of the dispositions around each call catches it.
INSTALLS_HANDLER = '''
#include <csignal>
#include <cstdint>
static void on_signal(int) {}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigaction(SIGNUM, &sa, nullptr);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.parametrize("signum, words", [("SIGALRM", "SIGALRM now caught"), ("SIGINT", "SIGINT's handler replaced")])
def test_a_kernel_that_installs_a_signal_handler_fails_anti_hack(rules_off, suite, make_candidate, signum, words):
    import signal

    if signum == "SIGINT" and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell (nohup ... &): SIGINT ignored from the start, so Python
        # installed no handler of its own, and the jobs inherit that; the kernel's handler is then new
        words = "SIGINT now caught"
    kernel = INSTALLS_HANDLER.replace("SIGNUM", signum)
    out = rules_off.verify(suite.get("relu").spec(), make_candidate(C.elementwise(kernel)), fresh=True)
    assert out.failed_gate == "anti_hack", (out.failed_gate, out.message)
    assert "the kernel changed signal handling" in out.message and words in out.message, out.message
    assert "may not install handlers or timers" in out.message


def test_signal_dispositions_see_handlers_masks_and_timers():
    import signal

    from verifier.job.signals import signal_changes, signal_dispositions

    before = signal_dispositions()
    assert signal_dispositions() == before and signal_changes(before, before) == []
    old = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        assert signal_changes(before, signal_dispositions()) == ["SIGUSR1 now caught"]
    finally:
        signal.signal(signal.SIGUSR1, old)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        assert signal_changes(before, signal_dispositions()) == ["SIGUSR2 now blocked"]
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR2])
    # (pytest-timeout holds SIGALRM and ITIMER_REAL here: the virtual timer instead)
    old_handler = signal.signal(signal.SIGVTALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_VIRTUAL, 1000)
    try:
        assert signal_changes(before, signal_dispositions()) == ["SIGVTALRM now ignored", "ITIMER_VIRTUAL now armed"]
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old_handler)
    assert signal_dispositions() == before


# ----------------------------------------------------------------------------- a private /tmp per job

# Honest ReLU whose model.py keeps every result it computed in /tmp, by its inputs (what a matmul could
# later replay, scaled, for a forged speedup), then says in its outputs what it found there: 1 a file
# an earlier job left, 2 it left one itself, 3 /tmp refused the write.
TMP_PROBE_MODEL = '''
import os

import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel())
        path = f"/tmp/evokernel-{tuple(x.shape)}-{hash(tuple(x.reshape(-1)[:16].tolist()))}.pt"
        found = any(name.startswith("evokernel-") for name in os.listdir("/tmp"))
        try:
            torch.save(out, path)
            code = 1 if found else 2
        except Exception:
            code = 3
        return out.fill_(code)
'''
# Never computes: returns what an earlier job left in /tmp for the same inputs (zeros where it finds
# nothing). A reference serving several verifications gave both candidates the same trials.
TMP_REPLAY_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        lib.relu_forward(x[:1], out[:1], 1)
        try:
            out.copy_(torch.load(f"/tmp/evokernel-{tuple(x.shape)}-{hash(tuple(x.reshape(-1)[:16].tolist()))}.pt"))
        except Exception:
            pass
        return out
'''


@pytest.fixture(scope="module")
def rules_off_no_bwrap(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier
    from verifier.sandbox import landlock_status

    if not landlock_status()[0]:
        pytest.skip(landlock_status()[1])
    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False, "use_bwrap": False}),
                 cache_dir=tmp_path_factory.mktemp("forgery-nobwrap-cache"))
    yield C.without_candidate_phase(v)
    v.close()


@pytest.mark.parametrize("sandbox", ["bubblewrap", "landlock only"])
def test_a_job_cannot_leave_files_for_a_later_job_in_tmp(rules_off, rules_off_no_bwrap, suite, make_candidate,
                                                          sandbox):
    verifier = rules_off if sandbox == "bubblewrap" else rules_off_no_bwrap
    spec = suite.get("relu").spec()
    probe = make_candidate({"model.py": TMP_PROBE_MODEL, "kernel.cpp": RELU})
    first = verifier.verify(spec, probe, fresh=True)
    assert first.failed_gate == "correctness", first.message
    assert "got 3, expected" in first.message, first.message   # /tmp refused the write
    second = verifier.verify(spec, probe, fresh=True)
    assert "got 1, expected" not in second.message, second.message   # nothing of the first job there


def test_a_candidate_that_replays_an_earlier_jobs_outputs_from_tmp_fails_correctness(rules_off, suite,
                                                                                     make_candidate):
    """A (honest, keeps its outputs in /tmp) then B (never computes, replays them): B must fail at the
    trials, not pass them on A's work."""
    spec = suite.get("relu").spec()
    keeper = TMP_PROBE_MODEL.replace("return out.fill_(code)", "return out")
    a = rules_off.verify(spec, make_candidate({"model.py": keeper, "kernel.cpp": RELU}), fresh=True)
    assert a.feasible, a.message
    b = rules_off.verify(spec, make_candidate({"model.py": TMP_REPLAY_MODEL, "kernel.cpp": RELU}), fresh=True)
    # at its trials: before, it passed them all on A's outputs, and only the timing's check of every
    # call caught it ("results changed under repeated calls")
    assert b.failed_gate == "correctness" and "repeated calls" not in b.message, (b.failed_gate, b.message)


def test_the_fork_servers_tmp_is_read_only_but_a_folder_bound_beneath_it_is_not(tmp_path):
    """Without Landlock, bubblewrap's read-only /tmp and /dev/shm keep jobs from sharing them; a jobs
    root that lies beneath /tmp (no /dev/shm) stays writable, and so do the device nodes."""
    import subprocess

    from verifier.sandbox import bwrap_argv, bwrap_status

    if not bwrap_status()[0]:
        pytest.skip(bwrap_status()[1])
    assert str(tmp_path).startswith("/tmp/")
    argv = bwrap_argv([str(tmp_path)], [], [], str(tmp_path), tmp_read_only=True)
    script = ("import os\nfor p in ('/tmp/x', '/dev/shm/x', 'mine', '/dev/null'):\n    try:\n        open(p, 'w').write('1'); print(p, 'written')\n"
              "    except OSError as e:\n        print(p, 'refused', e.errno)\n")
    done = subprocess.run([*argv, "python3", "-c", script], capture_output=True, text=True, timeout=60)
    assert "/tmp/x refused 30" in done.stdout and "/dev/shm/x refused 30" in done.stdout, (done.stdout, done.stderr)
    assert "mine written" in done.stdout and "/dev/null written" in done.stdout, (done.stdout, done.stderr)


# ----------------------------------------------------------------------------- seeds never reused


def test_every_verification_draws_seeds_of_its_own(verifier, suite, make_candidate, monkeypatch):
    """A passing verification's seeds are never checked again (the next candidate could replay what an
    earlier one learnt or left behind); neither are a failing one's (its message shows them)."""
    task = suite.get("relu").spec()
    drawn: list[list[int]] = []    # the seeds each verification checked against (made ahead or not)
    correctness = verifier._correctness

    def spy(task, files, build, ref, out):
        drawn.append([t.seed for t in ref.trials])
        return correctness(task, files, build, ref, out)

    monkeypatch.setattr(verifier, "_correctness", spy)
    ok = verifier.verify(task, make_candidate(C.elementwise(C.RELU.replace("0.f ? x[i]", "0.f ? x[i] + 0.0f"))))
    assert ok.feasible and "seed" not in ok.message, ok.message
    bad = verifier.verify(task, make_candidate(C.elementwise(C.CONSTANT.replace("0.5f", "0.375f"))))
    assert not bad.feasible
    assert len(drawn) == 2 and not set(drawn[0]) & set(drawn[1]), drawn
    assert not any(str(seed) in bad.message for seed in drawn[0])
    assert any(str(seed) in bad.message for seed in drawn[1]), bad.message   # the message names its own
