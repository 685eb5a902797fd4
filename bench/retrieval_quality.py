"""Does a prompt get the memory an expert would want? A benchmark that needs no model.

    .venv/bin/python bench/retrieval_quality.py --suite DIR [--n 5] [--iterations 4] [--seeds 10]

``DIR`` is a fetched KernelBench's ``KernelBench`` folder (``level1/``, ``level2/``; fetch
``github:ScalingIntelligence/KernelBench`` and ``git -C <mirror> archive HEAD KernelBench | tar -x -C /tmp/kb``;
never vendored). The memory is built from recorded attempts (``bench/recorded.py``: the real engine, a
scripted model writing kernels shaped like each task's family, canned verdicts, the tasks' real traced graphs)
over the ``MEMORY`` tasks. Then, for each ``HELD_OUT`` task, the items its first (draft) prompt shows are
chosen two ways over that same memory:

* **before**: the retrieval of main before #36 (commit 4cc3943, ``core.methods.EvoKernel``): a pool of
  K = λN items by BM25 similarity to the task's text, then N of them by Q1, ε-greedily;
* **after**: the engine's retrieval now (``EvoKernel.prepare``, run as is): a pool of K by relevance to what
  the kernel is (``core.kinship``), then N by Q1, ε-greedily.

An expert's labels (``LABELS``, below, read from each reference's traced graph and its roofline at the sizes
written) say what each task is: its family and its regime. Two measures, averaged over ``--seeds`` draws of ε:

* **recall@N** of same-family feasible kernels: of the N items shown, how many are working kernels of tasks
  with the held-out task's label (family and regime), over min(N, how many the memory holds);
* **share relevant**: of every memory item shown, how many an expert would want there: an attempt of a task
  with the same label (a failed one as a lesson), or knowledge whose subject is the task's (``KNOWLEDGE``).

It prints both, per family and overall, before and after, with the ratio after / before, and how often the
engine's classification (``core.kinship``) agrees with the expert's labels.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("EVOKERNEL_CODE") or str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import recorded  # noqa: E402

# Expert labels: (family, regime at the sizes as written in KernelBench), read from each reference's traced
# graph (which aten ops carry its FLOPs, what it outputs against what it reads) and its arithmetic intensity
# against this machine's ridge (170 GFLOP/s / 25 GB/s = 6.8 FLOP/byte). A depthwise convolution is written as
# a convolution (GEMM-like) but moves more than it computes: memory-bound. A matrix-vector product likewise.
LABELS: dict[str, tuple[str, str]] = {
    # memory: recorded attempts
    "1_Square_matrix_multiplication_": ("gemm", "compute"),
    "2_Standard_matrix_multiplication_": ("gemm", "compute"),
    "3_Batched_matrix_multiplication": ("gemm", "compute"),
    "8_Matmul_with_irregular_shapes_": ("gemm", "compute"),
    "16_Matmul_with_transposed_A": ("gemm", "compute"),
    "63_conv_standard_2D__square_input__square_kernel": ("gemm", "compute"),
    "12_Gemm_Multiply_LeakyReLU": ("gemm", "compute"),
    "76_Gemm_Add_ReLU": ("gemm", "compute"),
    "82_conv_depthwise_2D_square_input_square_kernel": ("gemm", "memory"),
    "19_ReLU": ("pointwise", "memory"),
    "20_LeakyReLU": ("pointwise", "memory"),
    "21_Sigmoid": ("pointwise", "memory"),
    "22_Tanh": ("pointwise", "memory"),
    "26_GELU_": ("pointwise", "memory"),
    "31_ELU": ("pointwise", "memory"),
    "32_HardTanh": ("pointwise", "memory"),
    "23_Softmax": ("normalization", "memory"),
    "33_BatchNorm": ("normalization", "memory"),
    "35_GroupNorm_": ("normalization", "memory"),
    "37_FrobeniusNorm_": ("normalization", "memory"),
    "40_LayerNorm": ("normalization", "memory"),
    "47_Sum_reduction_over_a_dimension": ("reduction", "memory"),
    "48_Mean_reduction_over_a_dimension": ("reduction", "memory"),
    "49_Max_reduction_over_a_dimension": ("reduction", "memory"),
    "52_Argmin_over_a_dimension": ("reduction", "memory"),
    "42_Max_Pooling_2D": ("reduction", "memory"),
    "94_MSELoss": ("reduction", "memory"),
    "89_cumsum": ("scan", "memory"),
    "90_cumprod": ("scan", "memory"),
    "92_cumsum_exclusive": ("scan", "memory"),
    # held out: the prompts measured
    "17_Matmul_with_transposed_B": ("gemm", "compute"),
    "18_Matmul_with_transposed_both": ("gemm", "compute"),
    "10_3D_tensor_matrix_multiplication": ("gemm", "compute"),
    "50_conv_standard_2D__square_input__square_kernel": ("gemm", "compute"),
    "30_Gemm_GroupNorm_Hardtanh": ("gemm", "compute"),
    "86_Matmul_Divide_GELU": ("gemm", "compute"),
    "4_Matrix_vector_multiplication_": ("gemm", "memory"),
    "84_conv_depthwise_2D_asymmetric_input_square_kernel": ("gemm", "memory"),
    "27_SELU_": ("pointwise", "memory"),
    "25_Swish": ("pointwise", "memory"),
    "28_HardSigmoid": ("pointwise", "memory"),
    "88_MinGPTNewGelu": ("pointwise", "memory"),
    "36_RMSNorm_": ("normalization", "memory"),
    "38_L1Norm_": ("normalization", "memory"),
    "39_L2Norm_": ("normalization", "memory"),
    "34_InstanceNorm": ("normalization", "memory"),
    "53_Min_reduction_over_a_dimension": ("reduction", "memory"),
    "51_Argmax_over_a_dimension": ("reduction", "memory"),
    "96_HuberLoss": ("reduction", "memory"),
    "44_Average_Pooling_1D": ("reduction", "memory"),
    "91_cumsum_reverse": ("scan", "memory"),
    "93_masked_cumsum": ("scan", "memory"),
}
LEVEL2 = {"12_Gemm_Multiply_LeakyReLU", "76_Gemm_Add_ReLU", "30_Gemm_GroupNorm_Hardtanh", "86_Matmul_Divide_GELU"}
MEMORY = list(LABELS)[:30]     # (24_LogSoftmax left out: a task of the model-played runs of #36)
HELD_OUT = list(LABELS)[30:]
# Seed knowledge an expert would want in a prompt, by the task it is shown to: the CPU's one retrievable item
# (the others are API knowledge, chosen by name) is about fused level-2 chains, tails and allocation.
KNOWLEDGE = {"Habits of fast, correct CPU kernels": lambda task_id: task_id in LEVEL2}


def suite_folders(root: Path) -> list[Path]:
    """The level folders of a fetched KernelBench, or the folder itself."""
    levels = [root / f"level{n}" for n in (1, 2)]
    return [p for p in levels if p.is_dir()] or [root]


def load(root: Path, ids: list[str]) -> list[Any]:
    from core.tasks import load_suite

    tasks: dict[str, Any] = {}
    for folder in suite_folders(root):
        for task in load_suite(str(folder)).tasks:
            tasks[task.id] = task
    missing = [i for i in ids if i not in tasks]
    if missing:
        raise SystemExit(f"not in {root}: {', '.join(missing)} (fetch KernelBench and pass its KernelBench folder)")
    return [tasks[i] for i in ids]


def label_of(exp: Any) -> tuple[str, str] | None:
    return LABELS.get(exp.task_id)


def is_relevant(exp: Any, task_id: str) -> bool:
    """An expert's call: an attempt of a task with the same label; knowledge whose subject is the task's."""
    if exp.kind in ("draft_trace", "refine_trace", "human_edit"):
        return label_of(exp) == LABELS[task_id]
    wanted = KNOWLEDGE.get(exp.title)
    return bool(wanted and wanted(task_id))


def feasible_of_label(store: Any, label: tuple[str, str]) -> list[str]:
    from core.attempts import outcome_of

    return [e.id for e in store.query(limit=None) if e.kind in ("draft_trace", "refine_trace")
            and LABELS.get(e.task_id) == label and outcome_of(e).feasible]


def before(store: Any, task: Any, n: int, config: Any, rng: random.Random) -> list[Any]:
    """main's retrieval before #36 (4cc3943, core.methods.EvoKernel.prepare, draft stage): a pool of K by BM25
    similarity to the task's text, then N by Q1, epsilon-greedily."""
    from core import policy

    k = policy.pool_size(n, config.pool_factor, config.pool_growth, 0)
    pool = store.retrieve(task.signature()["text"], k=k, backend="cpu", stage="draft", q_floor=config.q_floor,
                          kinds=policy.RETRIEVABLE_KINDS, exclude_ids=[])
    return policy.choose_by_value(pool, n, "draft", config.epsilon, rng)


