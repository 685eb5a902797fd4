"""The roofline: how far a kernel is from what this machine can do, in one module.

- **Task profile** (``profile_task``): the least a kernel of the task must do. Bytes: every input,
  parameter, buffer and output tensor moved once. FLOPs: ``torch.utils.flop_counter`` for matmuls
  and convolutions, plus elementwise work counted sensibly (one FLOP per output element of a
  pointwise op; per input element, times a small documented factor, for reductions, softmax and
  norms; nothing for copies and views). The reference runs on the ``meta`` device (no memory, no
  compute; on real CPU tensors if an op has no meta kernel), in a subprocess with a timeout, and
  the result is cached per task key.
- **Ceilings** (``measure_ceilings``): memory bandwidth by a STREAM triad (``a = b + s*c`` over
  arrays four times the last-level cache, 24 bytes per element) and peak FP32 FLOP/s by a loop of
  independent vector FMAs, both in one small C++ program built with the CPU backend's flags and run
  with the verifier's thread count; cached per machine fingerprint. Device backends (CUDA, Ascend)
  are not measured: their ceilings are None and prompts say so (untested here: no such device).
- **assess()**: pure arithmetic the performance gate calls: achieved GB/s and GFLOP/s, the
  roofline floor ``max(bytes / bandwidth, flops / peak)``, which side bounds it, and the share of
  the roofline a kernel reaches (floor / latency), with a one-line summary for people and prompts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch._ops import OpOverload

    from verifier.machine.facts import Target
    from verifier.machine.lock import MachineLock
    from verifier.task import TaskSpec

from verifier.locations import cache_dir as user_cache_dir
from verifier.processes import run_process, without_secrets

PROFILE_FORMAT = 2    # 2: the inputs' dtypes, and every case of a multi-case task
CEILINGS_FORMAT = 1

# Reductions and composite ops: FLOPs per element of their (first) input. A floor, not a census:
# softmax = max, subtract, exp, sum, divide; layer/group norm = mean, variance (2), normalise (2),
# scale and shift (2) plus one; var/std = subtract, square, add.
PER_INPUT_ELEMENT = {
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1, "argmax": 1, "argmin": 1,
    "any": 1, "all": 1, "cumsum": 1, "cumprod": 1, "logcumsumexp": 3, "logsumexp": 3, "var": 3, "std": 3,
    "var_mean": 3, "std_mean": 3, "norm": 2, "linalg_vector_norm": 2, "_softmax": 5, "_log_softmax": 5,
    "native_layer_norm": 8, "native_group_norm": 8, "native_batch_norm": 8, "_native_batch_norm_legit": 8,
    "_native_batch_norm_legit_no_training": 4, "_native_batch_norm_legit_functional": 8,
    "max_pool1d": 1, "max_pool2d": 1, "max_pool2d_with_indices": 1, "max_pool3d_with_indices": 1,
    "avg_pool1d": 1, "avg_pool2d": 1, "avg_pool3d": 1, "_adaptive_avg_pool2d": 1, "adaptive_max_pool2d": 1,
    "mse_loss": 3, "smooth_l1_loss": 4, "huber_loss": 4, "l1_loss": 2, "nll_loss_forward": 1, "nll_loss2d_forward": 1,
    "_weight_norm_interface": 3,
}
# Data movement: no arithmetic, whatever their tags say.
NO_FLOPS = {"copy_", "clone", "_to_copy", "contiguous", "fill_", "zero_", "empty_like", "zeros_like", "ones_like",
            "full_like", "detach", "alias", "lift_fresh", "cat", "stack", "where", "masked_fill", "index_select",
            "gather", "scatter", "flip", "roll", "constant_pad_nd", "expand", "repeat", "_unsafe_view"}


# -- the task profile (runs in the subprocess) ----------------------------------------------------


def _elementwise_mode(counted_names: set[str]) -> Any:
    """A dispatch mode that counts the elementwise FLOPs the matmul counter does not: one per output
    element of a pointwise op, per input element (times a factor) of a reduction."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    # torch's TorchDispatchMode has no annotations (its __init_subclass__ and __init__ are untyped calls)
    class Elementwise(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.by_op: dict[str, int] = {}

        def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in counted_names or name.rstrip("_") in NO_FLOPS or name in NO_FLOPS:
                return out
            flops = 0
            base = name.rstrip("_")
            if base in PER_INPUT_ELEMENT:
                first = next((a for a in args if isinstance(a, torch.Tensor)), None)
                flops = PER_INPUT_ELEMENT[base] * (first.numel() if first is not None else 0)
            elif torch.Tag.pointwise in getattr(func, "tags", ()):
                first_out = out if isinstance(out, torch.Tensor) else next(
                    (o for o in out if isinstance(o, torch.Tensor)), None) if isinstance(out, (tuple, list)) else None
                flops = first_out.numel() if first_out is not None else 0
            if flops:
                self.by_op[name] = self.by_op.get(name, 0) + flops
            return out

    return Elementwise()


def _tensors(value: Any) -> list[torch.Tensor]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _nbytes(ts: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def count_forward(model: Any, inputs: list[Any]) -> dict[str, Any]:
    """The least work of one forward of ``model`` on ``inputs`` (meta tensors, or real ones): bytes of
    the inputs, parameters, buffers and outputs, each moved once, and FLOPs (matmuls and convolutions by
    ``torch.utils.flop_counter``, elementwise work as documented above). The roofline's task profile and
    the sizer's choice of sizes (``verifier.sizing.work``) both count with it. Raises what the forward raises."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        from torch.utils.flop_counter import _FLOP_REGISTRY as counted  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - older torch
        counted = {}
    counted_names = {getattr(k, "__name__", str(k)).split(".")[-1] for k in counted}
    elementwise = _elementwise_mode(counted_names)
    with torch.no_grad(), FlopCounterMode(display=False) as flop_counter, elementwise:
        out = model(*inputs)
    state = {id(t): t for t in [*model.parameters(), *model.buffers()]} if hasattr(model, "parameters") else {}
    matmul = int(flop_counter.get_total_flops())
    by_op = {str(k).split(".")[-1]: int(v) for k, v in flop_counter.get_flop_counts().get("Global", {}).items()}
    by_op.update(elementwise.by_op)
    ew = sum(elementwise.by_op.values())
    floats = sorted({str(t.dtype).replace("torch.", "") for t in _tensors(inputs) if t.is_floating_point()})
    result: dict[str, Any] = {"format": PROFILE_FORMAT, "input_bytes": _nbytes(_tensors(inputs)), "dtypes": floats,
                              "param_bytes": _nbytes(list(state.values())), "output_bytes": _nbytes(_tensors(out)),
                              "matmul_flops": matmul, "elementwise_flops": ew, "flops": matmul + ew, "by_op": by_op}
    result["bytes"] = result["input_bytes"] + result["param_bytes"] + result["output_bytes"]
    return result


def _count(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """The profile of one task; runs in a fresh interpreter (``python -m verifier.machine.roofline``)."""
    import torch

    from verifier.task import TaskSpec, load_task_module

    spec = TaskSpec.from_dict(spec_dict)
    module = load_task_module(spec)
    problem = ""
    for device in ("meta", "cpu"):
        try:
            torch.manual_seed(0)
            with torch.device(device):
                model = module.Model(*module.get_init_inputs())
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
            found = {**count_forward(model, inputs), "device": device}
            if len(spec.cases) > 1:   # a multi-case task: every case's bytes and FLOPs (a prompt's roofline is the
                found["cases"] = _count_cases(module, model, len(spec.cases), device)   # timed cases', not case 0's)
            return found
        except Exception as exc:  # no meta kernel for some op: count on real tensors
            problem = f"{type(exc).__name__}: {exc}"
    raise RuntimeError(f"could not count the reference of {spec.id}: {problem}")


def _count_cases(module: Any, model: Any, n: int, device: str) -> list[dict[str, Any]]:
    """Bytes and FLOPs of each of a multi-case task's ``n`` cases (the totals of ``count_forward``)."""
    import torch

    from verifier.cases import inputs_for

    out = []
    for k in range(n):
        with torch.device(device):
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs_for(module.get_inputs, k)()]
        counted = count_forward(model, inputs)
        out.append({key: counted[key] for key in ("bytes", "flops", "input_bytes", "output_bytes")})
    return out


def describe_cases(profile: dict[str, Any], timed: list[int], ceilings: dict[str, Any] | None) -> str:
    """One line for a multi-case task's prompt: what its ``timed`` cases move and compute, and their floors."""
    cases = [profile["cases"][k] for k in timed if k < len(profile.get("cases") or [])]
    if not cases:
        return describe_profile(profile, ceilings)
    nbytes, flops = [int(c["bytes"]) for c in cases], [int(c["flops"]) for c in cases]
    text = (f"over its {len(cases)} timed case{'s' if len(cases) != 1 else ''}: {_fmt_bytes(min(nbytes))} to "
            f"{_fmt_bytes(max(nbytes))} moved and {_fmt_flops(min(flops))} to {_fmt_flops(max(flops))} per case")
    points = [assess(c, 1.0, ceilings) for c in cases]
    floors = [p for p in points if p and p.get("floor_ms") is not None]
    if floors:
        bounds = sorted({str(p["bound"]) for p in floors})
        said = " or ".join(f"{b}-bound" for b in bounds)
        lo, hi = min(p["floor_ms"] for p in floors), max(p["floor_ms"] for p in floors)
        text += f": {said} on this machine, roofline floors {lo:.4f} ms to {hi:.4f} ms"
    return text


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "profile":
        print("usage: python -m verifier.machine.roofline profile JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[1]).read_text())
    import torch

    torch.set_num_threads(1)
    results = []
    for task in job["tasks"]:
        try:
            results.append({"ok": True, "profile": _count(task)})
        except Exception as exc:
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:600]})
        Path(job["result"]).write_text(json.dumps(results))   # what is done survives a timeout
    return 0


