"""Retrieval and insert benchmark of the memory store, beside a numpy brute-force BM25 baseline.

    .venv/bin/python bench/retrieval.py [--n 100000] [--queries 200] [--k 40]

Builds a store of N synthetic-but-realistic experiences (kernels for the operator categories of the
built-in suites, on cpu/cuda/ascend, with drafts, refinements, build and correctness failures and
lessons), then reports, in one run:

* insert throughput: one durable transaction per experience (what the engine does), and batched;
* store open time (the index is not loaded at open);
* index build time, and first-retrieve time after reopening (the index loaded from disk);
* retrieval latency p50/p95 for a pool of K by BM25 filtered by backend, ours against a numpy
  brute-force BM25 over the same corpus and statistics (every posting scanned per query), with
  the ratio and how many of our top K the baseline also ranks top K;
* the same latency with a delta of fresh experiences not yet merged into the main index.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from store import Experience, Store  # noqa: E402
from store.terms import document_text, terms  # noqa: E402

OPERATORS = [
    # (name, category, ops, level)
    ("ReLU", "activation", ["relu"], 1),
    ("LeakyReLU", "activation", ["leaky_relu"], 1),
    ("GELU", "activation", ["gelu", "tanh"], 1),
    ("Sigmoid", "activation", ["sigmoid", "exp"], 1),
    ("Swish", "activation", ["silu", "sigmoid"], 1),
    ("Softplus", "activation", ["softplus", "log1p", "exp"], 1),
    ("HardTanh", "activation", ["hardtanh", "clamp"], 1),
    ("ELU", "activation", ["elu", "expm1"], 1),
    ("Add", "elementwise", ["add"], 1),
    ("Mul", "elementwise", ["mul"], 1),
    ("Div", "elementwise", ["div"], 1),
    ("Clamp", "elementwise", ["clamp"], 1),
    ("Sum", "reduction", ["sum"], 1),
    ("Mean", "reduction", ["mean"], 1),
    ("Max", "reduction", ["amax"], 1),
    ("ArgMax", "reduction", ["argmax"], 1),
    ("Softmax", "normalization", ["softmax", "exp", "amax", "sum"], 1),
    ("LogSoftmax", "normalization", ["log_softmax", "exp", "log"], 1),
    ("LayerNorm", "normalization", ["layer_norm", "mean", "var", "rsqrt"], 1),
    ("RMSNorm", "normalization", ["rms_norm", "rsqrt", "mean"], 1),
    ("BatchNorm", "normalization", ["batch_norm", "mean", "var"], 1),
    ("GroupNorm", "normalization", ["group_norm", "mean", "var"], 1),
    ("MaxPool2d", "pooling", ["max_pool2d"], 1),
    ("AvgPool2d", "pooling", ["avg_pool2d"], 1),
    ("AdaptiveAvgPool", "pooling", ["adaptive_avg_pool2d"], 1),
    ("Matmul", "matmul", ["matmul"], 1),
    ("BatchedMatmul", "matmul", ["bmm"], 1),
    ("MatVec", "matmul", ["mv"], 1),
    ("Conv2d", "convolution", ["conv2d"], 1),
    ("Conv1d", "convolution", ["conv1d"], 1),
    ("DepthwiseConv2d", "convolution", ["conv2d", "depthwise"], 1),
    ("ConvTranspose2d", "convolution", ["conv_transpose2d"], 1),
    ("MSELoss", "loss", ["mse_loss", "mean"], 1),
    ("CrossEntropyLoss", "loss", ["cross_entropy", "log_softmax", "nll_loss"], 1),
    ("HuberLoss", "loss", ["smooth_l1_loss"], 1),
    ("KLDivLoss", "loss", ["kl_div", "log"], 1),
    ("Cumsum", "scan", ["cumsum"], 1),
    ("Cumprod", "scan", ["cumprod"], 1),
    ("ReverseCumsum", "scan", ["cumsum", "flip"], 1),
    ("Gemm_Bias_ReLU", "fused", ["matmul", "add", "relu"], 2),
    ("Gemm_Scale_Sigmoid", "fused", ["matmul", "mul", "sigmoid"], 2),
    ("Conv2d_BatchNorm_ReLU", "fused", ["conv2d", "batch_norm", "relu"], 2),
    ("Conv2d_GroupNorm_GELU", "fused", ["conv2d", "group_norm", "gelu"], 2),
    ("Matmul_LayerNorm", "fused", ["matmul", "layer_norm"], 2),
    ("Gemm_Softmax_Dropout", "fused", ["matmul", "softmax"], 2),
    ("Conv2d_MaxPool_Tanh", "fused", ["conv2d", "max_pool2d", "tanh"], 2),
]
BACKENDS = ["cpu", "cpu", "cpu", "cuda", "cuda", "ascend"]
GATES = ["format", "anti_hack", "build", "correctness", "performance"]
BUILD_ERRORS = [
    "error: 'omp_get_thread_num' was not declared in this scope",
    "error: invalid conversion from 'const float*' to 'float*' [-fpermissive]",
    "error: expected ';' before '}}' token",
    "error: no matching function for call to 'std::max(float&, double)'",
    "undefined reference to `launch_{op}'",
    "error: identifier \"__shfl_down_sync\" is undefined",
    "error: use of undeclared identifier 'blockDim'",
    "error: 'DataCopy' was not declared in this scope; did you include kernel_operator.h?",
]
CORRECTNESS_ERRORS = [
    "output mismatch on trial {t}: max_abs_error {e:.3g} > atol 1e-2 at index [{i}, {j}]",
    "NaN in output on heavy-tailed inputs (trial {t}) where the reference is finite",
    "output shape ({i}, {j}) differs from reference ({j}, {i})",
    "input tensor 0 was modified in place by the candidate",
    "dtype float64 differs from reference float32",
]
HACK_ERRORS = [
    "forward() calls torch.{op} instead of the kernel launcher",
    "try/except around the kernel call falls back to the reference",
    "ModelNew subclasses Model",
]
LESSONS = [
    "Vectorise the inner loop over {dim} with #pragma omp simd and keep the accumulator in a register.",
    "Split the {op} into a parallel outer loop over rows and a simd inner loop; avoid false sharing.",
    "Use a two-pass reduction: per-thread partial {op} then combine; one pass over memory each.",
    "Tile {op} by {tile}x{tile} blocks so the working set fits in L1; transpose B once.",
    "Fuse {op} into the producer loop instead of writing an intermediate tensor.",
    "For numerical stability subtract the row max before exp in {op}.",
    "Launch {tile} threads per block and use shared memory for the {op} partials.",
    "Use DataCopy with 32-byte aligned tiles and double buffering (BUFFER_NUM=2) for {op}.",
    "Guard the tail when {dim} is not a multiple of the vector width {tile}.",
]


def _kernel(rng: random.Random, op: str, backend: str, variant: int) -> str:
    tile = rng.choice([8, 16, 32, 64, 128, 256])
    fname = f"launch_{op.lower()}"
    acc = rng.choice(["acc", "sum", "partial", "s", "total"])
    body_op = rng.choice(["std::max(x[i], 0.0f)", "x[i] * y[i]", "std::exp(x[i] - m)", "x[i] + b[j]",
                          "1.0f / (1.0f + std::exp(-x[i]))", "x[i] * scale"])
    if backend == "cuda":
        return (
            f"#include <cuda_runtime.h>\n"
            f"__global__ void {op.lower()}_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {{\n"
            f"  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
            f"  __shared__ float tile[{tile}];\n"
            f"  float {acc} = 0.0f;\n"
            f"  if (i < n) {{ {acc} = {body_op}; out[i] = {acc}; }}\n"
            f"}}\n"
            f'extern "C" void {fname}(const float* x, float* out, int64_t n, cudaStream_t stream) {{\n'
            f"  int threads = {tile * 4};\n"
            f"  {op.lower()}_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, out, n);\n"
            f"}}\nconstexpr int kVariant = {variant};\n"
        )
    if backend == "ascend":
        return (
            f'#include "kernel_operator.h"\nusing namespace AscendC;\n'
            f"constexpr int32_t BUFFER_NUM = 2; constexpr int32_t TILE_LENGTH = {tile * 32};\n"
            f"class Kernel{op} {{\n public:\n  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, uint32_t total) {{\n"
            f"    xGm.SetGlobalBuffer((__gm__ float*)x + GetBlockIdx() * total / GetBlockNum());\n"
            f"    pipe.InitBuffer(inQueue, BUFFER_NUM, TILE_LENGTH * sizeof(float));\n  }}\n"
            f"  __aicore__ inline void Process() {{ for (int32_t i = 0; i < loops; i++) {{ CopyIn(i); Compute(i); CopyOut(i); }} }}\n"
            f"  __aicore__ inline void Compute(int32_t i) {{ LocalTensor<float> x = inQueue.DeQue<float>();\n"
            f"    {rng.choice(['Relu', 'Exp', 'Muls', 'Adds', 'ReduceMax', 'Add'])}(x, x, TILE_LENGTH); outQueue.EnQue(x); }}\n"
            f"  TPipe pipe; TQue<QuePosition::VECIN, BUFFER_NUM> inQueue; TQue<QuePosition::VECOUT, BUFFER_NUM> outQueue;\n"
            f"  GlobalTensor<float> xGm; int32_t loops = {variant % 7 + 1};\n}};\n"
            f'extern "C" __global__ __aicore__ void {op.lower()}_custom(GM_ADDR x, GM_ADDR y, uint32_t total) {{\n'
            f"  Kernel{op} op; op.Init(x, y, total); op.Process();\n}}\nconstexpr int kVariant = {variant};\n"
        )
    pragma = rng.choice(["#pragma omp parallel for", "#pragma omp parallel for schedule(static)",
                         "#pragma omp parallel for collapse(2)", ""])
    simd = rng.choice(["#pragma omp simd", f"#pragma omp simd reduction(+:{acc})", ""])
    return (
        f"#include <cstdint>\n#include <cmath>\n#include <algorithm>\n#include <omp.h>\n"
        f'extern "C" void {fname}(const float* x, const float* y, const float* b, float* out,\n'
        f"                        int64_t rows, int64_t cols, float scale) {{\n"
        f"  constexpr int64_t TILE = {tile};\n"
        f"  {pragma}\n"
        f"  for (int64_t r = 0; r < rows; ++r) {{\n"
        f"    float m = -INFINITY; float {acc} = 0.0f;\n"
        f"    for (int64_t c0 = 0; c0 < cols; c0 += TILE) {{\n"
        f"      const int64_t c1 = std::min(cols, c0 + TILE);\n"
        f"      {simd}\n"
        f"      for (int64_t j = c0; j < c1; ++j) {{ const int64_t i = r * cols + j; out[i] = {body_op}; {acc} += out[i]; }}\n"
        f"    }}\n"
        f"    (void){acc}; (void)m;\n"
        f"  }}\n}}\nconstexpr int kVariant = {variant};\n"
    )


def _model_py(op: str) -> str:
    return (
        "import torch\nfrom evokernel_runtime import load_library, launch\n\n"
        "lib = load_library(__file__)\n\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self, *args):\n        super().__init__()\n\n"
        "    def forward(self, x):\n"
        "        out = torch.empty_like(x)\n"
        f"        launch(lib.launch_{op.lower()}, x, out)\n"
        "        return out\n"
    )


def synthetic_experiences(n: int, seed: int = 0) -> list[Experience]:
    """N experiences shaped like a long EvoKernel history: per task, drafts then refinements."""
    rng = random.Random(seed)
    out: list[Experience] = []
    t0 = 1.7e9
    while len(out) < n:
        name, category, ops, level = rng.choice(OPERATORS)
        idx = rng.randint(1, 100)
        task = f"{idx}_{name}"
        backend = rng.choice(BACKENDS)
        shapes = [[rng.choice([16, 64, 128, 256]), rng.choice([1024, 4096, 16384, 65536])]]
        sig = {
            "ops": ops, "category": category, "level": level, "shapes": shapes,
            "text": f"{name} {category} level {level} on tensors {shapes}: torch.{ops[0]} over the last dim",
        }
        parent = None
        for step in range(rng.randint(3, 12)):
            if len(out) >= n:
                break
            stage = "draft" if step < 2 else "refine"
            roll = rng.random()
            files = {"kernel.cpp" if backend != "cuda" else "kernel.cu": _kernel(rng, name, backend, len(out)),
                     "model.py": _model_py(name)}
            lesson = rng.choice(LESSONS).format(op=ops[0], dim="cols", tile=rng.choice([8, 16, 32]))
            if roll < 0.35:
                gate = rng.choice(GATES[:4])
                if gate == "build":
                    msg = rng.choice(BUILD_ERRORS).format(op=name.lower())
                elif gate == "correctness":
                    msg = rng.choice(CORRECTNESS_ERRORS).format(t=rng.randint(0, 5), e=rng.random(),
                                                                i=rng.randint(0, 9), j=rng.randint(0, 9))
                else:
                    msg = rng.choice(HACK_ERRORS).format(op=ops[0])
                kind, reward = "failure", -1.0
                outcome = {"feasible": False, "failed_gate": gate, "message": msg, "latency_ms": None,
                           "speedup": None, "max_abs_error": None}
                title = f"{task}: {gate} failed"
                text = f"{msg}. Fix: {lesson}"
            else:
                ms = rng.uniform(0.05, 20.0)
                kind = "success" if stage == "draft" else "refine_trace"
                reward = 1.0 if stage == "draft" else rng.uniform(-0.9, 0.9)
                outcome = {"feasible": True, "failed_gate": None, "message": "all gates passed",
                           "latency_ms": ms, "speedup": rng.uniform(0.3, 4.0), "max_abs_error": rng.random() * 1e-3}
                title = f"{task}: {stage} feasible at {ms:.2f} ms"
                text = lesson
            if rng.random() < 0.05:
                kind, files, title = "best_practice", {}, f"{category}: {lesson[:60]}"
                text = f"{lesson} (learned on {task}, attempt {len(out)})"
            exp = Experience(
                task_id=task, kind=kind, backend=backend, stage=stage, title=title, text=text,
                files=files, outcome=outcome, reward=reward, parent_id=parent, source="llm",
                model="qwen3-coder", signature=sig, created_at=t0 + len(out),
                q1=rng.uniform(-1, 1), q2=rng.uniform(-1, 1),
            )
            out.append(exp)
    return out


def _queries(rng: random.Random, count: int) -> list[tuple[str, str]]:
    qs = []
    for _ in range(count):
        name, category, ops, level = rng.choice(OPERATORS)
        backend = rng.choice(["cpu", "cuda", "ascend"])
        q = (f"{rng.randint(1, 100)}_{name} {name} {category} level {level} ops {' '.join(ops)} "
             f"torch.{ops[0]} over the last dim of a float32 tensor; write an OpenMP kernel")
        qs.append((q, backend))
    return qs


class BruteForceBM25:
    """Exact BM25 with no inverted index: every posting of the corpus is scanned per query."""

    def __init__(self, docs: list[list[str]], backends: list[str], k1: float = 1.5, b: float = 0.75):
        vocab: dict[str, int] = {}
        doc_idx, term_idx, tf = [], [], []
        lengths = np.zeros(len(docs), dtype=np.float32)
        for d, toks in enumerate(docs):
            lengths[d] = len(toks)
            counts: dict[int, int] = {}
            for t in toks:
                tid = vocab.setdefault(t, len(vocab))
                counts[tid] = counts.get(tid, 0) + 1
            doc_idx.extend([d] * len(counts))
            term_idx.extend(counts.keys())
            tf.extend(counts.values())
        self.vocab = vocab
        self.doc = np.asarray(doc_idx, dtype=np.int32)
        self.term = np.asarray(term_idx, dtype=np.int32)
        self.tf = np.asarray(tf, dtype=np.float32)
        self.n = len(docs)
        self.norm = (k1 * (1 - b + b * lengths / lengths.mean())).astype(np.float32)
        df = np.bincount(self.term, minlength=len(vocab))
        self.idf = np.log(1 + (self.n - df + 0.5) / (df + 0.5)).astype(np.float32)
        names = sorted(set(backends))
        self.backend = np.asarray([names.index(x) for x in backends], dtype=np.int8)
        self.backend_names = names

    def top(self, query: str, k: int, backend: str) -> list[int]:
        """Indices of the K best documents for ``query`` among those of ``backend`` (or agnostic)."""
        qids = np.asarray(sorted({self.vocab[t] for t in terms(query) if t in self.vocab}), dtype=np.int32)
        hit = np.isin(self.term, qids)
        d, t, f = self.doc[hit], self.term[hit], self.tf[hit]
        w = self.idf[t] * f / (self.norm[d] + f)
        scores = np.bincount(d, weights=w, minlength=self.n)
        allowed = [self.backend_names.index(x) for x in (backend, "") if x in self.backend_names]
        scores[~np.isin(self.backend, allowed)] = 0
        top = np.argpartition(-scores, k)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [int(i) for i in top if scores[i] > 0]


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="experiences in the store")
    ap.add_argument("--queries", type=int, default=200, help="retrieval queries timed")
    ap.add_argument("--k", type=int, default=40, help="pool size K")
    ap.add_argument("--single", type=int, default=1000, help="of the N, inserted one durable transaction each")
    ap.add_argument("--keep", default=None, help="build the store here and keep it (default: a temp dir)")
    args = ap.parse_args(argv)

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="evokernel-bench-"))
    path = root / ".evokernel" / "memory.lmdb"
    if path.exists():
        shutil.rmtree(path.parent)
    print(f"evokernel store benchmark: n={args.n:,} K={args.k} queries={args.queries} at {path}")

    t = time.perf_counter()
    exps = synthetic_experiences(args.n + 500, seed=1)
    print(f"generated {len(exps):,} synthetic experiences in {time.perf_counter() - t:.1f} s")
    bulk, single, fresh = exps[: args.n - args.single], exps[args.n - args.single: args.n], exps[args.n:]

    rows = []
    with Store.open(path) as store:
        t = time.perf_counter()
        for i in range(0, len(bulk), 1000):
            store.add_experiences(bulk[i: i + 1000])
        bulk_s = time.perf_counter() - t
        t = time.perf_counter()
        for exp in single:
            store.add_experience(exp)
        single_s = time.perf_counter() - t
        n_items = store.count()
        t = time.perf_counter()
        store.build_index()
        build_s = time.perf_counter() - t
    rows.append(("insert, batched (1,000 per txn)", f"{len(bulk) / bulk_s:,.0f} exp/s"))
    rows.append(("insert, one durable txn each", f"{len(single) / max(single_s, 1e-9):,.0f} exp/s"))
    rows.append(("index build (tokenise + bm25s)", f"{build_s:.2f} s"))

    # Reopen: the open must not touch the index; the first retrieve loads it from disk.
    opens = []
    for _ in range(5):
        t = time.perf_counter()
        store = Store.open(path)
        opens.append(time.perf_counter() - t)
        store.close()
    store = Store.open(path)
    rng = random.Random(7)
    queries = _queries(rng, args.queries)
    t = time.perf_counter()
    store.retrieve(queries[0][0], k=args.k, backend=queries[0][1])
    first_s = time.perf_counter() - t
    rows.append(("store open (median of 5)", f"{statistics.median(opens) * 1000:.1f} ms"))
    rows.append(("first retrieve (index load)", f"{first_s * 1000:.0f} ms"))

    for q, backend in queries[:5]:  # warm-up, untimed (both sides get one)
        store.retrieve(q, k=args.k, backend=backend)
    ours_ms, ours_ids = [], []
    for q, backend in queries:
        t = time.perf_counter()
        got = store.retrieve(q, k=args.k, backend=backend)
        ours_ms.append((time.perf_counter() - t) * 1000)
        ours_ids.append([e.id for e, _ in got])
    floor_ms = []
    for q, backend in queries:
        t = time.perf_counter()
        store.retrieve(q, k=args.k, backend=backend, stage="draft", q_floor=-0.8)
        floor_ms.append((time.perf_counter() - t) * 1000)

    # Baseline over the same corpus, in insertion order, with the same tokenizer.
    t = time.perf_counter()
    ids, docs, backends = [], [], []
    for exp in store.iter_experiences():
        ids.append(exp.id)
        docs.append(terms(document_text(exp.to_dict(), exp.files)))
        backends.append(exp.backend)
    brute = BruteForceBM25(docs, backends)
    del docs
    prep_s = time.perf_counter() - t
    for q, backend in queries[:5]:
        brute.top(q, args.k, backend)
    base_ms, overlap = [], []
    for (q, backend), mine in zip(queries, ours_ids):
        t = time.perf_counter()
        top = brute.top(q, args.k, backend)
        base_ms.append((time.perf_counter() - t) * 1000)
        theirs = {ids[i] for i in top}
        overlap.append(len(theirs & set(mine)) / max(1, len(theirs)))

    p50, p95 = _pct(ours_ms, 50), _pct(ours_ms, 95)
    b50, b95 = _pct(base_ms, 50), _pct(base_ms, 95)
    rows.append((f"retrieve K={args.k}, ours p50 / p95 (incl. reading the K back)", f"{p50:.2f} / {p95:.2f} ms"))
    rows.append((f"retrieve K={args.k}, numpy brute force p50 / p95", f"{b50:.2f} / {b95:.2f} ms"))
    rows.append(("speed-up over brute force (p50)", f"{b50 / p50:.1f}x"))
    rows.append((f"retrieve K={args.k} with Q1 floor -0.8, p50", f"{_pct(floor_ms, 50):.2f} ms"))
    rows.append(("top-K agreement with brute force", f"{100 * statistics.mean(overlap):.1f} %"))
    rows.append(("brute-force preparation (not timed above)", f"{prep_s:.1f} s"))

    # Fresh experiences go to the delta, scored with the main index's statistics.
    for i in range(0, len(fresh), 100):
        store.add_experiences(fresh[i: i + 100])
    delta_ms = []
    for q, backend in queries:
        t = time.perf_counter()
        store.retrieve(q, k=args.k, backend=backend)
        delta_ms.append((time.perf_counter() - t) * 1000)
    rows.append((f"retrieve with {len(fresh)} unmerged fresh items, p50", f"{_pct(delta_ms, 50):.2f} ms"))
    store.close()

    width = max(len(r[0]) for r in rows)
    print(f"\nitems in store: {n_items:,}")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    ok = p50 <= 10.0 and statistics.median(opens) <= 0.5
    print(f"\ntargets: retrieval p50 <= 10 ms, open <= 0.5 s: {'met' if ok else 'NOT met'}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
