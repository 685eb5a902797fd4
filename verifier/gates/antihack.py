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
network, environment, timer or signal functions (named anywhere, not only called: a declaration or a
typedef'd pointer to them is refused too), no inline assembly or symbol aliasing, no code run at load
time (constructor/destructor attributes, ``init_priority``, ``.init_array`` sections), no ``_Pragma``,
no system paths (``/proc``) in strings, and none of the spellings that make the text scanner and the
compiler disagree (raw strings, digit separators, trigraphs, ``%:`` digraphs, unterminated literals).
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


# Modules model.py may import (``verifier.runtime`` only as ``from verifier.runtime import load``).
ALLOWED_IMPORTS = {"torch", "torch.nn", "math", "typing", "numbers", "verifier.runtime", "__future__"}
_MODULES = {"torch", "torch.nn", "torch.nn.init", "math", "typing", "numbers", "__future__"}
_IMPORT_HINTS = {
    "torch.nn.functional": "nn.functional computes what your kernel must compute",
    "torch.utils.cpp_extension": "build through the candidate's sources and verifier.runtime.load(), not cpp_extension",
    "ctypes": "call kernels through verifier.runtime.load(), which checks arguments",
    "numpy": "numpy would compute outside the kernel",
}
_DO_INSTEAD = "compute in your kernel; model.py may only allocate outputs and call lib functions"
# torch.<name>(...) calls allowed outside __init__: allocation and shape helpers.
TORCH_ALLOCATION = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                    "full_like", "Size", "no_grad", "inference_mode", "device", "dtype", "is_tensor",
                    "is_floating_point"}
