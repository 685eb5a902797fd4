"""Red-team findings against the candidate sandbox, each replayed as a candidate:

A. a job writing into the fork server's memory (``/proc/<ppid>/mem``) or reading PID 1's environment;
B. a job or a build reading files from the home folder, the cache or the workspace's private paths
   (and, since the allow-list view, from anywhere outside it: see test_white_box.py);
C. a job creating folders in the shared jobs root or writing into another job's folder.

Every probe runs inside a real sandboxed job (or sandboxed build) and must fail; ordinary candidates
must still pass, and the verifier must keep working after each attack.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

import candidates as C

pytestmark = pytest.mark.slow

SECRET = "TOPSECRET_" + "9f3a" * 4


def _bwrap() -> tuple[bool, str]:
    from verifier.sandbox import bwrap_status

    return bwrap_status()


needs_bwrap = pytest.mark.skipif(not _bwrap()[0], reason=_bwrap()[1])


@pytest.fixture(scope="module")
def outside_tmp():
    """A scratch folder outside /tmp (the sandbox has a private /tmp: a file there proves nothing)."""
    import shutil

    base = "/var/tmp"
    if not (os.path.isdir(base) and os.access(base, os.W_OK)):
        pytest.skip("/var/tmp is not writable")
    folder = Path(tempfile.mkdtemp(prefix="evokernel-hardening-", dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def workspace_private(outside_tmp) -> dict[str, Path]:
    """A workspace's private paths (what ``Workspace.private_paths`` returns) holding a key."""
    ws = outside_tmp / "workspace"
    ws.mkdir()
    config = ws / "evokernel.toml"
    config.write_text(f'api_key = "{SECRET}"\n')
    state = ws / ".evokernel"
    state.mkdir()
    (state / "notes.txt").write_text(SECRET)
    return {"root": ws, "config": config, "state": state}


