"""The anti-hack gate's rules as one table, in the words a model reads: every prompt's "Rules the
verifier enforces" and docs/verifier.md are generated from it, and each static rule carries a violating
example that a test runs through the gate (``check_candidate``), so the table and the gate cannot
diverge. Dynamic rules are checked on the timed calls (``verifier.gates.performance``).

A ``model`` example is appended to a correct ``model.py`` as module code (checked like ``forward``);
a ``kernel`` example is appended to a correct kernel source.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One rule: what it says, where it applies (``model``, ``kernel`` or ``dynamic``), and a violation."""

    says: str
    where: str
    example: str = ""


RULES: tuple[Rule, ...] = (
    Rule("model.py imports only `torch`, `torch.nn`, `math`, `typing`, `numbers`, `__future__` and exactly "
         "`from verifier.runtime import load`", "model", "import numpy"),
    Rule("no fallback to the reference: no `nn.functional`, no subclassing or naming `Model`", "model",
         "import torch.nn.functional as F"),
    Rule("no `try`/`except` anywhere in model.py", "model", "try:\n    pass\nexcept Exception:\n    pass"),
    Rule("no PyTorch compute outside `__init__`: `forward` (and every other function or module code) may only "
         "allocate (`torch.empty`, `torch.empty_like`, `torch.zeros`), reshape/view and call the library; nn "
         "layers built in `__init__` hold weights and are never called", "model",
         "y = torch.relu(torch.empty(2))"),
    Rule("no torch function kept or passed as a value (`f = torch.relu`)", "model", "f = torch.relu"),
    Rule("no data handed to NumPy or Python outside `__init__` (`.numpy()`, `.tolist()`, `.item()`, "
         "`__array__`)", "model", "v = torch.empty(2).numpy()"),
    Rule("no private or dunder attributes (`w._version`, `x.__class__`) beyond `super().__init__()`, "
         "`__name__` and your own `self._name` attributes", "model", "v = torch.empty(2)._version"),
    Rule("no `getattr`, `setattr`, `delattr`, `vars`, `globals`, `locals` or `type`", "model",
         "g = getattr(torch, 'empty')"),
    Rule("no files, threads, processes, sockets, environment, timers or hooks in model.py", "model",
         "h = open('x')"),
    Rule("no patching of torch, the runtime or the harness (assigning to their attributes)", "model",
         "torch.empty = None"),
    Rule("kernel sources include no torch, BLAS or Python headers", "kernel", "#include <cblas.h>"),
    Rule("kernel sources call no process, file, network, environment, timer or signal functions, and "
         "name none of them anywhere (never a variable called `time`, `clock`, `signal` or `open`)", "kernel",
         "static int started = time(0);"),
    Rule("no inline assembly in kernel sources", "kernel", 'static void pause_cpu() { asm("pause"); }'),
    Rule("no code run at load time (constructor or destructor attributes, `init_priority`)", "kernel",
         "__attribute__((constructor)) static void at_load() {}"),
    Rule("no system paths (`/proc`, `/sys`) in kernel strings", "kernel",
         'static const char* where = "/proc/self/status";'),
    Rule("threads only through OpenMP (`#pragma omp`, and `omp.h`'s `omp_get_thread_num()` and the like are "
         "fine), never threads of the kernel's own (`std::thread`, `pthread_create`)", "kernel",
         "#include <thread>\nstatic void spawn() { std::thread t([] {}); t.join(); }"),
    Rule("every timed call runs your kernels: a `forward` that skips the library, runs PyTorch compute, or "
         "returns results kept from an earlier call is refused", "dynamic"),
    Rule("kernels may not install signal handlers or timers", "dynamic"),
)


def contract_text() -> str:
    """The rules as a prompt section's bullet list (and docs/verifier.md's, word for word)."""
    return "\n".join(f"- {rule.says}." for rule in RULES)
