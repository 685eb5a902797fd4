"""A look inside a kernel (#51, 8): why it is fast or slow, beyond its speedup.

- ``hot_loops``: the loops of its launchers' code (each ``extern "C"`` function and the bodies OpenMP outlines
  from it, ``name._omp_fn.N``), read from the built library's disassembly (``verifier.build.disassemble``): the
  innermost ones, most vector work first, each with its instructions, its vector width (xmm/ymm/zmm) and its
  masked ops. ``assembly`` builds a candidate (the verifier's build cache: what was verified is what is read)
  and says that in words with the loops' code.
- ``one_case``: a multi-case task reduced to one chosen case (by its number), which ``verify --case`` then times
  alone, in its own window beside the reference.
- ``count_calls``: one case verified with a window observer counting each side's timed calls with the harness's
  ``perf_event_open`` (``verifier.machine.counters``): per call, the candidate's and PyTorch's cycles,
  instructions and cache misses where the machine has a PMU, CPU time, page faults and context switches always.
- ``side_by_side``: two attempts' files in two columns, aligned line by line (not only a diff against the
  parent).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import TaskError

if TYPE_CHECKING:
    from core.tasks import Task
    from core.workspace import Workspace

_FUNC = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_INSN = re.compile(r"^\s*(?P<addr>[0-9a-f]+):\s+(?P<text>\S.*)$")
_JUMP = re.compile(r"^j\w+\s+(?P<target>[0-9a-f]+)\b")
_VECTOR = re.compile(r"%([xyz])mm\d+")
WIDTH = {"x": 128, "y": 256, "z": 512}
SHOWN_LINES = 40   # instructions shown per loop


@dataclass
class Loop:
    """One innermost loop of a function: where it is, its instructions, how wide its vectors are."""

    function: str
    start: int
    end: int
    instructions: list[str] = field(default_factory=list)

    @property
    def vector_bits(self) -> int:
        widths = [WIDTH[m] for text in self.instructions for m in _VECTOR.findall(text)]
        return max(widths, default=0)

    @property
    def vector_ops(self) -> int:
        return sum(1 for text in self.instructions if _VECTOR.search(text))

    @property
    def masked_ops(self) -> int:
        return sum(1 for text in self.instructions if "{%k" in text)

    def words(self) -> str:
        width = (f"{self.vector_bits}-bit vectors ({'xyz'[self.vector_bits // 256]}mm), {self.vector_ops} vector ops"
                 if self.vector_bits else "scalar: no vector register")
        masked = f", {self.masked_ops} masked" if self.masked_ops else ""
        return f"{self.function}: a loop of {len(self.instructions)} instructions at {self.start:#x}, {width}{masked}"


def hot_loops(disassembly: str, launchers: list[str], most: int = 4) -> list[Loop]:
    """The innermost loops of the launchers' functions (and what OpenMP outlined from them), the widest vectors and
    the densest vector work first, at most ``most``."""
    functions: dict[str, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] | None = None
    wanted = set(launchers)
    for line in disassembly.splitlines():
        m = _FUNC.match(line.strip())
        if m:
            name = m.group("name")
            base = name.split("._omp_fn")[0].split("(")[0]
            current = functions.setdefault(name, []) if base in wanted else None
            continue
        if current is not None and (ins := _INSN.match(line)):
            current.append((int(ins.group("addr"), 16), " ".join(ins.group("text").split())))
    loops: list[Loop] = []
    for name, code in functions.items():
        found = []
        for addr, text in code:
            jump = _JUMP.match(text)
            if jump and (target := int(jump.group("target"), 16)) <= addr and target >= code[0][0]:
                found.append((target, addr))
        inner = [(a, b) for a, b in found if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in found)]
        for a, b in inner:
            loops.append(Loop(name, a, b, [t for x, t in code if a <= x <= b]))
    # the widest vectors first, then the densest in vector work: a remainder or a scalar loop comes last
    loops.sort(key=lambda lp: (-lp.vector_bits, -lp.vector_ops / max(1, len(lp.instructions)), lp.function))
    return loops[:most]


def loops_text(loops: list[Loop], library: str = "") -> str:
    """The loops in words, each followed by its instructions."""
    if not loops:
        return "no loop found in the launchers' code (a loop the compiler unrolled away, or code in a helper " \
               "it did not inline)"
    out = [f"the hot loops of {library or 'the library'} (objdump, AT&T syntax), the widest vectors first:"]
    for lp in loops:
        out.append("")
        out.append(lp.words())
        out += [f"    {t}" for t in lp.instructions[:SHOWN_LINES]]
        if len(lp.instructions) > SHOWN_LINES:
            out.append(f"    ... {len(lp.instructions) - SHOWN_LINES} more")
    return "\n".join(out)


def assembly(workspace: Workspace, backend: str, files: dict[str, str]) -> str:
    """The hot loops of ``files`` built as the verifier builds them (its build cache: a verified candidate is not
    built again), in words; what went wrong instead when it does not build or cannot be read."""
    from verifier import build_candidate, disassemble, get_backend

    found = get_backend(backend)
    if found.device != "cpu":
        return f"the {backend} backend's kernels run on a device: their assembly is not read here"
    config = workspace.config().verifier
    built = build_candidate(found, files, workspace.cache_dir, timeout=config.build_timeout_s,
                            sandbox=config.use_bwrap, hidden=workspace.private_paths())
    if not built.ok:
        return f"it does not build, so there is no assembly:\n{built.log}"
    text = disassemble(found, built, sandbox=config.use_bwrap)
    if not text:
        return "the library could not be disassembled (objdump, from binutils, did not run)"
    return loops_text(hot_loops(text, [s.name for s in built.signatures]), built.library.name if built.library
                      else "")


def one_case(task: Task, number: int) -> Task:
    """``task`` with only its case ``number`` (as every table names it), which a verification then checks and
    times alone; a task of one case as it is for 1."""
    from verifier import case_number

    cases = task.spec().cases
    if not cases:
        if number == 1:
            return task
        raise TaskError(f"task {task.id} has one case (no case file): --case 1 or none")
    for k in range(len(cases)):
        if case_number(cases, k) == number:
            return replace(task, cases=(cases[k],))
    numbers = [case_number(cases, k) for k in range(len(cases))]
    raise TaskError(f"task {task.id} has no case #{number}: its cases are #{numbers[0]}-#{numbers[-1]}"
                    + (f" ({len(numbers)} of them: the memory budget dropped some)" if numbers[-1] != len(numbers)
                       else ""))


def first_timed_case(task: Task) -> int:
    """The number of the first case a verification of ``task`` times (its largest of the dtype first timed); 1 for
    a task of one case."""
    from core.tasks import timed_cases
    from verifier import case_number

    cases = task.spec().cases
    return case_number(cases, timed_cases(task, 1)[0]) if len(cases) > 1 else 1


def count_calls(verifier: Any, task: Task, folder: Path) -> dict[str, Any]:
    """``task`` (one case: ``one_case``) verified afresh, its window's timed calls counted by the harness per side
    (``verifier.machine.counters.CallCounts``): ``{"outcome", "candidate": {event: per call}, "reference": ...,
    "calls": {side: n}, "missing": {event: why}, "problem"}``."""
    from verifier import CallCounts

    counts = CallCounts()
    before = getattr(verifier, "window_observer", None)
    verifier.window_observer = counts
    try:
        outcome = verifier.verify(task.spec(), folder, fresh=True)
    finally:
        verifier.window_observer = before
        counts.close()
    sides = ("candidate", "reference")
    return {"outcome": outcome, **{s: counts.per_call(s) for s in sides}, "calls": {s: counts.calls(s) for s in sides},
            "missing": counts.missing(), "problem": counts.problem}


COUNTER_WORDS = (("task_clock_ns", "CPU time", 1e-6, "ms"), ("cycles", "cycles", 1e-6, "M"),
                 ("instructions", "instructions", 1e-6, "M"), ("cache_references", "cache references", 1e-3, "k"),
                 ("cache_misses", "cache misses", 1e-3, "k"), ("branch_misses", "branch misses", 1e-3, "k"),
                 ("page_faults", "page faults", 1.0, ""), ("context_switches", "context switches", 1.0, ""),
                 ("cpu_migrations", "CPU migrations", 1.0, ""))


def counts_table(found: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(event, the kernel's per call, PyTorch's per call) rows, with IPC where both cycles and instructions exist."""
    rows: list[tuple[str, str, str]] = []
    cand, ref = found.get("candidate") or {}, found.get("reference") or {}

    def said(side: dict[str, float], key: str, scale: float, unit: str) -> str:
        return f"{side[key] * scale:.3g}{unit}" if key in side else "-"

    for key, label, scale, unit in COUNTER_WORDS:
        if key in cand or key in ref:
            rows.append((label, said(cand, key, scale, unit), said(ref, key, scale, unit)))
    if cand.get("cycles") and ref.get("cycles") and "instructions" in cand and "instructions" in ref:
        rows.append(("instructions per cycle", f"{cand['instructions'] / cand['cycles']:.2f}",
                     f"{ref['instructions'] / ref['cycles']:.2f}"))
    return rows


def side_by_side(left: dict[str, str], right: dict[str, str], left_label: str, right_label: str,
                 width: int = 160) -> str:
    """Two attempts' files in two columns, line against line (difflib's alignment; ``|`` a changed line, ``<``
    and ``>`` one side's own), each file under its name."""
    half = max(20, (width - 3) // 2)

    def cell(text: str) -> str:
        text = text.expandtabs(4)
        return (text[: half - 1] + "…") if len(text) > half else text.ljust(half)

    out = [f"{cell(left_label)} | {right_label}"]
    for name in sorted(set(left) | set(right), key=lambda n: (n == "model.py", n)):
        a, b = left.get(name, "").splitlines(), right.get(name, "").splitlines()
        out.append(f"{cell('== ' + name + (' (absent)' if name not in left else ''))} | == {name}"
                   + (" (absent)" if name not in right else ""))
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            for k in range(max(i2 - i1, j2 - j1)):
                x = a[i1 + k] if i1 + k < i2 else ""
                y = b[j1 + k] if j1 + k < j2 else ""
                mark = " " if op == "equal" else "|" if x and y else "<" if x else ">"
                out.append(f"{cell(x)} {mark} {y}")
    return "\n".join(out)
