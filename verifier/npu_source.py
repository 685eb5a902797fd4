"""Tasks written for an Ascend NPU (``import torch_npu``) on a machine without torch_npu.

Many NPU benchmark references import ``torch_npu`` only to place tensors on the device (``x.npu()``,
``device="npu"``); the operator itself is plain PyTorch and runs anywhere. Such a source is rewritten
before it runs: the import is dropped, ``.npu()`` becomes a no-op and an ``"npu"`` device becomes the
CPU, and the notes say what was skipped. A reference that calls into torch_npu itself
(``torch_npu.npu_rms_norm``) is an NPU operator: it is refused in one line. torch_npu is never installed.
"""

from __future__ import annotations

import ast
import importlib.util


class NpuOnly(ValueError):
    """A task that needs torch_npu's own operators, in one line."""


def torch_npu_available() -> bool:
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return False


def _is_npu_device(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        (node.value == "npu" or node.value.startswith("npu:"))


class _Neutralise(ast.NodeTransformer):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.refusals: list[str] = []
        self.aliases: set[str] = set()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def visit_Import(self, node: ast.Import) -> ast.stmt:
        kept = []
        for alias in node.names:
            if alias.name == "torch_npu" or alias.name.startswith("torch_npu."):
                self.aliases.add(alias.asname or alias.name.split(".")[0])
                self._note(f"import torch_npu (line {node.lineno})")
            else:
                kept.append(alias)
        if not kept:
            return ast.Pass()
        node.names = kept
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.stmt:
        if node.module and (node.module == "torch_npu" or node.module.startswith("torch_npu.")):
            if any(a.name == "*" for a in node.names):
                self.refusals.append(f"from {node.module} import * (line {node.lineno})")
            else:
                names = ", ".join(a.asname or a.name for a in node.names)
                self.refusals.append(f"from {node.module} import {names} (line {node.lineno})")
            return ast.Pass()
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "is_available" and ast.unparse(f.value) in \
                ("torch.npu", "torch_npu.npu", *(f"{a}.npu" for a in self.aliases)):
            self._note(f"{ast.unparse(f)}() (False here)")
            return ast.Constant(False)
        self.generic_visit(node)
        if isinstance(f, ast.Attribute) and f.attr == "npu" and not node.args and not node.keywords:
            self._note(".npu() calls")
            return f.value
        for kw in node.keywords:
            if kw.arg == "device" and _is_npu_device(kw.value):
                kw.value = ast.Constant("cpu")
                self._note('device="npu"')
        if isinstance(f, ast.Attribute) and f.attr == "to":
            node.args = [ast.Constant("cpu") if _is_npu_device(a) else a for a in node.args]
        if isinstance(f, ast.Attribute) and f.attr == "device" and isinstance(f.value, ast.Name) and \
                f.value.id == "torch" and node.args and _is_npu_device(node.args[0]):
            node.args[0] = ast.Constant("cpu")
            self._note('torch.device("npu")')
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.Attribute:
        self.generic_visit(node)
        root: ast.expr = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.aliases | {"torch_npu"}:
            self.refusals.append(f"{ast.unparse(node)} (line {node.lineno})")
        elif isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr == "npu":
            self.refusals.append(f"torch.npu (line {node.lineno})")
        return node


def neutralise_npu(source: str) -> tuple[str, list[str]]:
    """``(source, notes)``: the source runnable without torch_npu and what was skipped (no notes and the
    source unchanged when it does not use torch_npu). Raises :class:`NpuOnly` for an NPU operator."""
    if "npu" not in source:
        return source, []
    tree = ast.parse(source)
    fixer = _Neutralise()
    # imports first, so aliases are known before their uses are visited
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch_npu":
                    fixer.aliases.add(alias.asname or "torch_npu")
    tree = fixer.visit(tree)
    if fixer.refusals:
        raise NpuOnly(f"it uses torch_npu beyond device placement ({fixer.refusals[0]}"
                      f"{f' and {len(fixer.refusals) - 1} more' if len(fixer.refusals) > 1 else ''}); "
                      "it needs an NPU with torch_npu")
    if not fixer.notes:
        return source, []
    return ast.unparse(ast.fix_missing_locations(tree)), fixer.notes
