"""What a kernel is, for choosing what memory a prompt shows: its **family** read from the reference's
traced graph, its **regime** on the roofline at its sizes, and its **dtypes**.

Relevance was decided by traced op names and the task's category, so a matrix multiplication (``mm``) and a
fused GEMM (``addmm``, category "fused") were strangers: the GEMM's prompts got the matmul's failed draft as a
lesson and none of its working code, and every prompt showed the same few items whatever the task. A family
says what kind of loop nest a kernel is, whatever its ops are called:

- ``gemm``: GEMM-like, the FLOPs in matrix products (``mm``, ``addmm``, ``bmm``, ``linear``, ``einsum``,
  attention) or convolutions written as GEMMs; an epilogue (bias, activation, a norm) does not change it;
- ``scan``: prefix operations (``cumsum``, ``cumprod``, ...);
- ``normalization``: a reduction whose result is applied back to its input (softmax, layer/group/batch/RMS
  norms, ``x / norm(x)``): its output is as large as its input;
- ``reduction``: a reduction to a smaller output (sums, means, extrema, arg-extrema, losses), and pooling (a
  windowed reduction, even where a stride of 1 keeps the output as large as the input);
- ``pointwise``: elementwise chains (activations, arithmetic);
- ``data_movement``: no arithmetic (copies, transposes, gathers, concatenation).

The traced graph is the roofline's task profile (``verifier.machine.roofline``: FLOPs per aten op, bytes in and
out, counted on the meta device); without one (no verifier meter, a count that failed) the family is read from
the op names the task's source calls and its category. The regime compares the task's arithmetic intensity
with this machine's ridge (FMA peak / triad bandwidth), or a nominal one per backend when the ceilings are not
measured. Pure functions: ``kind_of`` for a task, ``kind_of_signature`` for a stored experience (its signature
carries the family since #36; older ones are read from their ops and category), ``relevance`` for a pair.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("gemm", "scan", "normalization", "reduction", "pointwise", "data_movement")
FAMILY_WORDS = {"gemm": "GEMM-like (matrix products and convolutions as GEMMs)", "scan": "a scan (prefix operation)",
                "normalization": "a normalisation (a reduction applied back to its input)",
                "reduction": "a reduction to a smaller output", "pointwise": "a pointwise chain",
                "data_movement": "data movement (no arithmetic)"}

_GEMM = re.compile(r"^(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|vdot|einsum|addbmm|_?scaled_dot_product\w*|"
                   r"convolution|_convolution|conv\w*|mkldnn_convolution|slow_conv\w*|thnn_conv\w*|_mm\w*)$")
_SCAN = re.compile(r"^(cumsum|cumprod|cummax|cummin|logcumsumexp|_logcumsumexp)$")
_NORM = re.compile(r"^(native_layer_norm|layer_norm|native_group_norm|group_norm|native_batch_norm|batch_norm\w*|"
                   r"_native_batch_norm_legit\w*|instance_norm|_fused_rms_norm|rms_norm|_softmax|softmax|"
                   r"_log_softmax|log_softmax|normalize)$")
_REDUCE = re.compile(r"^(sum|mean|amax|amin|max|min|prod|argmax|argmin|any|all|var|std|var_mean|std_mean|logsumexp|"
                     r"norm|linalg_vector_norm|\w*pool\w*|\w*_loss\w*|nll_loss\w*|binary_cross_entropy\w*|kl_div|"
                     r"cross_entropy\w*|median|mode|topk|sort|kthvalue)$")
# Ops that carry no kernel identity of their own (arithmetic glue any chain has): never the overlap that
# makes two kernels kin.
TRIVIAL_OPS = frozenset({"add", "sub", "mul", "div", "neg", "copy", "clone", "view", "reshape", "contiguous",
                         "expand", "to", "float", "t", "transpose", "permute", "unsqueeze", "squeeze", "rsub",
                         "fill", "zero", "empty", "zeros", "ones", "add_", "mul_", "div_", "sub_", "binop"})

# The ridge (FLOP/byte) where compute starts to bound, per backend, when this machine's ceilings are not
# measured: a CPU's FMA peak over its DRAM bandwidth is about 5-15, a GPU's or NPU's 50-150.
NOMINAL_RIDGE = {"cpu": 8.0, "cuda": 60.0, "ascend": 100.0}


@dataclass(frozen=True)
class KernelKind:
    """A kernel's family, regime ("memory" or "compute", "" when unknown), floating dtypes and the traced ops
    that carry its identity (by FLOPs, heaviest first; trivial arithmetic left out)."""

    family: str
    regime: str = ""
    dtypes: tuple[str, ...] = ("float32",)
    ops: tuple[str, ...] = ()
    source: str = "names"               # "graph" (the traced profile) or "names" (source call names, category)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def signature(self) -> dict[str, Any]:
        """What an experience stores of it (``Experience.signature``), and the terms retrieval matches on."""
        return {"family": self.family, "regime": self.regime, "dtypes": list(self.dtypes),
                "traced_ops": list(self.ops), "kind_terms": self.terms()}

    def terms(self) -> str:
        """Tokens for the lexical index, distinctive enough not to collide with words in code."""
        return " ".join([f"family_{self.family}", *([f"regime_{self.regime}"] if self.regime else []),
                         *(f"dtype_{d}" for d in self.dtypes)])

    def words(self) -> str:
        """The kind in words, for a prompt: "GEMM-like (...), compute-bound at its sizes, float32"."""
        said = [FAMILY_WORDS.get(self.family, self.family)]
        if self.ops:
            said[0] += f": {', '.join(self.ops[:4])}"
        if self.regime:
            said.append(f"{self.regime}-bound at its sizes")
        said.append(", ".join(self.dtypes))
        return "; ".join(said)


def family_of_ops(flops_by_op: Mapping[str, float], input_bytes: float = 0.0, output_bytes: float = 0.0) -> str:
    """The family of a traced graph: FLOPs per aten op, and the bytes of its inputs and outputs (a reduction
    whose output is as large as its input is a normalisation)."""
    ops = {str(k).split(".")[-1].rstrip("_"): float(v) for k, v in flops_by_op.items()}
    total = sum(ops.values())
    if not ops or total <= 0:
        return "data_movement"
    gemm = sum(v for k, v in ops.items() if _GEMM.match(k))
    if gemm >= 0.5 * total:
        return "gemm"
    if any(_SCAN.match(k) for k in ops):
        return "scan"
    normalizes = any(_NORM.match(k) for k in ops)
    reduces = any(_REDUCE.match(k) for k in ops)
    if not normalizes and any("pool" in k for k in ops):
        return "reduction"          # a windowed reduction, whatever its stride leaves of the input's size
    if normalizes or reduces:
        same_size = input_bytes > 0 and output_bytes >= 0.5 * input_bytes
        if normalizes and not input_bytes:
            return "normalization"
        return "normalization" if same_size else "reduction"
    return "pointwise"


def family_of_names(names: Iterable[str], category: str = "") -> str:
    """The family from the names a task's source calls and its category, when no graph was traced."""
    names = [n.lower() for n in names]
    words = " ".join(names)
    if any(_GEMM.match(n) for n in names) or re.search(r"gemm|matmul|bmm|linear|conv|einsum|attention", words) \
            or category in ("matmul", "convolution"):
        return "gemm"
    if any(_SCAN.match(n) for n in names) or category == "scan":
        return "scan"
    if any(_NORM.match(n) for n in names) or re.search(r"norm(?!al)|softmax", words) or category == "normalization":
        return "normalization"
    if any(_REDUCE.match(n) for n in names) or category in ("reduction", "pooling", "loss"):
        return "reduction"
    if category in ("activation", "elementwise", "fused") or names:
        return "pointwise"
    return "data_movement"