@pytest.fixture(scope="module")
def hardened(tmp_path_factory, fast_config, workspace_private):
    """A verifier with the static anti-hack rules off (only the sandbox stands in the way) and a
    workspace's private paths to hide."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False, "memory_limit_mb": 2048}),
                 cache_dir=tmp_path_factory.mktemp("hardening-cache"),
                 hidden_paths=[str(workspace_private["state"]), str(workspace_private["config"])])
    yield C.without_candidate_phase(v)
    v.close()


# model.py runs in the job's process, exactly where the kernel's code runs: each probe is one file
# operation; the results come back in the verdict's message.
PROBE_MODEL = '''
import json
import os

import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()
results = {{"ppid": os.getppid(), "cwd": os.getcwd()}}


def probe(name, fn):
    try:
        fn()
        results[name] = "ok"
    except OSError as exc:
        results[name] = type(exc).__name__


def read(path):
    with open(path, "rb") as fh:
        data = fh.read()
    if SECRET.encode() in data:
        print(SECRET)


SECRET = {secret!r}
{probes}
raise RuntimeError("probes " + json.dumps(results, sort_keys=True))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        lib.relu_forward(x.contiguous(), out, x.numel())
        return out
'''


def probe_candidate(probes: str) -> dict[str, str]:
    return {"model.py": PROBE_MODEL.format(secret=SECRET, probes=probes), "kernel.cpp": C.RELU}


def run_probes(verifier, suite, make_candidate, probes: str) -> tuple[dict, str]:
    out = verifier.verify(suite.get("relu").spec(), make_candidate(probe_candidate(probes)), fresh=True)
    text = json.dumps(out.to_dict())
    assert out.failed_gate == "correctness", out.message
    found = re.search(r"probes (\{.*?\})", out.message)
    assert found, out.message
    return json.loads(found.group(1)), text


def assert_all_refused(results: dict, names: list[str]) -> None:
    for name in names:
        assert results[name] in ("PermissionError", "FileNotFoundError", "OSError"), (name, results)


def assert_still_works(verifier, suite, make_candidate) -> None:
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.RELU)), fresh=True)
    assert out.feasible, out.message
    assert [g.status for g in out.gates] == ["passed"] * 5


# ----------------------------------------------------------------------------- A: other processes


def test_job_cannot_open_the_fork_server_memory_or_environment(hardened, suite, make_candidate):
    results, _ = run_probes(hardened, suite, make_candidate, '''
pp = os.getppid() or 1   # 0 in a PID namespace of its own: the fork server is PID 1 of /proc's (bubblewrap's)
probe("ppid_mem_rw", lambda: open(f"/proc/{pp}/mem", "r+b"))
probe("ppid_mem_r", lambda: open(f"/proc/{pp}/mem", "rb"))
probe("ppid_environ", lambda: read(f"/proc/{pp}/environ"))
probe("ppid_stdin", lambda: open(f"/proc/{pp}/fd/0", "wb"))  # the server's command pipe
probe("ppid_fd_link", lambda: os.readlink(f"/proc/{pp}/fd/0"))
probe("ppid_cwd", lambda: os.listdir(f"/proc/{pp}/cwd"))
probe("pid1_environ", lambda: read("/proc/1/environ"))
probe("pid1_mem", lambda: open("/proc/1/mem", "r+b"))
''')
    assert_all_refused(results, ["ppid_mem_rw", "ppid_mem_r", "ppid_environ", "ppid_stdin", "ppid_fd_link", "ppid_cwd",
                                "pid1_mem"])
    assert results["ppid"] == 0     # the job's parent is outside its PID namespace: it cannot name it
    if hardened.server._use_bwrap:
        assert results["pid1_environ"] == "PermissionError"   # the fork server, PID 1 of bubblewrap's /proc
    assert_still_works(hardened, suite, make_candidate)


# The reported attack itself, from the kernel's C code: open the parent's memory read-write. Every
# output is the errno (EACCES = 13), or 1000 if the open succeeded.
OPEN_PARENT_MEM = '''
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    char path[64];
    int parent = getppid();   // 0 in the job's own PID namespace: the fork server is PID 1 of /proc's
    snprintf(path, sizeof path, "/proc/%d/mem", parent ? parent : 1);
    int fd = open(path, O_RDWR);
    float v = fd < 0 ? (float)errno : 1000.f;
    for (int64_t i = 0; i < n; ++i) out[i] = v;
}
'''


def test_kernel_cannot_open_the_fork_server_memory(hardened, suite, make_candidate):
    out = hardened.verify(suite.get("relu").spec(), make_candidate(C.elementwise(OPEN_PARENT_MEM)), fresh=True)
    assert out.failed_gate == "correctness"
    assert "got 13, expected" in out.message  # EACCES


def test_zygote_and_jobs_hold_no_capabilities_and_are_not_dumpable(hardened, suite, make_candidate):
    results, _ = run_probes(hardened, suite, make_candidate, '''
import ctypes
status = open("/proc/self/status").read()
results["CapEff"] = [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0]
results["NoNewPrivs"] = [l.split()[1] for l in status.splitlines() if l.startswith("NoNewPrivs")][0]
results["dumpable"] = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
''')
    assert int(results["CapEff"], 16) == 0
    assert results["NoNewPrivs"] == "1"
    assert results["dumpable"] == 0


# ----------------------------------------------------------------------------- B: files


def test_job_cannot_read_the_home_folder(hardened, suite, make_candidate, outside_tmp, monkeypatch):
    home = outside_tmp / "home"
    beside = outside_tmp / "beside.txt"  # beside the home, not in it: outside the allow-list all the same
    beside.write_text(SECRET)
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(SECRET)
    (home / ".bashrc").write_text(f"export OPENAI_API_KEY={SECRET}\n")
    (home / ".cargo").mkdir()
    (home / ".cargo" / "credentials.toml").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    hardened.server.close(restartable=True)  # restart so the sandbox is built for this home
    real_home = os.path.realpath(os.path.expanduser("~root")) if os.path.isdir("/root") else "/root"
    try:
        results, text = run_probes(hardened, suite, make_candidate, f'''
probe("control", lambda: read("model.py"))
probe("beside", lambda: read({str(beside)!r}))
probe("bashrc", lambda: read({str(home / ".bashrc")!r}))
probe("claude", lambda: read({str(home / ".claude" / ".credentials.json")!r}))
probe("cargo", lambda: read({str(home / ".cargo" / "credentials.toml")!r}))
probe("list_home", lambda: os.listdir({str(home)!r}) and None)
results["home_entries"] = os.listdir({str(home)!r}) if os.path.isdir({str(home)!r}) else None
probe("write_home", lambda: open({str(home / "planted")!r}, "w"))
probe("root_bashrc", lambda: read({real_home + "/.bashrc"!r}))
''')
    finally:
        hardened.server.close(restartable=True)   # the next test gets a sandbox of the real home
    assert results["control"] == "ok", results
    assert_all_refused(results, ["bashrc", "claude", "cargo", "write_home", "root_bashrc", "beside"])
    assert not results["home_entries"]  # an empty tmpfs, if there at all
    assert SECRET not in text
    assert not (home / "planted").exists()


def test_job_cannot_read_hidden_state(hardened, suite, make_candidate, workspace_private):
    results, text = run_probes(hardened, suite, make_candidate, f'''
probe("config", lambda: read({str(workspace_private["config"])!r}))
probe("state", lambda: read({str(workspace_private["state"] / "notes.txt")!r}))
probe("cache", lambda: os.listdir({str(hardened.cache_dir / "builds")!r}))
''')
    assert_all_refused(results, ["config", "state", "cache"])
    assert SECRET not in text


def _include(path: Path) -> dict[str, str]:
    return {"kernel.cpp": f'#include "{path}"\n' + C.RELU}


@needs_bwrap
def test_build_cannot_include_home_or_hidden_files(tmp_path, monkeypatch, workspace_private, outside_tmp):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    backend = get_backend("cpu")
    home = outside_tmp / "build-home"
    (home / ".claude").mkdir(parents=True)
    home_secret = home / ".claude" / "secret.h"
    home_secret.write_text(f"{SECRET} leaked;\n")
    beside = outside_tmp / "beside" / "secret.h"  # an ordinary folder: outside the allow-list too
    beside.parent.mkdir()
    beside.write_text(f"{SECRET} leaked;\n")
    monkeypatch.setenv("HOME", str(home))
    hidden = [str(workspace_private["state"]), str(workspace_private["config"])]

    control = build_candidate(backend, _include(beside), tmp_path / "plain", hidden=hidden, sandbox=False)
    assert not control.ok and SECRET in control.log  # the control, unsandboxed: what a leak looks like

    for target in (home_secret, beside, workspace_private["config"], workspace_private["state"] / "notes.txt"):
        result = build_candidate(backend, _include(target), tmp_path / "cache", hidden=hidden)
        assert not result.ok
        assert SECRET not in result.log, result.log
        # gone (a home's tmpfs) or unreadable (a hidden file is an unusable device node)
        assert "No such file" in result.log or "Permission denied" in result.log, result.log
    if os.path.isfile("/root/.bashrc") and os.access("/root/.bashrc", os.R_OK):
        result = build_candidate(backend, _include(Path("/root/.bashrc")), tmp_path / "cache", hidden=hidden)
        assert not result.ok and "No such file" in result.log, result.log


@needs_bwrap
def test_build_still_works_with_the_home_hidden(tmp_path, monkeypatch):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    result = build_candidate(get_backend("cpu"), {"kernel.cpp": C.RELU}, tmp_path / "cache")
    assert result.ok, result.log


# ----------------------------------------------------------------------------- C: other jobs


def test_job_cannot_create_folders_or_touch_another_job(hardened, suite, make_candidate):
    root = hardened.jobs_root
    sibling = Path(tempfile.mkdtemp(prefix="00001-candidate-", dir=root))
    (sibling / "model.py").write_text("# the next candidate's model\n")
    (sibling / "kernel.so").write_bytes(b"\x7fELF-the-next-library")
    (sibling / "result.json").write_text('{"ok": false}')
    (sibling / "outputs.pt").write_text(SECRET)
    try:
        results, text = run_probes(hardened, suite, make_candidate, f'''
sib = {str(sibling)!r}
probe("mkdir_parent", lambda: os.mkdir("../00002-perf"))
probe("mkdir_root", lambda: os.mkdir({str(root)!r} + "/00003-candidate"))
probe("list_root", lambda: os.listdir(".."))
probe("chmod_root", lambda: os.chmod("..", 0o755))
probe("write_result", lambda: open(sib + "/result.json", "w").write('{{"ok": true}}'))
probe("write_model", lambda: open(sib + "/model.py", "a").write("import os"))
probe("replace_library", lambda: os.replace("model.py", sib + "/kernel.so"))
probe("unlink_model", lambda: os.unlink(sib + "/model.py"))
probe("plant_file", lambda: open(sib + "/planted.py", "w"))
probe("read_outputs", lambda: read(sib + "/outputs.pt"))
probe("rename_own", lambda: os.rename(os.getcwd(), {str(root)!r} + "/renamed"))
''')
        assert_all_refused(results, ["mkdir_parent", "mkdir_root", "list_root", "chmod_root", "write_result",
                                     "write_model", "replace_library", "unlink_model", "plant_file"])
        assert (sibling / "result.json").read_text() == '{"ok": false}'
        assert (sibling / "model.py").read_text() == "# the next candidate's model\n"
        assert (sibling / "kernel.so").read_bytes() == b"\x7fELF-the-next-library"
        assert not (sibling / "planted.py").exists()
        assert not (root / "00002-perf").exists() and not (root / "00003-candidate").exists()
        assert (os.stat(root).st_mode & 0o777) == 0o300  # still unlistable
        if hardened.server._info.get("landlock"):
            assert results["read_outputs"] == "PermissionError"
            assert results["rename_own"] == "PermissionError"
            assert SECRET not in text
    finally:
        import shutil

        shutil.rmtree(sibling, ignore_errors=True)
    assert_still_works(hardened, suite, make_candidate)


# A kernel whose static initializer pre-creates the folders the verifier used to make next.
MKDIR_NEXT_JOBS = '''
#include <cstdint>
#include <cstdio>
#include <sys/stat.h>
__attribute__((constructor)) static void squat() {
    char name[64];
    for (int i = 1; i < 64; ++i) {
        snprintf(name, sizeof name, "../%05d-perf", i); mkdir(name, 0777);
        snprintf(name, sizeof name, "../%05d-candidate", i); mkdir(name, 0777);
    }
}
''' + C.RELU


def test_squatting_the_next_job_folders_does_not_break_the_verifier(hardened, suite, make_candidate):
    for i in range(1, 64):  # as if a job had managed to: the verifier must not care
        for kind in ("perf", "candidate"):
            (hardened.jobs_root / f"{i:05d}-{kind}").mkdir(exist_ok=True)
    files = {"model.py": C.ELEMENTWISE_MODEL.format(fn="relu_forward"), "kernel.cpp": MKDIR_NEXT_JOBS}
    with C.without_load_time_check():   # its constructor, refused by the link check since #48
        out = hardened.verify(suite.get("relu").spec(), make_candidate(files), fresh=True)
    assert out.feasible, out.message  # the squatter itself is a correct kernel; nothing crashed
    assert_still_works(hardened, suite, make_candidate)


SYMLINKED_STDERR = '''
import os

os.unlink("stderr.txt")
os.symlink({target!r}, "stderr.txt")
os.unlink("progress.txt") if os.path.exists("progress.txt") else None
os.symlink({target!r}, "progress.txt")
os.abort()


class ModelNew:
    pass
'''


def test_job_cannot_make_the_harness_read_a_host_file(hardened, suite, make_candidate, tmp_path):
    """stderr.txt and progress.txt end up in the verdict: a job that turns them into symlinks to a host
    file must not get that file's text into the message."""
    target = tmp_path / "host-secret.txt"
    target.write_text(SECRET + "\n")
    files = {"model.py": SYMLINKED_STDERR.format(target=str(target)), "kernel.cpp": C.RELU}
    out = hardened.verify(suite.get("relu").spec(), make_candidate(files), fresh=True)
    assert out.failed_gate == "correctness"
    assert SECRET not in json.dumps(out.to_dict())
    assert target.read_text() == SECRET + "\n"