def after(engine: Any, task: Any, rng: random.Random) -> list[Any]:
    """The engine's retrieval now: ``EvoKernel.prepare`` of the task's first attempt, as a run would call it."""
    from core.methods import METHODS
    from store import RunRecord, TaskProgress

    run = RunRecord(id="bench", method="evokernel", config={"iterations": 4}, tasks=[task.id],
                    progress={task.id: TaskProgress()})
    return METHODS["evokernel"].prepare(engine, run, task, 0, rng).context


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, required=True, help="a fetched KernelBench's KernelBench folder")
    parser.add_argument("--n", type=int, default=5, help="memory items a prompt shows (recall@N)")
    parser.add_argument("--iterations", type=int, default=4, help="calls per task when recording the memory")
    parser.add_argument("--seeds", type=int, default=10, help="epsilon draws averaged per held-out task")
    parser.add_argument("--cite-rate", type=float, default=2 / 24)
    parser.add_argument("--keep", type=Path, help="keep the recorded memory in this folder")
    args = parser.parse_args()

    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier
    from store import Store

    tmp = Path(tempfile.mkdtemp(prefix="evokernel-retrieval-quality-"))
    folder = args.keep or tmp
    folder.mkdir(parents=True, exist_ok=True)
    memory_tasks, held_out = load(args.suite, MEMORY), load(args.suite, HELD_OUT)
    facts = recorded.facts_with_meter(folder / "cache")
    families = {t: label[0] for t, label in LABELS.items()}
    config = Config()
    config.engine.n_context = args.n
    with Store.open(folder / "memory.lmdb") as store:
        if not store.count(kind="draft_trace"):
            recorded.record(store, memory_tasks, families, facts, iterations=args.iterations,
                            cite_rate=args.cite_rate)
        facts.prepare(held_out, False)
        agree = [(t.id, facts.kind(t)) for t in [*memory_tasks, *held_out]]
        engine = Engine(config, store, CannedVerifier(recorded.judge), None)
        engine.facts = facts
        rows: dict[str, dict[str, list[float]]] = {}
        for task in held_out:
            label = LABELS[task.id]
            wanted = set(feasible_of_label(store, label))
            for name, choose in (("before", lambda rng, t=task: before(store, t, args.n, config.engine, rng)),
                                 ("after", lambda rng, t=task: after(engine, t, rng))):
                recall, share = [], []
                for seed in range(args.seeds):
                    shown = choose(random.Random(f"{seed}:{task.id}"))
                    if wanted:
                        recall.append(len({e.id for e in shown} & wanted) / min(args.n, len(wanted)))
                    if shown:
                        share.append(sum(is_relevant(e, task.id) for e in shown) / len(shown))
                row = rows.setdefault(task.id, {})
                row[f"{name}_recall"] = recall
                row[f"{name}_share"] = share
    print(f"memory: {len(memory_tasks)} public tasks, {args.iterations} recorded calls each; held out: "
          f"{len(held_out)}; N = {args.n}; {args.seeds} epsilon draws each (epsilon {config.engine.epsilon})")
    print(f"{'held-out task':52s} {'label':24s} {'recall@N before':>16s} {'after':>6s} {'share before':>13s} "
          f"{'after':>6s}")
    for task_id, row in rows.items():
        def mean(key: str, row: dict[str, list[float]] = row) -> str:
            return f"{statistics.mean(row[key]):.2f}" if row[key] else "-"
        label = "/".join(LABELS[task_id])
        print(f"{task_id[:52]:52s} {label:24s} {mean('before_recall'):>16s} {mean('after_recall'):>6s} "
              f"{mean('before_share'):>13s} {mean('after_share'):>6s}")
    for family in [None, *dict.fromkeys(LABELS[t][0] for t in HELD_OUT)]:
        chosen = [r for t, r in rows.items() if family is None or LABELS[t][0] == family]
        summary = {}
        for key in ("before_recall", "after_recall", "before_share", "after_share"):
            values = [statistics.mean(r[key]) for r in chosen if r[key]]
            summary[key] = statistics.mean(values) if values else float("nan")
        name = "overall" if family is None else family
        ratio = summary["after_recall"] / summary["before_recall"] if summary["before_recall"] else float("inf")
        print(f"{name:14s} recall@{args.n}: before {summary['before_recall']:.2f}, after {summary['after_recall']:.2f}"
              f" (x{ratio:.2f}); share relevant: before {summary['before_share']:.2f}, "
              f"after {summary['after_share']:.2f}")
    matches = sum(1 for t, k in agree if (k.family, k.regime) == LABELS[t])
    wrong = [f"{t}: {k.family}/{k.regime}" for t, k in agree if (k.family, k.regime) != LABELS[t]]
    print(f"classification (core.kinship) agrees with the expert's labels on {matches} of {len(agree)} tasks"
          + (f"; not on {', '.join(wrong)}" if wrong else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
