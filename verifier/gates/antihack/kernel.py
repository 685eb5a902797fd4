"""The anti-hack rules on kernel sources, read as text the way the compiler reads it (the shared lexer,
``verifier.toolchain.csource``: line continuations joined, comments and literals blanked); the rules are listed in
the package's docstring, ``verifier.gates.antihack``. A device backend adds its own (``devices``)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from verifier.backends.base import Backend, KernelRules
from verifier.gates.antihack.devices import device_problem, kernel_rules
from verifier.toolchain.csource import scan, splice

# (regex on the included header, why, the headers in words: the prompts' rule is made from this column)
_BANNED_INCLUDES = [
    (r"torch/|ATen/|c10/|Python\.h|pybind11", "kernels may not call into PyTorch or Python",
     "torch, ATen, c10, Python.h, pybind11"),
    (r"cblas|mkl|openblas|Eigen/|dnnl|oneapi/|cublas|cudnn|cutlass|lapack",
     "kernels may not call BLAS/DNN libraries; write the loops",
     "BLAS and DNN libraries (cblas, mkl, openblas, Eigen, dnnl, oneapi, cublas, cudnn, cutlass, lapack)"),
    (r"sys/socket|netinet/|arpa/|netdb\.h|curl", "no networking in kernels", "networking"),
    (r"fstream|filesystem|dirent\.h|sys/stat\.h|fcntl\.h", "no file access in kernels",
     "file access (fstream, filesystem, dirent.h, sys/stat.h, fcntl.h)"),
    (r"unistd\.h|sys/syscall\.h|dlfcn\.h|spawn\.h|sys/ptrace\.h|sys/mman\.h|sys/wait\.h|csignal|signal\.h",
     "no system calls, processes or signals in kernels",
     "system calls, processes and signals (unistd.h, sys/mman.h, dlfcn.h, signal.h, ...)"),
    (r"(?:^|/)(?:chrono|ctime|time\.h)$", "no timers in kernels", "timers (chrono, ctime, time.h)"),
    (r"^(?:thread|future|pthread\.h|threads\.h)$", "no threads of your own in kernels: parallelise with OpenMP "
     "(#pragma omp parallel for)", "threads (thread, future, pthread.h, threads.h)"),
]
_BANNED_WORDS = {
    "process": ["fork", "vfork", "_Fork", "__fork", "__libc_fork", "clone", "clone3", "__clone", "execl", "execlp",
                "execle", "execv", "execvp", "execvpe", "execve", "execveat", "fexecve", "system", "__libc_system",
                "popen", "posix_spawn", "posix_spawnp", "pthread_atfork", "atexit", "at_quick_exit"],
    "thread": ["pthread_create", "pthread_kill", "pthread_detach", "thrd_create", "sched_setaffinity",
               "pthread_setaffinity_np"],
    "library loading": ["dlopen", "dlmopen", "dlsym", "dlvsym", "dladdr", "dlinfo", "dl_iterate_phdr",
                        "__libc_dlopen_mode", "__libc_dlsym"],
    "environment": ["getenv", "secure_getenv", "environ", "__environ", "setenv", "putenv", "unsetenv", "clearenv"],
    "network": ["socket", "connect", "sendto", "recvfrom"],
    "file": ["open", "open64", "fopen", "fopen64", "freopen", "freopen64", "fdopen", "openat", "openat64", "opendir",
             "tmpfile", "mkstemp", "ifstream", "ofstream", "fstream", "creat", "creat64", "unlink", "remove"],
    "system call": ["syscall", "ptrace", "mmap", "munmap", "mremap", "mprotect", "pkey_mprotect", "kill", "prctl",
                    "ioctl", "setrlimit", "prlimit", "setpriority"],
    # A handler or a timer would interrupt the harness's own code in the job's process (issue #24).
    "signal or timer": ["signal", "sigaction", "__sigaction", "__libc_sigaction", "ssignal", "gsignal", "sigset",
                        "bsd_signal", "sysv_signal", "__sysv_signal", "sigvec", "sigqueue", "pthread_sigqueue",
                        "raise", "pthread_sigmask", "sigprocmask", "sigblock", "sigsetmask", "sigaltstack",
                        "signalfd", "tgkill", "tkill", "setitimer", "getitimer", "alarm", "ualarm", "timer_create",
                        "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
                        "timerfd_settime", "timerfd_gettime"],
    "timer": ["sleep", "usleep", "nanosleep", "sleep_for", "sleep_until", "clock", "clock_gettime", "clock_getres",
              "gettimeofday", "timespec_get", "getrusage", "times", "ftime", "time", "__rdtsc", "_rdtsc", "rdtsc",
              "__rdtscp", "rdtscp", "__builtin_ia32_rdtsc", "__builtin_ia32_rdtscp", "__builtin_ia32_rdpmc",
              "__rdpmc", "__builtin_readcyclecounter", "__builtin_readsteadycounter", "omp_get_wtime",
              "omp_get_wtick", "chrono", "steady_clock", "high_resolution_clock", "system_clock"],
    "inline assembly": ["asm", "__asm__", "__asm"],
    "thread count": ["omp_set_num_threads", "omp_set_dynamic", "omp_set_max_active_levels", "omp_set_nested",
                     "num_threads", "omp_set_schedule", "kmp_set_defaults", "mkl_set_num_threads"],
}
# Every banned word is banned wherever it appears: a declaration, `(open)(...)`, `&open`, `f = open;`,
# `use(open)` or a macro's body names the function as well as a call does, and a variable of that name
# cannot be told from those without C++ name lookup (its message says to rename it). The one exception
# is an OpenMP clause, which means something only in a directive: banned there and where called.
_COMMON_WORDS = {"socket", "connect", "open", "remove", "signal", "kill", "sleep", "clock", "time", "times",
                 "clone", "raise", "alarm"}
_CLAUSE_WORDS = {"num_threads"}
_WORD_WHY = "kernels only compute: take inputs and outputs as pointers and sizes from model.py"
_THREAD_COUNT_WHY = ("the verifier gives the kernel the same number of threads as the reference (OMP_NUM_THREADS); "
                     "use #pragma omp parallel for without num_threads and leave the thread count alone")
_THREAD_TYPES = re.compile(r"\bstd\s*::\s*(thread|jthread|async)\b")
# Attributes that run code when the library loads or alias symbols.
_LOAD_TIME_ATTRS = {"constructor", "destructor", "init_priority", "section", "ifunc", "alias", "weakref", "symver"}
_LOAD_TIME_WORDS = re.compile(r"(?<!\w)_{0,2}(constructor|destructor|init_priority|ifunc|weakref|symver)_{0,2}(?!\w)")
_LOAD_TIME_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")
_LOAD_TIME_WHY = ("is not allowed: no code that runs when the library loads and no symbol aliasing (constructor, "
                  "destructor, init_priority, section, ifunc, alias, weakref); do the work inside your extern \"C\" "
                  "launcher")
_SYSTEM_PATHS = ("/proc", "/sys/", "/dev/")
_INCLUDE = re.compile(r"\s*#\s*include\s*(<[^<>\"'\n]+>|\"[^<>\"'\n]+\")\s*")
_HAS_INCLUDE = re.compile(r"__has_include\s*\(\s*(?:<[^<>\"'\n]+>|\"[^<>\"'\n]+\")\s*\)")


def _lexical_problem(name: str, source: str) -> str | None:
    """Spellings that make the text rules and the compiler read the source differently (checked on the
    raw text: they act before comments and literals are recognised)."""
    checks = [
        (r"\?\?[=/'()!<>\-]", "trigraphs (??x) are not allowed in kernels"),
        (r"(?<![\w'])\d[\w.]*'\w", "digit separators (1'000) are not allowed in kernels; write numbers plainly"),
    ]
    for pattern, why in checks:
        m = re.search(pattern, source)
        if m:
            return f"{name} line {source.count(chr(10), 0, m.start()) + 1}: {why}"
    return None


def _attribute_bodies(code: str) -> Iterator[tuple[int, str]]:
    """(position, text) of every ``__attribute__((...))`` and ``[[...]]`` attribute list."""
    for m in re.finditer(r"__attribute__\s*\(|\[\s*\[", code):
        if m.group(0).startswith("["):
            end = code.find("]]", m.end())
            end = len(code) if end < 0 else end
        else:
            depth, end = 0, len(code)
            for k in range(m.end() - 1, len(code)):
                depth += code[k] == "("
                depth -= code[k] == ")"
                if depth == 0:
                    end = k
                    break
        yield m.start(), code[m.end():end]




def _directive_problem(name: str, lineno: int, line: str, local_files: set[str],
                        rules: KernelRules | None) -> str | None:
    m = re.match(r"\s*#\s*(\w*)", line)
    if not m:
        return None
    directive = m.group(1)
    if directive in ("include_next", "import"):
        return f"{name} line {lineno}: #{directive} is not allowed in kernels; use #include <header>"
    if directive == "include":
        inc = _INCLUDE.fullmatch(line)
        if not inc:
            return (f"{name} line {lineno}: #include must name its header literally, as <header> or "
                    "\"your_file.h\" (no macros or computed names)")
        quoted, target = inc.group(1)[0] == '"', inc.group(1)[1:-1].strip()
        if rules is not None:
            for pattern, why in rules.includes:
                if re.search(pattern, target):
                    return f"{name} line {lineno}: #include <{target}>: {why}"
            if target in rules.sdk_headers or any(re.search(p, target) for p in rules.sdk_patterns):
                return None
        if "/" in name and quoted:   # a project file: its own folder first, then the project's top
            own = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if own in local_files or target in local_files:
                return None
        if quoted and target not in local_files:
            return (f"{name} line {lineno}: #include \"{target}\": only the candidate's own files may be included "
                    "with quotes")
        if target.startswith("/") or ".." in target:
            return f"{name} line {lineno}: #include <{target}>: absolute or parent paths are not allowed"
        for pattern, why, _named in _BANNED_INCLUDES:
            if re.search(pattern, target):
                return f"{name} line {lineno}: #include <{target}>: {why}"
        return None
    if directive in ("embed", "line") or re.match(r"\s*#\s*pragma\s+(?:GCC\s+push_options|weak\b|redefine_extname\b)",
                                                  line):
        text = " ".join(line.split())
        return (f"{name} line {lineno}: {text} is not allowed in kernels (this preprocessor directive changes how "
                "the source is read; #pragma omp, once and unroll are fine)")
    return None




def _mention(code: str, word: str) -> int | None:
    """Where ``word`` is named in ``code`` (not as a member, ``x.word``), or None. A clause word counts
    only on a directive line or before ``(``."""
    for m in re.finditer(rf"(?<![\w.]){re.escape(word)}(?!\w)", code):
        if word not in _CLAUSE_WORDS:
            return m.start()
        line = code[code.rfind("\n", 0, m.start()) + 1:m.start()]
        if line.lstrip().startswith("#") or re.match(r"\s*\(", code[m.end():]):
            return m.start()
    return None


def check_kernel_source(name: str, source: str, local_files: set[str], backend: str | Backend = "cpu", *,
                        project: bool = False) -> str | None:
    """None when a kernel source follows the rules (the common ones plus ``backend``'s), else the first
    violation. In a custom-op ``project`` each place has the backend's rules for it (``project_rules``)."""
    rules = kernel_rules(backend, (name.split("/", 1)[0] if "/" in name else "") if project else None)
    problem = _lexical_problem(name, source)
    if problem:
        return problem
    spliced, line_of = splice(source)
    scanned = scan(spliced)
    code, no_comments, literals, open_at = scanned.code, scanned.no_comments, scanned.literals, scanned.open_at
    m = re.search(r"(?<!\w)(?:u8|u|U|L)?R\"", code)   # before the literal check: a raw string can look unclosed
    if m:
        return (f"{name} line {line_of[m.start()]}: raw string literals (R\"...\") are not allowed in kernels; "
                "use plain literals")
    if open_at is not None:
        return (f"{name} line {line_of[open_at]}: a string or character literal does not close on its line: close "
                "every literal on the line it opens (no stray apostrophes, e.g. in #if 0 blocks or #warning text)")
    for pos, text in literals:
        if any(p in text for p in _SYSTEM_PATHS):
            return (f"{name} line {line_of[pos]}: system paths (/proc, /sys, /dev) are not allowed in kernels; "
                    f"{_WORD_WHY}")
        if any(section in text for section in _LOAD_TIME_SECTIONS):
            return f"{name} line {line_of[pos]}: section {text} {_LOAD_TIME_WHY}"
    offset = 0
    for line in no_comments.split("\n"):
        problem = _directive_problem(name, line_of[offset], line, local_files, rules)
        if problem:
            return problem
        offset += len(line) + 1
    for m in re.finditer(r"__has_include(?:_next)?", no_comments):
        if not _HAS_INCLUDE.match(no_comments, m.start()):
            return f"{name} line {line_of[m.start()]}: __has_include must name a header literally, as <header>"
    # GNU's comma elision (`, ##__VA_ARGS__`, variadic logging macros) pastes no identifier together
    if "##" in re.sub(r",\s*##\s*__VA_ARGS__", ",", code):
        return f"{name}: token pasting (##) is not allowed"
    m = re.search(r"%:", code)
    if m:
        return f"{name} line {line_of[m.start()]}: the %: digraph is not allowed in kernels; write # for directives"
    m = re.search(r"(?<!\w)_Pragma(?!\w)", code)
    if m:
        return (f"{name} line {line_of[m.start()]}: _Pragma is not allowed in kernels; write directives as plain "
                "#pragma lines (#pragma omp ... is fine)")
    for pos, body in _attribute_bodies(code):
        for word in re.findall(r"\w+", body):
            if word.strip("_") in _LOAD_TIME_ATTRS:
                return f"{name} line {line_of[pos]}: attribute {word.strip('_')} {_LOAD_TIME_WHY}"
    m = _LOAD_TIME_WORDS.search(code)
    if m:
        return f"{name} line {line_of[m.start()]}: {m.group(1)} {_LOAD_TIME_WHY}"
    m = _THREAD_TYPES.search(code)
    if m:
        return (f"{name} line {line_of[m.start()]}: std::{m.group(1)} is not allowed in kernels (thread): "
                "parallelise with OpenMP (#pragma omp parallel for)")
    for what, words in _BANNED_WORDS.items():
        for word in words:
            at = _mention(code, word)
            if at is not None:
                why = _THREAD_COUNT_WHY if what == "thread count" else _WORD_WHY
                rename = "; a variable of yours by this name: rename it" if word in _COMMON_WORDS else ""
                return f"{name} line {line_of[at]}: {word} is not allowed in kernels ({what}{rename}): {why}"
    if rules is not None:
        return device_problem(name, code, rules, line_of)
    return None


