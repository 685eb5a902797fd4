"""The build gate's link check: what a candidate library may bind to when it is loaded.

The worker loads a candidate library into a process that already holds the Python interpreter and
PyTorch, and the dynamic loader resolves every undefined symbol of the library against that whole
process (the interpreter's symbols are global, whatever ``dlopen`` mode loads the library). A kernel
that merely *declares* ``PyRun_SimpleString`` can therefore run Python inside the worker: switch off
the op trace, compute with PyTorch, or replace the clock the timing loop reads.

So a built library may need only symbols that a library on an allow-list defines: the C and C++
runtimes, libm, libgcc_s and OpenMP (libgomp), plus the backend's own runtime (its sonames, or any
library inside its toolkit). Every undefined dynamic symbol, weak ones included (a weak reference
links without complaint and still binds at load time), must be defined by one of the libraries the
library itself needs, each of them on the allow-list; anything else fails the build naming the symbol.
Where the backend links no runtime statically (the CPU backend), the loader's own lookup functions
(``dlsym``, ``dlopen``, ``dl_iterate_phdr``, ``getauxval``...) are refused too: they find the same
symbols by name at run time.

And a built library may run no code of its own when it is loaded (issue #48): a C++ dynamic initializer
(``static int booted = boot();``, a namespace-scope object with a constructor) is code in ``.init_array`` with no
attribute, section or "constructor" word for the source rules to see, and at ``dlopen`` it ran before the candidate
phase and reached Python. So whatever the source spells, the library's load-time code (``parse_load_time``: what
``DT_INIT`` and ``DT_INIT_ARRAY`` run, the ``.init``/``.ctors`` sections, the ``.fini`` side too, IFUNC resolvers,
which the loader or the first lookup of a symbol calls) must be no more than the toolchain's own: that of a library
built the same way from the same files, each empty (``load_time_problem``; the baseline is built by the build gate,
``verifier.build``). A backend whose toolkit registers each kernel at load says so instead
(``LinkPolicy.load_time_unchecked``).

What this does not stop: native code can still find the interpreter by walking memory (return
addresses, the loader's link map read through ``/proc/self/maps``, libc's in-memory symbol table) once its code
runs, in a call; docs/verifier.md's threat model says what is decided outside the candidate's process for that
reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from verifier.processes import run_process

# The system runtimes every backend may link against (by soname).
SYSTEM_LIBRARIES = re.compile(
    r"^(?:libc|libm|libmvec|libgomp|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libatomic|ld-linux[\w.-]*|ld64)"
    r"\.so(?:\.[\w.]+)?$"
)
SYSTEM_NAMES = "libc, libm, libstdc++, libgcc_s and libgomp"
# Weak references the C runtime's start files leave unresolved in every library.
BENIGN_WEAK = frozenset({"__gmon_start__", "_ITM_registerTMCloneTable", "_ITM_deregisterTMCloneTable",
                         "_Jv_RegisterClasses", "__cxa_finalize"})
# The loader's lookups by name: another way to the interpreter's symbols.
LOADER_LOOKUPS = frozenset({"dlopen", "dlmopen", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
                            "_dl_find_object", "getauxval", "__getauxval", "__libc_dlopen_mode", "__libc_dlsym",
                            "__libc_dlvsym", "_r_debug", "_dl_debug_state", "_dl_argv", "__libc_stack_end"})


@dataclass(frozen=True)
class LinkPolicy:
    """What a backend's libraries may link against beyond the system runtimes."""

    runtime_sonames: tuple[str, ...] = ()     # regexes on sonames (``libcudart\\.so.*``)
    runtime_dirs: tuple[str, ...] = ()        # any library found inside these folders (a toolkit)
    loader_lookups: bool = False              # True where a statically linked runtime itself uses dlopen/dlsym
    runtime_names: str = ""                   # in words, for the message
    load_time_unchecked: str = ""             # why a library's load-time code is not compared with the toolchain's
    #                                           own on this backend ("": it is, ``load_time_problem``)


