"""What the verifier needs to know about a task, and how a KernelBench task file is loaded.

A task file defines ``class Model(nn.Module)``, ``get_inputs()`` (or ``get_input_groups()`` and a
case file: verifier.cases) and ``get_init_inputs()``. Its module-level integers (``batch_size = 16``,
``N = 2048 * 2``, ``h = w = 256``, ``shape = (128, 256)``) are its *sizes*: the verifier changes them
for the second-shape trials (smaller, larger and tiny ones, their remainders drawn afresh:
``second_shape_candidates``), and the engine scales them for CPU runs.
Changing a size rewrites the
assignment in the source before it runs, so derived constants (``hidden = 4 * dim``) follow.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import secrets
import types
from collections.abc import Callable, Iterator
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
    # A multi-case task (``get_input_groups()``): its cases as JSON-lines records, ``{"inputs": [...]}``
    # (shapes already scaled), each a correctness trial set; empty for a plain KernelBench task.
    cases: tuple[dict[str, Any], ...] = ()
    case_file: str = ""         # the file name the task opens to read them (served from ``cases``)

    @property
    def key(self) -> str:
        """Content key of the reference as it will run (source + size overrides + cases)."""
        h = hashlib.sha256(self.source.encode())
        h.update(repr(sorted(self.size_overrides.items())).encode())
        if self.cases:   # a case's number names it, it does not run (verifier.cases.case_number)
            h.update(json.dumps([{k: v for k, v in c.items() if k != "number"} for c in self.cases],
                                sort_keys=True).encode())
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
            "cases": list(self.cases),
            "case_file": self.case_file,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskSpec:
        d = dict(d)
        d["cases"] = tuple(d.get("cases", ()))
        return cls(**d)


def _module_assignments(tree: ast.Module) -> Iterator[tuple[str, ast.Assign | ast.AnnAssign]]:
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


_INT_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b, ast.LShift: lambda a, b: a << b}


def _const_int(node: ast.AST) -> int | None:
    """The value of an integer expression made only of literals (``2048 * 2``), else None."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, int) and not isinstance(node.value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const_int(node.operand)
        return -v if v is not None else None
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        a, b = _const_int(node.left), _const_int(node.right)
        if (a is None or b is None or (isinstance(node.op, (ast.Pow, ast.LShift)) and not 0 <= b <= 64)
                or (isinstance(node.op, ast.FloorDiv) and b == 0)):
            return None
        return _INT_OPS[type(node.op)](a, b)
    return None


