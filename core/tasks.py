"""Tasks and suites: KernelBench-format operator files, the built-in suites, size scaling.

A suite is any folder of task files (``Model``, ``get_inputs``, ``get_init_inputs``). The task id is
the file stem, the level comes from the nearest ``level<N>`` folder (1 if none). A malformed file is
reported with a one-line reason and the rest load. Files are checked statically here (parse, the
three names); the reference itself first runs when a candidate is verified.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.errors import TaskError
from verifier.task import MIN_SIZE, TaskSpec, input_numel, module_constants, size_constants

BUILTIN_ROOT = Path(__file__).parent / "suites" / "builtin"
CATEGORIES = ("activation", "elementwise", "reduction", "normalization", "pooling", "matmul", "convolution",
              "loss", "scan", "fused")
AUTO_SCALE_ELEMENTS = 4_000_000  # "auto" scaling aims at about this many input elements (16 MB of fp32)

# Inferred categories for files that do not declare one (KernelBench's), by name and ops.
_CATEGORY_WORDS = [
    ("loss", r"loss|entropy|kl_?div|hinge|huber|triplet"),
    ("convolution", r"conv"),
    ("pooling", r"pool"),
    ("normalization", r"norm(?!al)|normaliz"),
    ("scan", r"cum(sum|prod|max|min)|scan"),
    ("matmul", r"matmul|gemm|bmm|matvec|mm\b|linear|einsum|matrix"),
    ("activation", r"relu|gelu|sigmoid|tanh|elu|softplus|softsign|swish|silu|mish|softmax|hardtanh|selu|activation"),
    ("reduction", r"sum|mean|max|min|argmax|argmin|prod|reduc|norm"),
]


@dataclass(frozen=True)
class Task:
    """One operator to write a kernel for."""

    id: str
    level: int
    category: str
    path: Path
    source: str
    description: str = ""
    ops: tuple[str, ...] = ()
    size_overrides: dict[str, int] = field(default_factory=dict)
    scale: float | None = None

    @property
    def sizes(self) -> dict[str, int]:
        """The task's extents as it will run (scaled when a scale is set)."""
        return {**size_constants(self.source), **self.size_overrides}

    def spec(self) -> TaskSpec:
        consts = module_constants(self.source)
        atol, rtol = consts.get("ATOL"), consts.get("RTOL")
        return TaskSpec(
            id=self.id, source=self.source, path=str(self.path), level=self.level,
            size_overrides=dict(self.size_overrides),
            atol=float(atol) if isinstance(atol, (int, float)) else None,
            rtol=float(rtol) if isinstance(rtol, (int, float)) else None,
        )

    def signature(self) -> dict:
        """What retrieval matches on: ops, category, level, sizes and a text description."""
        return {"ops": list(self.ops), "category": self.category, "level": self.level,
                "sizes": self.sizes, "text": f"{self.id} {self.category} {self.description} {' '.join(self.ops)}"}

    def scale_note(self) -> str:
        """A line saying how sizes were scaled ("" when they were not)."""
        if not self.size_overrides:
            return ""
        original = size_constants(self.source)
        changes = ", ".join(f"{k} {original.get(k, '?')}->{v}" for k, v in self.size_overrides.items())
        factor = f" by {self.scale:.3g}" if self.scale else ""
        return f"sizes scaled{factor}: {changes}"


