"""Static anti-hack rules against the red-team escapes: model.py may not compute through NumPy/Python,
reach modules through attribute chains, use getattr-style access or hide PyTorch compute in nested
functions, lambdas or layers; kernel sources may not run code at load time, include computed headers,
name process/thread/loader/environment/timer functions anywhere, or read /proc. Every valid example the
project ships (fixtures, README, seed knowledge) still passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifier.gates.antihack import check_candidate, check_kernel_source, check_model

import candidates as C

ROOT = Path(__file__).resolve().parents[2]
HEAD = "import torch\nimport torch.nn as nn\nfrom verifier.runtime import load\n\nlib = load()\n"
CALL = "out = torch.empty_like(x)\n        lib.relu_forward(x, out, x.numel())\n        "


def model(init: str = "", forward: str = CALL + "return out", head: str = HEAD, extra: str = "") -> str:
    """A model.py: ``extra`` at module level, ``init`` after super().__init__(), ``forward``'s body."""
    src = head + "\n" + extra + "\n\nclass ModelNew(nn.Module):\n"
    if init:
        src += "    def __init__(self, *init_inputs):\n        super().__init__()\n        " + init + "\n\n"
    return src + "    def forward(self, x):\n        " + forward + "\n"


# ----------------------------------------------------------------------------- model.py: still accepted

VALID_MODELS = {
    "linear weights passed to the kernel": model(
        "self.linear = nn.Linear(4, 4)",
        CALL + "lib.f(x, self.linear.weight.detach(), self.linear.bias.detach(), out)\n        return out"),
    "conv weights with nn.init and math": model(
        "self.conv = nn.Conv2d(3, 8, 3)\n        nn.init.kaiming_uniform_(self.conv.weight, a=math.sqrt(5))",
        "n, c, h, w = x.shape\n        out = torch.empty(n, 8, h - 2, w - 2, device=x.device, dtype=x.dtype)\n"
        "        lib.conv(x, self.conv.weight, out, n, c, h, w)\n        return out", head=HEAD + "import math\n"),
    "own private attributes and helper": model(
        "self._scratch = torch.empty(0)",
        "if self._scratch.numel() < 4:\n            self._scratch = torch.empty(4)\n        return self._launch(x)\n\n"
        "    def _launch(self, x):\n        " + CALL + "return out"),
    "typing and annotations": model(head="from __future__ import annotations\nfrom typing import Optional\n" + HEAD)
    .replace("def forward(self, x)", "def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None) -> torch.Tensor"),
    "no_grad decorator and block": model(
        forward="with torch.no_grad():\n            out = torch.empty_like(x)\n            lib.relu_forward(x, out, x.numel())\n"
                "        return out").replace("    def forward", "    @torch.no_grad()\n    def forward"),
    "old-style super": model("pass").replace("super().__init__()", "super(ModelNew, self).__init__()"),
    "nn.Module.__init__": model("pass").replace("super().__init__()", "nn.Module.__init__(self)"),
    "dtypes and views": model(forward="y = x.permute(0, 2, 1).contiguous().reshape(-1)\n"
                                      "        out = torch.empty(y.numel(), dtype=torch.float32, device=x.device)\n"
                                      "        lib.relu_forward(y, out, y.numel())\n        return out.view(x.size(0), -1)"),
    "helper module class built in __init__": model(
        "self.block = Block(4)", CALL + "lib.f(x, self.block.w.detach(), out)\n        return out",
        extra="class Block(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
              "        self.w = nn.Parameter(torch.randn(d) * 0.1)\n        self.lin = nn.Linear(d, d)\n"),
    "buffers, parameter lists, init-time compute": model(
        "self.register_buffer('scale', torch.tensor(2.0))\n"
        "        self.ws = nn.ParameterList([nn.Parameter(torch.randn(3)) for _ in range(3)])\n"
        "        w = torch.randn(4, 4)\n        self.w = nn.Parameter(w @ w.T + torch.eye(4))\n"
        "        self.max = 6.0\n        self.min = float(0.5)",
        CALL + "lib.g(x, out, self.min, self.max, self.scale)\n        return out"),
    "module constants and __main__ guard": model(extra="BLOCK = 256\n_TILE = 32\n") + "\n\nif __name__ == '__main__':\n    pass\n",
    "from torch import nn, aliased load": model("pass", head="import torch\nfrom torch import nn\nfrom verifier.runtime "
                                                           "import load as load_kernels\n\nlib = load_kernels()\n"),
    "library kept on self": model("self.lib = lib", "out = torch.empty_like(x)\n        self.lib.max(x, out, x.numel())\n"
                                                     "        return out"),
    "zeroed output": model(forward="out = torch.zeros_like(x)\n        out.zero_()\n        lib.relu_forward(x, out, x.numel())\n"
                                   "        rows, _ = x.shape\n        return out"),
}