def regime_of(profile: Mapping[str, Any] | None, ceilings: Mapping[str, Any] | None, backend: str = "cpu") -> str:
    """"memory" or "compute": which ceiling bounds the task at its sizes on this machine (its ridge, or the
    backend's nominal one without measured ceilings); "" without a profile."""
    if not profile or not profile.get("bytes"):
        return ""
    intensity = float(profile.get("flops", 0)) / float(profile["bytes"])
    bw, peak = (ceilings or {}).get("triad_gbps"), (ceilings or {}).get("fma_gflops")
    ridge = float(peak) / float(bw) if bw and peak else NOMINAL_RIDGE.get(backend, NOMINAL_RIDGE["cpu"])
    return "compute" if intensity >= ridge else "memory"


def identity_ops(flops_by_op: Mapping[str, float], limit: int = 6) -> tuple[str, ...]:
    """The traced ops that say what the kernel is, heaviest first, trivial arithmetic left out."""
    ranked = sorted(((float(v), str(k).split(".")[-1].rstrip("_")) for k, v in flops_by_op.items()), reverse=True)
    return tuple(dict.fromkeys(n for _, n in ranked if n not in TRIVIAL_OPS))[:limit]


def kind_of(ops: Iterable[str], category: str, profile: Mapping[str, Any] | None,
            ceilings: Mapping[str, Any] | None, backend: str = "cpu", dtypes: Iterable[str] = ()) -> KernelKind:
    """A task's kind: from its traced ``profile`` when there is one (family, regime, ops, dtypes), else from the
    names its source calls (``ops``) and its ``category``. ``dtypes``: the floating dtypes of its inputs when
    known otherwise (a multi-case task's cases)."""
    said = tuple(dict.fromkeys(dtypes)) or tuple((profile or {}).get("dtypes") or ()) or ("float32",)
    by_op = (profile or {}).get("by_op") or {}
    if profile and (by_op or profile.get("bytes")):      # a graph with no arithmetic is data movement
        family = family_of_ops(by_op, float(profile.get("input_bytes", 0)), float(profile.get("output_bytes", 0)))
        return KernelKind(family, regime_of(profile, ceilings, backend), said, identity_ops(by_op), "graph")
    names = [str(n).lower() for n in ops]
    return KernelKind(family_of_names(names, category), regime_of(profile, ceilings, backend), said,
                      tuple(n for n in dict.fromkeys(names) if n not in TRIVIAL_OPS), "names")