def link_check_status() -> tuple[bool, str]:
    """Whether the build's link check can run here (binutils' nm and readelf)."""
    missing = [tool for tool in ("nm", "readelf") if shutil.which(tool) is None]
    if missing:
        return False, (f"{' and '.join(missing)} not found: every build fails its link check; install binutils "
                       "(Debian/Ubuntu: apt install binutils)")
    return True, f"link check: candidate libraries bind only to {SYSTEM_NAMES} (and the backend's runtime)"


def parse_undefined(nm_output: str) -> list[tuple[str, bool]]:
    """(name, weak) for each line of ``nm -D --undefined-only``; versions (``@GLIBC_2.14``) dropped."""
    out = []
    for line in nm_output.splitlines():
        m = re.match(r"^\s*([UwvV])\s+(\S+)\s*$", line)
        if m:
            out.append((m.group(2).split("@", 1)[0], m.group(1) in "wv"))
    return out


def parse_defined(nm_output: str) -> set[str]:
    """Names from ``nm -D --defined-only`` (every kind but undefined)."""
    names = set()
    for line in nm_output.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] not in ("U", "w", "v"):
            names.add(parts[2].split("@", 1)[0])
    return names


def parse_needed(readelf_output: str) -> list[str]:
    """The sonames of ``readelf -d``'s NEEDED entries."""
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf_output)


def parse_origin_runpath(readelf_output: str, origin: str) -> list[str]:
    """The RUNPATH/RPATH folders of ``readelf -d`` that are relative to the library (``$ORIGIN/...``), with
    ``origin`` (the library's folder) in its place: where the loader will look for what it NEEDS."""
    found = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]+)\]", readelf_output)
    return [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
            for entry in found for p in entry.split(":") if p.startswith(("$ORIGIN", "${ORIGIN}"))]


@functools.lru_cache(maxsize=1)
def _ld_cache() -> dict[str, str]:
    """soname -> path, from the loader's cache (``ldconfig -p``), this architecture's entries first."""
    exe = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if not exe:
        return {}
    ran = run_process([exe, "-p"], timeout=20, background=False, stderr=False, output_limit=16_000_000)
    if ran.timed_out or not ran.started:
        return {}
    text = ran.output
    tag = {"x86_64": "x86-64", "aarch64": "AArch64"}.get(os.uname().machine)
    found: dict[str, str] = {}
    for m in re.finditer(r"^\s*(\S+) \(([^)]*)\)[^=]*=> (\S+)$", text, re.M):
        name, flags, path = m.groups()
        if name not in found and (tag is None or tag in flags):
            found[name] = path
    return found


def resolve(soname: str, search: list[str]) -> str | None:
    """Where the loader would find ``soname``: ``search`` folders (LD_LIBRARY_PATH) first, then its cache."""
    path: str | None
    for folder in search:
        path = os.path.join(folder, soname)
        if os.path.isfile(path):
            return os.path.realpath(path)
    path = _ld_cache().get(soname)
    if path is None:
        for folder in ("/lib64", "/usr/lib64", "/lib", "/usr/lib", f"/usr/lib/{os.uname().machine}-linux-gnu",
                       f"/lib/{os.uname().machine}-linux-gnu"):
            cand = os.path.join(folder, soname)
            if os.path.isfile(cand):
                path = cand
                break
    return os.path.realpath(path) if path else None


def defined_symbols(path: str, cache_dir: Path | None) -> set[str]:
    """The dynamic symbols ``path`` (a trusted system library) defines; kept on disk by identity."""
    st = os.stat(path)
    key = hashlib.sha256(f"{path}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:24]
    return set(_defined_symbols(path, key, str(cache_dir) if cache_dir else ""))


@functools.lru_cache(maxsize=64)
def _defined_symbols(path: str, key: str, cache_dir: str) -> frozenset[str]:
    store = Path(cache_dir) / "symbols" / f"{key}.json" if cache_dir else None
    if store is not None:
        try:
            return frozenset(json.loads(store.read_text()))
        except (OSError, ValueError):
            pass
    ran = run_process(["nm", "-D", "--defined-only", path], timeout=60, background=False, stderr=False,
                      output_limit=64_000_000)
    if ran.timed_out or not ran.started:
        return frozenset()
    text = ran.output
    names = frozenset(parse_defined(text))
    if store is not None and names:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sorted(names)))
        os.replace(tmp, store)
    return names