@pytest.mark.parametrize("name", list(VALID_MODELS))
def test_valid_models_pass(name):
    assert check_model(VALID_MODELS[name]) is None


def test_fixture_candidates_pass():
    for files in (C.elementwise(C.RELU), {"model.py": C.ROWSUM_MODEL, "kernel.cpp": C.ROWSUM_REASSOCIATED},
                  {"model.py": C.SOFTMAX_SCRATCH_MODEL, "kernel.cpp": C.SOFTMAX_SCRATCH},
                  {"model.py": C.SCALE_BIAS_MODEL, "kernel.cpp": C.SCALE_BIAS},
                  {"model.py": C.INPUT_OVERWRITE_MODEL, "kernel.cpp": C.RELU},
                  {"model.py": C.TORCH_OPERATOR_MODEL, "kernel.cpp": C.RELU},   # left to the run-time check
                  {"model.py": C.NEVER_CALLS_MODEL, "kernel.cpp": C.RELU},      # left to the run-time check
                  C.elementwise(C.POINTER_CACHE), C.elementwise(C.GOES_STALE), C.elementwise(C.MEMORY_HOG)):
        assert check_candidate(files, (".cpp",), (".h",)) is None


def test_readme_example_passes():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Writing a kernel by hand"):]
    kernel = re.search(r"```cpp\n(.*?)```", section, re.S).group(1)
    model_py = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert check_candidate({"model.py": model_py, "kernel.cpp": kernel}, (".cpp",), (".h",)) is None


def test_seed_knowledge_models_pass():
    checked = 0
    for path in sorted((ROOT / "core/knowledge").glob("*/*.md")):
        for block in re.findall(r"```python file=model\.py\n(.*?)```", path.read_text(), re.S):
            assert check_model(block) is None, path.name
            checked += 1
    assert checked >= 3


# ----------------------------------------------------------------------------- model.py: rejected

