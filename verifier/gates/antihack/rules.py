"""The anti-hack gate's rules as one table, in the words a model reads: every prompt's "Rules the
verifier enforces" and docs/verifier.md are generated from it, and each static rule carries a violating
example that a test runs through the gate (``check_candidate``), so the table and the gate cannot
diverge. Dynamic rules are checked on the timed calls (``verifier.gates.performance``).

A ``model`` example is appended to a correct ``model.py`` as module code (checked like ``forward``);
a ``kernel`` example is appended to a correct kernel source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verifier.backends.base import FORM_KERNEL_LAUNCH, KernelRules
from verifier.gates.antihack.kernel import _BANNED_INCLUDES, _BANNED_WORDS, _COMMON_WORDS
from verifier.gates.antihack.model_names import TORCH_FORBIDDEN


@dataclass(frozen=True)
class Rule:
    """One rule: what it says, where it applies (``model``, ``kernel``, ``dynamic``, or ``device``: a backend's own,
    ``device_rules``), and a violation."""

    says: str
    where: str
    example: str = ""
    more: tuple[str, ...] = ()
    """Further violations, one per spelling the rule covers (each reaches its own refusal in the gate)."""
    short: str = ""
    """The rule in a few words, for a prompt whose model's context cannot hold the whole table (``contract_text``'s
    short form); "" says it in full there too."""

    @property
    def examples(self) -> tuple[str, ...]:
        return (self.example, *self.more) if self.example else self.more


RULES: tuple[Rule, ...] = (
    Rule("model.py imports only `torch`, `torch.nn`, `math`, `typing`, `numbers`, `__future__` and exactly "
         "`from verifier.runtime import load` (no star or relative imports, no private names), and calls `lib = "
         "load()` without arguments, using nothing else of the verifier", "model", "import numpy",
         more=("import ctypes", "import os", "import verifier.harness", "from . import helpers",
               "from torch import *", "from verifier import harness", "import verifier.runtime",
               "from typing import _GenericAlias", "lib2 = load(1)", "v = load.cache_info"),
         short="model.py imports only torch, torch.nn, math, typing, numbers, __future__ and "
               "`from verifier.runtime import load`; `lib = load()`"),
    Rule("no fallback to the reference: no `nn.functional`, no subclassing or naming `Model`; every class derives "
         "from `nn.Module`, with no class keywords (`metaclass=`)", "model",
         "import torch.nn.functional as F",
         more=("class Fake(object):\n    pass", "class Meta(nn.Module, metaclass=type):\n    pass",
               "y = torch.nn.functional", "y = nn.functional.relu",
               "def g():\n    return F\nimport torch.nn.functional as F",
               "def f(functional):\n    return functional.x()"),
         short="no nn.functional, no use of `Model`"),
    Rule("no `try`/`except` anywhere in model.py", "model", "try:\n    pass\nexcept Exception:\n    pass",
         short="no try/except in model.py"),
    Rule("no PyTorch compute outside `__init__`: `forward` (and every other function or module code) may only "
         "allocate (`torch.empty`, `torch.empty_like`, `torch.zeros`), reshape/view and call the library; nn "
         "layers built in `__init__` hold weights and are never called; `nn.init`, `nn.<Layer>(...)` and the "
         "classes of model.py only in `__init__`; no `@`; no calling the result of a call (`make()()`)", "model",
         "y = torch.relu(torch.empty(2))",
         more=("y = torch.empty(2, 2) @ torch.empty(2, 2)", "y = torch.empty(2).add(1)",
               "nn.init.zeros_(torch.empty(2))", "layer = nn.Linear(2, 2)",
               "class Helper(nn.Module):\n    pass\nh = Helper()",
               "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
               "        self.l = nn.Linear(2, 2)\n    def forward(self, x):\n        return self.l(x)",
               "def f(g):\n    return g()()"),
         short="`forward` only allocates (torch.empty, torch.zeros), reshapes and calls the library: no PyTorch "
               "compute"),
    Rule("no torch function, tensor method or module kept or passed as a value (`f = torch.relu`, "
         "`g = x.add`, `m = math`), and no attributes of a module's members (`math.pi.real`)", "model",
         "f = torch.relu", more=("v = torch.empty(2).add", "import math\nm = math", "import math\nv = math.pi.real"),
         short="no torch function or module kept as a value"),
    Rule("no torch settings, compilers or submodules (" + ", ".join(f"`torch.{n}`" for n in sorted(TORCH_FORBIDDEN))
         + "), no classes reached into (`torch.Tensor.add`), and from `nn` only classes (`nn.Module`, `nn.Parameter`, "
         "layers) and `nn.init.<function>`", "model", "from torch import cuda",
         more=("s = torch.manual_seed", "v = nn.parameter", "v = nn.Linear.weight", "v = torch.linalg.norm",
               "v = torch.nn.init.normal_.x"),
         short="no torch settings or submodules (torch.backends, torch.ops, ...)"),
    Rule("no data handed to NumPy or Python outside `__init__` (`.numpy()`, `.tolist()`, `.item()`, "
         "`__array__`)", "model", "v = torch.empty(2).numpy()",
         short="no .numpy(), .tolist() or .item() outside __init__"),
    Rule("no private or dunder attributes (`w._version`, `x.__class__`) beyond `super().__init__()`, "
         "`__name__` and your own `self._name` attributes (set private attributes only on `self`); no module "
         "reached through an attribute (`torch.os`); no methods with dunder names beyond `__init__` or with the "
         "names of nn.Module's internals (`_apply`, `_call_impl`)", "model", "v = torch.empty(2)._version",
         more=("v = torch.empty(2).__dict__", "v = torch.os", "nn.Module.__init__(torch.empty(1))", "v = __file__",
               "def f(o):\n    o._x = 1", "def __getattr__(name):\n    pass", "def _apply():\n    pass"),
         short="no private or dunder attributes but your own `self._name`"),
    Rule("no `getattr`, `setattr`, `delattr`, `vars`, `globals`, `locals` or `type`, and no `global` statements",
         "model", "g = getattr(torch, 'empty')", more=("def f():\n    global counter",),
         short="no getattr, setattr, vars, globals, type or global"),
    Rule("no files, threads, processes, sockets, environment, timers or hooks in model.py", "model",
         "h = open('x')", more=("h = torch.empty(2).register_hook",),
         short="no files, threads, processes, sockets, environment, timers or hooks in model.py"),
    Rule("no patching of torch, the runtime or the harness (assigning to their attributes)", "model",
         "torch.empty = None",
         short="no patching of torch or the harness"),
    Rule("kernel sources `#include` only a literal `<header>` or one of their own files as `\"file.h\"` (no macro, "
         "no absolute or parent path, no `#include_next` or `#import`; `__has_include` names its header literally "
         "too), and no header of these: " + "; ".join(named for _, _, named in _BANNED_INCLUDES), "kernel",
         "#include <cblas.h>",
         more=tuple(f"#include <{first}>" for first in ("torch/extension.h", "sys/socket.h", "fstream", "unistd.h",
                                                        "chrono", "thread"))
         + ("#include_next <vector>", "#define HDR <vector>\n#include HDR", '#include "elsewhere.h"',
            "#include </usr/include/stdio.h>", "#if __has_include(HDR)\n#endif"),
         short="kernels include only standard headers and their own files (no torch, BLAS, file, system, timer or "
               "thread headers)"),
    Rule("kernel sources name no function of these kinds: "
         + ", ".join(w for w in _BANNED_WORDS if w != "inline assembly")
         + "; anywhere, not only in calls (a declaration, `&open`, a macro's body): never a variable called "
         + ", ".join(f"`{w}`" for w in sorted(_COMMON_WORDS)) + "; OpenMP sets the thread count: no `num_threads` "
         "clause and no `omp_set_num_threads`", "kernel",
         "static int started = time(0);",
         more=tuple(f"static void* f{k} = (void*) &{words[0]};"
                    for k, (what, words) in enumerate(_BANNED_WORDS.items()) if what != "inline assembly"),
         short="kernels call no process, thread, file, network, system, signal or timer function and never set the "
               "thread count"),
    Rule("no inline assembly in kernel sources", "kernel", 'static void pause_cpu() { asm("pause"); }',
         short="no inline assembly"),
    Rule("no code run at load time and no symbol aliasing (constructor or destructor attributes, `init_priority`, "
         "`section`, `.init_array`, `alias`, `ifunc`, `weakref`, `symver`)", "kernel",
         "__attribute__((constructor)) static void at_load() {}",
         more=('static const char* s = ".init_array";', "#define RUN_FIRST constructor"),
         short="no load-time code (constructor attributes) or symbol aliasing"),
    Rule("no system paths (`/proc`, `/sys`, `/dev`) in kernel strings", "kernel",
         'static const char* where = "/proc/self/status";',
         short="no /proc, /sys or /dev paths"),
    Rule("threads only through OpenMP (`#pragma omp`, and `omp.h`'s `omp_get_thread_num()` and the like are "
         "fine), never threads of the kernel's own (`std::thread`, `pthread_create`)", "kernel",
         "#include <thread>\nstatic void spawn() { std::thread t([] {}); t.join(); }",
         more=("static void spawn() { std::thread t([] {}); t.join(); }",),
         short="threads only through OpenMP"),
    Rule("write C++ the way the rules can read it: no token pasting (`##`; GNU's `, ##__VA_ARGS__` is fine), no "
         "digit separators (`1'000`), no raw strings (`R\"(...)\"`), no trigraphs (`??=`), no `%:` digraph, no "
         "`_Pragma` (write `#pragma` lines), and close every string or character literal on the line it opens "
         "(no stray apostrophe in `#if 0` blocks or `#warning` text)", "kernel",
         "#define CAT(a, b) a##b",
         more=("static const int kBig = 1'000;", 'static const char* s = R"(x)";', "??=define X 1",
               "%:define X 1", '_Pragma("omp parallel for")', "#if 0\nit's off\n#endif"),
         short="no `##` token pasting, digit separators, raw strings or _Pragma"),
    Rule("no preprocessor directive that changes how the source is read: `#pragma GCC push_options`, "
         "`#pragma weak`, `#pragma redefine_extname`, `#line`, `#embed` (`#pragma omp`, `once` and `unroll` are "
         "fine)", "kernel", "#pragma GCC push_options",
         short="no #pragma GCC push_options, #pragma weak, #line or #embed"),
    Rule("every timed call runs your kernels: a `forward` that skips the library, runs PyTorch compute, or "
         "returns results kept from an earlier call is refused", "dynamic",
         short="every timed call runs your kernels"),
    Rule("kernels may not install signal handlers or timers", "dynamic",
         short="no signal handlers or timers"),
    Rule("load everything when model.py loads: once model.py and its library are loaded, the calls run where the "
         "sandbox refuses opening files and starting processes (on the CPU backend)", "dynamic",
         short="load everything when model.py loads"),
)


def device_rules(backend: str, form: str = "kernel-launch") -> tuple[Rule, ...]:
    """The rules ``backend`` adds to the common ones, in words made from its own table (``kernel_rules``,
    a ``verifier.backends.KernelRules``; for the custom-op ``form``, each place's ``project_rules`` too),
    so the prompt states what the gate refuses on that backend; () for the CPU."""
    from verifier.backends import backend_class
    from verifier.errors import UnknownBackend

    try:
        cls = backend_class(backend)
    except UnknownBackend:
        return ()
    tables: list[tuple[str, KernelRules]] = []
    own = cls.kernel_rules
    if own is not None:
        tables.append(("kernel sources", own))
    if form != FORM_KERNEL_LAUNCH:
        for place, table in cls.project_rules.items():
            if table is not own:
                tables.append((f"`{place}/` sources" if place else "the binding", table))
    said: dict[str, str] = {}     # what a rule says -> where (a project's kernel sources repeat the backend's)
    for where, table in tables:
        for what, (words, why) in table.words.items():
            said.setdefault(f"no {what} of their own ({', '.join(f'`{w}`' for w in words)}): {why}", where)
        for pattern, why in table.includes:
            said.setdefault(f"no `#include` of {_alternatives(pattern)}: {why}", where)
        for pattern, why in table.prefixes:
            names = _alternatives(pattern) if re.fullmatch(r"[\w|^]+", pattern) else ""
            said.setdefault(f"{f'no {names}: ' if names else ''}{why}", where)
        if table.launch_needs_stream:
            said.setdefault("every launch names the launcher's stream as its fourth parameter, `<<<grid, block, "
                            "shared_bytes, stream>>>` (never `0`, `nullptr` or the default stream)", where)
    return tuple(Rule(f"{where}: {says}", "device") for says, where in said.items())


def _alternatives(pattern: str) -> str:
    """A header or name pattern of a backend's table as words: ``^acl/|^aclnn`` -> "`acl/`, `aclnn`"."""
    return ", ".join(f"`{alt.strip('^$')}`" for alt in pattern.split("|"))


def contract_text(backend: str = "cpu", form: str = "kernel-launch", *, short: bool = False) -> str:
    """The rules as a prompt section's bullet list (and docs/verifier.md's, word for word, for the CPU):
    the common rules, then ``backend``'s own (``device_rules``). ``short``: each rule in a few words (``Rule.short``),
    in one paragraph, for a model whose context cannot hold the whole table."""
    rules = (*RULES, *device_rules(backend, form))
    if short:
        return "; ".join(rule.short or rule.says for rule in rules) + "."
    return "\n".join(f"- {rule.says}." for rule in rules)
