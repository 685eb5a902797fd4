"""The build gate's machinery: compile a candidate's sources into one shared library, cached by a
hash of the sources and the backend's build key, with compiler diagnostics trimmed to what matters;
then check what the library links against (``verifier.toolchain.linkage``): only the system runtimes and the
backend's own, never a symbol of the process that loads it; and that it runs no code of its own when loaded (no more
than a library built the same way from the same files, each empty: ``load_time_baseline``, built once per build key
and file names and kept beside the builds).

Failed builds are cached too (the same sources fail the same way). Concurrent builds of the same
key wait for each other instead of compiling twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.backends.base import Backend, BuildPlanError
from verifier.locations import cache_dir
from verifier.processes import run_process, scrubbed_env
from verifier.sandbox.isolation import bwrap_argv, bwrap_status, sandbox_view
from verifier.sandbox.lockdown import landlock_abi
from verifier.toolchain.cdecl import DeclarationError, Signature
from verifier.toolchain.linkage import (
    check_links,
    load_time_problem,
    parse_load_time,
    parse_needed,
    parse_origin_runpath,
    parse_undefined,
)

BUILD_FORMAT = 3  # 2: the link check (libraries built before it are built and checked again); 3: no load-time code,
#                   and the key made of each file's exact bytes, length-prefixed
# What the link check reads of a library: its dynamic section (what it needs, its load-time arrays), its sections, its
# relocations and its dynamic symbols (IFUNC resolvers): ``verifier.toolchain.linkage``.
READELF = ["readelf", "-W", "-d", "-S", "-r", "--dyn-syms"]
MAX_LOG_LINES = 30
MAX_LOG_CHARS = 3000


@dataclass
class BuildResult:
    ok: bool
    key: str
    library: Path | None = None
    signatures: list[Signature] = field(default_factory=list)
    log: str = ""
    cached: bool = False
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)   # folders beside the library it needs (a custom op's vendor)


def default_cache_dir() -> Path:
    """The cache of builds made outside a workspace (``verifier.locations.cache_dir``)."""
    return cache_dir()


def build_key(backend: Backend, files: dict[str, str]) -> str:
    """What a build is served to: the backend's build key and every source's name and exact bytes (each
    length-prefixed, so no two sets of files share a key)."""
    h = hashlib.sha256(f"{BUILD_FORMAT}|{backend.build_key()}".encode())
    for name in sorted(files):
        if name == "model.py":
            continue
        for part in (name.encode(), files[name].encode()):
            h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()[:24]


def trim_diagnostics(text: str, workdir: str) -> str:
    """Keep errors and the source lines they point at; drop notes, paths and repetition."""
    text = text.replace(workdir + "/", "").replace(workdir, ".")
    lines = text.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if re.match(r"\s*g?make(\[\d+\])?: \*\*\*", line):  # make's recursion echoes the failure: noise
            continue
        if re.search(r"\berror\b|undefined reference|fatal|Error \d", line, re.I):
            keep.append(line.strip())
            # the quoted source line and caret that follow gcc's error line (nvcc's, "file.cu(12): error",
            # quotes the source line without a "|")
            nvcc_style = re.search(r"\(\d+\): (?:error|warning)", line) is not None
            for follow in lines[i + 1 : i + 3]:
                if follow.startswith(" ") and ("|" in follow or "^" in follow or nvcc_style):
                    keep.append(follow.rstrip())
            if line.startswith("CMake Error"):  # cmake explains on the indented lines that follow
                for follow in lines[i + 1 : i + 8]:
                    if follow.strip() and not follow.startswith(" "):
                        break
                    if follow.strip():
                        keep.append(follow.rstrip())
    if not keep:
        keep = [line for line in lines if line.strip()][-MAX_LOG_LINES:]
    deduped: list[str] = []
    for line in keep:
        if line not in deduped[-3:]:
            deduped.append(line)
    out = "\n".join(deduped[:MAX_LOG_LINES])
    return out[:MAX_LOG_CHARS]


def build_candidate(backend: Backend, files: dict[str, str], cache_dir: Path | None, *, timeout: float = 120.0,
                    sandbox: bool = True, hidden: list[str] | None = None,
                    slow_timeout: float | None = None) -> BuildResult:
    """Build the candidate's sources with ``backend``; reuse a cached result for identical sources.
    In the sandbox the compiler sees no home folder but the build folder and its toolchain, and none of
    ``hidden`` (the workspace's private paths; the cache folder always). ``timeout``: each command's limit;
    a plan that declares a floor (a flow of minutes: ``BuildPlan.min_timeout_s``) gets at least that floor,
    or exactly ``slow_timeout`` when it is given (``VerifyConfig.project_build_timeout_s``)."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    key = build_key(backend, files)
    root = cache_dir / "builds"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = _load(final)
        if cached is not None:
            return cached
        result = _build(backend, files, root, key, timeout, sandbox, hidden or [], slow_timeout)
    return result


def _load(final: Path) -> BuildResult | None:
    meta_path = final / "build.json"
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError:
        return None
    library = final / meta["library"] if meta.get("library") else None
    if meta["ok"] and (library is None or not library.exists()):
        return None
    if library is not None and meta.get("library_sha256") != _digest(library):
        return None  # damaged or replaced since it was built (or built by an older version): build again
    return BuildResult(
        ok=meta["ok"], key=meta["key"], library=library,
        signatures=[Signature.from_dict(s) for s in meta.get("signatures", [])],
        log=meta.get("log", ""), cached=True, seconds=meta.get("seconds", 0.0), command=meta.get("command", []),
        keep=[k for k in meta.get("keep") or [] if (final / k).is_dir()],
    )


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _launchers(backend: Backend, sources: dict[str, str]) -> list[Signature]:
    """The functions the runtime may call: the backend's reading of its sources (``Backend.launchers``: every
    ``extern "C"`` function by default; device backends drop device kernels or turn them into launch entries)."""
    return list(backend.launchers(sources))


def _build(backend: Backend, files: dict[str, str], root: Path, key: str, timeout: float, sandbox: bool,
           hidden: list[str], slow_timeout: float | None = None) -> BuildResult:
    workdir = Path(tempfile.mkdtemp(prefix=f"tmp-{key}-", dir=root))
    try:
        for name, text in files.items():   # a custom-op project's sources sit in op_host/ and op_kernel/
            (workdir / name).parent.mkdir(parents=True, exist_ok=True)
            (workdir / name).write_text(text)
        sources = sorted(n for n in files if n.endswith(backend.source_suffixes))
        meta: dict[str, Any] = {"key": key, "ok": False, "library": None, "signatures": [], "log": "", "seconds": 0.0}
        env = scrubbed_env(backend.worker_env(), home=str(workdir))
        try:
            sigs = _launchers(backend, {name: files[name] for name in sources})
            if any("#define" in files[name] for name in sources):   # a macro may generate launchers: read them
                expanded = _expanded(backend, sources, workdir, env, sandbox, [str(root.parent), *hidden], timeout)
                sigs = _launchers(backend, expanded) if expanded else sigs
        except DeclarationError as exc:
            unread = str(exc)
            expanded = _expanded(backend, sources, workdir, env, sandbox, [str(root.parent), *hidden], timeout)
            try:   # the types a macro fills in resolve once it is expanded (one launcher per dtype from one macro)
                sigs = _launchers(backend, expanded) if expanded else []
            except DeclarationError as again:
                unread, expanded = str(again), None
            if not expanded:
                meta["log"] = unread
                return _store(meta, workdir, root / key)
        if not sigs:
            meta["log"] = ('no extern "C" function found: the runtime calls kernels through extern "C" '
                           'launchers, e.g. extern "C" void my_kernel(const float* x, float* out, int64_t n)')
            return _store(meta, workdir, root / key)
        try:
            plan = backend.build_plan(sources, workdir)
        except BuildPlanError as exc:
            meta["log"] = str(exc)
            return _store(meta, workdir, root / key)
        for name, text in plan.files.items():
            (workdir / name).write_text(text)
        if plan.min_timeout_s:   # a flow that cannot finish sooner (a custom op: minutes): the user's limit for it
            timeout = slow_timeout if slow_timeout is not None else max(timeout, plan.min_timeout_s)
        env = {**env, **plan.env}
        seconds, log = 0.0, []
        for argv in plan.commands:
            argv = _sandboxed(argv, workdir, env, sandbox, [str(root.parent), *hidden], plan.readable)
            proc = run_process(argv, cwd=workdir, env=env, timeout=timeout)
            seconds += proc.seconds
            log.append(proc.output)
            meta["command"] = argv
            if proc.timed_out:
                meta["log"] = f"the build did not finish within {timeout:.0f} s"
                meta["seconds"] = seconds
                return BuildResult(False, key, log=meta["log"], seconds=seconds)  # not cached: may be load
            if proc.returncode != 0:
                meta["log"] = trim_diagnostics("\n".join(log), str(workdir))
                meta["seconds"] = seconds
                return _store(meta, workdir, root / key)
        if not (workdir / plan.library).exists():
            meta["log"] = f"the build succeeded but produced no {plan.library}"
            return _store(meta, workdir, root / key)
        problem, lasting = _link_problem(backend, sources, workdir, plan.library, env, sandbox,
                                         [str(root.parent), *hidden], root, timeout)
        if problem:
            meta["log"] = problem
            meta["seconds"] = seconds
            if not lasting:   # the baseline could not be built here (a timeout under load?): not cached
                return BuildResult(False, key, log=problem, seconds=seconds)
            return _store(meta, workdir, root / key)
        meta["keep"] = [k for k in plan.keep if (workdir / k).is_dir()]
        meta.update(ok=True, library=plan.library, signatures=[s.to_dict() for s in sigs], seconds=seconds,
                    log=trim_diagnostics("\n".join(log), str(workdir)) if any("warning" in x for x in log) else "")
        return _store(meta, workdir, root / key)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _expanded(backend: Backend, sources: list[str], workdir: Path, env: dict[str, str], sandbox: bool,
              hidden: list[str], timeout: float) -> dict[str, str] | None:
    """Each source as the preprocessor leaves it (``Backend.preprocess_argv``, run in the build's sandbox), keeping
    only the lines of the candidate's own files (a system header's ``extern "C"`` declarations are not its
    launchers): what a launcher generated by a macro is read from. None when the backend has no preprocessor or
    it fails (the compiler then says why)."""
    out: dict[str, str] = {}
    for name in sources:
        argv = backend.preprocess_argv(name)
        if argv is None:
            return None
        proc = run_process(_sandboxed(argv, workdir, env, sandbox, hidden), cwd=workdir, env=env, timeout=timeout,
                           output_limit=16_000_000, stderr=False)
        if not proc.ok:
            return None
        out[name] = own_lines(proc.output, workdir)
    return out


_MARKER = re.compile(r'^#\s*\d+\s+"([^"]*)"')


def own_lines(preprocessed: str, workdir: Path) -> str:
    """The lines of ``preprocessed`` that come from the candidate's own files (a relative name, or one inside
    ``workdir``), by the preprocessor's line markers; blank lines in place of the others, so nothing joins."""
    own, keep = True, []
    root = str(workdir)
    for line in preprocessed.splitlines():
        m = _MARKER.match(line)
        if m:
            name = m.group(1)
            own = not name.startswith("<") and (not name.startswith("/") or name.startswith(root))
            keep.append("")
            continue
        keep.append(line if own else "")
    return "\n".join(keep)


def disassemble(backend: Backend, built: BuildResult, *, sandbox: bool = True, timeout: float = 60.0) -> str:
    """The built library's code as ``objdump -d`` prints it (AT&T syntax, no raw bytes, names demangled), read in
    the build's sandbox (its bytes are the candidate's); "" when there is no library or objdump fails."""
    if built.library is None or not built.library.exists():
        return ""
    folder = built.library.parent
    env = scrubbed_env(backend.worker_env(), home=str(folder))
    argv = _sandboxed(["objdump", "-d", "--no-show-raw-insn", "-C", built.library.name], folder, env, sandbox,
                      [str(folder.parent.parent)])
    proc = run_process(argv, cwd=folder, env=env, timeout=timeout, output_limit=32_000_000, stderr=False)
    return proc.output if proc.ok else ""


def _sandboxed(argv: list[str], workdir: Path, env: dict[str, str], sandbox: bool, hidden: list[str],
               readable: list[str] | None = None) -> list[str]:
    """``argv`` as the build runs it: under bubblewrap with the sandbox's allow-list view (the toolchain
    of ``argv[0]`` and the plan's ``readable`` added) and ``workdir`` writable; without bubblewrap, in a Landlock
    domain with the same allow-list where the kernel has Landlock; else as it is."""
    if not sandbox:
        return argv
    toolchain = [*_toolchain_paths(argv[0], env), *(readable or [])]
    if bwrap_status()[0]:
        return bwrap_argv([str(workdir)], hidden, [], str(workdir), env=env, readable=toolchain) + argv
    if landlock_abi()[0]:
        config = {"folder": str(workdir), "readable": [*sandbox_view(env, toolchain), "/proc"]}
        return [sys.executable, "-m", "verifier.sandbox.forkserver", "--confine", json.dumps(config), *argv]
    return argv


def _link_problem(backend: Backend, sources: list[str], workdir: Path, library: str, env: dict[str, str],
                  sandbox: bool, hidden: list[str], root: Path, timeout: float) -> tuple[str | None, bool]:
    """Why the built library may not be loaded (see ``verifier.toolchain.linkage``), or None; and whether that answer
    lasts (False: the load-time baseline could not be built here, which says nothing of these sources). The library
    is read with binutils inside the build's sandbox (its bytes are the candidate's)."""
    outputs = []
    for command in ([*READELF, library], ["nm", "-D", "--undefined-only", library]):
        argv = _sandboxed(command, workdir, env, sandbox, hidden)
        proc = run_process(argv, cwd=workdir, env=env, timeout=timeout, output_limit=16_000_000)
        if not proc.ok:
            return (f"the built library could not be inspected ({command[0]}, from binutils): "
                    f"{proc.output.strip()[-300:] or 'no output'}"), True
        outputs.append(proc.output)
    search = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    # folders beside the library it names itself ($ORIGIN RUNPATH: a custom op's private vendor), first
    search = [*parse_origin_runpath(outputs[0], str((workdir / library).parent)), *search]
    policy = backend.link_policy()
    problem = check_links(parse_needed(outputs[0]), parse_undefined(outputs[1]), policy, search, root.parent)
    if problem or policy.load_time_unchecked:
        return problem, True
    baseline = load_time_baseline(backend, sources, root, sandbox, hidden, timeout)
    if isinstance(baseline, str):
        return (f"the link check could not build the toolchain's own load-time code to compare with ({baseline}); "
                "verify again"), False
    return load_time_problem(parse_load_time(outputs[0]), baseline), True


LOAD_TIME_FORMAT = "2"   # what ``parse_load_time`` records: 2, the start files' hooks left undefined (red team irt)


def load_time_baseline(backend: Backend, sources: list[str], root: Path, sandbox: bool, hidden: list[str],
                       timeout: float) -> dict[str, int] | str:
    """What a library built by ``backend``'s plan from ``sources`` (their names), each empty, runs at load:
    the toolchain's own load-time code (crtbegin's ``frame_dummy``, nvcc's registration of each translation unit, a
    statically linked runtime's), ``verifier.toolchain.linkage.parse_load_time``. Built once per build key and file
    names, in the build's sandbox, and kept in ``root/load-time``; a reason (str) where it cannot be built."""
    names = sorted(sources)
    key = hashlib.sha256("\0".join([str(BUILD_FORMAT), LOAD_TIME_FORMAT, backend.build_key(), *names]).encode()
                         ).hexdigest()[:24]
    folder = root / "load-time"
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / f"{key}.json"
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = json.loads(store.read_text())
            if isinstance(found, dict):
                return {str(k): int(v) for k, v in found.items()}
        except (OSError, ValueError, TypeError):
            pass
        workdir = Path(tempfile.mkdtemp(prefix=f"tmp-load-time-{key}-", dir=root))
        try:
            for name in names:
                (workdir / name).parent.mkdir(parents=True, exist_ok=True)
                (workdir / name).write_text("")
            try:
                plan = backend.build_plan(names, workdir)
            except BuildPlanError as exc:
                return f"its plan: {exc}"
            for name, text in plan.files.items():
                (workdir / name).write_text(text)
            env = scrubbed_env(backend.worker_env(), home=str(workdir))
            for argv in [*plan.commands, [*READELF, plan.library]]:
                proc = run_process(_sandboxed(argv, workdir, env, sandbox, hidden), cwd=workdir, env=env,
                                   timeout=timeout, output_limit=16_000_000)
                if proc.timed_out or not proc.ok:
                    return f"{argv[0]}: " + (f"did not finish within {timeout:.0f} s" if proc.timed_out else
                                             proc.output.strip()[-300:] or "failed")
            found = parse_load_time(proc.output)
            tmp = store.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(found))
            os.replace(tmp, store)
            return found
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _toolchain_paths(program: str, env: dict[str, str]) -> list[str]:
    """The folder of the program a build command runs (``nvcc``, ``g++``, ``cmake``), found as the
    sandbox will find it; ``bwrap_argv`` binds it back (with its prefix) when it lies in a home."""
    exe = program if os.path.isabs(program) else shutil.which(program, path=env.get("PATH"))
    if not exe:
        return []
    return list(dict.fromkeys([os.path.dirname(exe), os.path.dirname(os.path.realpath(exe))]))


def _store(meta: dict[str, Any], workdir: Path, final: Path) -> BuildResult:
    """Move the finished build into place atomically (rename), then load it back."""
    if meta.get("library") and (workdir / meta["library"]).exists():
        meta["library_sha256"] = _digest(workdir / meta["library"])
    (workdir / "build.json").write_text(json.dumps(meta))
    staged = Path(str(final) + ".staged")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    for name in ("build.json", meta.get("library") or ""):
        if name and (workdir / name).exists():
            shutil.copy2(workdir / name, staged / name)
    for folder in meta.get("keep") or []:   # beside the library, where its RUNPATH ($ORIGIN/...) finds them
        shutil.copytree(workdir / folder, staged / folder, symlinks=True)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staged, final)
    result = _load(final)
    assert result is not None
    result.cached = False
    return result