REJECTED_MODELS = [
    # 1. data handed to NumPy / Python
    ("x.numpy()", model(forward="a = x.numpy()\n        return x"), "numpy"),
    ("x.tolist()", model(forward="a = x.tolist()\n        return x"), "tolist"),
    ("x.__array__()", model(forward="a = x.__array__()\n        return x"), "__array__"),
    ("__array_interface__", model(forward="a = x.__array_interface__\n        return x"), "__array_interface__"),
    (".item() in forward", model(forward="v = x[0].item()\n        return x"), ".item()"),
    (".item kept as a value", model(forward="f = x.item\n        return x"), ".item used as a value"),
    ("untyped_storage", model(forward="s = x.untyped_storage()\n        return x"), "storage"),
    # 2. modules reached through attribute chains, private names, imports
    ("dispatch-mode escape", model(forward="nn.modules.module.torch.utils._python_dispatch._disable_current_modes()\n"
                                           "        return x"), "private attribute"),
    ("nn.modules", model("self.act = nn.modules.activation.ReLU()"), "nn.modules"),
    ("import verifier", model(forward="verifier.job.worker.importlib.import_module('numpy')\n        return x",
                              head=HEAD + "import verifier\n"), "import of verifier"),
    ("import verifier.runtime", model(forward="verifier.runtime._calls.update({})\n        return x",
                                      head=HEAD + "import verifier.runtime\n"), "from verifier.runtime import load"),
    ("from verifier import runtime", model(head=HEAD + "from verifier import runtime\n"), "import of verifier.runtime"),
    ("other runtime names", model(head=HEAD + "from verifier.runtime import configure\n"), "import only the loader"),
    ("runtime internals on the loader", model(forward="a = load.__globals__\n        return x"), "__globals__"),
    ("library internals", model(forward="a = lib._path\n        return x"), "private attribute _path"),
    ("torch._C", model(forward="torch._C._set_grad_enabled(False)\n        return x"), "private attribute"),
    ("from torch import _C", model(head=HEAD + "from torch import _C\n"), "torch._C"),
    ("from torch import os", model(head=HEAD + "from torch import os\n"), "import of torch.os"),
    ("typing.sys", model(forward="typing.sys.modules['os'].system('id')\n        return x", head=HEAD + "import typing\n"),
     "reaches a module"),
    (".torch attribute", model(forward="t = self.forward.torch\n        return x"), ".torch reaches a module"),
    ("module stored in a variable", model(forward="m = torch\n        return m.relu(x)"), "module torch may only be used"),
    ("nn.Module internals", model(forward="a = self._modules\n        return x"), "private attribute _modules"),
    ("tensor internals", model(forward="a = x._base\n        return x"), "private attribute _base"),
    ("binding a module internal", model("self._forward_hooks = {}"), "_forward_hooks"),
    ("dunder name", model(forward="f = __file__\n        return x"), "__file__"),
    ("nn.Linear.forward", model("self.lin = nn.Linear(3, 3)", "return nn.Linear.forward(self.lin, x)"),
     "nn.Linear only to build"),
    ("torch submodule", model(forward="return torch.linalg.norm(x)"), "torch.linalg.norm"),
    ("from torch import relu", model(forward="return relu(x)", head=HEAD + "from torch import relu\n"),
     "makes PyTorch compute"),
    # 3. getattr and friends
    ("getattr on torch", model(forward="return getattr(torch, 'relu')(x)"), "getattr is not allowed"),
    ("getattr on a tensor", model(forward="return getattr(x, 'relu')()"), "getattr is not allowed"),
    ("setattr", model(forward="setattr(self, 'y', x)\n        return x"), "setattr is not allowed"),
    ("delattr", model(forward="delattr(self, 'y')\n        return x"), "delattr is not allowed"),
    ("vars", model(forward="v = vars(self)\n        return x"), "vars() is not allowed"),
    ("globals", model(forward="g = globals()\n        return x"), "globals() is not allowed"),
    ("locals", model(forward="g = locals()\n        return x"), "locals() is not allowed"),
    ("type()", model(forward="return type(x).relu(x)"), "type() is not allowed"),
    # 4. compute hidden in nested functions, lambdas, defaults, layers and re-run constructors
    ("def inside __init__", model("def f(t):\n            return torch.relu(t)\n        self.f = f", "return self.f(x)"),
     "torch.relu() makes PyTorch compute"),
    ("lambda inside __init__", model("self.f = lambda t: t.relu()", "return self.f(x)"), ".relu() makes PyTorch compute"),
    ("default argument bound in __init__", model("def f(t, op=torch.relu):\n            return op(t)\n        self.f = f",
                                                 "return self.f(x)"), "torch.relu used as a value"),
    ("torch function kept on self", model("self.act = torch.relu", "return self.act(x)"), "torch.relu used as a value"),
    ("bound tensor method kept", model("self.w = nn.Parameter(torch.randn(3))\n        self.f = self.w.mul",
                                       "return self.f(x)"), ".mul used as a value"),
    ("torch function passed to map", model(forward="return list(map(torch.relu, [x]))[0]"), "torch.relu used as a value"),
    ("class attribute", model().replace("class ModelNew(nn.Module):\n", "class ModelNew(nn.Module):\n    act = torch.relu\n"),
     "torch.relu used as a value"),
    ("module-level helper", model(forward="return helper(x)", extra="def helper(t):\n    return torch.relu(t)\n"),
     "torch.relu() makes PyTorch compute"),
    ("generator built in __init__", model("self.g = (torch.relu(t) for t in [])"), "torch.relu() makes PyTorch compute"),
    ("nn layer called in forward", model("self.act = nn.ReLU()", "return self.act(x)"), "calling self.act, an nn layer"),
    ("nn layer through an alias", model("self.lin = nn.Linear(3, 3)", "m = self.lin\n        return m(x)"), "an nn layer"),
    ("nn layer .forward", model("self.lin = nn.Linear(3, 3)", "return self.lin.forward(x)"), "an nn layer"),
    ("nn.Sequential item", model("self.seq = nn.Sequential(nn.ReLU())", "return self.seq[0](x)"), "an nn layer"),
    ("nn layer built in forward", model(forward="return nn.ReLU()(x)"), "nn.ReLU(...) outside __init__"),
    ("nn.init in forward", model(forward="nn.init.zeros_(x)\n        return x"), "only in __init__"),
    ("ModelNew rebuilt in forward", model("pass", "return ModelNew(x).out"), "ModelNew is used outside __init__"),
    ("helper class built in forward", model(forward="return H(x).y", extra="class H(nn.Module):\n    def __init__(self, x):\n"
                                            "        super().__init__()\n        self.y = torch.relu(x)\n"),
     "H is used outside __init__"),
    ("__init__ re-run from forward", model("pass", "self.__init__(x)\n        return x"), "super().__init__()"),
    ("apply_ with a Python function", model(forward="x.apply_(lambda v: max(v, 0))\n        return x"), ".apply_()"),
    ("in-place compute", model(forward="x.clamp_min_(0)\n        return x"), ".clamp_min_()"),
    ("forward hook", model("self.register_forward_hook(lambda m, i, o: o)"), "no hooks"),
    ("__call__ override", model() + "\n    def __call__(self, x):\n        return x\n", "defining __call__"),
    ("_call_impl override", model() + "\n    def _call_impl(self, x):\n        return x\n", "nn.Module internal"),
]


