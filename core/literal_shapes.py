"""Shapes written as literals in a task's ``get_inputs()`` lifted into module-level sizes, so that sizing
(``verifier.sizing``) can scale them: a rewrite of the task's source, before any of it runs."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from verifier import MIN_SIZE

# torch's tensor makers whose positional arguments (or ``size=``) are a shape; randint's shape comes third
_SHAPE_MAKERS = {"rand": 0, "randn": 0, "zeros": 0, "ones": 0, "empty": 0, "randint": 2, "full": None}


def lift_literal_shapes(source: str) -> tuple[str, list[str]]:
    """``get_inputs()`` extents written as literals (``torch.rand(batch_size, 3, 224, 224)``) lifted into
    module-level sizes (``input_224 = 224``, one per value, placed before ``get_inputs``) so scaling
    reaches them; only a shape's third extent on, and the rest of the text is kept as written.
    ``(source, [])`` when there are none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, []
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return source, []
    taken = {t.id for n in ast.walk(tree) for t in ([n] if isinstance(n, ast.Name) else [])}
    literals: list[ast.Constant] = []

    def shape_literals(dims: Sequence[ast.AST]) -> None:
        # extents from the third on (NCHW's H and W, a sequence's length): a literal batch or channel
        # count is usually tied to a layer's own literal (Conv2d(3, ...)), an image's size rarely is
        for d, node in enumerate(dims):
            if d >= 2 and isinstance(node, ast.Constant) and type(node.value) is int and node.value >= MIN_SIZE:
                literals.append(node)

    for call in ast.walk(fn):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in _SHAPE_MAKERS:
            continue
        first = _SHAPE_MAKERS[name]
        shape_args = call.args[:1] if first is None else call.args[first:]
        shape_args = [*shape_args, *(k.value for k in call.keywords if k.arg == "size")]
        if len(shape_args) == 1 and isinstance(shape_args[0], (ast.Tuple, ast.List)):
            shape_args = shape_args[0].elts
        shape_literals(shape_args)
    if not literals:
        return source, []
    names: dict[int, str] = {}
    for node in literals:
        value = int(node.value)  # type: ignore[arg-type]   # shape literals are ints (see shape_literals)
        if value not in names:
            name = f"input_{value}"
            while name in taken:
                name += "_"
            names[value] = name
    lines = source.splitlines(keepends=True)
    # replace from the end so earlier positions stay valid
    for node in sorted(literals, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        row = node.lineno - 1
        line = lines[row].encode()
        lines[row] = (line[:node.col_offset] + names[int(node.value)].encode()  # type: ignore[arg-type]
                      + line[node.end_col_offset:]).decode()
    at = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
    block = "".join(f"{n} = {v}  # lifted from a literal shape in get_inputs()\n" for v, n in names.items())
    lines.insert(at, block + "\n")
    return "".join(lines), list(names.values())