# ----------------------------------------------------------------------------- the sandbox's shape


def test_the_sandbox_root_is_an_allow_list(tmp_path, monkeypatch):
    """No bind of / any more: the system view, the interpreter, the verifier package and the job folder;
    a home is never bound itself (only folders inside it that the worker needs)."""
    from verifier.sandbox import bwrap_argv, home_roots, sandbox_readable, system_view

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert str(home.resolve()) in home_roots()
    argv = bwrap_argv([str(tmp_path / "jobs")], [], [], str(tmp_path / "jobs"))
    pairs = list(zip(argv, argv[1:]))
    assert ("--ro-bind", "/") not in pairs and ("--bind", "/") not in pairs
    bound = [b for a, b in pairs if a in ("--ro-bind", "--bind", "--symlink")]
    assert "/usr" in system_view() and ("--ro-bind", "/usr") in pairs
    for top in ("/var", "/opt", "/work", "/home", "/root", "/srv", "/mnt", "/etc", str(home.resolve())):
        assert top not in bound
    assert ("--cap-drop", "ALL") in pairs or not _bwrap()[0]
    # never a home itself (that would show all of it): only folders inside one
    for path in sandbox_readable():
        assert path not in home_roots()


def test_what_a_job_needs_from_the_hosts_tmp_is_bound_back_over_the_private_tmp(tmp_path):
    """A checkout (and its .venv) under /tmp, e.g. a fresh clone there, stays reachable inside the
    sandbox, whose /tmp is its own: read-only, and only what it needs."""
    from verifier.sandbox import bwrap_argv, sandbox_readable

    tool = tmp_path / "venv" / "bin"
    tool.mkdir(parents=True)
    assert str(tmp_path).startswith("/tmp/")
    prefix = str(tmp_path / "venv")                          # a bin folder brings its prefix
    assert prefix in sandbox_readable(extra=[str(tool)])
    argv = bwrap_argv([], [], [], "/", readable=[str(tool)])
    pairs = list(zip(argv, argv[1:]))
    assert pairs.index(("--tmpfs", "/tmp")) < pairs.index(("--ro-bind", prefix))
    assert "/tmp" not in sandbox_readable(extra=["/tmp"])    # never the host's whole /tmp


