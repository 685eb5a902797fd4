"""Tasks and suites: KernelBench-format operator files, the built-in suites, size scaling.

A suite is any folder of task files (``Model``, ``get_inputs``, ``get_init_inputs``). The task id is
the file stem, the level comes from the nearest ``level<N>`` folder (1 if none). A malformed file is
reported with a one-line reason and the rest load. Files are checked statically here (parse, the
three names); the reference itself first runs when a candidate is verified.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import Any, TypedDict, Unpack

from core.errors import TaskError
from core.literal_shapes import lift_literal_shapes
from verifier import (
    PROBE_TIMEOUT_S,
    SIZING_BYTES_CAP,
    SIZING_WINDOW_MS,
    CaseError,
    NpuOnly,
    Probe,
    ProbeSandbox,
    TaskSpec,
    Tolerance,
    case_file_name,
    fit_cases,
    fixed_divisors,
    module_constants,
    neutralise_npu,
    parse_case_file,
    run_probe,
    scale_cases,
    scale_values,
    size_constants,
    torch_npu_available,
)

BUILTIN_ROOT = Path(__file__).parent / "suites" / "builtin"
CATEGORIES = ("activation", "elementwise", "reduction", "normalization", "pooling", "matmul", "convolution",
              "loss", "scan", "fused")

# Categories by name, for a task whose reference has not run yet (the traced ops decide once it has:
# see category_from_ops). Words are matched at word boundaries so "bilinear" is not "linear".
_CATEGORY_WORDS = [
    ("fused", r"resnet|vgg|mobilenet|efficientnet|densenet|transformer|lstm|unet|(?<![a-z])(gru|vit|mlp)(?![a-z])"),
    ("loss", r"loss|entropy|kl_?div|hinge|huber|triplet"),
    ("convolution", r"conv"),
    ("pooling", r"pool"),
    ("normalization", r"norm(?!al)|normaliz"),
    ("scan", r"cum(sum|prod|max|min)|scan"),
    ("matmul", r"matmul|gemm|bmm|matvec|(?<![a-z])mm(?![a-z])|(?<!bi)linear|einsum|matrix|attention"),
    ("activation", r"relu|gelu|sigmoid|tanh|elu|softplus|softsign|swish|silu|mish|softmax|hardtanh|selu|activation"),
    ("reduction", r"sum|mean|max|min|argmax|argmin|prod|reduc|norm"),
]

# Traced aten operators -> category. A reference whose heavy ops span two of the "heavy" categories
# (a ResNet: convolutions, norms, pooling, a linear layer) is "fused".
_OP_CATEGORIES = [
    ("convolution", r"^(convolution|_convolution|conv\w*|mkldnn_convolution|slow_conv\w*|thnn_conv\w*)$"),
    ("matmul", r"^(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|einsum|_scaled_dot_product\w*"
               r"|scaled_dot_product\w*)$"),
    ("normalization", r"^(native_layer_norm|layer_norm|native_batch_norm|_native_batch_norm_legit\w*|batch_norm\w*|"
                      r"native_group_norm|group_norm|instance_norm|_fused_rms_norm|rms_norm|norm|linalg_vector_norm)$"),
    ("pooling", r"\w*pool\w*"),
    ("loss", r"^(\w*_loss\w*|nll_loss\w*|binary_cross_entropy\w*|kl_div|huber_loss|smooth_l1_loss|mse_loss|"
             r"cross_entropy_loss)$"),
    ("scan", r"^(cumsum|cumprod|cummax|cummin|logcumsumexp)$"),
    ("activation", r"^(relu|gelu|sigmoid|tanh|elu|softplus|softshrink|hardshrink|hardtanh|hardsigmoid|hardswish|"
                   r"leaky_relu|selu|silu|mish|_softmax|softmax|_log_softmax|log_softmax|threshold|glu|celu|rrelu\w*|"
                   r"logsigmoid|prelu|_prelu_kernel)$"),
    ("reduction", r"^(sum|mean|amax|amin|max|min|argmax|argmin|prod|var|std|var_mean|std_mean|logsumexp|all|any)$"),
]
_HEAVY = ("convolution", "matmul", "normalization", "pooling")


@dataclass(frozen=True)
class Task:
    """One operator to write a kernel for. ``id`` is the task's key in the workspace (``core.identity``: the
    id in its suite, with the suite's name beside it where another suite's task has that id), ``name`` its
    id in its suite (the file's stem), ``suite`` its suite's name."""

    id: str
    level: int
    category: str
    path: Path
    source: str
    description: str = ""
    ops: tuple[str, ...] = ()
    size_overrides: dict[str, int] = field(default_factory=dict)
    scale: float | None = None
    cases: tuple[dict[str, Any], ...] = ()        # a multi-case task's cases (as they will run: scaled with the task)
    case_file: str = ""
    original_cases: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()         # what loading changed (an NPU import skipped...)
    case_notes: tuple[str, ...] = ()    # what fitting the cases to their memory budget changed
    category_source: str = "name"       # "declared", "name" or "ops" (traced from the reference's forward)
    name: str = ""                      # the id in its suite ("" until set: the id)
    suite: str = ""                     # its suite's name (core.identity.suite_label)

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.id)

    @property
    def sizes(self) -> dict[str, int]:
        """The task's extents as it will run (scaled when a scale is set)."""
        return {**size_constants(self.source), **self.size_overrides}

    @property
    def input_dtypes(self) -> tuple[str, ...]:
        """The dtypes of the tensors its cases give the kernel, in order of first use (float32 for a task
        without cases: its ``get_inputs()`` is only known by running it)."""
        from verifier import canonical_dtype, entry_shapes

        dtypes: list[str] = []
        for case in self.spec().cases:
            for entry in case.get("inputs", []):
                if "value" not in entry and entry_shapes(entry):
                    d = canonical_dtype(str(entry.get("dtype", "float32")))
                    if d not in dtypes:
                        dtypes.append(d)
        return tuple(dtypes) or ("float32",)

    def spec(self) -> TaskSpec:
        consts = module_constants(self.source)
        atol, rtol = consts.get("ATOL"), consts.get("RTOL")
        return TaskSpec(
            id=self.name, source=self.source, path=str(self.path), level=self.level,
            size_overrides=dict(self.size_overrides),
            atol=float(atol) if isinstance(atol, (int, float)) else None,
            rtol=float(rtol) if isinstance(rtol, (int, float)) else None,
            cases=tuple(self.cases) or _listed_cases(self), case_file=self.case_file,
        )

    def signature(self) -> dict[str, Any]:
        """What retrieval matches on: ops, category, level, sizes and a text description."""
        return {"ops": list(self.ops), "category": self.category, "level": self.level,
                "sizes": self.sizes, "text": f"{self.name} {self.category} {self.description} {' '.join(self.ops)}"}

    def scale_note(self) -> str:
        """A line saying how sizes were scaled ("" when they were not)."""
        from verifier import describe_case

        if not self.size_overrides and self.cases == self.original_cases:
            return ""
        original = size_constants(self.source)
        changes = [f"{k} {original.get(k, '?')}->{v}" for k, v in self.size_overrides.items()]
        if self.cases != self.original_cases:
            changes.append(f"{len(self.cases)} cases, first {describe_case(self.cases[0])}")
        factor = f" by {self.scale:.3g}" if self.scale and self.scale != 1 else ""
        return f"sizes scaled{factor}: {', '.join(changes)}" + "".join(f"; {n}" for n in self.case_notes)


@dataclass
class Suite:
    name: str           # as given (builtin, or the folder as typed)
    root: Path
    tasks: list[Task]
    errors: list[str] = field(default_factory=list)   # "<file relative to root>: <why it was refused>"

    @property
    def label(self) -> str:
        """The suite's name beside a task id that another suite also has (``suite_label``)."""
        return suite_label(self.name if self.name == "builtin" else self.root)

    @property
    def spec(self) -> str:
        """What loads this suite again from anywhere: ``builtin`` or its folder, resolved."""
        return "builtin" if self.name == "builtin" else str(self.root)

    def refusals(self, level: int | None = None) -> list[tuple[str, int, str]]:
        """The files that did not load, at ``level`` if given: (file relative to the root, its level, why)."""
        out = []
        for err in self.errors:
            where, _, why = err.partition(": ")
            at = _level_of(self.root / where, self.root)
            if level is None or at == level:
                out.append((where, at, why or err))
        return out

    def get(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        refused = [(where, why) for where, _, why in self.refusals() if Path(where).stem == task_id]
        if refused:
            raise TaskError(f"task {task_id!r} of suite {self.name} did not load: {refused[0][1]}")
        ids = [t.id for t in self.tasks]
        close = difflib.get_close_matches(task_id, ids, n=4, cutoff=0.6) or \
            [i for i in ids if task_id.lower() in i.lower()][:4]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; `evokernel tasks --suite {self.name}` lists them"
        raise TaskError(f"no task {task_id!r} in suite {self.name}{hint}")

    def select(self, ids: list[str] | None = None, level: int | None = None, *,
               refusals_ok: bool = False) -> list[Task]:
        """The named tasks (each once, in the order given) or all of them, at ``level`` if given. An empty
        selection is an error that says why: with the reasons its files were refused when they were (every
        task of NPUKernelBench's level 4 calls torch_npu's own operators), or the levels there are. With
        ``refusals_ok`` (a listing, which shows the refusals) a selection left empty only by refusals is []."""
        if ids is not None and not ids:
            raise TaskError("no task named: give task ids separated by commas (or leave out --tasks for all)")
        tasks = [self.get(i) for i in dict.fromkeys(ids)] if ids else list(self.tasks)
        chosen = [t for t in tasks if level is None or t.level == level]
        if chosen:
            return chosen
        refused = [] if ids else self.refusals(level)
        if refused:
            if refusals_ok:
                return []
            where = f"at level {level} " if level is not None else ""
            first = f"{refused[0][0]}: {refused[0][2].removeprefix('refused: ')}"
            raise TaskError(f"no task {where}in {self.name} loads here: {plural(len(refused), 'file')} refused "
                            f"({first}{'; ...' if len(refused) > 1 else ''}); `evokernel tasks --suite {self.name}` "
                            "lists every reason")
        levels = sorted({t.level for t in tasks})
        raise TaskError(f"no task at level {level} in {self.name} (levels: {', '.join(map(str, levels)) or 'none'})")


def plural(n: int, word: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {word}{'s' * (n != 1)}"


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
    """The category by the task's name (and the call names in its source), for a reference not yet run."""
    if level >= 2:
        return "fused"
    text = f"{task_id} {' '.join(ops)}".lower()
    for category, pattern in _CATEGORY_WORDS:
        if re.search(pattern, text):
            return category
    return "elementwise"


def category_from_ops(ops: dict[str, int], level: int = 1) -> str | None:
    """The category of a reference from the aten operators its forward ran (None if nothing matched):
    the heaviest kind of op present decides; heavy ops of two kinds make it "fused"."""
    if level >= 2:
        return "fused"
    found: list[str] = []
    for name in ops:
        for category, pattern in _OP_CATEGORIES:
            if re.search(pattern, name):
                if category not in found:
                    found.append(category)
                break
    heavy = [c for c in _HEAVY if c in found]
    if len(heavy) >= 2 and set(heavy) != {"matmul", "normalization"}:
        return "fused"
    for category in ("convolution", "matmul", "loss", "normalization", "pooling", "scan", "activation", "reduction"):
        if category in found:
            return category
    return "elementwise" if ops else None


def with_traced_category(task: Task, ops: dict[str, int]) -> Task:
    """The task with its category from traced ops (a category the file declares is kept)."""
    if task.category_source == "declared" or not ops:
        return task
    category = category_from_ops(ops, task.level)
    if category is None:
        return task
    return replace(task, category=category, category_source="ops")


_LISTED: dict[str, tuple[dict[str, Any], ...]] = {}


def _listed_cases(task: Task) -> tuple[dict[str, Any], ...]:
    """The cases of a task whose ``get_input_groups()`` lists them in code (no case file): described
    from the groups it builds on the meta device (nothing allocated); () when it is not such a task or
    cannot be run there, and then its first group is its only case."""
    if task.case_file or "get_input_groups" not in task.source:
        return ()
    key = f"{task.id}:{hash(task.source)}:{sorted(task.size_overrides.items())}"
    if key not in _LISTED:
        from verifier import describe_groups, load_task_module

        try:
            import torch

            module = load_task_module(TaskSpec(id=task.name, source=task.source, path=str(task.path),
                                               size_overrides=dict(task.size_overrides)))
            with torch.device("meta"):
                groups = list(module.get_input_groups())
            _LISTED[key] = describe_groups(groups) if len(groups) > 1 else ()
        except Exception:  # the task's own code; its first group stays its one case
            _LISTED[key] = ()
    return _LISTED[key]


def _cases_for(path: Path, source: str) -> tuple[str, tuple[dict[str, Any], ...]]:
    """The case file a multi-case task reads and its cases (none for a task that lists them in code)."""
    name = case_file_name(source, path.stem)
    file = path.parent / name
    if not file.exists():
        if re.search(r"\.jsonl?[\"']", source):
            raise TaskError(f"{path.name}: get_input_groups() reads {name}, which is not beside it")
        return "", ()
    try:
        return name, parse_case_file(file.read_text(), name)
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path.name}: case file {name} unreadable: {exc}") from None
    except CaseError as exc:
        raise TaskError(f"{path.name}: {exc}") from None


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
    multi = isinstance(top.get("get_input_groups"), ast.FunctionDef)
    for fn in ("get_inputs", "get_init_inputs"):
        if not isinstance(top.get(fn), ast.FunctionDef) and not (fn == "get_inputs" and multi):
            more = " (nor get_input_groups())" if fn == "get_inputs" else ""
            raise TaskError(f"{path.name}: no {fn}() function{more}")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise TaskError(f"{path.name}: Model has no forward()")
    notes: list[str] = []
    if "torch_npu" in source and not torch_npu_available():
        try:
            _, skipped = neutralise_npu(source)
        except NpuOnly as exc:
            raise TaskError(f"{path.name}: refused: {exc}") from None
        if skipped:
            notes.append(f"without torch_npu: skipped {', '.join(skipped)} (device placement only)")
    case_file, cases = _cases_for(path, source) if multi else ("", ())
    ops = _call_names(model)
    declared = module_constants(source).get("CATEGORY")
    tid = task_id or path.stem
    category = declared if declared in CATEGORIES else infer_category(tid, ops, level)
    doc = ast.get_docstring(tree) or ast.get_docstring(model) or ""
    return Task(id=tid, level=level, category=category, path=path, source=source,
                description=" ".join(doc.split())[:200], ops=tuple(ops), cases=cases, case_file=case_file,
                original_cases=cases, notes=tuple(notes),
                category_source="declared" if declared in CATEGORIES else "name")


_LEVEL_FOLDER = re.compile(r"(?:.*[_-])?level[_-]?(\d+)", re.I)   # level1, level_2, npukernelbench_level3


def suite_label(spec: str | Path) -> str:
    """A suite's name as task keys and screens show it (``core.identity``): ``builtin``, else its folder's
    name, with the folder above it when the folder is only a level (``KernelBench/level1``: several suites
    keep a level1)."""
    text = str(spec).rstrip("/")
    if text == "builtin":
        return text
    path = PurePath(text)
    if _LEVEL_FOLDER.fullmatch(path.name) and path.parent.name not in ("", ".", ".."):
        return f"{path.parent.name}/{path.name}"
    return path.name or text


def _level_of(path: Path, root: Path) -> int:
    for part in reversed(path.relative_to(root).parts[:-1]):
        m = _LEVEL_FOLDER.fullmatch(part)
        if m:
            return int(m.group(1))
    m = _LEVEL_FOLDER.fullmatch(root.name)
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
    label = Suite(name, root, []).label
    tasks = [replace(t, suite=label) for t in tasks]
    tasks.sort(key=lambda t: (t.level, t.id))
    if not tasks and not errors:
        raise TaskError(f"no task files in {root}: a task is a .py file defining Model, get_inputs, get_init_inputs")
    return Suite(name, root, tasks, errors)


SIZES_FILE = "sizes.json"


def task_hash(task: Task) -> str:
    """The task as written (source and case file, no sizes applied): what its recorded sizes belong to."""
    return TaskSpec(id=task.name, source=task.source, cases=task.original_cases).key   # no sizes, no listing run


def sizes_path(cache_dir: Path) -> Path:
    """The workspace's recorded sizes: beside the memory (``.evokernel/sizes.json``; ``cache_dir`` is
    ``.evokernel/cache``)."""
    return Path(cache_dir).parent / SIZES_FILE


def recorded_sizes(task: Task, cache_dir: Path | None) -> Probe | None:
    """The sizes "auto" decided for this task (this exact file) in this workspace, or None."""
    if cache_dir is None:
        return None
    try:
        data = json.loads(sizes_path(cache_dir).read_text())
    except (OSError, ValueError):
        return None
    entry = data.get(f"{task.name}:{task_hash(task)}") if isinstance(data, dict) else None
    return Probe.from_dict(entry["probe"]) if isinstance(entry, dict) and isinstance(entry.get("probe"), dict) \
        else None


def record_sizes(task: Task, probe: Probe, cache_dir: Path, settings: dict[str, Any] | None = None) -> None:
    """Record the sizes "auto" decided for ``task`` (keyed by its id and file hash; an edited file is a new
    task and is sized again), so every later run, method and verification in the workspace sees the same.
    A probe that failed is recorded too, so a listing can say so without running anything."""
    path = sizes_path(cache_dir)
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    # the previous version of this file (another suite's task of this id keeps its own)
    data = {k: v for k, v in data.items()
            if not (k.startswith(f"{task.name}:") and isinstance(v, dict) and v.get("path") == str(task.path))}
    data[f"{task.name}:{task_hash(task)}"] = {"id": task.name, "path": str(task.path), "decided_at": time.time(),
                                            "settings": settings or {}, "probe": {**probe.to_dict(), "steps": []}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
    os.replace(tmp, path)


def probe_task(task: Task, scale: float | str | None = None, *, threads: int = 1, cache_dir: Path | None = None,
               window: tuple[float, float] = SIZING_WINDOW_MS, bytes_cap: int = SIZING_BYTES_CAP,
               timeout_s: float = PROBE_TIMEOUT_S, resize: bool = False, sandbox: ProbeSandbox | None = None,
               use_bwrap: bool = True, seccomp: bool = True) -> Probe:
    """Run ``task``'s reference in a probe job (``verifier.sizing.launch.run_probe``: confined as a
    candidate's job is, in ``sandbox`` when given, else in one of its own with the verifier's ``use_bwrap``
    and ``seccomp``): sized by work when ``scale`` is "auto", else at the factor given (1 when None).
    Cached per machine in ``cache_dir/sizing.json`` when given. Under "auto"
    with a workspace (``cache_dir``), the sizes are decided once: recorded in ``.evokernel/sizes.json``
    and read back from there by every later call, whatever the machine's load, unless ``resize``.
    Under "auto", shapes written as literals in ``get_inputs()`` are sized too (lifted into module-level
    sizes, see :func:`core.literal_shapes.lift_literal_shapes`; the probe's ``source`` says so) unless the
    reference then fails (a literal 224 that a classifier's input size depends on): then they stay as
    written."""
    if scale == "auto" and cache_dir is not None:
        recorded = None if resize else recorded_sizes(task, cache_dir)
        if recorded is not None and recorded.ok:  # a failure recorded is tried again
            return recorded
        probe = probe_task(task, scale, threads=threads, cache_dir=None, window=window, bytes_cap=bytes_cap,
                           timeout_s=timeout_s, sandbox=sandbox, use_bwrap=use_bwrap, seccomp=seccomp)
        record_sizes(task, probe, cache_dir,
                     {"threads": threads, "window_ms": list(window), "bytes_cap": bytes_cap})
        return probe

    def once(t: Task) -> Probe:
        return _probe_once(t, scale, threads=threads, cache_dir=cache_dir, window=window, bytes_cap=bytes_cap,
                           timeout_s=timeout_s, sandbox=sandbox, use_bwrap=use_bwrap, seccomp=seccomp)

    if scale == "auto":
        lifted, names = lift_literal_shapes(task.source)
        if names:
            probe = once(replace(task, source=lifted))
            if probe.ok:
                return replace(probe, source=lifted,
                               notes=[*probe.notes, f"literal shapes in get_inputs() sized as {', '.join(names)}"])
            original = once(task)
            kept = f"literal shapes in get_inputs() kept as written (scaled, {probe.problem})"
            return replace(original, notes=[*original.notes, kept])
    return once(task)


def _probe_key(task: Task, scale: float | str | None, threads: int, window: tuple[float, float],
               bytes_cap: int) -> tuple[str, TaskSpec, bool, float]:
    """What a probe's record is kept under (``cache_dir/sizing.json``), the spec it runs, and its mode."""
    from verifier import machine_fingerprint

    auto = scale == "auto"
    factor = 1.0 if auto or scale in (None, "none") else _factor(scale)
    base = replace(task.spec(), size_overrides={}, cases=task.original_cases)
    key = json.dumps([_PROBE_FORMAT, base.key, auto, factor, list(window), bytes_cap, threads,
                      machine_fingerprint(threads, "cpu")])
    return key, base, auto, factor


def _cached_probe(key: str, cache_file: Path | None) -> Probe | None:
    if key in _probes:
        return _probes[key]
    if cache_file is not None:
        try:
            cached = json.loads(cache_file.read_text()).get(key)
        except (OSError, ValueError):
            cached = None
        if isinstance(cached, dict):
            _probes[key] = Probe.from_dict(cached)
            return _probes[key]
    return None


def checked_probe(task: Task, scale: float | str | None, *, threads: int, cache_dir: Path | None,
                  window: tuple[float, float] = SIZING_WINDOW_MS, bytes_cap: int = SIZING_BYTES_CAP) -> Probe | None:
    """What ``tasks --check`` recorded of ``task`` at ``scale`` in this workspace (its sizes, its time, the
    operators its forward ran), or None; nothing runs. The listing reads it, so ``tasks`` and ``tasks --check``
    show a task the same (#51: its category by name in one, by its traced operators in the other)."""
    if cache_dir is None:
        return None
    if scale == "auto":
        return recorded_sizes(task, cache_dir)
    try:
        key = _probe_key(task, scale, threads, window, bytes_cap)[0]
    except TaskError:
        return None
    return _cached_probe(key, Path(cache_dir) / "sizing.json")


def _probe_once(task: Task, scale: float | str | None, *, threads: int, cache_dir: Path | None,
                window: tuple[float, float], bytes_cap: int, timeout_s: float, sandbox: ProbeSandbox | None,
                use_bwrap: bool, seccomp: bool) -> Probe:
    key, base, auto, factor = _probe_key(task, scale, threads, window, bytes_cap)
    cache_file = Path(cache_dir) / "sizing.json" if cache_dir else None
    cached = _cached_probe(key, cache_file)
    if cached is not None:
        return cached
    job = {"spec": base.to_dict(), "mode": "auto" if auto else "fixed", "factor": factor, "window": list(window),
           "bytes_cap": bytes_cap, "threads": threads, "trace": True}
    probe = run_probe(job, timeout_s, sandbox=sandbox, use_bwrap=use_bwrap, seccomp=seccomp)
    _probes[key] = probe
    if cache_file is not None and probe.ok:
        try:
            data = json.loads(cache_file.read_text()) if cache_file.exists() else {}
        except (OSError, ValueError):
            data = {}
        data[key] = probe.to_dict()
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, cache_file)
    return probe


_PROBE_FORMAT = 1
_probes: dict[str, Probe] = {}


def _factor(scale: float | str) -> float:
    try:
        factor = float(scale)
    except (TypeError, ValueError):
        raise TaskError(f"size scale {scale!r} is not a number in (0, 1] or 'auto'") from None
    if not 0 < factor <= 1:
        raise TaskError(f"size scale {factor} must be in (0, 1] (or 'auto')")
    return factor


def apply_probe(task: Task, probe: Probe) -> Task:
    """The task at the sizes a probe chose, its category from the ops the probe traced."""
    source = probe.source or task.source  # literal shapes lifted into sizes, when the probe sized those
    sizes = size_constants(source)
    overrides = {k: int(v) for k, v in probe.overrides.items() if k in sizes and int(v) != sizes[k]}
    if not overrides:
        source = task.source
    cases, notes = fit_cases(tuple(probe.cases) if probe.cases else task.original_cases)
    scaled = replace(task, source=source, size_overrides=overrides, cases=cases,
                     scale=probe.factor if overrides or cases != task.original_cases else None,
                     case_notes=tuple(notes))
    return with_traced_category(scaled, probe.ops)


class ProbeOptions(TypedDict, total=False):
    """How "auto" probes a task: :func:`probe_task`'s keyword arguments."""

    threads: int
    cache_dir: Path | None
    window: tuple[float, float]
    bytes_cap: int
    timeout_s: float
    resize: bool
    sandbox: ProbeSandbox | None   # the probes' sandbox, kept for many (verifier.sizing.launch.ProbeSandbox)
    use_bwrap: bool                # the verifier's settings, for a sandbox of each probe's own
    seccomp: bool


def scale_task(task: Task, scale: float | str | None, **probe_options: Unpack[ProbeOptions]) -> Task:
    """The task with its sizes scaled: by a factor in (0, 1] (every module-level size and case extent,
    keeping equal sizes equal, powers of two and divisors), or "auto": by work, to a reference time in
    the window (see verifier.sizing), which runs the reference in a probe job. A task "auto" cannot
    run raises TaskError in one line; one it cannot bring into the window keeps the closest sizes."""
    if scale in (None, 1, 1.0, "1", "none"):
        return within_budget(task)
    if scale == "auto":
        probe = probe_task(task, "auto", **probe_options)
        if not probe.ok:
            raise TaskError(f"task {task.id}: --size-scale auto could not size it: {probe.problem}")
        return apply_probe(task, probe)
    factor = _factor(scale)
    sizes = size_constants(task.source)
    scaled = scale_values(sizes, factor, fixed=fixed_divisors(task.source)) if sizes else {}
    overrides = {k: v for k, v in scaled.items() if v != sizes[k]}
    cases = scale_cases(task.original_cases, factor) if task.original_cases else ()
    if not overrides and cases == task.original_cases:
        return within_budget(task)
    return within_budget(replace(task, size_overrides=overrides, cases=cases, scale=factor))


def within_budget(task: Task) -> Task:
    """The task with its cases brought within the cases' memory budget
    (:func:`verifier.sizing.case_limits.fit_cases`): the largest cases shrunk, a case that cannot shrink
    enough dropped, each change a note."""
    cases, notes = fit_cases(task.cases)
    if not notes:
        return task
    return replace(task, cases=cases, case_notes=tuple(notes))


CASE_LINES = 12  # cases listed one a line in a prompt; the rest summarised


def timed_cases(task: Task, most: int) -> list[int]:
    """The cases of a multi-case task every verification times, at most ``most`` (``[verifier] timed_cases``):
    chosen by its cases alone (``verifier.cases.timing_order``), the same ones for every candidate and run."""
    from verifier import timing_order

    cases = task.spec().cases
    return timing_order(cases, range(len(cases)))[:most] if len(cases) > 1 else []


def cases_section(task: Task, tolerance: Tolerance, most_timed: int | None = None) -> str:
    """What a model must know of a multi-case task's cases ("" for a single-case task): how many, which are
    timed (``most_timed``: ``[verifier] timed_cases``; every case when None), each
    case's inputs (shapes as they will run, dtypes, attributes), that one ``ModelNew`` serves them all,
    the C pointer types the runtime accepts for each dtype, and the tolerance per dtype (``tolerance``:
    dtype -> (atol, rtol), the task's as the verifier applies it: ``VerifierProtocol.tolerance_for``)."""
    from verifier import (
        FLOAT_DTYPES,
        POINTER_DTYPES,
        canonical_dtype,
        case_number,
        describe_case,
        entry_shapes,
        untimed_dtypes,
    )

    cases = task.spec().cases
    if len(cases) < 2 and not task.case_file:
        return ""
    dtypes: list[str] = []
    attributes: dict[str, list[Any]] = {}
    for case in cases:
        for entry in case.get("inputs", []):
            if "value" in entry:
                seen = attributes.setdefault(str(entry.get("name", "?")), [])
                if entry["value"] not in seen:
                    seen.append(entry["value"])
            elif entry_shapes(entry):
                d = canonical_dtype(str(entry.get("dtype", "float32")))
                if d not in dtypes:
                    dtypes.append(d)
    timed = timed_cases(task, most_timed) if most_timed is not None else list(range(len(cases)))
    if len(timed) < len(cases):
        left_out = untimed_dtypes(cases, range(len(cases)), timed)
        head = (f"## Cases: {len(cases)}, every one checked for correctness; {len(timed)} timed, the same ones in "
                f"every verification ({', '.join(f'#{case_number(cases, k)}' for k in sorted(timed))}: first the "
                "cases that bring a new dtype, then the largest others"
                + (f"; no slot left to time {', '.join(left_out)}" if left_out else "")
                + "); the speedup is the geometric mean over the timed cases")
    else:
        head = (f"## Cases: {len(cases)}, every one checked for correctness and timed (the speedup is the geometric "
                "mean over them)")
    lines = [head,
             "One ModelNew (one model.py) gets every case's inputs in turn: "
             + ("it must serve all of these dtypes, " + ", ".join(dtypes) + " (check each tensor's dtype and call "
                "a launcher written for it)"
                if len(dtypes) > 1 else f"every tensor input is {dtypes[0] if dtypes else 'float32'}")
             + ", and every shape below (read sizes from the tensors, never fix them)."]
    listed = sorted(set(range(min(len(cases), CASE_LINES))) | set(timed))
    for k in listed:
        lines.append(f"- case #{case_number(cases, k)}{' (timed)' if k in timed and len(timed) < len(cases) else ''}: "
                     f"{describe_case(cases[k])}")
    if len(cases) > len(listed):
        sizes = sorted((sum(_numel(s) for e in c.get("inputs", []) for s in entry_shapes(e)), k)
                       for k, c in enumerate(cases))
        lines.append(f"- ... {len(cases) - len(listed)} more; the smallest is case #{case_number(cases, sizes[0][1])} "
                     f"({describe_case(cases[sizes[0][1]])}), the largest case #{case_number(cases, sizes[-1][1])} "
                     f"({describe_case(cases[sizes[-1][1]])})")
    for name, values in attributes.items():
        if len(values) > 1:
            lines.append(f"Attribute {name} takes {len(values)} values: {', '.join(map(repr, values[:10]))}"
                         + (", ..." if len(values) > 10 else ""))
    types = []
    for d in dtypes:
        accepted = [f"{c}*" for c, ds in POINTER_DTYPES.items() if d in ds]
        if accepted:
            types.append(f"{d}: {', '.join(accepted)}")
    if types:
        lines.append("C pointer types the runtime accepts per dtype: " + "; ".join(types))
    floats = [d for d in dtypes if d in FLOAT_DTYPES]
    if floats:
        lines.append("Tolerance per output dtype: " + "; ".join(f"{d} atol={tolerance(d)[0]:g} rtol={tolerance(d)[1]:g}"
                                                                for d in floats))
    return "\n".join(lines)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
