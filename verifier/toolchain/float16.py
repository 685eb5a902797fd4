"""Half-precision floats on the CPU backend: whether ``_Float16`` code builds and runs with the backend's flags
here, and the flags that make it.

docs/kernels.md recommends ``_Float16*`` for a float16 tensor. GCC 12 with ``-march=native`` on a CPU with
AVX512-FP16 (Sapphire Rapids and later) vectorises a ``_Float16`` loop with a masked ``vmovsh`` store
(``vmovsh %xmm1, (mem){%k1}{z}``) that binutils 2.40's assembler rejects ("unsupported masking for `vmovsh'"):
every kernel with a ``_Float16`` loop failed to build while ``doctor`` said the CPU backend was ready. A probe
(:func:`float16_support`) builds and runs a small ``_Float16`` loop with a vector tail: with the flags as they
are, else with each fix in ``FIXES`` added, and keeps the first that builds and computes the right answer. The
CPU backend adds those flags to every build (``CpuBackend.build_flags``), and ``doctor`` says what it found.
Reproduced on this project's machine (AMD EPYC, no AVX512-FP16) by adding ``-mavx512fp16`` to the flags: the
build fails with exactly that assembler message, and ``-mno-avx512fp16`` after it builds and runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

FIXES: tuple[tuple[str, ...], ...] = (("-mno-avx512fp16",),)
"""What may be added to the flags, in order, when ``_Float16`` code does not build or run with them as they are:
without AVX512-FP16 the compiler converts through float (F16C), which binutils assembles."""

PROBE = r'''
#include <cstdint>
#include <cstdio>
extern "C" __attribute__((noinline)) void relu_f16(const _Float16* x, _Float16* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > (_Float16)0 ? x[i] : (_Float16)0;
}
int main(int argc, char**) {
    const int64_t n = 36 + argc;   // not a constant the compiler folds: the loop keeps a vector tail
    _Float16 x[64], out[64];
    for (int64_t i = 0; i < n; ++i) x[i] = (_Float16)(float)(i % 7 - 3);
    relu_f16(x, out, n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)(float)out[i];
    std::printf("%g\n", sum);
    return 0;
}
'''
EXPECTED = str(sum(max(0, i % 7 - 3) for i in range(37)))   # what the probe prints when _Float16 is right


@dataclass(frozen=True)
class Float16Support:
    """What the probe found: ``ok`` (``_Float16`` builds and runs with the flags plus ``extra``), ``extra`` (the
    flags added: none when the flags as they are work), ``said`` (in words, for ``doctor``)."""

    ok: bool
    extra: tuple[str, ...] = ()
    said: str = ""


def float16_support(compiler: str, flags: Sequence[str], *, cache: Path | None = None,
                    timeout: float = 60.0) -> Float16Support:
    """Whether ``_Float16`` code builds and runs with ``compiler`` and ``flags`` here, and what to add so it does
    (see the module's docstring). Kept in ``cache`` (a JSON file: per compiler, its version, the flags and this
    CPU) and in this process; never raises."""
    return _cached(compiler, tuple(flags), str(cache) if cache else "", timeout)


@functools.lru_cache(maxsize=8)
def _cached(compiler: str, flags: tuple[str, ...], cache: str, timeout: float) -> Float16Support:
    from verifier.machine.facts import cpu_model

    key = hashlib.sha256(json.dumps([compiler, _version(compiler), flags, cpu_model()]).encode()).hexdigest()[:24]
    store = Path(cache) if cache else None
    if store is not None:
        try:
            found = json.loads(store.read_text()).get(key)
            if isinstance(found, dict):
                return Float16Support(bool(found["ok"]), tuple(found.get("extra") or ()), str(found.get("said", "")))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    result = _probe(compiler, flags, timeout)
    if store is not None:
        try:
            data = json.loads(store.read_text()) if store.exists() else {}
            data = data if isinstance(data, dict) else {}
            data[key] = asdict(result)
            store.parent.mkdir(parents=True, exist_ok=True)
            tmp = store.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, store)
        except OSError:
            pass
    return result


def _version(compiler: str) -> str:
    from verifier.processes import run_process

    ran = run_process([compiler, "--version"], timeout=10, background=False, stderr=False)
    return ran.output.splitlines()[0] if ran.started and not ran.timed_out and ran.output else ""


def _probe(compiler: str, flags: tuple[str, ...], timeout: float) -> Float16Support:
    """Build and run the probe with ``flags``, then with each fix added; the first that prints ``EXPECTED``."""
    from verifier.processes import run_process

    exe_flags = [f for f in flags if f not in ("-shared", "-fPIC") and not f.startswith("-fdiagnostics")]
    first_failure = ""
    with tempfile.TemporaryDirectory(prefix="evokernel-f16-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(PROBE)
        for extra in ((), *FIXES):
            exe = Path(tmp) / f"probe{len(extra)}"
            built = run_process([compiler, *exe_flags, *extra, "-o", str(exe), str(src)], timeout=timeout,
                                background=True)
            if not built.started or built.timed_out or built.returncode != 0:
                why = _first_error(built.output) or ("the compiler did not answer" if built.timed_out else
                                                     f"exit {built.returncode}")
                first_failure = first_failure or f"fails to build: {why}"
                continue
            ran = run_process([str(exe)], timeout=timeout, background=True)
            if not ran.started or ran.timed_out or ran.returncode != 0 or ran.output.strip() != EXPECTED:
                first_failure = first_failure or (f"builds but computes wrong ({ran.output.strip()[:40]!r} where "
                                                  f"{EXPECTED} was expected)" if ran.returncode == 0 else
                                                  f"builds but its program fails (exit {ran.returncode})")
                continue
            if not extra:
                return Float16Support(True, (), f"_Float16 builds and runs with {' '.join(exe_flags)}")
            return Float16Support(True, extra, f"_Float16 code {first_failure} with {' '.join(exe_flags)}; every "
                                               f"build adds {' '.join(extra)} (found by a probe that builds and runs "
                                               "a _Float16 loop), and it builds and runs")
    return Float16Support(False, (), f"_Float16 code {first_failure}, with or without {' '.join(FIXES[0])}: give "
                                     "float16 tensors to uint16_t* launchers and convert (docs/kernels.md)")


def _first_error(output: str) -> str:
    """The compiler's or assembler's first error line, without its file prefix."""
    for line in output.splitlines():
        if "Error:" in line or "error:" in line:
            return line.split("Error:", 1)[-1].split("error:", 1)[-1].strip()[:160]
    return ""