# ----------------------------------------------------------------------------- device backends' process model


@pytest.fixture(scope="module")
def spawning(tmp_path_factory, fast_config):
    """Device backends exec a fresh interpreter per job (which resets dumpability): the same guards."""
    from verifier.backends.cpu import CpuBackend
    from verifier.harness.verify import Verifier

    class SpawningCpu(CpuBackend):
        process_model = "spawn"

    v = Verifier(SpawningCpu(), fast_config.model_copy(update={"antihack": False}),
                 cache_dir=tmp_path_factory.mktemp("hardening-spawn-cache"))
    yield C.without_candidate_phase(v)
    v.close()


def test_spawned_job_is_as_confined(spawning, suite, make_candidate):
    root = spawning.jobs_root
    sibling = Path(tempfile.mkdtemp(prefix="00001-candidate-", dir=root))
    (sibling / "model.py").write_text("# the next candidate's model\n")
    try:
        results, _ = run_probes(spawning, suite, make_candidate, f'''
import ctypes
import sys
pp = os.getppid()
probe("ppid_mem_rw", lambda: open(f"/proc/{{pp}}/mem", "r+b"))
probe("ppid_environ", lambda: read(f"/proc/{{pp}}/environ"))
probe("mkdir_parent", lambda: os.mkdir("../squat"))
probe("list_root", lambda: os.listdir(".."))
probe("write_model", lambda: open({str(sibling)!r} + "/model.py", "a").write("import os"))
results["dumpable"] = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)
results["argv_has_job_dir"] = any(os.getcwd() in a for a in open("/proc/self/cmdline").read().split("\\0"))
''')
        assert_all_refused(results, ["ppid_mem_rw", "ppid_environ", "mkdir_parent", "list_root", "write_model"])
        assert results["dumpable"] == 0
        assert results["argv_has_job_dir"] is False  # no other process can read the folder off the command line
        assert (sibling / "model.py").read_text() == "# the next candidate's model\n"
        assert not (root / "squat").exists()
    finally:
        import shutil

        shutil.rmtree(sibling, ignore_errors=True)
    assert_still_works(spawning, suite, make_candidate)