def kind_of_signature(sig: Mapping[str, Any] | None) -> KernelKind | None:
    """The kind an experience was recorded with (its signature's family, regime, dtypes and traced ops), or
    read from its ops and category when it predates them; None for knowledge (no ops, no category)."""
    sig = sig or {}
    if sig.get("family") in FAMILIES:
        return KernelKind(str(sig["family"]), str(sig.get("regime") or ""),
                          tuple(sig.get("dtypes") or ("float32",)), tuple(sig.get("traced_ops") or ()), "graph")
    ops, category = list(sig.get("ops") or []), str(sig.get("category") or "")
    if not ops and not category:
        return None
    names = [str(n).lower() for n in ops]
    return KernelKind(family_of_names(names, category), "", ("float32",),
                      tuple(n for n in dict.fromkeys(names) if n not in TRIVIAL_OPS), "names")


def op_overlap(a: KernelKind, b: KernelKind) -> float:
    """Jaccard overlap of two kinds' identity ops (0 when either has none)."""
    x, y = set(a.ops) - TRIVIAL_OPS, set(b.ops) - TRIVIAL_OPS
    return len(x & y) / len(x | y) if x and y else 0.0


def relevance(item: KernelKind | None, task: KernelKind) -> float:
    """How close an experience's kernel is to the task's: 4 for the same family, 2 more in the same regime,
    0.5 more sharing a dtype, up to 1 more for shared identity ops. The regime weighs more than the op names:
    a standard convolution learns more from a compute-bound matmul than from a memory-bound depthwise
    convolution, a matrix-vector product more from a memory-bound kernel of its family than from a blocked
    GEMM (bench/retrieval_quality.py). Another family counts only through shared identity ops (a fused GEMM's
    group-norm epilogue and a group norm); 0 means unrelated."""
    if item is None:
        return 0.0
    shared = op_overlap(item, task)
    if item.family != task.family and shared == 0.0:
        return 0.0
    score = 4.0 * (item.family == task.family) + 1.0 * shared
    score += 2.0 if item.regime and item.regime == task.regime else 0.0
    score += 0.5 if set(item.dtypes) & set(task.dtypes) else 0.0
    return score