def _size_slots(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Every module-level integer a size can live in: ``(key, value)`` with key ``name`` or ``name[i]``.
    Covers literals, literal expressions (``N = 2048 * 2``), chained assignments (``h = w = 256``),
    tuples (``shape = (128, 256)``) and unpacking (``m, n = 64, 32``)."""
    for node in tree.body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                v = _const_int(value)
                if v is not None:
                    yield target.id, v
                elif isinstance(value, (ast.Tuple, ast.List)) and len(targets) == 1:
                    for i, elt in enumerate(value.elts):
                        v = _const_int(elt)
                        if v is not None:
                            yield f"{target.id}[{i}]", v
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                    and len(target.elts) == len(value.elts):
                for t, elt in zip(target.elts, value.elts):
                    v = _const_int(elt)
                    if isinstance(t, ast.Name) and v is not None:
                        yield t.id, v


def size_constants(source: str) -> dict[str, int]:
    """The module-level integers that are extents (scalable sizes), by name (``name[i]`` in a tuple)."""
    sizes = {}
    for key, value in _size_slots(ast.parse(source)):
        if value < MIN_SIZE or any(word in key.lower() for word in _NOT_SIZES):
            continue
        sizes[key] = value
    return sizes


# Tails (issue #35): a vectorised loop whose remainder is mishandled (an ``if`` where a loop belongs, a mask
# off by one) is wrong only at sizes whose remainder it mishandles. Every second shape draws its sizes'
# remainders modulo ``TAIL_MODULUS`` afresh from the operating system, never 0 or 1 modulo 8 (the two a
# one-element tail gets right), different modulo 8 between the smaller and the larger shape, so the
# remainders modulo 8, 16, 32 and 64 vary across trials and verifications; a third, tiny shape puts every
# size at an odd number below one vector width (``VECTOR_WIDTH``: 16 float32 lanes of AVX-512) whose
# product is neither 0 nor 1 modulo 16, so a flat loop over all of an input's elements is ragged too.
TAIL_MODULUS = 64
VECTOR_WIDTH = 16
SHAPE_KINDS = ("smaller", "larger", "tiny")


def _rng(rng: random.Random | None) -> random.Random:
    return rng if rng is not None else random.Random(secrets.randbits(64))


def _tail_residues(names: list[str], rng: random.Random) -> tuple[dict[str, int], dict[str, int]]:
    """Two remainders modulo ``TAIL_MODULUS`` per size (the smaller shape's, the larger shape's): never 0 or
    1 modulo 8, and different modulo 8 from each other."""
    ragged = [r for r in range(TAIL_MODULUS) if r % 8 > 1]
    smaller, larger = {}, {}
    for name in names:
        smaller[name] = rng.choice(ragged)
        larger[name] = rng.choice([r for r in ragged if r % 8 != smaller[name] % 8])
    return smaller, larger


def _ragged(base: int, residue: int, up: bool) -> int:
    """The nearest size at or above (``up``) or at or below ``base`` with the given remainder modulo
    ``TAIL_MODULUS``, or modulo the largest of 32, 16 and 8 that is at most a quarter of ``base`` (so a
    size moves by at most a quarter; modulo 8 below 32)."""
    modulus = next((m for m in (TAIL_MODULUS, 32, 16) if 4 * m <= base), 8)
    return base + (residue - base) % modulus if up else base - (base - residue) % modulus


def tiny_sizes(names: list[str], rng: random.Random | None = None) -> dict[str, int]:
    """An odd size below ``VECTOR_WIDTH`` for each name (never 1), drawn so that their product is neither
    0 nor 1 modulo 16."""
    rng = _rng(rng)
    odd = list(range(3, VECTOR_WIDTH, 2))
    while True:
        sizes = {name: rng.choice(odd) for name in names}
        product = 1
        for v in sizes.values():
            product *= v
        if product % VECTOR_WIDTH not in (0, 1):
            return sizes


def second_shape_candidates(source: str, overrides: dict[str, int], rng: random.Random | None = None,
                            ) -> dict[str, list[dict[str, int]]]:
    """The second shapes to try, by kind (``SHAPE_KINDS``), each a list of size sets in order; the reference
    keeps the first of each kind it accepts (a larger one also within ``LARGER_MAX_*``). Drawn afresh
    (``rng``, else from the operating system) for every verification:

    * smaller: every size at three quarters, its remainder drawn (see ``TAIL_MODULUS``); then halved;
    * larger: every size grown by a quarter, its remainder drawn; then only the largest size so;
    * tiny: every size an odd number below one vector width; then only the largest size so."""
    sizes = {**size_constants(source), **overrides}
    if not sizes:
        return {}
    rng = _rng(rng)
    names = sorted(sizes)
    low, high = _tail_residues(names, rng)
    smaller = {k: max(MIN_SIZE // 2, _ragged(v * 3 // 4, low[k], up=False)) for k, v in sizes.items()}
    half = {k: max(MIN_SIZE // 2, v // 2) for k, v in sizes.items()}
    grow = {k: _ragged(v + v // 4 + 1, high[k], up=True) for k, v in sizes.items()}
    largest = max(sizes, key=lambda k: sizes[k])
    tiny = tiny_sizes(names, rng)
    found: dict[str, list[dict[str, int]]] = {}
    for kind, variants in (("smaller", [smaller, half]), ("larger", [grow, {**sizes, largest: grow[largest]}]),
                           ("tiny", [tiny, {**sizes, largest: tiny[largest]}])):
        kept: list[dict[str, int]] = []
        for v in variants:
            if v != sizes and v not in kept:
                kept.append(v)
        if kept:
            found[kind] = kept
    return found


# A larger second shape may hold at most this many times the default shape's input elements, and
# at most LARGER_MAX_ELEMENTS in all: it must fit the worker's memory limit and time out no trial.
LARGER_MAX_RATIO = 3.0
LARGER_MAX_ELEMENTS = 1 << 26


def widen_inputs(source: str) -> bool:
    """False when the task file sets ``WIDEN_INPUTS = False``: its reference relies on its inputs'
    range in a way it does not reveal by NaN, infinity or an error (see verifier.inputs)."""
    for name, node in _module_assignments(ast.parse(source)):
        if name == "WIDEN_INPUTS" and isinstance(node.value, ast.Constant) and node.value.value is False:
            return False
    return True


def apply_overrides(source: str, overrides: dict[str, int]) -> str:
    """Rewrite the module-level sizes named in ``overrides`` (keys as :func:`size_constants` gives them)
    to the given integers; a chained or unpacking assignment is split so each name gets its own value."""
    if not overrides:
        return source
    tree = ast.parse(source)
    body = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in overrides \
                and node.value is not None:
            node.value = ast.Constant(int(overrides[node.target.id]))
        elif isinstance(node, ast.Assign):
            body.extend(_rewrite_assign(node, overrides))
            continue
        body.append(node)
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree))


def _rewrite_assign(node: ast.Assign, overrides: dict[str, int]) -> list[ast.stmt]:
    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
    value = node.value
    if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name = names[0]
        if name in overrides and _const_int(value) is not None:
            node.value = ast.Constant(int(overrides[name]))
        elif (isinstance(value, (ast.Tuple, ast.List))
              and any(f"{name}[{i}]" in overrides for i in range(len(value.elts)))):
            value.elts = [ast.Constant(int(overrides[f"{name}[{i}]"])) if f"{name}[{i}]" in overrides else e
                          for i, e in enumerate(value.elts)]
        return [node]
    if len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)) \
            and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(node.targets[0].elts):
        value.elts = [ast.Constant(int(overrides[t.id])) if isinstance(t, ast.Name) and t.id in overrides else e
                      for t, e in zip(node.targets[0].elts, value.elts)]
        return [node]
    if len(names) == len(node.targets) and any(n in overrides for n in names) and _const_int(value) is not None:
        # ``h = w = 256`` with one of them changed: one assignment per name
        return [ast.Assign(targets=[ast.Name(n, ast.Store())],
                           value=ast.Constant(int(overrides[n])) if n in overrides else value, lineno=node.lineno)
                for n in reversed(names)]
    return [node]


def runnable_source(spec: TaskSpec, overrides: dict[str, int] | None = None) -> tuple[str, list[str]]:
    """The task source as it will run here (sizes applied; without torch_npu, an NPU task's device
    placement dropped) and notes on what was skipped. Raises NpuOnly for an NPU-only operator."""
    from verifier.npu_source import neutralise_npu, torch_npu_available

    sizes = dict(spec.size_overrides)
    sizes.update(overrides or {})
    source = apply_overrides(spec.source, sizes)
    if "torch_npu" in source and not torch_npu_available():
        return neutralise_npu(source)
    return source, []


def load_task_module(spec: TaskSpec, overrides: dict[str, int] | None = None) -> types.ModuleType:
    """Execute the task source (with size overrides) as a fresh module and return it. A multi-case task
    (``get_input_groups()``) gets a ``get_inputs`` that makes its cases (see verifier.cases)."""
    from verifier.cases import install_cases

    source, _ = runnable_source(spec, overrides)
    module = types.ModuleType(f"evokernel_task_{spec.id}")
    module.__file__ = spec.path or f"<task {spec.id}>"
    code = compile(source, module.__file__, "exec")
    exec(code, module.__dict__)  # noqa: S102 - task files are the user's own trusted references
    install_cases(module, spec.cases, spec.case_file)
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
