"""Sizing a task by work: scale every size it has so its reference takes a target time here.

GPU-sized suites (KernelBench's 19_ReLU is 6.4 GB) must shrink for a CPU, and tiny tasks should grow
until launch overhead stops dominating. Counting input elements misses the work (a GEMM's 32000x32000
weight is a parameter, not an input; a conv's work grows with the cube of its sizes), so ``auto`` runs
the reference and measures: each task is probed in its own subprocess (``core.probe``) under a time
and memory cap, which first shrinks it on the meta device until its tensors fit the memory cap (a
parameter never allocated at full size), then times it and rescales until one call lands in the window.

Scaling keeps what the task declares between its sizes: equal sizes stay equal, and a size that
divides another still divides it (``block_len`` into ``seq_length``).
A task that cannot be brought into the window is reported with the reason, never timed for minutes.
"""

from __future__ import annotations

import ast
import json
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import lcm
from pathlib import Path
from typing import Any

from verifier.cases import case_bytes
from verifier.task import MIN_SIZE

WINDOW_MS = (2.0, 50.0)       # the reference time "auto" aims for, on this machine
BYTES_CAP = 1 << 30           # parameters + one case's inputs, at most (the memory cap per task)
CALL_CAP_S = 2.0              # one reference call longer than this is not repeated: shrink first
PROBE_TIMEOUT_S = 120.0       # a probe (sizing + timing one task) is killed after this
MAX_GROWTH = 64.0             # "auto" grows a small task by at most this factor per size
MAX_STEPS = 20               # "auto" measures at most this many times (a size near the window is measured twice)
START_BYTES = 32 << 20        # "auto" starts here when a task's work cannot be counted on the meta device
# "auto" chooses sizes from the work counted on the meta device (bytes moved, FLOPs: the roofline's count),
# at these nominal rates of one core running PyTorch, so the same task gets the same sizes whatever the
# machine's load; a timing only confirms, and corrects the rate in steps of RATE_STEP when it disagrees
NOMINAL_GBPS = 8.0
NOMINAL_GFLOPS = 50.0
RATE_STEP = 4.0
# a forward the meta device cannot run (nonzero's output size, a value read in it) is counted on real tensors
# instead, at these two small sizes of each case (input bytes), and carried to the case's size (core.probe)
# (its dispatched operators counted too, at NOMINAL_OP_US each: such a forward is often a Python loop)
REAL_COUNT_BYTES = (4 << 10, 16 << 10)
NOMINAL_OP_US = 5.0
# The time limit of a multi-case task's reference, per call of one case: a verification runs every case's
# trials (about seven each) and a timing window per case, so all the cases' calls together stay within
# CASES_TIME_MS and no case over CASE_CAP_MS (a case over it is shrunk, or dropped at its smallest sizes)
CASE_CAP_MS = 1000.0
CASES_TIME_MS = 20_000.0


