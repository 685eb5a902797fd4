"""Recorded attempts over public tasks, for the memory benchmarks (``bench/retrieval_quality.py``,
``bench/value_drift.py``): the real engine (prompts, retrieval, credit, commits) runs a scripted model over
public tasks, verdicts come from the canned verifier, and each task's traced graph from the real roofline
meter (``count_forward`` on the meta device, in a subprocess), so every stored experience carries what its
kernel is. Nothing here is vendored: the tasks come from a suite folder fetched at run time, e.g. KernelBench
(``github:ScalingIntelligence/KernelBench``; ``git -C <mirror> archive HEAD KernelBench | tar -x -C DIR``).

The scripted model writes a kernel shaped by the task's family (the loops a GEMM, a reduction, a
normalisation, a scan or a pointwise chain has, named after the task's ops), so lexical retrieval sees code
of the right kind; each answer's verdict is drawn from rates like those of the loopback runs (a quarter of
drafts refused or wrong; refinements faster, slower, the same or broken), and with ``cite_rate`` the answer
cites the first memory item its prompt shows (the loopback runs cited memory in 2 of 24 answers).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MEASURED_CEILINGS = {"triad_gbps": 25.0, "fma_gflops": 170.0}   # this development machine's, with 2 threads

FAMILY_LOOPS = {
    "gemm": """    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) {{
            const float a = A[i * K + k];
            #pragma omp simd
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += a * B[k * N + j];   // {ops} tile
        }}""",
    "reduction": """    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {{
        float acc = x[r * cols];
        for (int64_t c = 1; c < cols; ++c) acc = {op}_combine(acc, x[r * cols + c]);   // {ops}
        out[r] = acc;
    }}""",
    "normalization": """    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {{
        float s = 0.f;
        for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c] * x[r * cols + c];   // {ops} statistics
        const float inv = 1.f / std::sqrt(s / cols + 1e-5f);
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] * inv;
    }}""",
    "scan": """    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {{
        double run = 0.0;
        for (int64_t c = 0; c < cols; ++c) {{ run += x[r * cols + c]; out[r * cols + c] = (float) run; }}   // {ops}
    }}""",
    "pointwise": """    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = {op}_of(x[i]);   // {ops}""",
    "data_movement": """    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[index_of(i)];   // {ops}""",
}

MODEL = '''import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, *xs):
        out = torch.empty_like(xs[0])
        lib.{name}(xs[0], out, xs[0].numel())
        return out
'''


def kernel_files(task_id: str, family: str, ops: Iterable[str], verdict: str, tag: int) -> dict[str, str]:
    """A kernel of ``family``'s shape named after the task's ops, its canned verdict in a constant."""
    ops = [o for o in ops if re.fullmatch(r"\w+", o)] or ["op"]
    name = re.sub(r"\W", "_", f"{ops[0]}_forward")
    body = FAMILY_LOOPS.get(family, FAMILY_LOOPS["pointwise"]).format(op=ops[0], ops=", ".join(ops))
    source = (f"#include <cmath>\n#include <cstdint>\n// {task_id}\nextern \"C\" void {name}(const float* x, float* out, "
              f"int64_t n) {{\n{body}\n}}\nstatic const int kTag{tag} = {tag};\n"
              f"static const char* kCanned = \"{verdict}\";\n")
    return {"model.py": MODEL.format(name=name), "kernel.cpp": source}


def judge(task_id: str, files: dict[str, str]) -> Any:
    """The canned verdict an answer's kernel carries: a gate's name or a latency in ms."""
    from core.scripted import Canned

    said = re.search(r'kCanned = "([^"]+)"', files.get("kernel.cpp", ""))
    text = said.group(1) if said else "format"
    try:
        return Canned(latency_ms=float(text))
    except ValueError:
        messages = {"anti_hack": "kernel.cpp line 4: token pasting (##) is not allowed",
                    "correctness": "output 0 differs from the reference at 12 places (max abs error 0.31)",
                    "build": "kernel.cpp:7: error: 'acc' was not declared in this scope"}
        return Canned(failed_gate=text, message=messages.get(text, f"canned {text} failure"))


