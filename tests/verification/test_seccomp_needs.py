"""The one seccomp design (``verifier.sandbox.seccomp``): the filter leaves open exactly what a backend's
runtime declares it needs, and ``[verifier] seccomp = false`` runs jobs without it, saying so."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

import candidates as C

PROBE = r'''
import json, os, signal, socket, sys
from verifier.sandbox.seccomp import RuntimeNeeds, lock_down
needs = RuntimeNeeds.from_dict(json.loads(sys.argv[1]))
problem = lock_down(os.getpid(), needs)
out = {"problem": problem}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = exc.errno
attempt("fork", lambda: os._exit(0) if os.fork() == 0 else os.wait())
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
attempt("timer", lambda: signal.setitimer(signal.ITIMER_REAL, 0))
attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
print(json.dumps(out))
'''


def _probe(needs: dict) -> dict:
    pytest.importorskip("pyseccomp")
    from verifier.sandbox import seccomp_status

    ok, why = seccomp_status()
    if not ok:
        pytest.skip(why)
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(needs)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_cpu_filter_refuses_what_no_job_needs():
    got = _probe({})
    assert got["problem"] is None
    assert got["fork"] == 1 and got["inet"] == 1 and got["timer"] == 1 and got["kill_parent"] == 1  # EPERM
    assert got["unix"] == "ok"


def test_a_runtime_that_declares_timers_and_inet_gets_them_and_nothing_more():
    got = _probe({"signal_timers": True, "socket_families": [socket.AF_UNIX, socket.AF_INET]})
    assert got["timer"] == "ok" and got["inet"] == "ok" and got["unix"] == "ok"
    assert got["fork"] == 1 and got["kill_parent"] == 1


def test_needs_round_trip_through_the_fork_servers_json():
    from verifier.sandbox.seccomp import CPU_NEEDS, RuntimeNeeds

    needs = RuntimeNeeds(signal_timers=True, socket_families=(1, 16), open_files=2048, sources=("a page",))
    assert RuntimeNeeds.from_dict(json.loads(json.dumps(needs.to_dict()))) == needs
    assert RuntimeNeeds.from_dict(None) == RuntimeNeeds() == RuntimeNeeds.from_dict({"unknown_key": 1})
    assert CPU_NEEDS.sources


def test_every_backend_declares_its_needs_with_a_source():
    from verifier.backends import get_backend

    for name in ("cpu", "cuda", "ascend"):
        needs = get_backend(name).runtime_needs
        assert needs.sources, name


@pytest.mark.slow
def test_seccomp_off_by_configuration_runs_jobs_without_the_filter_and_says_so(tmp_path, fast_config, suite,
                                                                               make_candidate):
    from verifier.harness.verify import Verifier

    config = fast_config.model_copy(update={"antihack": False, "seccomp": False})
    with Verifier("cpu", config, cache_dir=tmp_path / "cache") as v:
        out = v.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.OPEN_SOCKET)))
        assert out.failed_gate == "correctness"
        # socket(AF_INET) was not refused by seccomp (no EPERM written into the outputs)
        assert "got 1, expected" not in out.message, out.message
        assert "no seccomp filter ([verifier] seccomp = false)" in v.server.isolation