def check_links(needed: list[str], undefined: list[tuple[str, bool]], policy: LinkPolicy, search: list[str],
                cache_dir: Path | None) -> str | None:
    """None when every undefined symbol is defined by an allowed library the candidate needs, else a
    message naming what is not."""
    allowed_words = SYSTEM_NAMES + (f", and {policy.runtime_names}" if policy.runtime_names else "")
    runtime_dirs = [os.path.realpath(d) for d in policy.runtime_dirs if d]
    # A toolkit's own libraries are found where its environment script would put them on the path.
    search = [*search, *(os.path.join(d, sub) for d in runtime_dirs for sub in ("lib64", "lib", "runtime/lib64"))]
    available: set[str] = set()
    for soname in needed:
        path = resolve(soname, search)
        system = SYSTEM_LIBRARIES.match(soname) is not None
        runtime = any(re.fullmatch(p, soname) for p in policy.runtime_sonames) or (
            path is not None and any(path.startswith(d.rstrip("/") + "/") for d in runtime_dirs))
        if not (system or runtime):
            return (f"the library needs {soname}, which kernels may not link against: only {allowed_words}")
        if path is not None:
            available |= defined_symbols(path, cache_dir)
    if not policy.loader_lookups:
        lookups = sorted({name for name, _ in undefined if name in LOADER_LOOKUPS or name.startswith("_dl_")})
        if lookups:
            return (f"the library calls the dynamic loader ({', '.join(lookups)}): kernels may not look symbols or "
                    "libraries up at run time")
    missing = sorted({name for name, weak in undefined
                      if name not in available and not (weak and name in BENIGN_WEAK)})
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        return (f"the library needs {shown}, which none of the libraries kernels may use ({allowed_words}) "
                "defines: a kernel may not call into Python, PyTorch or anything else of the process that loads it")
    return None


# ----------------------------------------------------------------------------- load-time code

# Sections whose contents run when a library is loaded or unloaded: ``_init``'s code (``DT_INIT`` points at the start
# of ``.init``; code put in that section runs as part of it), the arrays of functions the loader calls
# (``.ctors``/``.dtors`` are merged into the arrays by the linker), and their ends.
LOAD_TIME_SECTIONS = (".init", ".init_array", ".preinit_array", ".ctors", ".fini", ".fini_array", ".dtors")
_ARRAY_TAGS = {"INIT_ARRAYSZ": ".init_array", "PREINIT_ARRAYSZ": ".preinit_array", "FINI_ARRAYSZ": ".fini_array"}


def parse_load_time(readelf_output: str) -> dict[str, int]:
    """What of a library runs when it is loaded, unloaded or first looked up, from ``readelf -W -d -S -r
    --dyn-syms``: the bytes of each of ``LOAD_TIME_SECTIONS``, the dynamic section's array sizes (``INIT_ARRAYSZ``...:
    what the loader reads, whatever the sections are called), ``DT_INIT``/``DT_FINI`` pointing anywhere but the start
    of ``.init``/``.fini`` (``INIT_ELSEWHERE``), and the IFUNC resolvers (``IRELATIVE`` relocations, ``IFUNC``
    symbols: the loader or the first lookup of the symbol calls them)."""
    found: dict[str, int] = {}
    starts: dict[str, int] = {}
    # a section header line: name, type, address, offset, size
    section = r"^\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s"
    for m in re.finditer(section, readelf_output, re.M):
        name, address, size = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
        if name in LOAD_TIME_SECTIONS:
            found[name] = found.get(name, 0) + size
            starts.setdefault(name, address)
    for m in re.finditer(r"^\s*0x[0-9a-f]+\s+\((\w+)\)\s+(0x[0-9a-f]+|\d+)", readelf_output, re.M):
        tag, value = m.group(1), int(m.group(2), 0)
        if tag in _ARRAY_TAGS:
            found[tag] = value
        elif tag in ("INIT", "FINI") and value != starts.get(f".{tag.lower()}"):
            found["INIT_ELSEWHERE"] = found.get("INIT_ELSEWHERE", 0) + 1
    found["IRELATIVE"] = len(re.findall(r"_IRELATIV", readelf_output))
    found["IFUNC"] = len(re.findall(r"\sIFUNC\s", readelf_output))
    # the start files' hooks the library leaves to others (``UND`` in --dyn-syms): one it defines is called at load
    for m in re.finditer(r"^\s*\d+:\s+[0-9a-f]+\s+\d+\s+\w+\s+WEAK\s+\w+\s+UND\s+([\w.]+)", readelf_output, re.M):
        if m.group(1).split("@")[0] in BENIGN_WEAK:
            found[HOOK_LEFT + m.group(1).split("@")[0]] = 1
    return found