def profile_task(spec: TaskSpec, timeout: float = 120.0) -> dict[str, Any]:
    """Count ``spec``'s bytes and FLOPs in a fresh interpreter; raises RuntimeError with a reason."""
    result = profile_tasks([spec], timeout)[0]
    if isinstance(result, str):
        raise RuntimeError(result)
    return result


def profile_tasks(specs: list[TaskSpec], timeout: float = 120.0) -> list[dict[str, Any] | str]:
    """Profiles of ``specs`` counted in one fresh interpreter: each a dict, or a string saying why not."""
    from verifier.processes import scrubbed_env

    if not specs:
        return []
    timeout = timeout + 5.0 * len(specs)
    results: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="evokernel-roofline-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"tasks": [s.to_dict() for s in specs], "result": str(Path(tmp) / "result.json")}))
        env = scrubbed_env({"OMP_NUM_THREADS": "1"}, home=tmp)
        # counting is not a timing: at lower priority (verifier.priority)
        ran = run_process([sys.executable, "-m", "verifier.machine.roofline", "profile", str(job)], cwd=tmp, env=env,
                          timeout=timeout, background=True)
        if ran.timed_out:
            why = f"counting the reference took over {timeout:.0f} s"
        else:
            why = f"counting the reference failed: {ran.last_line() or ran.describe()}"
        try:
            results = json.loads((Path(tmp) / "result.json").read_text())
        except (OSError, ValueError):
            results = []
    out: list[dict[str, Any] | str] = []
    for i in range(len(specs)):
        r = results[i] if i < len(results) and isinstance(results[i], dict) else None
        if r is None:
            out.append(why or "counting the reference failed")
        else:
            out.append(r["profile"] if r.get("ok") else f"counting the reference failed: {r.get('error')}")
    return out