@dataclass
class Suite:
    name: str
    root: Path
    tasks: list[Task]
    errors: list[str] = field(default_factory=list)

    def get(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        ids = [t.id for t in self.tasks]
        close = difflib.get_close_matches(task_id, ids, n=4, cutoff=0.6) or [i for i in ids if task_id.lower() in i.lower()][:4]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; `evokernel tasks --suite {self.name}` lists them"
        raise TaskError(f"no task {task_id!r} in suite {self.name}{hint}")

    def select(self, ids: list[str] | None = None, level: int | None = None) -> list[Task]:
        """The named tasks (each once, in the order given) or all of them, at ``level`` if given;
        an empty selection is an error that says why."""
        if ids is not None and not ids:
            raise TaskError("no task named: give task ids separated by commas (or leave out --tasks for all)")
        tasks = [self.get(i) for i in dict.fromkeys(ids)] if ids else list(self.tasks)
        chosen = [t for t in tasks if level is None or t.level == level]
        if not chosen:
            levels = sorted({t.level for t in tasks})
            raise TaskError(f"no task at level {level} in {self.name} (levels: {', '.join(map(str, levels))})")
        return chosen


def _call_names(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name and name not in ("super", "__init__", "Model", "Parameter", "size", "view", "reshape", "dim",
                                     "unsqueeze", "squeeze", "contiguous", "float", "int", "len", "range", "tuple",
                                     "list", "print", "get_inputs", "get_init_inputs", "randn", "rand", "randint"):
                names.append(name.lower())
        elif isinstance(node, ast.BinOp):
            names.append({ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul",
                          ast.Pow: "pow"}.get(type(node.op), "binop"))
    seen: list[str] = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return seen


def infer_category(task_id: str, ops: list[str], level: int) -> str:
    if level >= 2:
        return "fused"
    text = f"{task_id} {' '.join(ops)}".lower()
    for category, pattern in _CATEGORY_WORDS:
        if re.search(pattern, text):
            return category
    return "elementwise"


def parse_task(path: Path, level: int, task_id: str | None = None) -> Task:
    """Statically check one task file; raises TaskError with a one-line reason."""
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path.name}: unreadable: {exc}") from None
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError as exc:
        raise TaskError(f"{path.name} line {exc.lineno}: syntax error: {exc.msg}") from None
    top = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    model = top.get("Model")
    if not isinstance(model, ast.ClassDef):
        raise TaskError(f"{path.name}: no class Model (a KernelBench task defines Model, get_inputs, get_init_inputs)")
    for fn in ("get_inputs", "get_init_inputs"):
        if not isinstance(top.get(fn), ast.FunctionDef):
            raise TaskError(f"{path.name}: no {fn}() function")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise TaskError(f"{path.name}: Model has no forward()")
    ops = _call_names(model)
    consts = module_constants(source)
    declared = consts.get("CATEGORY")
    tid = task_id or path.stem
    category = declared if declared in CATEGORIES else infer_category(tid, ops, level)
    doc = ast.get_docstring(tree) or ast.get_docstring(model) or ""
    return Task(id=tid, level=level, category=category, path=path, source=source,
                description=" ".join(doc.split())[:200], ops=tuple(ops))


def _level_of(path: Path, root: Path) -> int:
    for part in reversed(path.relative_to(root).parts[:-1]):
        m = re.fullmatch(r"level[_-]?(\d+)", part, re.I)
        if m:
            return int(m.group(1))
    m = re.fullmatch(r"level[_-]?(\d+)", root.name, re.I)
    return int(m.group(1)) if m else 1


def load_suite(spec: str | Path = "builtin") -> Suite:
    """Load a suite: ``"builtin"`` or a folder of task files (searched two levels deep)."""
    if str(spec) == "builtin":
        root, name = BUILTIN_ROOT, "builtin"
    else:
        root = Path(spec).expanduser().resolve()
        name = str(spec)
        if not root.is_dir():
            what = "is not a folder" if root.exists() else "does not exist"
            raise TaskError(f"suite folder {spec} {what} (use --suite builtin or a folder of task files)")
    files = sorted(p for p in [*root.glob("*.py"), *root.glob("*/*.py"), *root.glob("*/*/*.py")]
                   if not p.name.startswith(("_", ".")) and "__pycache__" not in p.parts)
    tasks: list[Task] = []
    errors: list[str] = []
    ids: dict[str, int] = {}
    for path in files:
        level = _level_of(path, root)
        task_id = path.stem
        if task_id in ids:  # the same stem at another level
            task_id = f"{path.stem}_l{level}"
        try:
            task = parse_task(path, level, task_id)
        except TaskError as exc:
            errors.append(f"{path.relative_to(root)}: {str(exc).split(': ', 1)[-1]}")
            continue
        ids[task_id] = level
        tasks.append(task)
    tasks.sort(key=lambda t: (t.level, t.id))
    if not tasks and not errors:
        raise TaskError(f"no task files in {root}: a task is a .py file defining Model, get_inputs, get_init_inputs")
    return Suite(name, root, tasks, errors)


def scale_task(task: Task, scale: float | str | None) -> Task:
    """The task with its module-level sizes scaled by ``scale`` (a factor in (0, 1], or "auto")."""
    if scale in (None, 1, 1.0, "1", "none"):
        return task
    sizes = size_constants(task.source)
    if not sizes:
        return task

    def overrides_for(factor: float) -> dict[str, int]:
        return {k: max(min(v, MIN_SIZE), round(v * factor)) for k, v in sizes.items()}

    if scale == "auto":
        spec = task.spec()

        def numel(s) -> int:
            try:
                return input_numel(s)
            except (Exception, SystemExit) as exc:  # the task's own code, run to learn its input sizes
                raise TaskError(f"task {task.id}: --size-scale auto could not size its inputs: get_inputs() "
                                f"failed on the meta device ({type(exc).__name__}: {exc})") from None

        if numel(spec) <= AUTO_SCALE_ELEMENTS:
            return task
        lo, hi = 0.0, 1.0
        for _ in range(24):
            mid = (lo + hi) / 2
            if numel(replace(spec, size_overrides=overrides_for(mid))) <= AUTO_SCALE_ELEMENTS:
                lo = mid
            else:
                hi = mid
        factor = lo or 1e-6
    else:
        try:
            factor = float(scale)
        except ValueError:
            raise TaskError(f"size scale {scale!r} is not a number in (0, 1] or 'auto'") from None
        if not 0 < factor <= 1:
            raise TaskError(f"size scale {factor} must be in (0, 1] (or 'auto')")
    overrides = {k: v for k, v in overrides_for(factor).items() if v != sizes[k]}
    return replace(task, size_overrides=overrides, scale=factor) if overrides else task