HOOK_LEFT = "undefined "
"""``parse_load_time``'s key for a start-file hook the library leaves undefined (``undefined __gmon_start__``): the C
runtime's start files call ``__gmon_start__`` from ``_init`` and ``_ITM_registerTMCloneTable`` from ``frame_dummy``
(``_ITM_deregisterTMCloneTable`` and ``__cxa_finalize`` at unload) by weak reference, so a library that defines one,
even hidden, has its own function run by the loader with no ``.init_array`` entry (red team irt)."""


_LOAD_TIME_WORDS = {
    ".init_array": "functions the loader calls (.init_array)",
    "INIT_ARRAYSZ": "functions the loader calls (DT_INIT_ARRAY)",
    ".ctors": "constructors (.ctors)", ".preinit_array": "functions run before the program (.preinit_array)",
    "PREINIT_ARRAYSZ": "functions run before the program (DT_PREINIT_ARRAY)", ".init": "bytes of _init's code (.init)",
    ".fini_array": "functions run at unload (.fini_array)", "FINI_ARRAYSZ": "functions run at unload (DT_FINI_ARRAY)",
    ".dtors": "destructors (.dtors)", ".fini": "bytes of _fini's code (.fini)",
    "INIT_ELSEWHERE": "load or unload entries pointing outside _init and _fini", "IRELATIVE": "IFUNC relocations",
    "IFUNC": "IFUNC symbols (resolvers the loader calls)"}


def load_time_problem(library: dict[str, int], baseline: dict[str, int]) -> str | None:
    """None when the library runs no more at load (or unload) than ``baseline``, the toolchain's own (a library built
    the same way from the same files, each empty; both from ``parse_load_time``), else a message naming what more."""
    more = [f"its own {key[len(HOOK_LEFT):]}, which the C runtime's start files call when a library is loaded or "
            "unloaded, where the toolchain's own leaves it to the system"
            for key in sorted(baseline) if key.startswith(HOOK_LEFT) and not library.get(key)]
    said = {_ARRAY_TAGS[k] for k in _ARRAY_TAGS if library.get(k, 0) > baseline.get(k, 0)}   # one line, not two
    for key, value in library.items():
        own = baseline.get(key, 0)
        if value > own and key not in said and not key.startswith(HOOK_LEFT):
            per = 8 if key.endswith(("array", "ARRAYSZ")) or key in (".ctors", ".dtors") else 1   # 8-byte entries
            more.append(f"{value // per} {_LOAD_TIME_WORDS.get(key, key)} where the toolchain's own have {own // per}")
    if not more:
        return None
    return ("the library runs code of its own when it is loaded: " + "; ".join(more[:3]) + " (a library built the "
            "same way from empty files). Kernels may not run code at load time, however it is spelled: no "
            "namespace-scope object with a constructor or destructor, no `static T x = f();` outside a function, no "
            "constructor attribute or section, no ifunc, no function named as a start file's hook. Keep such state as "
            "a `static` local of the launcher that uses it (made at its first call) or a plain array")