@dataclass
class ScriptedCoder:
    """Answers like a model of the loopback runs' kind, by rates: ``draft_fail`` of drafts refused or wrong,
    refinements faster / slower / the same (``refine``), citing the first memory item shown at ``cite_rate``."""

    kinds: dict[str, tuple[str, list[str]]]    # task id -> (its family, as labelled; the ops its source calls)
    seed: int = 0
    cite_rate: float = 2 / 24
    draft_fail: float = 0.25
    refine: tuple[float, float, float, float] = (0.35, 0.30, 0.25, 0.10)   # faster, slower, same, broken
    prompts: list[tuple[str, int, str]] = field(default_factory=list)     # (task, iteration, user message)
    _tag: int = 0
    _best: dict[str, float] = field(default_factory=dict)

    def __call__(self, request: Any, n: int) -> str:
        task, iteration = request.sample.split(":")[-2], int(request.sample.split(":")[-1])
        user = request.messages[-1][1]
        self.prompts.append((task, iteration, user))
        rng = random.Random(f"{self.seed}:{task}:{iteration}")
        self._tag += 1
        refining = "## Start point" in user
        if not refining:
            verdict = rng.choice(["anti_hack", "correctness"]) if rng.random() < self.draft_fail else \
                f"{rng.uniform(5.0, 15.0):.3f}"
        else:
            best = self._best.get(task, 10.0)
            roll, (faster, slower, same, _broken) = rng.random(), self.refine
            verdict = (f"{best * rng.uniform(0.7, 0.9):.3f}" if roll < faster else
                       f"{best * rng.uniform(1.1, 1.4):.3f}" if roll < faster + slower else
                       f"{best * rng.uniform(0.995, 1.005):.3f}" if roll < faster + slower + same else "correctness")
        try:
            ms = float(verdict)
            self._best[task] = min(self._best.get(task, ms), ms)
        except ValueError:
            pass
        memory = user.split("## Memory:", 1)[1] if "## Memory:" in user else ""
        shown = re.findall(r"\[mem:([0-9a-f]+)\]", memory)
        cite = shown[:1] if shown and rng.random() < self.cite_rate else []
        family, ops = self.kinds[task]
        files = kernel_files(task, family, ops or [task], verdict, self._tag)
        return answer(files, f"Change: {'tile and vectorise' if refining else 'a first version'} "
                             f"({family}, try {self._tag})", cite)


def facts_with_meter(cache: Path, backend: str = "cpu", threads: int = 2) -> Any:
    """PromptFacts whose roofline meter counts real traced graphs; the ceilings are this machine's, given."""
    from core.prompts import PromptFacts
    from verifier.backends import get_backend
    from verifier.machine.roofline import RooflineMeter

    meter = RooflineMeter(cache, get_backend(backend), threads)
    meter.ceilings = lambda remeasure=False: dict(MEASURED_CEILINGS)          # type: ignore[method-assign]
    meter.cached_ceilings = lambda: dict(MEASURED_CEILINGS)                   # type: ignore[method-assign]
    return PromptFacts(backend, meter=meter, ceilings=dict(MEASURED_CEILINGS))


def record(store: Any, tasks: list[Any], families: dict[str, str], facts: Any, *, iterations: int = 4, seed: int = 0,
           method: str = "evokernel", cite_rate: float = 2 / 24, epsilon: float = 0.1) -> tuple[Any, ScriptedCoder]:
    """One run of ``method`` over ``tasks`` (in lockstep) with the scripted coder writing kernels of each task's
    labelled family (``families``): (run record, the coder, which kept every prompt it was sent). Runs on the
    engine of whatever checkout is imported (``--code`` of the benchmarks: main's, for the before figures)."""
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel

    try:
        facts.prepare(tasks, False)      # the traced graphs only (this branch); a checkout before #36 counts both
    except TypeError:
        facts.prepare(tasks)
    coder = ScriptedCoder({t.id: (families[t.id], list(t.ops)) for t in tasks}, seed=seed, cite_rate=cite_rate)
    config = Config()
    config.engine.epsilon = epsilon
    config.engine.final_window = False
    engine = Engine(config, store, CannedVerifier(judge), ScriptedModel(coder))
    engine.facts = facts
    run = asyncio.run(engine.run(tasks, method=method, iterations=iterations, seed=seed))
    return run, coder


def load_tasks(suite: Path, ids: Iterable[str]) -> list[Any]:
    """The named tasks of a suite folder (a fetched KernelBench's ``KernelBench`` folder), as written."""
    from core.tasks import load_suite

    found = load_suite(str(suite))
    return [found.get(i) for i in ids]


def answer(files: dict[str, str], note: str, cite: list[str]) -> str:
    """An answer in the format prompts ask for: the Change line, fenced files, the MEMORY USED line."""
    blocks = [f"```{'python' if n.endswith('.py') else 'cpp'} file={n}\n{t.strip()}\n```" for n, t in files.items()]
    used = ", ".join(f"mem:{i}" for i in cite) if cite else "none"
    return note + "\n\n" + "\n\n".join(blocks) + f"\n\nMEMORY USED: {used}\n"
