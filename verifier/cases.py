"""Multi-case tasks: a task that defines ``get_input_groups()`` and a JSON-lines case file beside it.

The NPU benchmarks' format: each line of the case file is ``{"inputs": [{"name", "dtype", "shape"} or
{"name", "value"}, ...]}`` (dtype float32 / float16 / bfloat16 / int..., several shapes per task), and
``get_input_groups()`` opens that file and returns one input list per line. The task's own code knows
what its inputs mean (a target's class range, a scalar attribute), so inputs are always made by it;
this module only decides *which* cases it sees: the cases ride in the :class:`TaskSpec` (sizes already
scaled) and the task's ``open()`` of its case file is answered from them, one case at a time, so the
worker never reads the task's folder and a scaled case is what the task builds.

Every case is a correctness trial set (``verifier.inputs.case_trials``, in place of the second-shape
trials); performance is the geometric mean over the cases (:func:`case_geomean`).

A case is named by its number everywhere, in text and in JSON alike: 1 for the case file's first case
(:func:`case_number`). Each case carries it (``"number"``, set when the file is read) through scaling and
fitting, so a case keeps its number when the memory budget or sizing drops one before it; the number is no
part of what runs (neither a task's key nor the file the task reads holds it).
"""

from __future__ import annotations

import builtins
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import IO, Any

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
KNOWN_DTYPES = (*FLOAT_DTYPES, "int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "bool",
                "complex64", "complex128")
# Short names case files also use (the NPU benchmark writes "bf16" beside "bfloat16"); the task's own code
# maps them, so a case keeps the name it was written with and only this module reads them as their dtype.
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
                 "fp64": "float64", "double": "float64", "int": "int64", "long": "int64"}


def canonical_dtype(dtype: str) -> str:
    """The dtype a case file's name stands for (``bf16`` -> ``bfloat16``); unknown names as they are."""
    return DTYPE_ALIASES.get(dtype, dtype)


def entry_shapes(entry: dict[str, Any]) -> list[list[int]]:
    """The shapes of one case input: one for a tensor (``"shape"``), several for a list of tensors
    (``"shapes"``), none for a value."""
    if "value" in entry:
        return []
    if isinstance(entry.get("shapes"), list):
        return [s for s in entry["shapes"] if isinstance(s, list)]
    return [entry["shape"]] if isinstance(entry.get("shape"), list) else []


class CaseError(ValueError):
    """A case file that cannot be used, in one line."""


def parse_case_file(text: str, name: str = "cases") -> tuple[dict[str, Any], ...]:
    """The cases of a JSON-lines case file, each checked: an object with an ``inputs`` list whose
    entries have a ``name`` and either a ``value`` or a ``dtype`` (a known one, or its short name: ``bf16``)
    and a ``shape`` (or ``shapes``, a list of shapes, for an input that is a list of tensors)."""
    cases: list[dict[str, Any]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except ValueError as exc:
            raise CaseError(f"{name} line {lineno}: not JSON ({getattr(exc, 'msg', exc)})") from None
        inputs = case.get("inputs") if isinstance(case, dict) else None
        if not isinstance(inputs, list):
            raise CaseError(f"{name} line {lineno}: a case is an object with an \"inputs\" list")
        for k, entry in enumerate(inputs):
            if not isinstance(entry, dict):
                raise CaseError(f"{name} line {lineno}: input {k} is not an object")
            if "value" in entry or entry.get("shape", 0) is None:
                continue
            dtype = entry.get("dtype")
            shapes = entry["shapes"] if "shapes" in entry and "shape" not in entry else [entry.get("shape")]
            if dtype is not None and canonical_dtype(dtype) not in KNOWN_DTYPES:
                raise CaseError(f"{name} line {lineno}: input {entry.get('name', k)!r} has unknown dtype {dtype!r} "
                                f"(known: {', '.join(KNOWN_DTYPES)}, or {', '.join(DTYPE_ALIASES)})")
            if not (isinstance(shapes, list) and shapes and all(
                    isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape) for shape in shapes)):
                raise CaseError(f"{name} line {lineno}: input {entry.get('name', k)!r} needs a \"shape\" list of "
                                "non-negative integers (or \"shapes\", a list of them) or a \"value\"")
        cases.append({**case, NUMBER: len(cases) + 1})
    if not cases:
        raise CaseError(f"{name}: no cases")
    return tuple(cases)


NUMBER = "number"
"""The key of a case's number in its record (:func:`case_number`): what names it, never what runs."""


def case_number(cases: Sequence[dict[str, Any]], k: int) -> int:
    """The number of case ``k`` of ``cases`` (its index there) as every surface names it: its place in the task's
    case file, 1 for the first, kept when cases before it were dropped; ``k + 1`` for a case without one."""
    if 0 <= k < len(cases):
        n = cases[k].get(NUMBER)
        if isinstance(n, int) and not isinstance(n, bool):
            return n
    return k + 1


def unnumbered(case: dict[str, Any]) -> dict[str, Any]:
    """A case as it runs and as its task reads it: without its number."""
    return {k: v for k, v in case.items() if k != NUMBER} if NUMBER in case else case


