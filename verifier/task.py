"""What the verifier needs to know about a task, and how a KernelBench task file is loaded.

A task file defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``. Its
module-level integer constants (``batch_size = 16``) are its *sizes*: the verifier changes them for
the second-shape trials (one smaller, one larger), and the engine scales them down for CPU runs. Changing a size rewrites the
assignment in the source before it runs, so derived constants (``hidden = 4 * dim``) follow.
"""

from __future__ import annotations

import ast
import hashlib
import types
from dataclasses import dataclass, field
from typing import Any

# Module-level integers whose names say they are not extents: changing them changes the operator.
_NOT_SIZES = ("axis", "kernel", "stride", "pad", "dilation", "group", "head", "seed", "reduce", "num_classes")
# Integers below this are shapes' small parts (channels=3, kernel=3) and stay as they are.
MIN_SIZE = 8


@dataclass(frozen=True)
class TaskSpec:
    """A task as the verifier sees it: the reference source, which sizes to change, tolerances."""

    id: str
    source: str
    path: str = ""
    level: int = 1
    size_overrides: dict[str, int] = field(default_factory=dict)
    atol: float | None = None
    rtol: float | None = None

    @property
    def key(self) -> str:
        """Content key of the reference as it will run (source + size overrides)."""
        h = hashlib.sha256(self.source.encode())
        h.update(repr(sorted(self.size_overrides.items())).encode())
        return h.hexdigest()[:20]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "path": self.path,
            "level": self.level,
            "size_overrides": dict(self.size_overrides),
            "atol": self.atol,
            "rtol": self.rtol,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskSpec":
        return cls(**d)


def _module_assignments(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            yield node.targets[0].id, node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            yield node.target.id, node


def module_constants(source: str) -> dict[str, Any]:
    """Module-level literal constants (ints, floats, strings) of a task file, by name."""
    out: dict[str, Any] = {}
    for name, node in _module_assignments(ast.parse(source)):
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, (int, float, str)):
            if not isinstance(value.value, bool):
                out[name] = value.value
    return out


def size_constants(source: str) -> dict[str, int]:
    """The module-level integers that are extents (scalable sizes), by name."""
    sizes = {}
    for name, value in module_constants(source).items():
        if not isinstance(value, int) or value < MIN_SIZE:
            continue
        if any(word in name.lower() for word in _NOT_SIZES):
            continue
        sizes[name] = value
    return sizes


def alt_shape_candidates(source: str, overrides: dict[str, int]) -> list[dict[str, int]]:
    """Smaller second-shape size sets to try, in order: an odd, ragged variant first, then a halved one."""
    sizes = {**size_constants(source), **overrides}
    if not sizes:
        return []
    odd = {k: max(MIN_SIZE // 2, v * 3 // 4 + 1) for k, v in sizes.items()}
    half = {k: max(MIN_SIZE // 2, v // 2) for k, v in sizes.items()}
    variants = []
    for v in (odd, half):
        if v != sizes and v not in variants:
            variants.append(v)
    return variants


# A larger second shape may hold at most this many times the default shape's input elements, and
# at most LARGER_MAX_ELEMENTS in all: it must fit the worker's memory limit and time out no trial.
LARGER_MAX_RATIO = 3.0
LARGER_MAX_ELEMENTS = 1 << 26


def larger_shape_candidates(source: str, overrides: dict[str, int]) -> list[dict[str, int]]:
    """Larger second-shape size sets to try, in order: every size grown by a quarter plus one (odd,
    so a kernel specialised or clamped to the default sizes fails), then only the largest size grown
    so. The reference job keeps the first whose inputs fit ``LARGER_MAX_*``."""
    sizes = {**size_constants(source), **overrides}
    if not sizes:
        return []
    grow = {k: v + v // 4 + 1 for k, v in sizes.items()}
    largest = max(sizes, key=lambda k: sizes[k])
    one = {**sizes, largest: grow[largest]}
    return [grow] if grow == one else [grow, one]


def widen_inputs(source: str) -> bool:
    """False when the task file sets ``WIDEN_INPUTS = False``: its reference relies on its inputs'
    range in a way it does not reveal by NaN, infinity or an error (see verifier.inputs)."""
    for name, node in _module_assignments(ast.parse(source)):
        if name == "WIDEN_INPUTS" and isinstance(node.value, ast.Constant) and node.value.value is False:
            return False
    return True


def apply_overrides(source: str, overrides: dict[str, int]) -> str:
    """Rewrite the module-level assignments named in ``overrides`` to the given integers."""
    if not overrides:
        return source
    tree = ast.parse(source)
    for name, node in _module_assignments(tree):
        if name in overrides:
            node.value = ast.Constant(int(overrides[name]))
    return ast.unparse(tree)


def load_task_module(spec: TaskSpec, overrides: dict[str, int] | None = None) -> types.ModuleType:
    """Execute the task source (with size overrides) as a fresh module and return it."""
    sizes = dict(spec.size_overrides)
    sizes.update(overrides or {})
    source = apply_overrides(spec.source, sizes)
    module = types.ModuleType(f"evokernel_task_{spec.id}")
    module.__file__ = spec.path or f"<task {spec.id}>"
    code = compile(source, module.__file__, "exec")
    exec(code, module.__dict__)  # noqa: S102 - task files are the user's own trusted references
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, name):
            raise AttributeError(f"task {spec.id} defines no {name}")
    return module


def input_numel(spec: TaskSpec, overrides: dict[str, int] | None = None) -> int:
    """Total elements of ``get_inputs()`` at the given sizes, computed on the meta device (no memory)."""
    import torch

    module = load_task_module(spec, overrides)
    with torch.device("meta"):
        inputs = module.get_inputs()
    return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))