@pytest.mark.parametrize("name, source, words", REJECTED_MODELS, ids=[r[0] for r in REJECTED_MODELS])
def test_model_escapes_are_rejected(name, source, words):
    compile(source, name, "exec")  # each snippet is valid Python: the rule, not a syntax error, rejects it
    problem = check_model(source)
    assert problem is not None and words in problem, (name, problem)
    assert "\n" not in problem


def test_model_messages_say_what_to_do_instead():
    for source in (model(forward="a = x.numpy()\n        return x"), model("self.f = lambda t: t.relu()", "return self.f(x)"),
                   model(forward="nn.modules.module.torch.utils._python_dispatch._disable_current_modes()\n        return x")):
        assert "kernel" in check_model(source)
    assert "from verifier.runtime import load" in check_model(model(head=HEAD + "import verifier\n"))
    assert "weight" in check_model(model("self.act = nn.Linear(2, 2)", "return self.act(x)"))


# ----------------------------------------------------------------------------- kernel sources

RELU = C.RELU

REJECTED_KERNELS = [
    # code at load time
    ("[[gnu::constructor]]", "[[gnu::constructor]] void init() {}\n", "constructor"),
    ("[[gnu::destructor]]", "[[gnu::destructor]] void fini() {}\n", "destructor"),
    ("__attribute__ ((constructor))", "__attribute__ ((constructor)) void init() {}\n", "constructor"),
    ("__attribute__( ( constructor ) )", "__attribute__( ( constructor ) ) void init() {}\n", "constructor"),
    ("constructor after another attribute", "__attribute__((used, constructor(101))) void init() {}\n", "constructor"),
    ("__constructor__", "__attribute__((__constructor__)) void init() {}\n", "constructor"),
    ("constructor through a macro", "#define CTOR constructor\n__attribute__((CTOR)) void init() {}\n", "constructor"),
    ("init_priority", "struct S { S() {} };\nS s __attribute__((init_priority(101)));\n", "init_priority"),
    ("section .init_array", 'static void init() {}\n__attribute__((section(".init_array"))) void (*p)() = init;\n',
     ".init_array"),
    ("[[gnu::section]]", '[[gnu::section(".init_array")]] void (*p)() = 0;\n', ".init_array"),
    ("weakref alias", 'static int f() __attribute__((weakref("fork")));\n', "weakref"),
    # includes that are not literal, and directives that change how the source is read
    ("#include MACRO", "#define CFG <fstream>\n#include CFG\n", "#include must name its header literally"),
    ("#include __FILE__", "#include __FILE__\n", "#include must name its header literally"),
    ("#include split by a line continuation", "#include \\\n<fstream>\n", "no file access"),
    ("# split from include", "# \\\ninclude <fstream>\n", "no file access"),
    ("#include_next", "#include_next <cstdint>\n", "#include_next"),
    ("_Pragma", '_Pragma("GCC optimize(\\"O0\\")")\n', "_Pragma"),
    ("#pragma weak", "#pragma weak myfork = fork\n", "#pragma weak"),
    ("%: digraph", "%:include <fstream>\n", "%: digraph"),
    ("#include <thread>", "#include <thread>\n", "OpenMP"),
    # processes, threads, loaders, environment, system calls: named anywhere, not only called
    ("dlopen through a typedef", 'typedef void* (*F)(const char*, int);\nextern "C" void* dlopen(const char*, int);\n'
                                 "static F f = dlopen;\n", "dlopen"),
    ("dlsym address", "static auto p = &dlsym;\n", "dlsym"),
    ("getenv pointer", 'extern "C" char* getenv(const char*);\nstatic auto g = getenv;\n', "getenv"),
    ("fork declaration", 'extern "C" int fork(void);\n', "fork"),
    ("fork split by a line continuation", 'extern "C" int fo\\\nrk(void);\n', "fork"),
    ("_Fork", 'extern "C" int _Fork(void);\n', "_Fork"),
    ("pthread_create declaration", 'extern "C" int pthread_create(void*, void*, void* (*)(void*), void*);\n',
     "pthread_create"),
    ("std::thread", "#include <vector>\nvoid g() { std::thread t([] {}); t.join(); }\n", "std::thread"),
    ("syscall declaration", 'extern "C" long syscall(long, ...);\n', "syscall"),
    ("std::system pointer", "#include <cstdlib>\nstatic auto s = &std::system;\n", "system"),
    ("open declared by hand", 'extern "C" int open(const char*, int, ...);\nint g() { return open("x", 0); }\n', "open"),
    # timers
    ("__builtin_ia32_rdtsc", "unsigned long long t() { return __builtin_ia32_rdtsc(); }\n", "__builtin_ia32_rdtsc"),
    ("__rdtsc", "unsigned long long t() { return __rdtsc(); }\n", "__rdtsc"),
    ("clock_gettime declaration", 'struct timespec;\nextern "C" int clock_gettime(int, timespec*);\n', "clock_gettime"),
    ("gettimeofday pointer", "static auto p = &gettimeofday;\n", "gettimeofday"),
    ("omp_get_wtime", "#include <omp.h>\ndouble t() { return omp_get_wtime(); }\n", "omp_get_wtime"),
    # system paths
    ("/proc in a string", 'const char* p = "/proc/self/maps";\n', "/proc"),
    ("/proc split over literals", 'const char* p = "/pr" "oc/self/environ";\n', "/proc"),
    # spellings that make the scanner and the compiler disagree
    ("raw string", 'const char* s = R"(")"; int g(); const char* t = "";\n', "raw string"),
    ("digit separator", "int a = 1'000; int b = 2'0;\n", "digit separators"),
    ("trigraph", 'const char* s = "abc??/";\n', "trigraphs"),
    ("apostrophe in #if 0", "#if 0\nit's\n#endif\nint c = 'x';\n", "does not close on its line"),
    ("quote in __has_include", "#if __has_include(<a'b>)\n#endif\n", "does not close on its line"),
    ("comment closed across a line continuation", "/* x *\\\n/ static auto p = &getenv; /* */\n", "getenv"),
]