# ----------------------------------------------------------------------------- without bubblewrap


@pytest.fixture(scope="module")
def unwrapped(tmp_path_factory, fast_config):
    """Bubblewrap off by configuration: the per-job guards (no capabilities, non-dumpable, Landlock,
    seccomp) must still keep jobs away from the server and from each other."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"antihack": False, "use_bwrap": False}),
                 cache_dir=tmp_path_factory.mktemp("hardening-nobwrap-cache"))
    yield C.without_candidate_phase(v)
    v.close()


def test_without_bubblewrap_jobs_are_still_kept_apart(unwrapped, suite, make_candidate):
    root = unwrapped.jobs_root
    sibling = Path(tempfile.mkdtemp(prefix="00001-candidate-", dir=root))
    (sibling / "model.py").write_text("# the next candidate's model\n")
    try:
        results, _ = run_probes(unwrapped, suite, make_candidate, f'''
pp = os.getppid()
probe("ppid_mem_rw", lambda: open(f"/proc/{{pp}}/mem", "r+b"))
probe("ppid_environ", lambda: read(f"/proc/{{pp}}/environ"))
probe("list_root", lambda: os.listdir(".."))
probe("chmod_root", lambda: os.chmod("..", 0o755))
probe("write_model", lambda: open({str(sibling)!r} + "/model.py", "a").write("import os"))
probe("mkdir_parent", lambda: os.mkdir("../squat"))
probe("write_etc", lambda: open("/etc/evokernel-planted", "w"))
probe("harness_environ", lambda: read("/proc/{os.getpid()}/environ"))  # this test's process (run as root
# here, the job's empty capability set already bars it; for a user without capabilities it is the
# harness being non-dumpable that does)
''')
        assert_all_refused(results, ["ppid_mem_rw", "ppid_environ", "list_root", "chmod_root", "harness_environ"])
        if unwrapped.server._info.get("landlock"):
            assert_all_refused(results, ["write_model", "mkdir_parent", "write_etc"])
            assert (sibling / "model.py").read_text() == "# the next candidate's model\n"
            assert not (root / "squat").exists()
            assert not os.path.exists("/etc/evokernel-planted")
    finally:
        import shutil

        shutil.rmtree(sibling, ignore_errors=True)
        shutil.rmtree(root / "squat", ignore_errors=True)
    assert_still_works(unwrapped, suite, make_candidate)
