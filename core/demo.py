"""The demo model: canned answers, shipped, so a newcomer can watch a run without any LLM endpoint
(``evokernel run --model demo``). It is the scripted model of ``core.scripted`` with a script that knows a
few built-in elementwise tasks: a first correct kernel as its draft, then variants of its loop (a schedule
without SIMD, with SIMD, with a chunk size) as refinements, then the same ones again (repeats). Every answer
is verified for real; only the writing is canned. Its name says it is a demo wherever a model's name shows
(the run's header, the run's record, each attempt's facts in the memory)."""

from __future__ import annotations

from core.llm import ChatRequest
from core.scripted import ScriptedModel

DEMO = "demo"
"""What ``--model`` takes for it."""
DEMO_MODEL = "demo (canned answers, not an LLM)"
"""Its name in runs, attempts and headers."""
DEMO_ITERATIONS = 4

# task id -> the element's value from ``v`` (float), as PyTorch computes it
EXPRESSIONS = {
    "relu": "v > 0.f ? v : 0.f",
    "sigmoid": "1.f / (1.f + std::exp(-v))",
    "tanh": "std::tanh(v)",
    "exp": "std::exp(v)",
    "silu": "v / (1.f + std::exp(-v))",
    "gelu": "0.5f * v * (1.f + std::erf(v * 0.70710678118654752f))",
    "softsign": "v / (1.f + std::fabs(v))",
    "hardsigmoid": "std::fmin(std::fmax(v / 6.f + 0.5f, 0.f), 1.f)",
}

# The loop each answer writes, in turn: the draft's, then the refinements' (later answers repeat them).
LOOPS = [
    ("a plain OpenMP loop", "#pragma omp parallel for schedule(static)"),
    ("the loop vectorised with omp simd", "#pragma omp parallel for simd schedule(static)"),
    ("SIMD with chunks of 4096 elements per thread turn", "#pragma omp parallel for simd schedule(static, 4096)"),
    ("SIMD with dynamic chunks of 16384", "#pragma omp parallel for simd schedule(dynamic, 16384)"),
]

KERNEL = """#include <cmath>
#include <cstdint>

extern "C" void {name}_forward(const float* x, float* out, int64_t n) {{
    {pragma}
    for (int64_t i = 0; i < n; ++i) {{
        const float v = x[i];
        out[i] = {expression};
    }}
}}
"""

MODEL = """import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        lib.{name}_forward(x, out, x.numel())
        return out
"""


def knows(name: str) -> bool:
    """Whether the demo has answers for task ``name`` (its id in its suite)."""
    return name in EXPRESSIONS


def answer(request: ChatRequest, n: int) -> str:
    """The demo's answer to ``request``: which task and which attempt come from its sample
    (``<run>:<task key>:<iteration>``), the stage from the prompt."""
    parts = request.sample.rsplit(":", 2)
    key, iteration = (parts[1], parts[2]) if len(parts) == 3 else ("", "")
    name = key.split("@", 1)[0]
    if name not in EXPRESSIONS:
        return f"The demo model has no canned kernel for {name}: it knows {', '.join(sorted(EXPRESSIONS))}."
    refining = any("## Start point" in content for _, content in request.messages)
    step = int(iteration) if iteration.isdigit() else n
    what, pragma = LOOPS[step % len(LOOPS)] if refining else LOOPS[0]
    kernel = KERNEL.format(name=name, pragma=pragma, expression=EXPRESSIONS[name])
    return (f"Change: {what} (a canned demo answer)\n\n```cpp file=kernel.cpp\n{kernel}```\n\n"
            f"```python file=model.py\n{MODEL.format(name=name)}```\n\nMEMORY USED: none\n")


def demo_model() -> ScriptedModel:
    """The demo model (a ``core.llm.LLMClient``)."""
    return ScriptedModel(answer, model=DEMO_MODEL)