@pytest.mark.parametrize("name, prefix, words", REJECTED_KERNELS, ids=[r[0] for r in REJECTED_KERNELS])
def test_kernel_escapes_are_rejected(name, prefix, words):
    problem = check_kernel_source("kernel.cpp", prefix + RELU, {"kernel.cpp"})
    assert problem is not None and words in problem, (name, problem)
    assert "\n" not in problem


def test_kernel_escapes_are_rejected_on_every_backend():
    for backend, suffix in (("cuda", ".cu"), ("ascend", ".cpp")):
        assert "constructor" in check_kernel_source("k" + suffix, "[[gnu::constructor]] void i() {}\n", set(), backend)
        assert "dlopen" in check_kernel_source("k" + suffix, "static auto p = &dlopen;\n", set(), backend)


VALID_KERNELS = {
    "openmp with thread ids": "#include <omp.h>\n#include <cmath>\nint tid() { return omp_get_thread_num(); }\n"
                              + RELU.replace("simd schedule(static)", "schedule(dynamic, 64)"),
    "pragma once and unroll": "#pragma once\n#include <cstdint>\n#pragma GCC unroll 4\n" + RELU,
    "multi-line macro": "#define ADD(a, b) \\\n    ((a) + (b))\n" + RELU,
    "harmless attributes": '__attribute__((visibility("default"))) int f() { return 1; }\n[[nodiscard]] int g() '
                           "{ return 2; }\nalignas(64) static float buf[16];\n__attribute__((aligned(64))) float b[16];\n" + RELU,
    "quotes inside literals": "char q = '\\'';\nchar d = '\"';\nconst char* s = \"it's \\\"fine\\\"\";\n" + RELU,
    "__has_include": "#if __has_include(<immintrin.h>)\n#include <immintrin.h>\n#endif\n" + RELU,
    "number literals": "float a = 1.5e-3f; double b = 0x1.8p1; int c = 0xFF, d = 1u;\n" + RELU,
    "apostrophes in comments": "// it's fine, don't worry\n/* isn't it */\n" + RELU,
    "ordinary identifiers": "int section = 3;\nint thread = 1;\nfloat sigma = 0.f;\nint num_threads = 2;\n" + RELU,
    "math functions": "#include <cmath>\nfloat f(float x) { return std::exp(x) + expf(x) + std::tanh(x); }\n" + RELU,
}


