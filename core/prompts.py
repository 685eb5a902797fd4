"""Prompts for drafting and refining, and the compact text an attempt leaves in memory.

A prompt is a system message (the role and the answer format) and a user message in sections:
the task's PyTorch reference, API knowledge, resident rules, memory items (each tagged
``[mem:<id>]`` so the answer can cite what it used) and, when refining, the start point with its
children. Long code is trimmed so a prompt stays within ``MAX_PROMPT_CHARS``.
"""

from __future__ import annotations

from typing import Sequence

from core.tasks import Task
from store import Experience

MAX_PROMPT_CHARS = 48_000
MAX_CODE_LINES = 120

BACKEND_NAMES = {"cpu": "CPU (C++ with OpenMP, built by g++)", "cuda": "NVIDIA GPU (CUDA C++, built by nvcc)",
                 "ascend": "Huawei Ascend NPU (Ascend C, built with the CANN toolkit)"}
SOURCE_SUFFIX = {"cpu": ".cpp", "cuda": ".cu", "ascend": ".cpp"}

SYSTEM = """You are an expert kernel engineer. You write {backend} kernels that replace a PyTorch \
reference operator exactly (same outputs within a tight tolerance) and run faster.

Answer with complete files in fenced code blocks that name their file, for example:
```cpp file=kernel{suffix}
...
```
```python file=model.py
...
```
model.py must define `class ModelNew(nn.Module)` with the same constructor arguments as the reference \
`Model`, load the kernels with `from verifier.runtime import load; lib = load()`, and do all computation \
in the kernels (forward may only allocate outputs, reshape and call the library).
After the code, write one line `MEMORY USED: mem:<id>, ...` naming the memory items you actually relied on \
(or `MEMORY USED: none`)."""


def system_message(backend: str) -> str:
    return SYSTEM.format(backend=BACKEND_NAMES.get(backend, backend), suffix=SOURCE_SUFFIX.get(backend, ".cpp"))


def _code(files: dict[str, str], *, kernels_only: bool = False, max_lines: int = MAX_CODE_LINES) -> str:
    parts = []
    for name, text in files.items():
        if kernels_only and name == "model.py" and len(files) > 1:
            continue
        lines = text.rstrip().splitlines()
        if len(lines) > max_lines:
            lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
        lang = "python" if name.endswith(".py") else "cpp"
        parts.append(f"```{lang} file={name}\n" + "\n".join(lines) + "\n```")
    return "\n".join(parts)


def verdict(outcome: dict | None) -> str:
    """One line: feasible with latency and speedup, or the failing gate and why."""
    if not outcome:
        return "not verified"
    if outcome.get("feasible"):
        text = f"feasible, {outcome.get('latency_ms', 0):.3f} ms"
        if outcome.get("speedup"):
            text += f" ({outcome['speedup']:.2f}x vs PyTorch {outcome.get('reference_ms', 0):.3f} ms)"
        return text
    message = " ".join(str(outcome.get("message", "")).split())
    return f"failed at {outcome.get('failed_gate')}: {message[:400]}"


def attempt_text(outcome: dict | None) -> str:
    """What an attempt teaches, in memory: its verdict (the code travels with it)."""
    return verdict(outcome)


def render_experience(exp: Experience, *, with_code: bool = True, max_lines: int = 60) -> str:
    head = f"[mem:{exp.id}] "
    if exp.kind in ("best_practice", "rule", "api_template"):
        return head + f"{exp.title}\n{exp.text}"
    where = f"task {exp.task_id}" if exp.task_id not in ("", "*") else "general"
    who = "your own hand edit" if exp.source == "human" else f"{exp.stage or 'attempt'}"
    body = head + f"{where}, {who}: {verdict(exp.outcome)}"
    if exp.text and exp.text != verdict(exp.outcome):
        body += f"\n{exp.text}"
    if with_code and exp.files:
        body += "\n" + _code(exp.files, kernels_only=True, max_lines=max_lines)
    return body


