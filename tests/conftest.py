"""Shared fixtures: the small test suite, a session-wide verifier, candidate folders."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))  # shared candidate sources: `import candidates`
SUITE = FIXTURES / "suite"

# One timing lock per test session, not per machine: a test run never waits on another EvoKernel process
# (a workbench, another checkout's test run), and they never wait on it. Set before any test imports the
# verifier, inherited by every CLI, workbench and reference process the tests start. Under pytest-xdist the
# controller loads this file before it starts its workers, so every worker inherits the one folder and the
# workers' timing windows take turns as they would in one process. A test of the lock itself passes its own folder.
if "EVOKERNEL_LOCK_DIR" not in os.environ:
    _SESSION_LOCKS = tempfile.mkdtemp(prefix="evokernel-test-locks-")
    os.environ["EVOKERNEL_LOCK_DIR"] = _SESSION_LOCKS
    atexit.register(shutil.rmtree, _SESSION_LOCKS, True)

# One user cache per test session, the same way: no test reads or writes the user's own (builds, crash reports,
# the machine's roofline), and the roofline's ceilings, a fact of the machine, are measured once per session
# rather than once per verifier (about 3 s of every test's first verification). A test of a fresh measurement
# passes its own XDG_CACHE_HOME or folder.
if "EVOKERNEL_TEST_CACHE" not in os.environ:
    os.environ["EVOKERNEL_TEST_CACHE"] = os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evokernel-test-cache-")
    atexit.register(shutil.rmtree, os.environ["EVOKERNEL_TEST_CACHE"], True)

# Files whose every test starts the whole CLI or workbench (a fresh interpreter importing PyTorch, a
# pilot session) or hammers a real store from several processes: a second or more each. They are
# marked slow here, in one place, so `make check` (`-m "not slow"`) stays under a minute; `make test`
# runs everything. Single slow tests elsewhere carry their own mark.
SLOW_FILES = {
    "backends/test_doctor_and_packaging.py",
    "core_tests/test_cli_bad_input.py",
    "core_tests/test_cli_verifier.py",
    "store/test_concurrency.py",
    "store/test_crash.py",
    "tui/test_cli_daily.py",
    "tui/test_commands.py",
    "tui/test_daily_use.py",
    "tui/test_first_run.py",
    "tui/test_keys.py",
    "tui/test_model_waits.py",
    "tui/test_screenshots.py",
    # the timing tests of the merged timing branch: real paired timing windows, a lock across processes
    "verification/test_machine_lock.py",
    "verification/test_paired_timing.py",
}


# Single tests of otherwise fast files that took 5 s or more in both of two `make check` runs on the 2-core
# machine (#38: a real sandboxed job, timer or allocator probe, a workbench, a sized suite): the slow tier
# runs them, with every parameter.
SLOW_TESTS = {
    ("engine/test_run_records.py", "test_run_in_an_empty_folder_makes_the_whole_workspace"),
    ("engine/test_run_records.py", "test_answers_without_code_are_attempts_of_their_own_across_runs"),
    ("verification/test_speed_forgery.py", "test_every_verification_draws_seeds_of_its_own"),
    ("verification/test_speed_forgery.py", "test_a_kernel_cannot_arm_a_timer_even_with_the_rules_off"),
    ("verification/test_speed_forgery.py", "test_a_job_cannot_leave_files_for_a_later_job_in_tmp"),
    ("verification/test_fidelity_settings.py", "test_a_jobs_allocator_reuses_a_large_output_without_page_faults"),
    ("engine/test_relevant_memory.py", "test_a_pointwise_task_is_not_shown_gemm_kernels"),
    ("engine/test_relevant_memory.py", "test_a_fused_gemm_is_shown_the_matmul_s_working_kernel_and_nothing_unrelated"),
    ("core_tests/test_multi_case_tasks.py",
     "test_auto_sizes_are_decided_once_recorded_beside_the_memory_and_redecided_only_when_asked"),
    ("engine/test_watcher.py", "test_a_save_whose_verification_was_cut_short_is_verified_at_the_next_opening"),
    ("tui/test_memory_keys.py", "test_help_search_and_filters_from_the_keyboard"),
}


# Tests whose assertions compare real timings (a kernel measured against another in one window, a probe's
# sizes under a load it makes itself). No other test of this session runs beside them: a neighbour worker's
# builds on a 2-core machine made a same-speed kernel read "noisy" (tests/engine/test_speed_signal.py). `make test`
# and `make check` run them in a phase of their own, in one process, after the parallel phase (-m "not quiet");
# under a plain `pytest -n 2` the turnstile below keeps the other worker idle while one runs. The parallel phase
# used to hold them too: each quiet test then waited for the other worker's test in flight (about 10 s on average,
# weighted by the tests' times), some twenty times a run.
QUIET_FILES = {
    "engine/test_speed_signal.py",
    "engine/test_report_retime.py",
    "verification/test_paired_timing.py",
    "verification/test_timing_method.py",
    "verification/test_machine_lock.py",
}
QUIET_TESTS = {
    ("core_tests/test_auto_sizing.py", "test_two_probes_under_different_load_choose_the_same_sizes"),
    ("verification/test_window.py", "test_a_triad_ceiling_pytorch_or_the_kernel_beat_is_measured_again"),
    ("verification/test_harness_trust.py", "test_a_candidate_cannot_pin_the_best_or_the_fork_server"),
}

# The order files start in under pytest-xdist (`make test`, `make check`: a file per worker, `--no-loadscope-reorder`):
# the longest first, by the selected tests' times in tests/durations.json, so no long file starts last and keeps
# one worker busy while the other has finished (xdist's own order, by number of tests, started the 108 s one-test
# file near the end). A test not in the file counts as 0.5 s. Only the order: a stale file costs time, never a
# result. `make durations` writes it again from a whole run (`--write-durations`).
DURATIONS = Path(__file__).parent / "durations.json"
UNKNOWN_S = 0.5


def pytest_addoption(parser):
    parser.addoption("--write-durations", action="store_true",
                     help="merge this run's test times (set-up, call and tear-down) into tests/durations.json")


def _durations() -> dict[str, float]:
    try:
        found = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class _LongestFirst:
    @pytest.hookimpl(trylast=True)     # after `-m` has deselected: only the selected tests' times count
    def pytest_collection_modifyitems(self, items):
        known = _durations()
        weight: dict[Path, float] = {}
        for item in items:
            seconds = known.get(item.nodeid)
            seconds = float(seconds) if isinstance(seconds, (int, float)) else UNKNOWN_S
            weight[item.path] = weight.get(item.path, 0.0) + seconds
        items.sort(key=lambda item: -weight[item.path])    # stable: a file's tests stay together, in their order


def pytest_configure(config):
    config.pluginmanager.register(_LongestFirst(), "evokernel-longest-first")


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).parent
    real_llm = os.environ.get("EVOKERNEL_LLM_PYTHON")   # the real-server tier's interpreter: `make test-llm` sets it
    for item in items:
        if item.get_closest_marker("real_llm") and not real_llm:
            item.add_marker(pytest.mark.skip(reason="a real local model server: `make test-llm` runs it"))
        where = item.path.relative_to(root).as_posix()
        if where in SLOW_FILES or (where, getattr(item, "originalname", item.name)) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        if where in QUIET_FILES or (where, getattr(item, "originalname", item.name)) in QUIET_TESTS:
            item.add_marker(pytest.mark.quiet)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist, a quiet test holds the session's turn exclusively and every other test holds it
    shared, for the whole of its set-up, call and tear-down (module fixtures included). A quiet test first
    takes the turnstile, so the other worker starts no new test while it waits for the one in flight."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    folder = Path(os.environ["EVOKERNEL_LOCK_DIR"])
    quiet = item.get_closest_marker("quiet") is not None
    with open(folder / "test-turnstile", "a") as turnstile, open(folder / "test-turn", "a") as turn:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if quiet:
            fcntl.flock(turn, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(turn, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def suite():
    from core.tasks import load_suite

    return load_suite(SUITE)


@pytest.fixture(scope="session")
def fast_config():
    """Full checks, short timing: tests assert on verdicts, never on wall-clock time."""
    from verifier import VerifyConfig

    return VerifyConfig(trials=5, timing_calls=5, timing_budget_s=0.2, warmup_calls=1, run_timeout_s=20,
                        memory_limit_mb=4096, threads=2)


@pytest.fixture(scope="session")
def verifier(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config, cache_dir=tmp_path_factory.mktemp("verifier-cache"))
    yield v
    v.close()


@pytest.fixture
def make_candidate(tmp_path):
    """Write a candidate folder from {name: text} and return its path."""
    counter = iter(range(1000))

    def make(files: dict[str, str]) -> Path:
        folder = tmp_path / f"cand{next(counter)}"
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        return folder

    return make


@pytest.fixture
def llm_env(monkeypatch):
    """Point the LLM client at a scripted server: ``llm_env(script) -> ScriptedLLM`` (started)."""
    from openai_server import ScriptedLLM

    servers = []

    def start(script):
        server = ScriptedLLM(script).__enter__()
        servers.append(server)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        return server

    yield start
    for s in servers:
        s.__exit__(None, None, None)


_TIMES: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """A test's time, set-up to tear-down (in the controller under pytest-xdist), for ``--write-durations``."""
    _TIMES[report.nodeid] = _TIMES.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    if not session.config.getoption("--write-durations") or hasattr(session.config, "workerinput"):
        return
    merged = {**_durations(), **{k: round(v, 1) for k, v in _TIMES.items()}}
    DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