def numbered_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A verdict's per-case entry (``Outcome.cases``: ``"case"`` is the case's index) as a JSON reader gets it:
    ``"case"`` is the case's number, as the text says it (``verify --json``, ``report --json``)."""
    out = {k: v for k, v in entry.items() if k != NUMBER}
    if "case" in entry:
        out["case"] = int(entry.get(NUMBER) or int(entry["case"]) + 1)
    return out


_CASE_FILE_LITERAL = re.compile(r"""["']([\w.\-]+\.jsonl?)["']""")


def case_file_name(source: str, task_stem: str) -> str:
    """The case file a task reads: the ``*.json``/``*.jsonl`` name its source spells, else ``<stem>.json``."""
    m = _CASE_FILE_LITERAL.search(source)
    return m.group(1) if m else f"{task_stem}.json"


def describe_case(case: dict[str, Any]) -> str:
    """``x float16[4, 1024], dim=1``: a case in a few words."""
    parts = []
    for k, entry in enumerate(case.get("inputs", [])):
        name = entry.get("name", f"in{k}")
        if "value" in entry:
            parts.append(f"{name}={entry['value']!r}")
        elif isinstance(entry.get("shapes"), list) and "shape" not in entry:
            shapes = entry_shapes(entry)
            parts.append(f"{name} [{len(shapes)} tensors] " + ", ".join(f"{entry.get('dtype', 'float32')}{s}"
                                                                        for s in shapes))
        elif entry.get("shape") is None:
            parts.append(f"{name}=None")
        else:
            parts.append(f"{name} {entry.get('dtype', 'float32')}{list(entry['shape'])}")
    return ", ".join(parts)


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1, "complex64": 8,
             "complex128": 16}


def case_bytes(case: dict[str, Any]) -> int:
    """Bytes of one case's tensor inputs, from its shapes and dtypes (no tensor made)."""
    total = 0
    for entry in case.get("inputs", []):
        size = _ITEMSIZE.get(canonical_dtype(str(entry.get("dtype", "float32"))), 4)
        for shape in entry_shapes(entry):
            n = 1
            for d in shape:
                n *= int(d)
            total += n * size
    return total


def timing_order(cases: Sequence[dict[str, Any]], among: Iterable[int]) -> list[int]:
    """The order in which a multi-case task's cases ``among`` are timed when not all of them can be
    (``[verifier] timed_cases``): first, in turn, the case that brings the most dtypes not timed yet (every
    dtype of its tensor inputs: ints, unsigned, bool and complex as much as floats; the larger case on a tie),
    until every dtype is in; then the others by size, largest first; equal sizes in case order. So the first
    ``n`` cover as many dtypes as ``n`` cases can (``untimed_dtypes`` names those left out). It depends on the
    cases alone (their shapes and dtypes), so every candidate of a task, and the best beside it, is timed on
    the same cases. (Until #51 only floating dtypes counted, each combination of them apart: a 13-dtype task
    timed fp16 and fp32 twice and never int8, int16, int32 or an unsigned one.)"""
    ks = sorted(set(among))
    by_size = sorted(ks, key=lambda k: (-case_bytes(cases[k]), k))
    dtypes = {k: set(tensor_dtypes(cases[k])) for k in ks}
    covered: set[str] = set()
    leaders: list[int] = []
    while True:
        gains = [(len(dtypes[k] - covered), k) for k in by_size if k not in leaders]
        best = max(gains, key=lambda g: g[0], default=(0, -1))   # max keeps the first (largest) on a tie
        if best[0] == 0:
            break
        leaders.append(best[1])
        covered |= dtypes[best[1]]
    return leaders + [k for k in by_size if k not in leaders]


def untimed_dtypes(cases: Sequence[dict[str, Any]], among: Iterable[int], timed: Iterable[int]) -> list[str]:
    """The dtypes of cases ``among`` that no case of ``timed`` has (the timed-case slots ran out first)."""
    seen = {d for k in timed for d in tensor_dtypes(cases[k])}
    every: list[str] = []
    for k in sorted(set(among)):
        every += [d for d in tensor_dtypes(cases[k]) if d not in every]
    return [d for d in every if d not in seen]


def tensor_dtypes(case: dict[str, Any]) -> list[str]:
    """Every dtype of a case's tensor inputs (canonical names), in order, each once."""
    seen: list[str] = []
    for entry in case.get("inputs", []):
        d = canonical_dtype(str(entry.get("dtype", "float32")))
        if entry_shapes(entry) and d not in seen:
            seen.append(d)
    return seen


def case_dtypes(case: dict[str, Any]) -> list[str]:
    """The floating dtypes of a case's tensor inputs, in order, each once."""
    seen: list[str] = []
    for entry in case.get("inputs", []):
        d = canonical_dtype(str(entry.get("dtype")))
        if entry_shapes(entry) and d in FLOAT_DTYPES and d not in seen:
            seen.append(d)
    return seen