def scale_values(values: dict[str, int], factor: float, floor: int = MIN_SIZE,
                 fixed: tuple[int, ...] = ()) -> dict[str, int]:
    """``values`` scaled by ``factor``: equal values stay equal, a value that divides another still
    divides it (the larger is rounded to a multiple of the smaller), a ``fixed`` number that divides a
    value still divides it (``num_groups = 8`` into ``out_channels``), and none goes below
    ``min(value, floor)``. Sizes are not kept powers of two: all of a task's sizes doubling at once
    would change its time 30-fold in one step, past the whole window."""
    distinct = sorted(set(values.values()))
    scaled: dict[int, int] = {}
    below = 0   # the largest value scaled so far: a larger size never comes out smaller than a smaller one
    for v in distinct:  # ascending, so every divisor of v is already scaled
        lo = min(v, floor)
        r = max(lo, round(v * factor))
        divisors = [scaled[d] for d in distinct if d < v and v % d == 0 and d >= floor]
        divisors += [d for d in fixed if 1 < d <= v and v % d == 0]  # num_groups == channels: not scaled
        step = 1
        for d in divisors:
            step = lcm(step, d)
        if step > 1:
            if step > max(r, lo) * 4:   # incompatible divisors after scaling: keep the largest one only
                step = max(divisors)
            r = max(step, round(r / step) * step)
        if r < below:
            r = -(-below // step) * step
        scaled[v] = int(r)
        below = max(below, int(r))
    return {k: scaled[v] for k, v in values.items()}


# module constants that are not sizes but must keep dividing one: GroupNorm's groups, attention's heads
_FIXED_DIVISOR_WORDS = ("group", "head")


def fixed_divisors(source: str) -> tuple[int, ...]:
    """The task's module-level integers that a size must stay a multiple of (``num_groups = 8``,
    ``num_heads = 4``): they are not scaled, so the sizes they divide are rounded to their multiples."""
    from verifier.task import module_constants, size_constants

    sizes = size_constants(source)
    return tuple(sorted({v for k, v in module_constants(source).items()
                         if type(v) is int and v > 1 and k not in sizes
                         and any(w in k.lower() for w in _FIXED_DIVISOR_WORDS)}))


# list attributes that are an output's extents: scaled with the inputs' (interpolate's output size)
_OUTPUT_SIZE_NAMES = ("size", "output_size")


def case_sizes(cases: tuple[dict[str, Any], ...]) -> dict[str, int]:
    """The scalable extents of a multi-case task's cases, keyed ``case/input/dim`` (``case/input.j/dim``
    for the j-th tensor of an input that is a list of tensors)."""
    from verifier.cases import entry_shapes

    out = {}
    for c, case in enumerate(cases):
        extents = {n for entry in case.get("inputs", []) for shape in entry_shapes(entry) for n in shape}
        for i, entry in enumerate(case.get("inputs", [])):
            value = entry.get("value")
            if isinstance(value, list) and value and all(type(v) is int for v in value):
                # a list of extents given as an attribute (LayerNorm's normalized_shape): the numbers that
                # are a tensor's extents too are scaled with them (equal ones stay equal); others (repeat
                # counts, permutations) are not sizes, except an output size (interpolate's ``size``)
                output = str(entry.get("name", "")).lower() in _OUTPUT_SIZE_NAMES
                for d, n in enumerate(value):
                    if n >= MIN_SIZE and (n in extents or output):
                        out[f"{c}/{i}v/{d}"] = n
                continue
            listed = "shape" not in entry
            for j, shape in enumerate(entry_shapes(entry)):
                where = f"{i}.{j}" if listed else f"{i}"
                for d, n in enumerate(shape):
                    if isinstance(n, int) and n >= MIN_SIZE:
                        out[f"{c}/{where}/{d}"] = n
    return out


def _with_sizes(case: dict[str, Any], new: dict[str, int]) -> dict[str, Any]:
    """``case`` with the extents ``new`` names (keys as :func:`case_sizes` gives them for case 0)."""
    inputs = []
    for i, entry in enumerate(case.get("inputs", [])):
        entry = dict(entry)
        value = entry.get("value")
        if isinstance(value, list) and all(type(v) is int for v in value):
            entry["value"] = [new.get(f"0/{i}v/{d}", n) for d, n in enumerate(value)]
        elif "value" not in entry and isinstance(entry.get("shape"), list):
            entry["shape"] = [new.get(f"0/{i}/{d}", n) for d, n in enumerate(entry["shape"])]
        elif "value" not in entry and isinstance(entry.get("shapes"), list):
            entry["shapes"] = [[new.get(f"0/{i}.{j}/{d}", n) for d, n in enumerate(shape)]
                               if isinstance(shape, list) else shape for j, shape in enumerate(entry["shapes"])]
        inputs.append(entry)
    return {**case, "inputs": inputs}


def scale_cases(cases: tuple[dict[str, Any], ...], factor: float,
                each: dict[int, float] | None = None) -> tuple[dict[str, Any], ...]:
    """The cases with every tensor extent scaled by ``factor`` (per case, so a case's matching extents,
    like a matmul's inner dimensions, stay matching); ``each``: a further factor for some cases by index
    (a case shrunk to its time limit)."""
    out = []
    for k, case in enumerate(cases):
        sizes = case_sizes((case,))
        f = factor * (each or {}).get(k, 1.0)
        out.append(_with_sizes(case, scale_values(sizes, f, fixed=case_divisors(case)) if sizes else {}))
    return tuple(out)


def case_cap_ms(cases: int) -> float:
    """The time limit of one call of one case of a task with ``cases`` cases (see CASE_CAP_MS)."""
    return min(CASE_CAP_MS, CASES_TIME_MS / max(1, cases))


def case_divisors(case: dict[str, Any]) -> tuple[int, ...]:
    """What a case's extents must stay multiples of when they are: its integer attributes (``num_groups``,
    a kernel or block size) and 2 (an even extent stays even: a task that halves it, SwiGLU's two
    chunks, needs it so)."""
    values = {2}
    for entry in case.get("inputs", []):
        v = entry.get("value")
        if type(v) is int and v > 1:
            values.add(v)
    return tuple(sorted(values))


# The inputs of all a multi-case task's cases together, once, at most: a verification keeps the reference's
# results of every trial of every case (about six per case), so this bounds them to a few hundred MiB.
CASES_BYTES_BUDGET = 48 << 20


def fit_cases(cases: tuple[dict[str, Any], ...], budget: int = CASES_BYTES_BUDGET,
              keep: frozenset[int] = frozenset()) -> tuple[tuple[dict[str, Any], ...], list[str]]:
    """The cases brought within ``budget`` bytes of inputs in all, and notes on what changed: the largest
    cases shrink (each to the same cap, every extent scaled alike, its constraints kept as scaling keeps
    them), smaller ones stay as written; a case still over its share at its smallest sizes is dropped,
    unless it is the last one. Cases already within the budget come back unchanged. The cases indexed
    by ``keep`` are never changed (their reference fails at other sizes) but count against the budget.
    (:func:`fit_case_indices` says which case each one left is.)"""
    placed, notes = fit_case_indices(cases, budget, keep)
    return tuple(c for _, c in placed), notes


def fit_case_indices(cases: tuple[dict[str, Any], ...], budget: int = CASES_BYTES_BUDGET,
                     keep: frozenset[int] = frozenset()) -> tuple[tuple[tuple[int, dict[str, Any]], ...], list[str]]:
    """:func:`fit_cases`, each case left paired with its index in ``cases`` (in their order): a case is
    known by its index, never by its place among those left once one is dropped. The notes name cases by
    their index in ``cases`` too."""
    if keep:
        kept = sum(case_bytes(cases[k]) for k in keep if k < len(cases))
        rest = [k for k in range(len(cases)) if k not in keep]
        fitted, notes = _fit([cases[k] for k in rest], rest, max(0, budget - kept)) if rest else ((), [])
        placed = {k: cases[k] for k in keep if 0 <= k < len(cases)} | dict(fitted)
        return tuple(sorted(placed.items(), key=lambda kc: kc[0])), notes
    return _fit(list(cases), list(range(len(cases))), budget)


def _fit(cases: list[dict[str, Any]], ids: list[int],
         budget: int) -> tuple[tuple[tuple[int, dict[str, Any]], ...], list[str]]:
    """:func:`fit_case_indices` without cases to keep: ``ids[k]`` is the index of ``cases[k]``."""
    sizes = [case_bytes(c) for c in cases]
    if not cases or sum(sizes) <= budget:
        return tuple(zip(ids, cases)), []
    # the largest cap that keeps every case at or below it within the budget
    lo, hi = 0, max(sizes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if sum(min(b, mid) for b in sizes) <= budget else (lo, mid)
    cap = lo
    out: list[tuple[int, dict[str, Any]]] = []
    shrunk, dropped = 0, []
    for k, case, b in zip(ids, cases, sizes):
        if b <= cap:
            out.append((k, case))
            continue
        a, z = 1e-4, 1.0  # the largest factor whose case fits the cap
        for _ in range(40):
            mid = (a * z) ** 0.5
            a, z = (mid, z) if case_bytes(scale_cases((case,), mid)[0]) <= cap else (a, mid)
        small = scale_cases((case,), a)[0]
        if case_bytes(small) <= cap:
            out.append((k, small))
            shrunk += 1
        else:
            dropped.append(k)
    if not out:  # every case over its share at its smallest: keep the smallest one, at its smallest sizes
        j = min(range(len(cases)), key=lambda i: case_bytes(scale_cases((cases[i],), 1e-4)[0]))
        out, dropped = [(ids[j], scale_cases((cases[j],), 1e-4)[0])], [i for i in dropped if i != ids[j]]
        shrunk = 1
    notes = [f"{shrunk} of {len(cases)} cases shrunk to fit {budget / 2**20:.0f} MiB of inputs in all "
             f"(largest {max(sizes) / 2**20:.1f} MiB as written; a verification keeps the reference's results "
             "of every trial of every case)"] if shrunk else []
    if dropped:
        notes.append(f"dropped {len(dropped)} case{'s' * (len(dropped) > 1)} (#{', #'.join(map(str, dropped))}) "
                     "still over the budget at their smallest sizes")
    return tuple(out), notes


@dataclass
class Probe:
    """What a probe of a task's reference found (all fields optional but ``ok``)."""

    ok: bool
    loaded: bool = False
    factor: float = 1.0
    overrides: dict[str, int] = field(default_factory=dict)
    cases: list[dict[str, Any]] | None = None   # a multi-case task's cases (JSON records) at these sizes
    ms: float | None = None
    case_ms: list[float] = field(default_factory=list)
    bytes: int | None = None
    ops: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    reason: str = ""        # why it is outside the window: busy, at_floor, no_sizes, memory_cap, cliff, no_closer_size,
    #                         steps (a probe that did not finish: timeout, failed)
    on_cpu: float | None = None  # the share of the best call's wall time the reference's threads ran
    source: str = ""        # the source the overrides refer to, when it is not the task's own (literals lifted)
    steps: list[dict[str, Any]] = field(default_factory=list)  # the probe's progress lines, as JSON
    sized_by: str = ""      # "counted work" (at a rate corrected by a timing) or "measured time"; "" not sized

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Probe:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def run_probe(job: dict[str, Any], timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Run ``core.probe`` on ``job`` in a subprocess of its own (a new process group, killed whole on
    timeout): a task that hangs, exits or dies is a Probe with a one-line problem, never our crash.

    A probe sizes, it does not judge: it runs at lower CPU priority (``verifier.machine.priority``) and holds
    the machine lock shared, so it waits while any timing window runs and never runs beside one. It runs the
    task's reference, as the verifier's reference jobs do, with the same scrubbed environment (no credentials:
    ``verifier.processes.scrubbed_env``)."""
    from verifier.machine.lock import MachineLock, machine_lock_path
    from verifier.processes import run_process, scrubbed_env

    with tempfile.TemporaryDirectory(prefix="evokernel-probe-") as tmp, MachineLock(machine_lock_path()).shared():
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "progress.jsonl"
        job_path.write_text(json.dumps(job))
        env = scrubbed_env({"OMP_NUM_THREADS": str(job.get("threads", 1))}, home=tmp)
        proc = run_process([sys.executable, "-m", "core.probe", str(job_path), str(out_path)], cwd=tmp, env=env,
                           timeout=timeout_s, background=True, limits=_limits(job), output_limit=4_000)
        timed_out = proc.timed_out
        lines = out_path.read_text().splitlines() if out_path.exists() else []
        records = [json.loads(line) for line in lines if line.strip()]
    final = next((r for r in reversed(records) if r.get("final")), None)
    if final is not None:
        final.setdefault("loaded", any(r.get("loaded") for r in records))
        final["steps"] = [r for r in records if "factor" in r and not r.get("final")]
        return Probe.from_dict(final)
    last = next((r for r in reversed(records) if "factor" in r), None)
    where = f" at scale {last['factor']:.3g}" if last else ""
    if timed_out:
        problem = f"reference did not finish within {timeout_s:.0f} s{where}"
        if last and last.get("ms"):
            problem += f" (last call {last['ms']:.0f} ms)"
    else:
        last = proc.last_line(200)
        code = proc.returncode if proc.returncode is not None else 0
        how = proc.describe()
        if code == -signal.SIGKILL:
            how += " (memory or CPU-time limit)"
        problem = f"reference process {how}{where}" + (f": {last}" if last else "")
        if code < 0 or "MemoryError" in last:
            problem += "; try --size-scale auto or a smaller factor"
    return Probe(ok=False, loaded=any(r.get("loaded") for r in records), problem=problem,
                 reason="timeout" if timed_out else "failed",
                 steps=[r for r in records if "factor" in r])


def _limits(job: dict[str, Any]) -> Callable[[], None]:
    cap = int(job.get("bytes_cap", BYTES_CAP))

    def apply() -> None:
        import resource

        limit = cap * 6 + (4 << 30)  # tensors, a copy or two of them, and the interpreter with torch
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass

    return apply


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
