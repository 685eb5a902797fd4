"""Fixtures of the store tests: a fresh memory on real LMDB files and a maker of experiences."""

from __future__ import annotations

import pytest

from store import Experience, Store


def make_experience(i: int, **overrides) -> Experience:
    """A distinct, realistic experience number ``i`` (same i, same content)."""
    ops = ["relu", "softmax", "matmul", "layer_norm", "cumsum"][i % 5]
    fields = dict(
        task_id=f"{i % 7}_{ops}",
        kind=["success", "failure", "refine_trace"][i % 3],
        backend=["cpu", "cuda", ""][i % 3],
        stage=["draft", "refine"][i % 2],
        title=f"attempt {i} on {ops}",
        text=f"lesson {i}: vectorise the {ops} inner loop with omp simd",
        files={
            "kernel.cpp": f'extern "C" void launch_{ops}(const float* x, float* y, long n) {{\n'
                          f"  #pragma omp parallel for\n  for (long i = 0; i < n; ++i) y[i] = x[i] * {i};\n}}\n",
            "model.py": "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n",
        },
        outcome={"feasible": i % 3 != 1, "failed_gate": "build" if i % 3 == 1 else None,
                 "message": f"error {i}" if i % 3 == 1 else "ok", "latency_ms": 0.1 * (i + 1),
                 "speedup": 1.0 + i / 10, "max_abs_error": 1e-4},
        reward=[1.0, -1.0, 0.25][i % 3],
        source=["llm", "human", "seed"][i % 3],
        model="test-model",
        run_id="run-1",
        iteration=i,
        signature={"ops": [ops], "category": "activation", "level": 1, "shapes": [[16, 1024]],
                   "text": f"{ops} over a 16x1024 tensor"},
    )
    fields.update(overrides)
    return Experience(**fields)


@pytest.fixture
def store_path(tmp_path):
    """Where a test's memory lives (inside a workspace-like folder)."""
    return tmp_path / "ws" / ".evokernel" / "memory.lmdb"


@pytest.fixture
def store(store_path):
    """A fresh writable store, closed after the test."""
    s = Store.open(store_path)
    yield s
    s.close()


@pytest.fixture
def make_exp():
    """``make_exp(i, **overrides)``: a distinct, realistic experience number ``i``."""
    return make_experience
