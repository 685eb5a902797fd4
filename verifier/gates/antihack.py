"""Gate 2, anti-hack: static rules that reject candidates which would pass the later gates without
doing the work in their own kernel, or which reach outside their box.

``model.py`` (AST): only a small set of imports; no fallback to the reference (subclassing or naming
``Model``, ``nn.functional``, ``try``/``except`` around kernels); no PyTorch compute outside
``__init__`` (allocation and views only); no threads, processes, sockets, files, environment;
no patching of torch, timers or the runtime; no ``importlib``/``gc``/``inspect``/dunder games.

Kernel sources (text, comments and strings blanked): no torch/BLAS/Python headers, no process,
file, network, environment, timer or signal calls, no inline assembly, no code run at load time.
Device backends add their own rules: on CUDA no streams, graphs, events or device allocation of the
kernel's own (work must run on the stream the runtime passes, timed by the verifier) and every
``<<<...>>>`` launch names its stream; on Ascend no ACL runtime calls (the runtime launches the kernel
on torch_npu's stream) and the CANN kernel headers may be included with quotes.

The worker adds a dynamic check of the same idea (the aten ops ``forward`` actually ran).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from verifier.cdecl import strip_comments_and_strings

ALLOWED_IMPORTS = {"torch", "torch.nn", "math", "typing", "numbers", "verifier.runtime", "__future__", "verifier"}
_IMPORT_HINTS = {
    "torch.nn.functional": "nn.functional computes what your kernel must compute",
    "torch.utils.cpp_extension": "build through the candidate's sources and verifier.runtime.load(), not cpp_extension",
    "ctypes": "call kernels through verifier.runtime.load(), which checks arguments",
    "numpy": "numpy would compute outside the kernel",
}
# torch.<name>(...) calls allowed outside __init__: allocation and shape helpers.
TORCH_ALLOCATION = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                    "full_like", "Size", "no_grad", "inference_mode", "device", "dtype", "is_tensor",
                    "is_floating_point"}
# torch.<name> that no part of model.py may touch.
TORCH_FORBIDDEN = {"set_num_threads", "set_num_interop_threads", "backends", "set_flush_denormal", "manual_seed",
                   "seed", "use_deterministic_algorithms", "compile", "jit", "ops", "_C", "library", "utils", "hub",
                   "load", "save", "classes", "overrides", "_dynamo", "fx", "autograd", "set_default_dtype",
                   "set_default_device", "cuda", "npu", "random", "multiprocessing", "distributed", "_ops", "_refs",
                   "_prims", "_decomp", "func", "vmap"}
# Tensor methods that compute (outside __init__ these hand the work back to PyTorch).
TENSOR_COMPUTE = set("""abs abs_ absolute acos add add_ addbmm addcdiv addcmul addmm addmv addr all amax amin aminmax any
argmax argmin argsort asin atan atan2 baddbmm bmm ceil clamp clamp_ clamp_max clamp_min clip cos cosh cross cummax
cummin cumprod cumsum diff digamma dist div div_ divide dot eq erf erfc erfinv exp exp_ exp2 expm1 floor
floor_divide fmax fmin fmod frac gather ge gelu greater gt hardtanh heaviside hypot index_add index_select inner
kthvalue le lerp lgamma log log10 log1p log2 log_softmax logaddexp logcumsumexp logical_and logical_not
logical_or logit logsumexp lt masked_fill masked_scatter masked_select matmul max maximum mean median min minimum
mm mode msort mul mul_ multiply mv nan_to_num nanmean nanmedian nansum ne neg negative norm outer pow pow_ prod
reciprocal relu relu_ remainder renorm roll round rsqrt scatter scatter_add scatter_reduce sigmoid sigmoid_ sign
sin sinh softmax sort sqrt sqrt_ square std sub sub_ subtract sum tan tanh tanh_ tensordot topk trace tril triu
true_divide trunc unique var where xlogy flip fliplr flipud rot90 conv1d conv2d conv3d softplus silu elu selu
mish hardswish hardsigmoid leaky_relu prelu rrelu celu glu logical_xor bitwise_and bitwise_or bitwise_xor
count_nonzero bincount histc cov corrcoef einsum kron cdist""".split())
BANNED_NAMES = {"Model": "do not use the reference Model: write ModelNew on your own kernels",
                "eval": "eval is not allowed", "exec": "exec is not allowed", "compile": "compile is not allowed",
                "__import__": "dynamic imports are not allowed", "open": "model.py may not open files",
                "globals": "globals() is not allowed", "locals": "locals() is not allowed",
                "vars": "vars() is not allowed", "setattr": "setattr is not allowed (no patching)",
                "delattr": "delattr is not allowed", "breakpoint": "breakpoint is not allowed",
                "input": "input is not allowed", "exit": "exit is not allowed", "quit": "quit is not allowed",
                "__builtins__": "__builtins__ is not allowed", "memoryview": "memoryview is not allowed",
                "F": None}
BANNED_ATTRS = {"__class__", "__dict__", "__globals__", "__code__", "__subclasses__", "__bases__", "__mro__",
                "__builtins__", "__getattribute__", "__setattr__", "__closure__", "__func__", "__self__",
                "__module__", "__wrapped__", "__defaults__", "__kwdefaults__", "__reduce__", "__reduce_ex__",
                "__loader__", "__spec__", "__import__", "__call__", "__torch_function__", "__torch_dispatch__",
                "data_ptr", "_cfunc", "_dll", "functional"}


class Violation(Exception):
    pass


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class _ModelRules(ast.NodeVisitor):
    def __init__(self, libraries: set[str]) -> None:
        self.modules: dict[str, str] = {}   # local name -> module path
        self.libraries = libraries          # names bound to the kernel library (lib, self.lib, ...)
        self.function_stack: list[str] = []
        self.loads_library = False

    def fail(self, node: ast.AST, message: str) -> None:
        raise Violation(f"model.py line {getattr(node, 'lineno', '?')}: {message}")

    # imports -------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> None:
        for prefix, hint in _IMPORT_HINTS.items():
            if module == prefix or module.startswith(prefix + "."):
                self.fail(node, f"import of {module}: {hint}")
        if module not in ALLOWED_IMPORTS:
            self.fail(node, f"import of {module} is not allowed; model.py may import only "
                            f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            self.modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.fail(node, "relative imports are not allowed")
        for alias in node.names:
            if alias.name == "*":
                self.fail(node, "star imports are not allowed")
            full = f"{module}.{alias.name}"
            # `from torch import nn` imports a module; `from verifier.runtime import load` a name.
            is_module = full in ALLOWED_IMPORTS or any(full == p or full.startswith(p + ".") for p in _IMPORT_HINTS)
            self._check_module(node, full if is_module else module)
            if module == "torch" and alias.name in TORCH_FORBIDDEN:
                self.fail(node, f"torch.{alias.name} is not allowed in model.py")
            self.modules[alias.asname or alias.name] = full

    # structure -----------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = _dotted(base)
            if name not in ("nn.Module", "torch.nn.Module", "Module"):
                self.fail(node, f"class {node.name} derives from {name or 'an expression'}; ModelNew must derive "
                                "from nn.Module and must not reuse the reference Model")
        for kw in node.keywords:
            self.fail(node, f"class keyword {kw.arg!r} is not allowed")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.function_stack.append(node.name)
        self.generic_visit(node)
        self.function_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Try(self, node: ast.AST) -> None:
        self.fail(node, "try/except is not allowed: a fallback path hides kernel failures; let errors propagate")

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_Global(self, node: ast.Global) -> None:
        self.fail(node, "global statements are not allowed (state across calls invites result caching)")

    # names and attributes ------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_NAMES and BANNED_NAMES[node.id]:
            self.fail(node, BANNED_NAMES[node.id])
        if node.id == "F" and self.modules.get("F", "").endswith("functional"):
            self.fail(node, "nn.functional computes what your kernel must compute")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in BANNED_ATTRS:
            self.fail(node, f"attribute {node.attr} is not allowed")
        dotted = _dotted(node)
        root = dotted.split(".")[0] if dotted else ""
        if self.modules.get(root) == "torch" or self.modules.get(root) == "torch.nn":
            parts = dotted.split(".")[1:]
            if parts and parts[0] in TORCH_FORBIDDEN:
                self.fail(node, f"{dotted} is not allowed in model.py")
            if parts[:2] == ["nn", "functional"] or parts[:1] == ["functional"]:
                self.fail(node, "nn.functional computes what your kernel must compute")
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            dotted = _dotted(target if isinstance(target, ast.Attribute) else target.value)
            root = dotted.split(".")[0] if dotted else ""
            owner = dotted.rsplit(".", 1)[0] if "." in dotted else dotted
            if root in self.modules or owner in self.libraries:
                self.fail(target, f"assigning to {dotted} patches a module or the kernel library; not allowed")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    # calls and operators -------------------------------------------------
    def _in_init(self) -> bool:
        return "__init__" in self.function_stack

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_init():
            self.fail(node, "the @ operator makes PyTorch do the matmul; call your kernel")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        dotted = _dotted(func)
        root = dotted.split(".")[0] if dotted else ""
        if "functional" in dotted.split("."):
            self.fail(node, "nn.functional computes what your kernel must compute")
        if isinstance(func, ast.Name) and func.id == "getattr":
            if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant) or str(node.args[1].value).startswith("_"):
                self.fail(node, "getattr is allowed only with a literal, public attribute name")
        if self.modules.get(root) == "verifier.runtime.load" or dotted in ("runtime.load", "verifier.runtime.load"):
            self.loads_library = True
            if node.args or node.keywords:
                self.fail(node, "call load() without arguments: it returns this candidate's own library")
        if self.modules.get(root) == "torch" and not self._in_init():
            name = dotted.split(".")[1] if "." in dotted else ""
            if name and name not in TORCH_ALLOCATION and name != "nn":
                self.fail(node, f"{dotted}() makes PyTorch compute outside __init__; only allocation "
                                f"({', '.join(sorted(TORCH_ALLOCATION - {'Size', 'no_grad', 'inference_mode', 'device', 'dtype', 'is_tensor', 'is_floating_point'}))}) "
                                "and views are allowed — do the work in your kernel")
        owner = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        if isinstance(func, ast.Attribute) and func.attr in TENSOR_COMPUTE and not self._in_init() \
                and self.modules.get(root) != "math" and owner not in self.libraries:
            self.fail(node, f".{func.attr}() makes PyTorch compute in {self.function_stack[-1] if self.function_stack else 'module code'}; "
                            "do the work in your kernel")
        self.generic_visit(node)


def _library_names(tree: ast.Module) -> set[str]:
    """Names the kernel library is bound to: targets of ``load()`` and of plain copies of those."""
    names: set[str] = set()
    for _ in range(3):  # a few rounds propagate `lib = self.lib`
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                value = node.value
                is_lib = (isinstance(value, ast.Call) and _dotted(value.func).split(".")[-1] == "load") or \
                    (_dotted(value) in names)
                if is_lib:
                    names.update(_dotted(t) for t in node.targets if _dotted(t))
    return names


def check_model(source: str) -> str | None:
    """None when ``model.py`` follows the rules, else the first violation."""
    tree = ast.parse(source, "model.py")
    rules = _ModelRules(_library_names(tree))
    try:
        rules.visit(tree)
    except Violation as exc:
        return str(exc)
    if not rules.loads_library:
        return "model.py never loads its kernels: use `from verifier.runtime import load` and `lib = load()`"
    return None


# ----------------------------------------------------------------------------- kernel sources

_BANNED_INCLUDES = [
    (r"torch/|ATen/|c10/|Python\.h|pybind11", "kernels may not call into PyTorch or Python"),
    (r"cblas|mkl|openblas|Eigen/|dnnl|oneapi/|cublas|cudnn|cutlass|lapack", "kernels may not call BLAS/DNN libraries; write the loops"),
    (r"sys/socket|netinet/|arpa/|netdb\.h|curl", "no networking in kernels"),
    (r"fstream|filesystem|dirent\.h|sys/stat\.h|fcntl\.h", "no file access in kernels"),
    (r"unistd\.h|sys/syscall\.h|dlfcn\.h|spawn\.h|sys/ptrace\.h|sys/mman\.h|sys/wait\.h|csignal|signal\.h",
     "no system calls, processes or signals in kernels"),
    (r"(?:^|/)(?:chrono|ctime|time\.h)$", "no timers in kernels"),
]
_BANNED_WORDS = {
    "process": ["fork", "vfork", "execl", "execlp", "execle", "execv", "execvp", "execvpe", "execve", "system",
                "popen", "posix_spawn", "pthread_atfork", "atexit", "at_quick_exit"],
    "library loading": ["dlopen", "dlsym", "dladdr"],
    "environment": ["getenv", "secure_getenv", "environ", "__environ", "setenv", "putenv", "unsetenv"],
    "network": ["socket", "connect", "sendto", "recvfrom"],
    "file": ["fopen", "freopen", "openat", "ifstream", "ofstream", "fstream", "creat", "unlink", "remove"],
    "system call": ["syscall", "ptrace", "mmap", "mprotect", "signal", "sigaction", "kill", "prctl", "ioctl"],
    "timer": ["sleep", "usleep", "nanosleep", "sleep_for", "sleep_until", "clock", "clock_gettime",
              "gettimeofday", "__rdtsc", "rdtsc", "__rdtscp", "time"],
    "inline assembly": ["asm", "__asm__", "__asm"],
}
_BARE_WORDS = {"environ", "__environ", "asm", "__asm__", "__asm"}


@dataclass(frozen=True)
class DeviceRules:
    """Kernel-source rules one device backend adds to the common ones."""

    words: dict[str, tuple[tuple[str, ...], str]]       # what -> (banned call names, why/what to do instead)
    includes: tuple[tuple[str, str], ...] = ()          # (pattern, why)
    sdk_headers: frozenset[str] = frozenset()            # SDK headers that may be included with quotes
    prefixes: tuple[tuple[str, str], ...] = ()          # (call-name regex, why)
    launch_needs_stream: bool = False


_CUDA_STREAM_WHY = "work must run on the cudaStream_t the runtime passes to your launcher"
DEVICE_RULES: dict[str, DeviceRules] = {
    "cuda": DeviceRules(
        words={
            "streams": (("cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority",
                         "cudaStreamDestroy", "cudaStreamBeginCapture", "cudaStreamEndCapture",
                         "cudaStreamAttachMemAsync"), _CUDA_STREAM_WHY),
            "graphs": (("cudaGraphCreate", "cudaGraphInstantiate", "cudaGraphLaunch", "cudaGraphAddKernelNode"),
                       _CUDA_STREAM_WHY),
            "timer": (("cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventElapsedTime",
                       "clock64", "__nanosleep"), "the verifier does the timing"),
            "device control": (("cudaDeviceReset", "cudaSetDevice", "cudaDeviceSetLimit", "cudaSetDeviceFlags",
                                "cudaDeviceSetCacheConfig"), "the device belongs to the verifier"),
            "device allocation": (("cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cudaMallocHost",
                                   "cudaMallocPitch", "cudaHostAlloc", "cudaFree", "cudaFreeAsync", "cudaFreeHost"),
                                  "allocate buffers in model.py with torch.empty(..., device=x.device) and pass them in"),
        },
        includes=((r"^thrust/", "thrust allocates and launches on its own streams; write the kernel"),),
        sdk_headers=frozenset({"cuda_runtime.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "device_launch_parameters.h",
                               "cooperative_groups.h", "mma.h", "cuda_pipeline.h"}),
        prefixes=((r"cudaStreamPerThread|cudaStreamLegacy", _CUDA_STREAM_WHY),),
        launch_needs_stream=True,
    ),
    "ascend": DeviceRules(
        words={},
        includes=((r"^acl/|^aclnn|^hccl", "kernels are device code; the runtime launches them on torch_npu's stream"),),
        sdk_headers=frozenset({"kernel_operator.h", "lib/matmul_intf.h", "kernel_tiling/kernel_tiling.h",
                               "lib/matrix/matmul/matmul.h"}),
        prefixes=((r"acl(?:rt|nn|op)?[A-Z]\w*\s*\(", "kernels may not call the ACL runtime (streams, memory, "
                   "devices): the runtime launches them on torch_npu's stream"),),
    ),
}


def _device_rule(name: str, code: str, rules: DeviceRules) -> str | None:
    for what, (words, why) in rules.words.items():
        for word in words:
            m = re.search(rf"(?<![\w.]){re.escape(word)}\s*\(", code)
            if m:
                lineno = code.count("\n", 0, m.start()) + 1
                return f"{name} line {lineno}: {word} is not allowed in kernels ({what}): {why}"
    for pattern, why in rules.prefixes:
        m = re.search(rf"(?<![\w.])(?:{pattern})", code)
        if m:
            lineno = code.count("\n", 0, m.start()) + 1
            return f"{name} line {lineno}: {m.group(0).rstrip('( ')} is not allowed in kernels: {why}"
    if rules.launch_needs_stream:
        for m in re.finditer(r"<<<(.*?)>>>", code, re.S):
            parts = _split_launch(m.group(1))
            lineno = code.count("\n", 0, m.start()) + 1
            if len(parts) < 4:
                return (f"{name} line {lineno}: kernel launch <<<{m.group(1).strip()}>>> names no stream: pass the "
                        "launcher's cudaStream_t as the fourth launch parameter, <<<grid, block, shared_bytes, stream>>>")
            if parts[3] in ("0", "nullptr", "NULL", "0L", "cudaStreamDefault"):
                return (f"{name} line {lineno}: kernel launch on stream {parts[3]}: pass the launcher's "
                        "cudaStream_t as the fourth launch parameter")
    return None


def _split_launch(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def check_kernel_source(name: str, source: str, local_files: set[str], backend: str = "cpu") -> str | None:
    """None when a kernel source follows the rules (the common ones plus ``backend``'s), else the first
    violation."""
    rules = DEVICE_RULES.get(backend)
    no_comments = strip_comments_and_strings(source, keep_strings=True)
    for lineno, line in enumerate(no_comments.splitlines(), 1):
        m = re.match(r"\s*#\s*include\s*([<\"])([^>\"]*)[>\"]", line)
        if m:
            target = m.group(2).strip()
            if rules is not None:
                for pattern, why in rules.includes:
                    if re.search(pattern, target):
                        return f"{name} line {lineno}: #include <{target}>: {why}"
            sdk = rules is not None and target in rules.sdk_headers
            if sdk:
                continue
            if m.group(1) == '"' and target not in local_files:
                return f"{name} line {lineno}: #include \"{target}\": only the candidate's own files may be included with quotes"
            if target.startswith("/") or ".." in target:
                return f"{name} line {lineno}: #include <{target}>: absolute or parent paths are not allowed"
            for pattern, why in _BANNED_INCLUDES:
                if re.search(pattern, target):
                    return f"{name} line {lineno}: #include <{target}>: {why}"
        if re.match(r"\s*#\s*(embed|pragma\s+GCC\s+push_options|line)\b", line):
            return f"{name} line {lineno}: this preprocessor directive is not allowed"
    code = strip_comments_and_strings(source)
    if "##" in code:
        return f"{name}: token pasting (##) is not allowed"
    if re.search(r"__attribute__\s*\(\(\s*(constructor|destructor)", code):
        return f"{name}: code that runs when the library loads (constructor attributes) is not allowed"
    for what, words in _BANNED_WORDS.items():
        for word in words:
            # Most are caught as calls; a few are banned wherever the word appears.
            pattern = rf"(?<![\w.]){re.escape(word)}\b" if word in _BARE_WORDS else rf"(?<![\w.]){re.escape(word)}\s*\("
            m = re.search(pattern, code)
            if m:
                lineno = code.count("\n", 0, m.start()) + 1
                return f"{name} line {lineno}: {word} is not allowed in kernels ({what})"
    if rules is not None:
        return _device_rule(name, code, rules)
    return None


def check_candidate(files: dict[str, str], source_suffixes: tuple[str, ...], header_suffixes: tuple[str, ...],
                    backend: str = "cpu") -> str | None:
    """The anti-hack gate over a whole candidate (``backend`` adds its device rules)."""
    problem = check_model(files["model.py"])
    if problem:
        return problem
    local = set(files)
    for name, text in files.items():
        if name.endswith((*source_suffixes, *header_suffixes)):
            problem = check_kernel_source(name, text, local, backend)
            if problem:
                return problem
    return None