# -- the ceilings ---------------------------------------------------------------------------------

CEILINGS_SOURCE = r"""
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
#define NACC 10
typedef float vf __attribute__((vector_size(VBYTES)));
static const int LANES = VBYTES / sizeof(float);
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double fma_run(long iters, float* sink) {
  double t = now();
  float total = 0.0f;
#pragma omp parallel reduction(+ : total)
  {
    vf acc[NACC], x, y;
    float seed = 1.0f + 1e-3f * omp_get_thread_num();
    for (int l = 0; l < LANES; ++l) { x[l] = 0.999999f; y[l] = 1e-6f * seed; }
    for (int k = 0; k < NACC; ++k) for (int l = 0; l < LANES; ++l) acc[k][l] = seed + k;
    for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
      for (int k = 0; k < NACC; ++k) acc[k] = acc[k] * x + y;
    }
    for (int k = 0; k < NACC; ++k) for (int l = 0; l < LANES; ++l) total += acc[k][l];
  }
  *sink += total;
  return now() - t;
}
int main(int argc, char** argv) {
  size_t n = argc > 1 ? strtoull(argv[1], nullptr, 10) : (size_t)1 << 24;
  double* a = (double*)aligned_alloc(64, n * sizeof(double));
  double* b = (double*)aligned_alloc(64, n * sizeof(double));
  double* c = (double*)aligned_alloc(64, n * sizeof(double));
  if (!a || !b || !c) { printf("{\"error\": \"out of memory\"}\n"); return 1; }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) { a[i] = 0.0; b[i] = 1.0; c[i] = 2.0; }
  double best = 1e30;
  for (int r = 0; r < 30; ++r) {
    double t = now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
    t = now() - t;
    if (r > 1) best = std::min(best, t);
  }
  double triad = 3.0 * sizeof(double) * n / best / 1e9;
  float sink = 0.0f;
  long iters = 1 << 16;
  while (fma_run(iters, &sink) < 0.05 && iters < (1L << 40)) iters *= 2;
  double fbest = 1e30;
  for (int r = 0; r < 10; ++r) fbest = std::min(fbest, fma_run(iters, &sink));
  double flops = 2.0 * LANES * NACC * (double)iters * omp_get_max_threads() / fbest / 1e9;
  printf("{\"triad_gbps\": %.3f, \"fma_gflops\": %.3f, \"threads\": %d, \"vector_bits\": %d, \"array_bytes\": %zu,"
         " \"check\": %.3f}\n", triad, flops, omp_get_max_threads(), VBYTES * 8, n * sizeof(double),
         a[n / 2] + sink * 0.0f);
  free(a); free(b); free(c);
  return 0;
}
"""