def describe_groups(groups: list[Any]) -> tuple[dict[str, Any], ...]:
    """Cases in the case-file format for what a task's ``get_input_groups()`` returned (run on the meta
    device): for a task that lists its cases in code instead of a file."""
    import torch

    cases: list[dict[str, Any]] = []
    for group in groups:
        inputs: list[dict[str, object]] = []
        for k, x in enumerate(group if isinstance(group, (list, tuple)) else [group]):
            if isinstance(x, torch.Tensor):
                inputs.append({"name": f"in{k}", "dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape)})
            else:
                inputs.append({"name": f"in{k}", "value": x if isinstance(x, (int, float, str, bool)) or x is None
                               else repr(x)})
        cases.append({"inputs": inputs, NUMBER: len(cases) + 1})
    return tuple(cases)


class CaseInputs:
    """A multi-case task's ``get_inputs``: called plainly it gives case 0; ``for_case(k)`` gives the
    function that makes case k. The task's ``open()`` of its case file is answered with only the case
    asked for (so a case's inputs cost one case); a task that lists cases in code gets its k-th group."""

    def __init__(self, module: ModuleType, cases: tuple[dict[str, Any], ...], case_file: str):
        self.module = module
        self.cases = cases
        self.case_file = case_file
        self._served: tuple[dict[str, Any], ...] = cases

    def _open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> IO[Any]:
        if isinstance(file, (str, os.PathLike)) and os.path.basename(os.fspath(file)) == self.case_file \
                and "w" not in mode and "a" not in mode:
            text = "".join(json.dumps(unnumbered(c)) + "\n" for c in self._served)
            return io.BytesIO(text.encode()) if "b" in mode else io.StringIO(text)
        return builtins.open(file, mode, *args, **kwargs)

    def install(self) -> None:
        """Answer the module's ``open()`` of its case file from the cases (module globals come first)."""
        self.module.__dict__["open"] = self._open

    def for_case(self, k: int) -> Callable[[], list[Any]]:
        def make() -> list[Any]:
            self._served = (self.cases[k],) if self.case_file and k < len(self.cases) else self.cases
            try:
                groups = list(self.module.get_input_groups())
            finally:
                self._served = self.cases
            if not groups:
                raise ValueError("get_input_groups() returned no groups")
            group = groups[0] if len(groups) == 1 else groups[k % len(groups)]
            return list(group) if isinstance(group, (list, tuple)) else [group]
        return make

    def __call__(self) -> list[Any]:
        return self.for_case(0)()


def install_cases(module: ModuleType, cases: tuple[dict[str, Any], ...], case_file: str) -> None:
    """Give a loaded multi-case task a ``get_inputs`` (case 0, ``for_case(k)`` for the others); ``cases``
    and ``case_file`` are its ``TaskSpec``'s."""
    if not callable(getattr(module, "get_input_groups", None)):
        return
    inputs = CaseInputs(module, tuple(cases) or ({"inputs": []},), case_file)
    if case_file:
        inputs.install()
    if not callable(getattr(module, "get_inputs", None)):
        module.__dict__["get_inputs"] = inputs
    else:  # a task with both: its get_inputs stays case 0's ... unless asked for a case
        module.__dict__["get_inputs_for_case"] = inputs.for_case


def inputs_for(get_inputs: Callable[[], list[Any]], case: int | None) -> Callable[[], list[Any]]:
    """The input maker for ``case`` (``get_inputs`` itself for a single-case task or no case)."""
    if case is None:
        return get_inputs
    for_case = getattr(get_inputs, "for_case", None)
    if for_case is None:
        for_case = getattr(get_inputs, "__globals__", {}).get("get_inputs_for_case")
    return for_case(case) if for_case is not None else get_inputs


def case_geomean(case_ms: list[float]) -> float:
    """Performance over a task's cases: the geometric mean of the per-case times (ms). A per-case
    speedup's geometric mean equals the ratio of the two geometric means, so either may be reported."""
    if not case_ms:
        raise ValueError("no case times")
    if any(not (t > 0 and math.isfinite(t)) for t in case_ms):
        raise ValueError(f"case times must be positive and finite: {case_ms}")
    return math.exp(sum(math.log(t) for t in case_ms) / len(case_ms))


def case_performance(reference_ms: list[float], candidate_ms: list[float]) -> dict[str, Any]:
    """The performance record of a multi-case task from per-case medians measured in one window:
    ``{"reference_ms", "latency_ms", "speedup", "cases": [{"case", "reference_ms", "latency_ms", "speedup"}]}``
    with the two times being geometric means over the cases."""
    if len(reference_ms) != len(candidate_ms):
        raise ValueError("one reference and one candidate time per case")
    ref, cand = case_geomean(reference_ms), case_geomean(candidate_ms)
    return {"reference_ms": ref, "latency_ms": cand, "speedup": ref / cand,
            "cases": [{"case": k, "reference_ms": r, "latency_ms": c, "speedup": r / c}
                      for k, (r, c) in enumerate(zip(reference_ms, candidate_ms))]}