_TORCH_HELPERS = {"finfo", "iinfo"}
# torch.<name> that may be used as a value (not only called): dtypes, types, layouts, constants.
TORCH_VALUES = set("""float32 float float64 double float16 half bfloat16 int8 int16 short int32 int int64 long
uint8 uint16 uint32 uint64 bool complex64 complex128 cfloat cdouble chalf float8_e4m3fn float8_e5m2
float8_e4m3fnuz float8_e5m2fnuz Tensor Size device dtype layout strided memory_format contiguous_format
channels_last channels_last_3d preserve_format inf nan pi e finfo iinfo""".split()) | TORCH_ALLOCATION
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
count_nonzero bincount histc cov corrcoef einsum kron cdist apply_ map_ map2_ item""".split())
# Attributes that hand a tensor's data to NumPy/Python or to raw memory: nowhere in model.py.
DATA_ESCAPES = {"numpy": "x.numpy() hands the tensor to NumPy", "tolist": "x.tolist() computes in Python",
                "__array__": "__array__ hands the tensor to NumPy", "__array_interface__": "__array_interface__ hands "
                "the tensor to NumPy", "__array_struct__": "__array_struct__ hands the tensor to NumPy",
                "__cuda_array_interface__": "__cuda_array_interface__ hands the tensor to another library",
                "__dlpack__": "__dlpack__ hands the tensor to another library",
                "untyped_storage": "storage access is not allowed", "storage": "storage access is not allowed"}
BANNED_NAMES = {"Model": "do not use the reference Model: write ModelNew on your own kernels",
                "eval": "eval is not allowed", "exec": "exec is not allowed", "compile": "compile is not allowed",
                "__import__": "dynamic imports are not allowed", "open": "model.py may not open files",
                "globals": "globals() is not allowed", "locals": "locals() is not allowed",
                "vars": "vars() is not allowed", "setattr": "setattr is not allowed (no patching): assign "
                "attributes directly (self.name = value)", "delattr": "delattr is not allowed",
                "getattr": "getattr is not allowed: write the attribute directly (obj.name)",
                "type": "type() is not allowed in model.py", "breakpoint": "breakpoint is not allowed",
                "input": "input is not allowed", "exit": "exit is not allowed", "quit": "quit is not allowed",
                "__builtins__": "__builtins__ is not allowed", "memoryview": "memoryview is not allowed",
                "F": None}
BANNED_ATTRS = {"__class__", "__dict__", "__globals__", "__code__", "__subclasses__", "__bases__", "__mro__",
                "__builtins__", "__getattribute__", "__setattr__", "__closure__", "__func__", "__self__",
                "__module__", "__wrapped__", "__defaults__", "__kwdefaults__", "__reduce__", "__reduce_ex__",
                "__loader__", "__spec__", "__import__", "__call__", "__torch_function__", "__torch_dispatch__",
                "data_ptr", "_cfunc", "_dll", "functional"}
# Attribute names that are (or lead to) modules: never an attribute in model.py.
MODULE_ATTRS = {"os", "sys", "builtins", "importlib", "ctypes", "subprocess", "socket", "threading",
                "multiprocessing", "signal", "inspect", "gc", "types", "shutil", "pathlib", "pickle", "marshal",
                "runpy", "functools", "operator", "numpy", "np", "torch", "weakref", "copyreg", "contextlib",
                "warnings", "traceback", "linecache", "tempfile", "fcntl", "mmap", "resource", "platform",
                "sysconfig", "site", "atexit", "time", "datetime", "random", "verifier", "runtime", "cpp_extension",
                "utils", "modules", "library"}
_ALLOWED_DUNDER_NAMES = {"__name__"}
# nn.Module internals: a candidate may not override them through its own private names.
_MODULE_INTERNALS = set("""_apply _backward_hooks _backward_pre_hooks _buffers _call_impl _compiled_call_impl
_forward_hooks _forward_hooks_always_called _forward_hooks_with_kwargs _forward_pre_hooks
_forward_pre_hooks_with_kwargs _get_backward_hooks _get_backward_pre_hooks _get_name _is_full_backward_hook
_load_from_state_dict _load_state_dict_post_hooks _load_state_dict_pre_hooks _maybe_warn_non_full_backward_hook
_modules _named_members _non_persistent_buffers_set _parameters _register_load_state_dict_pre_hook
_register_state_dict_hook _replicate_for_data_parallel _save_to_state_dict _slow_forward _state_dict_hooks
_state_dict_pre_hooks _version _wrapped_call_impl""".split())
_INTERNAL_LIKE = re.compile(r"hook|_impl$|state_dict|^_apply$|^_(?:modules|parameters|buffers)$")
# nn classes that hold data rather than compute: their objects may be used in forward.
_NN_DATA = {"Parameter", "ParameterList", "ParameterDict", "Buffer", "UninitializedParameter",
            "UninitializedBuffer"}


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


def _import_map(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it names (a module path or ``module.name``), from every import in the file."""
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                modules[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    modules[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
    return modules


def _is_self_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


class _ModelRules(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, libraries: set[str]) -> None:
        self.modules = _import_map(tree)    # local name -> module path
        self.libraries = libraries          # names bound to the kernel library (lib, self.lib, ...)
        self.scopes: list[tuple[str, str]] = []   # ("class"|"def"|"lambda"|"genexp", name)
        self.loads_library = False
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        self.classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        self.own_private = self._own_private_names(tree)
        self.nn_objects = self._nn_objects(tree)

    def fail(self, node: ast.AST, message: str) -> None:
        raise Violation(f"model.py line {getattr(node, 'lineno', '?')}: {message}")

    # what the file binds ---------------------------------------------------
    @staticmethod
    def _own_private_names(tree: ast.Module) -> set[str]:
        """``_name`` attributes the candidate binds itself: ``self._name = ...`` or a method/class attribute."""
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self_attr(node):
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(item.name)
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        return {n for n in names if n.startswith("_") and not n.startswith("__")}

    def _resolve(self, dotted: str) -> str:
        if not dotted:
            return ""
        root, _, rest = dotted.partition(".")
        full = self.modules.get(root)
        if full is None:
            return dotted
        return f"{full}.{rest}" if rest else full

    def _nn_objects(self, tree: ast.Module) -> set[str]:
        """Names bound to nn layers (``self.conv = nn.Conv2d(...)``, and plain copies of those)."""
        names: set[str] = set()
        for _ in range(3):
            for node in ast.walk(tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    value = node.value
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    is_layer = False
                    if isinstance(value, ast.Call):
                        path = self._resolve(_dotted(value.func))
                        is_layer = path.startswith("torch.nn.") and path.split(".")[2] not in _NN_DATA \
                            and path.split(".")[2][:1].isupper()
                    elif _dotted(value) in names:
                        is_layer = True
                    if is_layer:
                        names.update(_dotted(t) for t in targets if _dotted(t))
        return names

    # scopes --------------------------------------------------------------
    def _in_init(self) -> bool:
        """In the body of a top-level class's ``__init__`` itself: the one place PyTorch may compute."""
        return len(self.scopes) == 2 and self.scopes[0][0] == "class" and self.scopes[0][1] in self.classes \
            and self.scopes[1] == ("def", "__init__")

    def _where(self) -> str:
        names = [n for kind, n in self.scopes if kind != "class"]
        return names[-1] if names else "module code"

    def _visit_arguments(self, args: ast.arguments) -> None:
        for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(default)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)

    # imports -------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> None:
        for prefix, hint in _IMPORT_HINTS.items():
            if module == prefix or module.startswith(prefix + "."):
                self.fail(node, f"import of {module}: {hint}")
        if module == "verifier" or module.startswith("verifier."):
            self.fail(node, f"import of {module} is not allowed: from the verifier, import only the loader, "
                            "`from verifier.runtime import load`, and call `lib = load()`")
        if module not in ALLOWED_IMPORTS:
            self.fail(node, f"import of {module} is not allowed; model.py may import only torch, torch.nn, "
                            "math, typing, numbers and `from verifier.runtime import load`")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            if alias.name == "verifier.runtime":
                self.fail(node, "import the loader as `from verifier.runtime import load` and call `lib = load()`")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.fail(node, "relative imports are not allowed")
        for alias in node.names:
            if alias.name == "*":
                self.fail(node, "star imports are not allowed: import the names you use")
            full = f"{module}.{alias.name}"
            if module == "verifier" or module.startswith("verifier."):
                if full != "verifier.runtime.load":
                    self.fail(node, f"import of {full} is not allowed: from the verifier, import only the loader, "
                                    "`from verifier.runtime import load`, and call `lib = load()`")
                continue
            # `from torch import nn` imports a module; `from math import sqrt` a name.
            is_module = full in ALLOWED_IMPORTS or any(full == p or full.startswith(p + ".") for p in _IMPORT_HINTS)
            self._check_module(node, full if is_module else module)
            if module == "torch" and alias.name in TORCH_FORBIDDEN:
                self.fail(node, f"torch.{alias.name} is not allowed in model.py")
            if module == "__future__":
                continue
            if alias.name.startswith("_") or alias.name in MODULE_ATTRS or alias.name in DATA_ESCAPES:
                self.fail(node, f"import of {full} is not allowed: import only public functions and classes "
                                "(from torch import nn)")
            self._check_path(node, full, "import")

    # structure -----------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = _dotted(base)
            if self._resolve(name) != "torch.nn.Module" and name not in ("nn.Module", "torch.nn.Module", "Module"):
                self.fail(node, f"class {node.name} derives from {name or 'an expression'}; ModelNew must derive "
                                "from nn.Module and must not reuse the reference Model")
        for kw in node.keywords:
            self.fail(node, f"class keyword {kw.arg!r} is not allowed")
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.scopes.append(("class", node.name))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name != "__init__":
            self.fail(node, f"defining {node.name} is not allowed: define __init__, forward and your own helper "
                            "methods (without dunder names)")
        if node.name in _MODULE_INTERNALS or (node.name.startswith("_") and _INTERNAL_LIKE.search(node.name)):
            self.fail(node, f"defining {node.name} overrides an nn.Module internal: give your helper another name")
        for decorator in node.decorator_list:   # evaluated where the function is defined
            self.visit(decorator)
        self._visit_arguments(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self.scopes.append(("def", node.name))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_arguments(node.args)
        self.scopes.append(("lambda", "a lambda"))
        self.visit(node.body)
        self.scopes.pop()

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        # Runs lazily, possibly long after __init__: checked like forward.
        self.scopes.append(("genexp", "a generator expression"))
        self.generic_visit(node)
        self.scopes.pop()

    def visit_Try(self, node: ast.AST) -> None:
        self.fail(node, "try/except is not allowed: a fallback path hides kernel failures; let errors propagate")

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_Global(self, node: ast.Global) -> None:
        self.fail(node, "global statements are not allowed (state across calls invites result caching)")

    # names and attributes ------------------------------------------------
    def _check_segment(self, node: ast.AST, name: str, owner: ast.AST | None = None) -> None:
        """One identifier of a name or attribute chain."""
        if name in DATA_ESCAPES and owner is not None:
            self.fail(node, f"{DATA_ESCAPES[name]}: {_DO_INSTEAD}")
        if name in BANNED_ATTRS and owner is not None:
            if name == "functional":
                self.fail(node, "nn.functional computes what your kernel must compute")
            self.fail(node, f"attribute {name} is not allowed")
        if owner is not None and name in MODULE_ATTRS:
            self.fail(node, f".{name} reaches a module through an attribute; model.py may use only torch.<name>, "
                            f"nn.<Class> and math functions directly — {_DO_INSTEAD}")
        if not name.startswith("_") or name == "_":
            return
        if name.startswith("__") and name.endswith("__"):
            if owner is None and name in _ALLOWED_DUNDER_NAMES:
                return
            if name == "__init__" and owner is not None:
                base = self._resolve(_dotted(owner))
                is_super = isinstance(owner, ast.Call) and _dotted(owner.func) == "super"
                if (is_super or base == "torch.nn.Module") and self._in_init():
                    return
                self.fail(node, "__init__ may only be called as super().__init__() inside __init__: build state "
                                "once in __init__ and keep forward to allocation and kernel calls")
            self.fail(node, f"{name} is not allowed: model.py may not use dunder names (only super().__init__() "
                            "and __name__)")
        if owner is None:
            return   # a bare `_name` is the candidate's own (imports of private names are refused below)
        if isinstance(owner, ast.Name) and owner.id == "self" and name in self.own_private \
                and name not in _MODULE_INTERNALS and not _INTERNAL_LIKE.search(name):
            return
        self.fail(node, f"private attribute {name} is not allowed: model.py may use only public names (its own "
                        f"self._name attributes excepted) — {_DO_INSTEAD}")

    def _outermost(self, node: ast.AST) -> bool:
        parent = self.parents.get(id(node))
        return not (isinstance(parent, ast.Attribute) and parent.value is node)

    def _called(self, node: ast.AST) -> bool:
        parent = self.parents.get(id(node))
        return isinstance(parent, ast.Call) and parent.func is node

    def _check_path(self, node: ast.AST, dotted: str, use: str) -> None:
        """A whole name/attribute chain (``nn.init.normal_``), resolved through the imports; ``use`` is
        ``"call"`` (the chain is called), ``"value"`` or ``"import"`` (``dotted`` is then the full path)."""
        imported = use == "import"
        path = dotted if imported else self._resolve(dotted)
        root = dotted.split(".")[0]
        if not imported and root in self.modules and path in _MODULES:
            self.fail(node, f"module {dotted} may only be used as {dotted}.<name>; do not store, pass or call it")
        parts = path.split(".")
        if parts[0] == "torch" and len(parts) > 1:
            self._check_torch_path(node, path, parts[1:], use)
        elif parts[0] in ("math", "typing", "numbers") and (imported or root in self.modules) and len(parts) > 2:
            self.fail(node, f"{path}: use {parts[0]}.<name> directly, not attributes of its members")
        elif path.startswith("verifier.") and path != "verifier.runtime.load":
            self.fail(node, f"{path} is not allowed: from the verifier, model.py uses only load()")
        if root in self.classes and not self._in_init() and not imported:
            self.fail(node, f"{root} is used outside __init__: create sub-modules and helpers once in __init__ "
                            "(forward may only allocate outputs and call lib functions)")

    def _check_torch_path(self, node: ast.AST, path: str, parts: list[str], use: str) -> None:
        head = parts[0]
        if head in TORCH_FORBIDDEN:
            self.fail(node, f"{path} is not allowed in model.py")
        if head == "nn":
            if len(parts) == 1:
                return   # `import torch.nn`, `torch.nn.X`: the chain is checked at its end
            sub = parts[1]
            if sub == "functional":
                self.fail(node, "nn.functional computes what your kernel must compute")
            if sub == "init":
                if len(parts) > 3:
                    self.fail(node, f"{path} is not allowed: use nn.init.<function> in __init__")
                if len(parts) == 3 and use != "import" and not self._in_init():
                    self.fail(node, f"{path} may be used only in __init__ (to initialise parameters); {_DO_INSTEAD}")
                return
            if not sub[:1].isupper():
                self.fail(node, f"nn.{sub} is not allowed: from nn use only classes (nn.Module, nn.Parameter, "
                                "layers such as nn.Linear to hold weights) and nn.init, in __init__")
            if len(parts) > 2 and parts[2] != "__init__":
                self.fail(node, f"{path} is not allowed: use nn.{sub} only to build modules and parameters in "
                                "__init__")
            if use == "call" and not self._in_init():
                self.fail(node, f"nn.{sub}(...) outside __init__: build layers and parameters once in __init__; "
                                f"{_DO_INSTEAD}")
            return
        if len(parts) > 1 and not (head in TORCH_VALUES and len(parts) == 2):
            self.fail(node, f"{path} is not allowed: model.py may use torch.<name> directly (allocation in "
                            "forward, initialisation in __init__) but not reach into torch's submodules or classes")
        if len(parts) == 1 and use == "value" and head not in TORCH_VALUES:
            self.fail(node, f"torch.{head} used as a value: model.py may not keep or pass torch functions; "
                            f"{_DO_INSTEAD}")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_NAMES and BANNED_NAMES[node.id]:
            self.fail(node, BANNED_NAMES[node.id])
        if node.id == "F" and self.modules.get("F", "").endswith("functional"):
            self.fail(node, "nn.functional computes what your kernel must compute")
        self._check_segment(node, node.id)
        if self._outermost(node) and isinstance(node.ctx, ast.Load):
            self._check_path(node, node.id, "call" if self._called(node) else "value")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check_segment(node, node.attr, node.value)
        dotted = _dotted(node)
        if self._outermost(node) and isinstance(node.ctx, ast.Load):
            called = self._called(node)
            if dotted:
                self._check_path(node, dotted, "call" if called else "value")
            owner = _dotted(node.value)
            if not called and node.attr in TENSOR_COMPUTE and owner not in self.libraries and owner != "self" \
                    and self._resolve(owner) not in _MODULES:
                self.fail(node, f".{node.attr} used as a value hands the work to PyTorch later; {_DO_INSTEAD}")
        if node.attr.startswith("register_") and "hook" in node.attr:
            self.fail(node, f"{node.attr} is not allowed: no hooks; forward must call your kernel directly")
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            dotted = _dotted(target if isinstance(target, ast.Attribute) else target.value)
            root = dotted.split(".")[0] if dotted else ""
            owner = dotted.rsplit(".", 1)[0] if "." in dotted else dotted
            if root in self.modules or owner in self.libraries:
                self.fail(target, f"assigning to {dotted} patches a module or the kernel library; not allowed")
            if isinstance(target, ast.Attribute) and not _is_self_attr(target) and target.attr.startswith("_"):
                self.fail(target, f"assigning to {dotted or target.attr}: model.py may set private attributes "
                                  "only on self")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    # calls and operators -------------------------------------------------
    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_init():
            self.fail(node, "the @ operator makes PyTorch do the matmul; call your kernel")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.visit(func)   # the callee's own names first (getattr, private names, chains)
        dotted = _dotted(func)
        root = dotted.split(".")[0] if dotted else ""
        path = self._resolve(dotted)
        if "functional" in dotted.split("."):
            self.fail(node, "nn.functional computes what your kernel must compute")
        if path == "verifier.runtime.load":
            self.loads_library = True
            if node.args or node.keywords:
                self.fail(node, "call load() without arguments: it returns this candidate's own library")
        if path.startswith("torch.") and not self._in_init():
            name = path.split(".")[1]
            if name not in TORCH_ALLOCATION and name not in _TORCH_HELPERS and name != "nn":
                self.fail(node, f"{dotted}() makes PyTorch compute outside __init__; only allocation "
                                f"({', '.join(sorted(TORCH_ALLOCATION - {'Size', 'no_grad', 'inference_mode', 'device', 'dtype', 'is_tensor', 'is_floating_point'}))}) "
                                "and views are allowed — do the work in your kernel")
        owner = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        if isinstance(func, ast.Attribute) and not self._in_init() and owner not in self.libraries \
                and self._resolve(root) != "math":
            method = func.attr
            if method in TENSOR_COMPUTE or (method.endswith("_") and method.rstrip("_") in TENSOR_COMPUTE):
                what = ".item() reads a tensor into Python" if method == "item" else \
                    f".{method}() makes PyTorch compute"
                self.fail(node, f"{what} in {self._where()}; do the work in your kernel (model.py may only "
                                "allocate outputs and call lib functions)")
        if not self._in_init():
            layer = dotted if dotted in self.nn_objects else owner if owner in self.nn_objects and \
                isinstance(func, ast.Attribute) and func.attr == "forward" else ""
            if not layer and isinstance(func, ast.Subscript) and _dotted(func.value) in self.nn_objects:
                layer = _dotted(func.value)
            if layer:
                self.fail(node, f"calling {layer}, an nn layer, makes PyTorch compute; pass its weights "
                                f"({layer}.weight, {layer}.bias) to your kernel instead")
            if isinstance(func, ast.Call):
                self.fail(node, "calling the result of a call is not allowed outside __init__; "
                                f"{_DO_INSTEAD}")
        for arg in [*node.args, *node.keywords]:
            self.visit(arg)


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
    rules = _ModelRules(tree, _library_names(tree))
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
    (r"^(?:thread|future|pthread\.h|threads\.h)$", "no threads of your own in kernels: parallelise with OpenMP "
     "(#pragma omp parallel for)"),
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
    "system call": ["syscall", "ptrace", "mmap", "munmap", "mremap", "mprotect", "pkey_mprotect", "signal",
                    "sigaction", "kill", "prctl", "ioctl", "setrlimit", "prlimit", "setpriority"],
    "timer": ["sleep", "usleep", "nanosleep", "sleep_for", "sleep_until", "clock", "clock_gettime", "clock_getres",
              "gettimeofday", "timespec_get", "getrusage", "times", "ftime", "time", "__rdtsc", "_rdtsc", "rdtsc",
              "__rdtscp", "rdtscp", "__builtin_ia32_rdtsc", "__builtin_ia32_rdtscp", "__builtin_ia32_rdpmc",
              "__rdpmc", "__builtin_readcyclecounter", "__builtin_readsteadycounter", "omp_get_wtime",
              "omp_get_wtick", "chrono", "steady_clock", "high_resolution_clock", "system_clock"],
    "inline assembly": ["asm", "__asm__", "__asm"],
    "thread count": ["omp_set_num_threads", "omp_set_dynamic", "omp_set_max_active_levels", "omp_set_nested",
                     "num_threads", "omp_set_schedule", "kmp_set_defaults", "mkl_set_num_threads"],
}
# Common words that are banned only where called; every other banned word is banned wherever it appears
# (a declaration, a typedef'd pointer or `auto f = &fork;` names it as well as a call does).
_CALL_ONLY_WORDS = {"socket", "connect", "open", "remove", "signal", "kill", "sleep", "clock", "time", "times",
                    "clone", "num_threads"}
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
_SPLICE = re.compile(r"\\[ \t\r]*\n")
_INCLUDE = re.compile(r"\s*#\s*include\s*(<[^<>\"'\n]+>|\"[^<>\"'\n]+\")\s*")
_HAS_INCLUDE = re.compile(r"__has_include\s*\(\s*(?:<[^<>\"'\n]+>|\"[^<>\"'\n]+\")\s*\)")


def _splice(text: str) -> tuple[str, list[int]]:
    """``text`` with backslash-newlines joined, as the compiler reads it, and each character's line."""
    pieces: list[str] = []
    lines: list[int] = []
    pos, line = 0, 1
    for m in [*_SPLICE.finditer(text), None]:
        stop = m.start() if m else len(text)
        segment = text[pos:stop]
        pieces.append(segment)
        for ch in segment:
            lines.append(line)
            line += ch == "\n"
        if m:
            line += 1
            pos = m.end()
    lines.append(line)
    return "".join(pieces), lines


def _scan(text: str) -> tuple[str, str, list[tuple[int, str]], int | None]:
    """Comments blanked, as the compiler reads ``text`` (already spliced): the code with string and
    character literals blanked too, the code with literals kept, the literals (position, text; adjacent
    string literals joined as the compiler joins them), and the position of a literal that does not
    close on its own line (where a text scanner and the compiler could disagree about what is code)."""
    blank, keep = list(text), list(text)
    found: list[tuple[int, str]] = []
    i, n, last = 0, len(text), -1
    while i < n:
        if text.startswith("//", i) or text.startswith("/*", i):
            if text[i + 1] == "/":
                j = text.find("\n", i)
                j = n if j < 0 else j
            else:
                j = text.find("*/", i + 2)
                j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    blank[k] = keep[k] = " "
            i = j
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] != quote:
                return "".join(blank), "".join(keep), found, i
            for k in range(i + 1, j):
                blank[k] = " "
            literal = text[i:j + 1]
            if quote == '"' and found and found[-1][1].startswith('"') and last >= 0 and not text[last:i].strip():
                found[-1] = (found[-1][0], found[-1][1][:-1] + literal[1:])   # "a" "b" is one literal "ab"
            else:
                found.append((i, literal))
            i = last = j + 1
        else:
            i += 1
    return "".join(blank), "".join(keep), found, None


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


def _attribute_bodies(code: str):
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


def _device_rule(name: str, code: str, rules: DeviceRules, line_of: list[int]) -> str | None:
    for what, (words, why) in rules.words.items():
        for word in words:
            m = re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", code)   # named anywhere, not only called
            if m:
                lineno = line_of[m.start()]
                return f"{name} line {lineno}: {word} is not allowed in kernels ({what}): {why}"
    for pattern, why in rules.prefixes:
        m = re.search(rf"(?<![\w.])(?:{pattern})", code)
        if m:
            lineno = line_of[m.start()]
            return f"{name} line {lineno}: {m.group(0).rstrip('( ')} is not allowed in kernels: {why}"
    if rules.launch_needs_stream:
        for m in re.finditer(r"<<<(.*?)>>>", code, re.S):
            parts = _split_launch(m.group(1))
            lineno = line_of[m.start()]
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


def _directive_problem(name: str, lineno: int, line: str, local_files: set[str],
                        rules: DeviceRules | None) -> str | None:
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
            if target in rules.sdk_headers:
                return None
        if quoted and target not in local_files:
            return f"{name} line {lineno}: #include \"{target}\": only the candidate's own files may be included with quotes"
        if target.startswith("/") or ".." in target:
            return f"{name} line {lineno}: #include <{target}>: absolute or parent paths are not allowed"
        for pattern, why in _BANNED_INCLUDES:
            if re.search(pattern, target):
                return f"{name} line {lineno}: #include <{target}>: {why}"
        return None
    if directive in ("embed", "line") or re.match(r"\s*#\s*pragma\s+(?:GCC\s+push_options|weak\b|redefine_extname\b)",
                                                  line):
        text = " ".join(line.split())
        return (f"{name} line {lineno}: {text} is not allowed in kernels (this preprocessor directive changes how "
                "the source is read; #pragma omp, once and unroll are fine)")
    return None


def check_kernel_source(name: str, source: str, local_files: set[str], backend: str = "cpu") -> str | None:
    """None when a kernel source follows the rules (the common ones plus ``backend``'s), else the first
    violation."""
    rules = DEVICE_RULES.get(backend)
    problem = _lexical_problem(name, source)
    if problem:
        return problem
    spliced, line_of = _splice(source)
    code, no_comments, literals, open_at = _scan(spliced)
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
    if "##" in code:
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
            # Most are banned wherever the word appears; a few common words only where called.
            tail = r"\s*\(" if word in _CALL_ONLY_WORDS else r"(?!\w)"
            m = re.search(rf"(?<![\w.]){re.escape(word)}{tail}", code)
            if m:
                why = _THREAD_COUNT_WHY if what == "thread count" else _WORD_WHY
                return f"{name} line {line_of[m.start()]}: {word} is not allowed in kernels ({what}): {why}"
    if rules is not None:
        return _device_rule(name, code, rules, line_of)
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