def _task_section(task: Task) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in task.sizes.items())
    scaled = f" ({task.scale_note()})" if task.size_overrides else ""
    return (f"## Task {task.id} (level {task.level}, {task.category})\n"
            f"Reference implementation (PyTorch). Sizes: {sizes or 'as written'}{scaled}. "
            "Your kernel must also handle other sizes (it is checked at a second, ragged shape).\n"
            f"```python\n{task.source.strip()}\n```")


def _knowledge_sections(api: Sequence[Experience], rules: Sequence[Experience], memory: Sequence[Experience]) -> list[str]:
    parts = []
    if api:
        parts.append("## API knowledge\n" + "\n\n".join(f"### {e.title}\n{e.text}" for e in api))
    if rules:
        parts.append("## Rules learned across operators\n" + "\n".join(render_experience(e, with_code=False) for e in rules))
    if memory:
        parts.append("## Memory: earlier attempts and lessons (cite the ones you use)\n"
                     + "\n\n".join(render_experience(e) for e in memory))
    return parts


def _fit(parts: list[str]) -> str:
    text = "\n\n".join(parts)
    if len(text) <= MAX_PROMPT_CHARS:
        return text
    # Trim the longest parts (memory first) until the prompt fits.
    budget = MAX_PROMPT_CHARS // max(1, len(parts))
    trimmed = [p if len(p) <= budget else p[:budget] + "\n... (trimmed)" for p in parts]
    return "\n\n".join(trimmed)[:MAX_PROMPT_CHARS]


def draft_prompt(task: Task, backend: str, api: Sequence[Experience], rules: Sequence[Experience],
                 memory: Sequence[Experience]) -> list[tuple[str, str]]:
    """Messages asking for a first correct kernel."""
    parts = [_task_section(task), *_knowledge_sections(api, rules, memory),
             "## Your answer\nWrite model.py and the kernel source(s) for ModelNew. Correctness first: "
             "match the reference's outputs exactly (within 1e-4), including NaN/Inf behaviour."]
    return [("system", system_message(backend)), ("user", _fit(parts))]


def refine_prompt(task: Task, backend: str, api: Sequence[Experience], rules: Sequence[Experience],
                  memory: Sequence[Experience], start: Experience, children: Sequence[Experience],
                  best_ms: float | None) -> list[tuple[str, str]]:
    """Messages asking for a faster variant of ``start``."""
    start_text = (f"## Start point [mem:{start.id}]: {verdict(start.outcome)}\n"
                  + _code(start.files, max_lines=400))
    if children:
        tried = "\n".join(f"- [mem:{c.id}] reward {c.reward if c.reward is not None else 0:+.2f}: {verdict(c.outcome)}"
                          for c in children)
        start_text += "\n### Variants already tried from this start point\n" + tried
    goal = f"the best so far is {best_ms:.3f} ms" if best_ms else "make it faster"
    parts = [_task_section(task), start_text, *_knowledge_sections(api, rules, memory),
             f"## Your answer\nWrite a faster variant of the start point ({goal}). Keep it correct; change one "
             "or two things at a time (parallelism, vectorisation, blocking, fusion, memory traffic) and say in "
             "one sentence what you changed."]
    return [("system", system_message(backend)), ("user", _fit(parts))]


def feedback_prompt(task: Task, backend: str, api: Sequence[Experience], last: Experience | None,
                    best: Experience | None) -> list[tuple[str, str]]:
    """The refinement baseline: feedback from the last attempt only, no shared memory."""
    parts = [_task_section(task), *_knowledge_sections(api, [], [])]
    if best is not None:
        parts.append(f"## Your best kernel so far: {verdict(best.outcome)}\n" + _code(best.files, max_lines=400))
    if last is not None and (best is None or last.id != best.id):
        parts.append(f"## Your last attempt: {verdict(last.outcome)}\n" + _code(last.files, max_lines=400))
    ask = ("Fix the last attempt." if best is None else "Write a faster variant of your best kernel.")
    parts.append("## Your answer\n" + ask)
    return [("system", system_message(backend)), ("user", _fit(parts))]