@pytest.mark.parametrize("name", list(VALID_KERNELS))
def test_valid_kernels_pass(name):
    assert check_kernel_source("kernel.cpp", VALID_KERNELS[name], {"kernel.cpp"}) is None


@pytest.mark.parametrize("change", [
    ("#pragma omp parallel for", "#pragma omp parallel for num_threads(16)"),
    ("int workers = 4;", "omp_set_num_threads(16); int workers = 4;"),
    ("int workers = 4;", "omp_set_dynamic(0); int workers = 4;"),
])
def test_kernels_may_not_choose_their_own_thread_count(change):
    """More threads than the reference gets would be a speedup of the verifier's making."""
    from verifier.gates.antihack import check_kernel_source

    ok = ('#include <cstdint>\n#include <omp.h>\nextern "C" void f(float* x, int64_t n) {\n'
          '  int workers = 4; int num_threads = omp_get_num_threads(); (void)workers; (void)num_threads;\n'
          '  #pragma omp parallel for\n  for (int64_t i = 0; i < n; ++i) x[i] = 0;\n}\n')
    assert check_kernel_source("k.cpp", ok, set()) is None
    problem = check_kernel_source("k.cpp", ok.replace(*change), set())
    assert problem and "thread count" in problem and "OMP_NUM_THREADS" in problem
