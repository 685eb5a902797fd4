"""A fixed memory for screenshots: experiences with set ids, timestamps, values and outcomes, so every
run of the snapshot tests draws the same screens."""

from __future__ import annotations

import candidates as C

BASE = 1_767_268_800.0          # 2026-01-01 12:00 UTC
GATES = ("format", "anti_hack", "build", "correctness", "performance")
RUN_ID = "20260101-120000-a1b2"


def _id(n: int) -> str:
    return f"0001{n:016x}"


def outcome(task: str, failed: str | None = None, message: str = "", ms: float | None = None,
            ref: float | None = None) -> dict:
    gates, seen_failure = [], False
    for g in GATES:
        if seen_failure:
            status, text = "skipped", ""
        elif g == failed:
            status, text, seen_failure = "failed", message, True
        else:
            status, text = "passed", {"performance": f"{ms} ms; reference {ref} ms"}.get(g, "ok")
        gates.append({"name": g, "status": status, "message": text, "seconds": 0.1, "details": {}})
    feasible = failed is None
    speedup = round(ref / ms, 2) if feasible and ms and ref else None
    return {"task": task, "backend": "cpu", "feasible": feasible, "failed_gate": failed,
            "message": (f"feasible; {ms:.3f} ms, {speedup:.2f}x vs reference {ref:.3f} ms" if feasible
                        else f"{failed}: {message}"),
            "gates": gates, "latency_ms": ms if feasible else None, "reference_ms": ref, "speedup": speedup}


def relu_files(body: str, extra: str = "", head: str = "") -> dict[str, str]:
    kernel = head + C.RELU.strip().replace("out[i] = x[i] > 0.f ? x[i] : 0.f;", body) + "\n" + extra
    return C.elementwise(kernel)


def fill(store) -> None:
    """Put the fixed experiences, task states and a stopped run into ``store``."""
    from store import Experience, RunRecord, TaskState

    def exp(n, **kw) -> Experience:
        kw.setdefault("backend", "cpu")
        return Experience(id=_id(n), created_at=BASE + 60 * n, updated_at=BASE + 60 * n, **kw)

    history = [{"t": BASE + 300, "stage": "draft", "q": 0.3, "reward": 1.0, "task": "relu"},
               {"t": BASE + 360, "stage": "draft", "q": -0.09, "reward": -1.0, "task": "softmax"},
               {"t": BASE + 420, "stage": "refine", "q": 0.21, "reward": 0.71, "task": "relu"},
               {"t": BASE + 480, "stage": "draft", "q": 0.24, "reward": 1.0, "task": "sum_dim"}]
    items = [
        exp(1, task_id="*", kind="best_practice", stage="", source="seed", title="Parallel loops: omp parallel for simd",
            text="Put `#pragma omp parallel for simd schedule(static)` on the outer elementwise loop; keep the body "
                 "branch-free so it vectorises.", q1=0.24, q2=0.21, n1=3, n2=1, q_history=history,
            retrieved_by={"relu": 3, "softmax": 1, "sum_dim": 1}, adopted_by=["relu", "sum_dim"], adoptions=2),
        exp(2, task_id="*", kind="api_template", stage="", source="seed", title="Runtime contract: extern C launchers",
            text="Launchers are extern \"C\" functions taking data pointers and sizes; model.py calls them through "
                 "verifier.runtime.load().", q1=0.1, n1=1, q_history=history[:1], retrieved_by={"relu": 2}),
        exp(3, task_id="relu", kind="draft_trace", stage="draft", source="llm", model="qwen3-coder", run_id=RUN_ID,
            iteration=0, title="relu draft: failed at build",
            files=relu_files("out[i] = x[i] > 0.f ? x[i] : 0.f"),
            outcome=outcome("relu", "build", "kernel.cpp:5:50: error: expected ';' before '}' token"), reward=-1.0,
            q1=-0.3, n1=1),
        exp(4, task_id="relu", kind="draft_trace", stage="draft", source="llm", model="qwen3-coder", run_id=RUN_ID,
            iteration=1, title="relu draft: feasible", files=relu_files("out[i] = x[i] > 0.f ? x[i] : 0.f;", "static const int kV = 2;\n"),
            outcome=outcome("relu", ms=0.44, ref=0.48), reward=1.0, q1=0.3, q2=0.21, n1=1, n2=2,
            q_history=history[:1] + history[2:3], retrieved_by={"relu": 1}),
        exp(5, task_id="relu", kind="refine_trace", stage="refine", source="llm", model="qwen3-coder", run_id=RUN_ID,
            iteration=2, parent_id=_id(4), title="relu refine: feasible · std::max in place of the branch",
            files=relu_files("out[i] = std::max(x[i], 0.f);", "static const int kV = 3;\n", head="#include <algorithm>\n"),
            outcome=outcome("relu", ms=0.19, ref=0.48), reward=0.71, q2=0.3, n2=1),
        exp(6, task_id="relu", kind="human_edit", stage="refine", source="human", parent_id=_id(5),
            title="relu hand edit: failed at correctness",
            files=relu_files("out[i] = x[i] > 0.f ? x[i] : 0.1f * x[i];", "static const int kV = 4;\n"),
            outcome=outcome("relu", "correctness", "trial 1 (normal): max abs error 1.00e-01 at [3, 17]"),
            reward=-1.0),
        exp(7, task_id="relu", kind="refine_trace", stage="refine", source="llm", model="qwen3-coder", run_id=RUN_ID,
            iteration=3, parent_id=_id(5), title="relu refine: feasible · multiply by the mask",
            files=relu_files("out[i] = x[i] * (x[i] > 0.f);", "static const int kV = 5;\n"),
            outcome=outcome("relu", ms=0.21, ref=0.48), reward=-0.12),
        exp(8, task_id="softmax", kind="draft_trace", stage="draft", source="llm", model="qwen3-coder",
            run_id=RUN_ID, iteration=0, title="softmax draft: failed at anti_hack",
            files={"model.py": C.SOFTMAX_SCRATCH_MODEL, "kernel.cpp": C.SOFTMAX_SCRATCH},
            outcome=outcome("softmax", "anti_hack", "model.py:14: forward computes with torch.exp"), reward=-1.0),
    ]
    store.add_experiences(items)
    store.put_task(TaskState("relu", stage="refine", feasible=True, best_latency_ms=0.19, best_id=_id(5),
                             first_feasible_latency_ms=0.44, start_points=[_id(4), _id(5), _id(7)], iterations_used=4,
                             updated_at=BASE))
    store.put_task(TaskState("softmax", iterations_used=1, updated_at=BASE))
    progress = {t: {"iterations_used": 0, "feasible": False, "best_ms": None, "first_ms": None, "reference_ms": None,
                    "attempts": [], "stage": "draft"} for t in ("relu", "softmax", "sum_dim", "scale_bias")}
    progress["relu"].update(iterations_used=4, feasible=True, best_ms=0.19, first_ms=0.44, reference_ms=0.48,
                            attempts=[_id(3), _id(4), _id(5), _id(7)], stage="refine", best_id=_id(5))
    progress["softmax"].update(iterations_used=1, attempts=[_id(8)])
    store.put_run(RunRecord(id=RUN_ID, method="evokernel", config={"iterations": 30, "model": "qwen3-coder"},
                            tasks=list(progress), status="stopped", iteration=3, started_at=BASE, updated_at=BASE,
                            progress=progress))
