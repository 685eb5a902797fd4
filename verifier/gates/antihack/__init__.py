"""Gate 2, anti-hack: static rules that reject candidates which would pass the later gates without
doing the work in their own kernel, or which reach outside their box.

``model.py`` (AST):

* imports: only ``torch``, ``torch.nn``, ``math``, ``typing``, ``numbers``, ``__future__`` and, from the
  verifier, exactly ``from verifier.runtime import load``;
* no fallback to the reference (subclassing or naming ``Model``, ``nn.functional``, ``try``/``except``
  around kernels);
* no PyTorch compute outside the ``__init__`` of a top-level class (allocation and views only). Every
  other body is checked like ``forward``: methods, nested functions (also those defined inside
  ``__init__``), lambdas, generator expressions, class bodies and module code. Torch functions and
  compute methods may not be kept or passed as values (``f = torch.relu``), ``nn`` layers built in
  ``__init__`` may not be called, and classes of model.py may be instantiated only in ``__init__``;
* no data handed to NumPy or Python (``.numpy()``, ``.tolist()``, ``__array__``, ``.item()`` outside
  ``__init__``);
* no reaching through attribute chains: no private or dunder names (beyond ``super().__init__()``,
  ``__name__`` and the candidate's own ``self._name`` attributes), no attribute that names a module
  (``.torch``, ``.os``, ``.sys``, ``.importlib`` ...), only ``torch.<name>``, ``nn.<Class>`` and
  ``nn.init.<function>`` under torch, no module object used as a value;
* no ``getattr``/``setattr``/``delattr``/``vars``/``globals``/``locals``/``type``, no threads,
  processes, sockets, files, environment, no patching of torch, timers or the runtime, no hooks.

Kernel sources (text, comments and strings blanked, line continuations joined): no torch/BLAS/Python
headers, ``#include`` only of a literal ``<header>`` or ``"own_file.h"``, no process, thread, file,
network, environment, timer or signal functions (named anywhere, not only called: a declaration,
``(signal)(...)``, ``&open``, ``f = time;`` or a macro's body is refused too, and so a variable by such a
name; ``num_threads`` only in a directive or before ``(``), no inline assembly or symbol aliasing, no code run at load
time (constructor/destructor attributes, ``init_priority``, ``.init_array`` sections), no ``_Pragma``,
no system paths (``/proc``) in strings, and none of the spellings that make the text scanner and the
compiler disagree (raw strings, digit separators, trigraphs, ``%:`` digraphs, unterminated literals).
Device backends add their own rules, declared in their own module (``kernel_rules`` on the backend,
read through the backend table): on CUDA no streams, graphs, events or device allocation of the
kernel's own (work must run on the stream the runtime passes, timed by the verifier) and every
``<<<...>>>`` launch names its stream; on Ascend no ACL runtime calls (the runtime launches the kernel
on torch_npu's stream) and the CANN kernel headers may be included with quotes.

The worker adds a dynamic check of the same idea (the aten ops ``forward`` actually ran).

Modules: ``model`` (the AST rules) with ``model_names`` (the names they know), ``kernel`` (the text
rules), ``devices`` (a backend's own kernel rules); the C lexer they share with ``verifier.toolchain.cdecl`` is
``verifier.toolchain.csource``.
"""

from __future__ import annotations

from verifier.backends.base import Backend, KernelRules
from verifier.gates.antihack.devices import kernel_rules
from verifier.gates.antihack.kernel import check_kernel_source
from verifier.gates.antihack.model import Violation, check_model


def check_candidate(files: dict[str, str], source_suffixes: tuple[str, ...], header_suffixes: tuple[str, ...],
                    backend: str | Backend = "cpu") -> str | None:
    """The anti-hack gate over a whole candidate (``backend`` adds its device rules)."""
    problem = check_model(files["model.py"])
    if problem:
        return problem
    local = set(files)
    project = any("/" in n for n in files)   # a custom-op project (the format gate admits folders only there)
    for name, text in files.items():
        if name.endswith((*source_suffixes, *header_suffixes)) or (project and name.endswith((".cc", ".h", ".hpp"))):
            problem = check_kernel_source(name, text, local, backend, project=project)
            if problem:
                return problem
    if project:   # what the backend checks across a custom-op project's files (Ascend: the binding's calls)
        from verifier.backends import backend_class
        from verifier.errors import UnknownBackend

        try:
            cls = backend_class(backend) if isinstance(backend, str) else backend
        except UnknownBackend:
            return None
        return cls.project_problem(files)
    return None


__all__ = ["KernelRules", "Violation", "check_candidate", "check_kernel_source", "check_model", "kernel_rules"]
