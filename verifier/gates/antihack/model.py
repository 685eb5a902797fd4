"""The anti-hack rules on ``model.py``, read as a Python AST (the rules are listed in the package's
docstring, ``verifier.gates.antihack``); the names they know are in ``model_names``."""

from __future__ import annotations

import ast

from verifier.gates.antihack.model_names import (
    ALLOWED_DUNDER_NAMES,
    ALLOWED_IMPORTS,
    BANNED_ATTRS,
    BANNED_NAMES,
    DATA_ESCAPES,
    DO_INSTEAD,
    IMPORT_HINTS,
    INTERNAL_LIKE,
    MODULE_ATTRS,
    MODULE_INTERNALS,
    MODULES,
    NN_DATA,
    TENSOR_COMPUTE,
    TORCH_ALLOCATION,
    TORCH_FORBIDDEN,
    TORCH_HELPERS,
    TORCH_VALUES,
)


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
                        is_layer = path.startswith("torch.nn.") and path.split(".")[2] not in NN_DATA \
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
        for prefix, hint in IMPORT_HINTS.items():
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
            if alias.name == "verifier.runtime":   # before the module check, whose message would say less
                self.fail(node, "import the loader as `from verifier.runtime import load` and call `lib = load()`")
            self._check_module(node, alias.name)

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
            is_module = full in ALLOWED_IMPORTS or any(full == p or full.startswith(p + ".") for p in IMPORT_HINTS)
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
        if node.name in MODULE_INTERNALS or (node.name.startswith("_") and INTERNAL_LIKE.search(node.name)):
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

    visit_TryStar = visit_Try

    def visit_Global(self, node: ast.Global) -> None:
        self.fail(node, "global statements are not allowed (state across calls invites result caching)")

    # names and attributes ------------------------------------------------
    def _check_segment(self, node: ast.AST, name: str, owner: ast.AST | None = None) -> None:
        """One identifier of a name or attribute chain."""
        if name in DATA_ESCAPES and owner is not None:
            self.fail(node, f"{DATA_ESCAPES[name]}: {DO_INSTEAD}")
        if name in BANNED_ATTRS and owner is not None:
            if name == "functional":
                self.fail(node, "nn.functional computes what your kernel must compute")
            self.fail(node, f"attribute {name} is not allowed")
        if owner is not None and name in MODULE_ATTRS:
            self.fail(node, f".{name} reaches a module through an attribute; model.py may use only torch.<name>, "
                            f"nn.<Class> and math functions directly — {DO_INSTEAD}")
        if not name.startswith("_") or name == "_":
            return
        if name.startswith("__") and name.endswith("__"):
            if owner is None and name in ALLOWED_DUNDER_NAMES:
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
                and name not in MODULE_INTERNALS and not INTERNAL_LIKE.search(name):
            return
        self.fail(node, f"private attribute {name} is not allowed: model.py may use only public names (its own "
                        f"self._name attributes excepted) — {DO_INSTEAD}")

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
        if not imported and root in self.modules and path in MODULES:
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
                    self.fail(node, f"{path} may be used only in __init__ (to initialise parameters); {DO_INSTEAD}")
                return
            if not sub[:1].isupper():
                self.fail(node, f"nn.{sub} is not allowed: from nn use only classes (nn.Module, nn.Parameter, "
                                "layers such as nn.Linear to hold weights) and nn.init, in __init__")
            if len(parts) > 2 and parts[2] != "__init__":
                self.fail(node, f"{path} is not allowed: use nn.{sub} only to build modules and parameters in "
                                "__init__")
            if use == "call" and not self._in_init():
                self.fail(node, f"nn.{sub}(...) outside __init__: build layers and parameters once in __init__; "
                                f"{DO_INSTEAD}")
            return
        if len(parts) > 1 and not (head in TORCH_VALUES and len(parts) == 2):
            self.fail(node, f"{path} is not allowed: model.py may use torch.<name> directly (allocation in "
                            "forward, initialisation in __init__) but not reach into torch's submodules or classes")
        if len(parts) == 1 and use == "value" and head not in TORCH_VALUES:
            self.fail(node, f"torch.{head} used as a value: model.py may not keep or pass torch functions; "
                            f"{DO_INSTEAD}")

    def visit_Name(self, node: ast.Name) -> None:
        why = BANNED_NAMES.get(node.id)
        if why:
            self.fail(node, why)
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
                    and self._resolve(owner) not in MODULES:
                self.fail(node, f".{node.attr} used as a value hands the work to PyTorch later; {DO_INSTEAD}")
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
        self._check_operator(node, node.op, "@=")  # ``out @= b`` is ``out = out @ b``
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
        self._check_operator(node, node.op, "@")
        self.generic_visit(node)

    def _check_operator(self, node: ast.AST, op: ast.operator, spelling: str) -> None:
        """The operators refused outside ``__init__`` (an augmented assignment like its binary form; the
        others, on tensors, are left to the run-time op trace)."""
        if isinstance(op, ast.MatMult) and not self._in_init():
            self.fail(node, f"the {spelling} operator makes PyTorch do the matmul; call your kernel")

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
            if name not in TORCH_ALLOCATION and name not in TORCH_HELPERS and name != "nn":
                allocation = TORCH_ALLOCATION - {"Size", "no_grad", "inference_mode", "device", "dtype", "is_tensor",
                                                 "is_floating_point"}
                self.fail(node, f"{dotted}() makes PyTorch compute outside __init__; only allocation "
                                f"({', '.join(sorted(allocation))}) "
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
                                f"{DO_INSTEAD}")
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