MAX_CEILING_MEASUREMENTS = 5
"""How many times a kernel, or PyTorch beside it, under the memory floor has the ceilings measured again
(each keeps the best of all): enough for a triad first measured under load to reach the machine's, and
no more, since a kernel whose data stays in a large cache is under the floor every time."""


def measure_ceilings(compiler: str, flags: Sequence[str], threads: int, llc_bytes: int, timeout: float = 180.0
                     ) -> dict[str, Any]:
    """Build and run the triad + FMA program; ``{"triad_gbps", "fma_gflops", ...}`` or RuntimeError."""
    flags = [f for f in flags if f not in ("-shared", "-fPIC") and not f.startswith("-fdiagnostics")]
    n = max(4 * llc_bytes, 64 << 20) // 8
    with tempfile.TemporaryDirectory(prefix="evokernel-ceilings-") as tmp:
        src, exe = Path(tmp) / "ceilings.cpp", Path(tmp) / "ceilings"
        src.write_text(CEILINGS_SOURCE)
        built = run_process([compiler, *flags, "-o", str(exe), str(src)], timeout=timeout, background=True)
        if not built.ok:
            raise RuntimeError(f"building the ceilings probe failed: {built.output.strip()[:300] or built.describe()}")
        env = {**without_secrets(os.environ), "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "false"}
        ran = run_process([str(exe), str(n)], timeout=timeout, env=env, background=False, stderr=False)  # a timing
        if ran.timed_out:
            raise RuntimeError(f"the ceilings probe ran over {timeout:.0f} s")
    try:
        data = json.loads(ran.output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"the ceilings probe printed no result ({ran.describe()})") from None
    if "error" in data:
        raise RuntimeError(f"the ceilings probe failed: {data['error']}")
    data.pop("check", None)
    return {"format": CEILINGS_FORMAT, **data, "flags": " ".join(flags)}


# -- arithmetic (pure) ------------------------------------------------------------------------------


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _fmt_flops(n: float) -> str:
    for unit, size in (("GFLOP", 1e9), ("MFLOP", 1e6), ("KFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} FLOP"


BELOW_FLOOR = 0.5
"""A memory-bound kernel timed under this share of the roofline's floor is flagged for review (above the
floor itself is possible with data kept in cache, and the summary says so)."""


def assess(profile: dict[str, Any] | None, latency_ms: float | None, ceilings: dict[str, Any] | None = None
           ) -> dict[str, Any] | None:
    """Where a kernel taking ``latency_ms`` sits on the roofline (pure; None without a profile or time).

    Returns ``bytes``, ``flops``, ``intensity`` (FLOP/byte), ``achieved_gbps``, ``achieved_gflops``
    and, with ``ceilings``: ``ceiling_gbps``, ``ceiling_gflops``, ``bound`` ("memory"/"compute"),
    ``floor_ms`` (the roofline's least time), ``fraction`` (floor / latency: 1.0 is on the roofline;
    above 1 the data stayed in cache, faster than the DRAM triad) and ``summary``."""
    if not profile or not latency_ms or latency_ms <= 0:
        return None
    nbytes, flops = int(profile.get("bytes", 0)), int(profile.get("flops", 0))
    seconds = latency_ms / 1e3
    out: dict[str, Any] = {"bytes": nbytes, "flops": flops, "intensity": flops / nbytes if nbytes else None,
                           "latency_ms": latency_ms, "achieved_gbps": nbytes / seconds / 1e9,
                           "achieved_gflops": flops / seconds / 1e9}
    bw = (ceilings or {}).get("triad_gbps")
    peak = (ceilings or {}).get("fma_gflops")
    if not bw or not peak:
        out["summary"] = (f"{out['achieved_gbps']:.1f} GB/s, {out['achieved_gflops']:.1f} GFLOP/s "
                          "(no measured ceilings on this backend)")
        return out
    memory_ms = nbytes / (bw * 1e9) * 1e3
    compute_ms = flops / (peak * 1e9) * 1e3
    bound = "memory" if memory_ms >= compute_ms else "compute"
    floor_ms = max(memory_ms, compute_ms)
    fraction = floor_ms / latency_ms
    out.update(ceiling_gbps=bw, ceiling_gflops=peak, bound=bound, floor_ms=floor_ms, fraction=fraction)
    if bound == "memory":
        head = f"memory-bound: {100 * fraction:.0f} % of the {bw:.1f} GB/s triad ceiling"
        detail = f"{_fmt_bytes(nbytes)} moved at {out['achieved_gbps']:.1f} GB/s"
    else:
        head = f"compute-bound: {100 * fraction:.0f} % of the {peak:.0f} GFLOP/s FMA ceiling"
        detail = f"{_fmt_flops(flops)} at {out['achieved_gflops']:.1f} GFLOP/s"
    note = ("; under half of it: flagged for review" if bound == "memory" and fraction > 1 / BELOW_FLOOR
            else "; above the DRAM roofline: the data stays in cache" if fraction > 1.05 else "")
    out["summary"] = f"{head} ({detail}; floor {floor_ms:.3f} ms{note})"
    return out


def below_floor(point: dict[str, Any] | None) -> str:
    """The flag of a memory-bound kernel timed under half the roofline's floor, or "": the floor is the one
    ``assess`` gives in the summary beside it (one computation: the profile's bytes at the triad ceiling),
    so the flag and the roofline line never name two floors."""
    if not point or point.get("bound") != "memory" or not point.get("floor_ms") or not point.get("latency_ms"):
        return ""
    floor, latency = float(point["floor_ms"]), float(point["latency_ms"])
    if latency >= BELOW_FLOOR * floor:
        return ""
    return (f"{latency:.3f} ms is under half the roofline floor {floor:.3f} ms ({_fmt_bytes(point['bytes'])} moved "
            f"at the {point['ceiling_gbps']:.1f} GB/s triad ceiling): review before trusting")


def describe_profile(profile: dict[str, Any], ceilings: dict[str, Any] | None) -> str:
    """One line for prompts: what the task must move and compute, and its floor on this machine."""
    nbytes, flops = profile.get("bytes", 0), profile.get("flops", 0)
    text = (f"at least {_fmt_bytes(nbytes)} moved (inputs {_fmt_bytes(profile.get('input_bytes', 0))}, "
            f"weights {_fmt_bytes(profile.get('param_bytes', 0))}, "
            f"outputs {_fmt_bytes(profile.get('output_bytes', 0))}) "
            f"and {_fmt_flops(flops)} ({flops / nbytes if nbytes else 0:.2f} FLOP/byte)")
    point = assess(profile, 1.0, ceilings)
    if point and point.get("floor_ms") is not None:
        text += f": {point['bound']}-bound on this machine, roofline floor {point['floor_ms']:.3f} ms"
    return text


# -- per verifier: cached profiles and ceilings ------------------------------------------------------


class RooflineMeter:
    """Task profiles and this machine's ceilings, cached on disk. Never raises from ``point``: a roofline
    that cannot be computed is left out of the Outcome and ``problems`` says why.

    Both are facts of the machine and of a task's source, not of a workspace: kept in the user's cache
    (``verifier.locations.cache_dir``) unless ``cache_dir`` is given, so every workspace, CLI verifier and
    ``doctor`` of this user on this machine measures the ceilings once (1.6 s under the timing lock, 3 s of
    a first verification) and counts a task once."""

    def __init__(self, cache_dir: str | Path | None, backend: Target, threads: int, lock: MachineLock | None = None):
        self.root = Path(cache_dir if cache_dir is not None else user_cache_dir()) / "roofline"
        self.backend = backend
        self.threads = int(threads)
        self._lock = lock
        self._guard = threading.Lock()
        self._profiles: dict[str, dict[str, Any]] = {}
        self._failed: set[str] = set()       # tasks whose count failed: not tried again by this meter
        self._ceilings: dict[str, Any] | None = None
        self.problems: list[str] = []

    def _computing(self) -> AbstractContextManager[None]:
        """The machine lock, shared: counting (a fresh interpreter importing torch) never runs beside a
        timing (verifier.machine.lock)."""
        return self._lock.shared() if self._lock is not None else nullcontext()

    # disk
    def _read(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads((self.root / name).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write(self, name: str, key: str, value: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        data = self._read(name)
        data[key] = value
        tmp = self.root / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(data, indent=0))
        os.replace(tmp, self.root / name)

    def _profile_key(self, spec: TaskSpec) -> str:
        return f"{PROFILE_FORMAT}:{spec.key}"

    def cached_profile(self, spec: TaskSpec) -> dict[str, Any] | None:
        """The profile if it was counted before (never starts a count)."""
        key = self._profile_key(spec)
        return self._profiles.get(key) or self._read("tasks.json").get(key)

    def profile(self, spec: TaskSpec) -> dict[str, Any] | None:
        key = self._profile_key(spec)
        with self._guard:
            found = self.cached_profile(spec)
            if found:
                self._profiles[key] = found
                return found
            if key in self._failed:
                return None
            try:
                with self._computing():
                    found = profile_task(spec)
            except RuntimeError as exc:
                self._failed.add(key)
                self.problems.append(f"{spec.id}: {exc}")
                return None
            self._profiles[key] = found
            self._write("tasks.json", key, found)
            return found

    def _ceilings_key(self) -> str:
        """Same CPU, core count, threads, compiler and flags (no torch version: the probe is plain C++)."""
        import hashlib
        import platform

        from verifier.machine.facts import cpu_model

        text = f"{cpu_model()}|{os.cpu_count()}|{self.threads}|{platform.machine()}|{self.backend.build_key()}"
        return f"{CEILINGS_FORMAT}:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def cached_ceilings(self) -> dict[str, Any] | None:
        if self._ceilings is None and self.backend.device == "cpu":
            self._ceilings = self._read("ceilings.json").get(self._ceilings_key())
        return self._ceilings

    def ceilings(self, remeasure: bool = False) -> dict[str, Any] | None:
        """This machine's ceilings (measured the first time, under the timing lock); None on devices.

        ``remeasure`` measures again and keeps, per ceiling, the best of all measurements: anything
        else running on the machine can only make a measurement low, never high."""
        if self.backend.device != "cpu":
            return None
        with self._guard:
            before = self.cached_ceilings()
            if before and not remeasure:
                return before
            from verifier.machine.caches import last_level_cache_bytes

            compiler = self.backend.compiler or shutil.which("g++")
            flags = self.backend.build_flags() or ("-O3", "-march=native", "-fopenmp")
            try:
                with (self._lock.exclusive() if self._lock is not None else nullcontext()):
                    measured = None if remeasure else self._read("ceilings.json").get(self._ceilings_key())
                    if isinstance(measured, dict) and measured:   # by another process while this one waited
                        self._ceilings = measured
                        return self._ceilings
                    load = os.getloadavg()[0]   # what else ran: a measurement under load is low
                    found = measure_ceilings(compiler or "g++", flags, self.threads, last_level_cache_bytes())
                    found.update(measured_at=time.time(), load=load)
            except RuntimeError as exc:
                self.problems.append(str(exc))
                return None
            if before:
                found = {**found, "triad_gbps": max(found["triad_gbps"], before.get("triad_gbps", 0.0)),
                         "fma_gflops": max(found["fma_gflops"], before.get("fma_gflops", 0.0))}
            found["measurements"] = int((before or {}).get("measurements", 1 if before else 0)) + 1
            self._ceilings = found
            self._write("ceilings.json", self._ceilings_key(), found)
            return found

    def prepare(self, specs: list[TaskSpec], ceilings: bool = True) -> None:
        """Count every task not counted yet (one subprocess for all) and measure the ceilings (unless not
        ``ceilings``), so the first prompts of a run already carry them. Never raises."""
        try:
            with self._guard:
                missing = [s for s in specs if not self.cached_profile(s) and self._profile_key(s) not in self._failed]
                with self._computing():
                    counted = profile_tasks(missing)
                for spec, found in zip(missing, counted):
                    if isinstance(found, str):
                        self._failed.add(self._profile_key(spec))
                        self.problems.append(f"{spec.id}: {found}")
                        continue
                    self._profiles[self._profile_key(spec)] = found
                    self._write("tasks.json", self._profile_key(spec), found)
            if ceilings:
                self.ceilings()
        except Exception as exc:
            self.problems.append(f"{type(exc).__name__}: {exc}")

    def point(self, spec: TaskSpec, latency_ms: float | None) -> dict[str, Any] | None:
        """``assess`` for a kernel of ``spec`` taking ``latency_ms`` here; None when it cannot be had."""
        try:
            return assess(self.profile(spec), latency_ms, self.ceilings())
        except Exception as exc:  # the roofline is an annotation: it never fails a verification
            self.problems.append(f"{type(exc).__name__}: {exc}")
            return None


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
