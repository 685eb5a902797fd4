"""Which instruction-set extensions actually run here, by running them once.

A CPU (or a virtual machine's view of one) can report an extension that the compiler then enables with
``-march=native`` but that faults when used: a VM that shows AMX without allowing its tile state died in
``ldtilecfg`` with a general protection fault (llama.cpp's AMX buffers did, and a kernel using AMX would have).
For the extensions a kernel could use that way (``PROBES``: AMX's tiles, BF16 and INT8 products, AVX-512 FP16),
a tiny program is built with the extension enabled and run in a process of its own; what does not build or does
not run is left out of what the prompts and ``doctor`` say the machine offers (``verifier.machine.facts``). This
module is the one place that decides whether a feature runs; each answer is kept for the process's life.
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

_AMX_HEAD = r"""
#include <immintrin.h>
#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>
// Linux hands a process AMX's tile state only once asked (ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18)
static int tiles() {
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 0;
    alignas(64) unsigned char config[64];
    std::memset(config, 0, sizeof config);
    config[0] = 1;                                            // palette 1
    for (int t = 0; t < 3; ++t) { config[16 + 2 * t] = 4; config[48 + t] = 1; }   // 3 tiles of 1 row x 4 bytes
    _tile_loadconfig(config);
    _tile_zero(0); _tile_zero(1); _tile_zero(2);
    return 1;
}
"""

PROBES: dict[str, tuple[str, str]] = {
    # feature (as g++ names it) -> (its flag, the program: exit 0 when the feature ran and gave the right result)
    "amx-tile": ("-mamx-tile", _AMX_HEAD + "int main() { if (!tiles()) return 2; _tile_release(); return 0; }\n"),
    "amx-bf16": ("-mamx-bf16", _AMX_HEAD + "int main() { if (!tiles()) return 2; _tile_dpbf16ps(0, 1, 2); "
                                           "_tile_release(); return 0; }\n"),
    "amx-int8": ("-mamx-int8", _AMX_HEAD + "int main() { if (!tiles()) return 2; _tile_dpbssd(0, 1, 2); "
                                           "_tile_release(); return 0; }\n"),
    "avx512fp16": ("-mavx512fp16", r"""
#include <immintrin.h>
int main() {
    volatile float one = 1.0f;
    __m512h x = _mm512_set1_ph((_Float16)one);
    _Float16 out[32];
    _mm512_storeu_ph(out, _mm512_add_ph(x, x));
    return (float)out[31] == 2.0f ? 0 : 3;
}
"""),
}
_AMX_NEEDS = {"amx-bf16": "amx-tile", "amx-int8": "amx-tile"}   # the products need the tiles' flag too


@dataclass(frozen=True)
class Probe:
    """Whether ``feature`` ran here, and if not, why, in words."""

    feature: str
    runs: bool
    why: str = ""


def probed(features: list[str] | tuple[str, ...]) -> list[str]:
    """The features among ``features`` that have a probe (the others are taken as the compiler says)."""
    return [f for f in features if f in PROBES]


@functools.lru_cache(maxsize=32)
def probe(compiler: str, feature: str) -> Probe:
    """Build ``feature``'s program with ``compiler`` and run it once (each in a process of its own, a few seconds
    at most). A program that does not build, is killed by a signal (SIGILL, a protection fault) or exits with an
    error means the feature does not run here."""
    from verifier.processes import run_process

    if feature not in PROBES:
        return Probe(feature, True, "no probe: taken as the compiler reports it")
    flag, source = PROBES[feature]
    flags = [flag] + ([f"-m{_AMX_NEEDS[feature]}"] if feature in _AMX_NEEDS else [])
    with tempfile.TemporaryDirectory(prefix="evokernel-isa-") as tmp:
        src, exe = Path(tmp) / "probe.cpp", Path(tmp) / "probe"
        src.write_text(source)
        built = run_process([compiler, "-O1", *flags, "-o", str(exe), str(src)], timeout=60)
        if not built.started or built.timed_out or built.returncode != 0 or not exe.exists():
            said = " ".join((built.output or "").split())[:160]
            return Probe(feature, False, f"a program using it does not build here ({said or 'no output'})")
        ran = run_process([str(exe)], timeout=10)
    if ran.timed_out:
        return Probe(feature, False, "a program using it did not finish in 10 s")
    code = ran.returncode
    if code is not None and code < 0:
        import signal

        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        return Probe(feature, False, f"a program using it was killed by {name} (the CPU or the VM refuses it)")
    if code == 2 and feature.startswith("amx"):
        return Probe(feature, False, "the kernel did not grant the AMX tile state (arch_prctl)")
    if code != 0:
        return Probe(feature, False, f"a program using it failed (exit {code})")
    return Probe(feature, True)


def runnable(compiler: str, features: list[str] | tuple[str, ...]) -> tuple[list[str], list[Probe]]:
    """``features`` (as the compiler enables them) split into those that run here, in order, and the probes of
    those that do not. Probed only where a probe exists; ``EVOKERNEL_NO_ISA_PROBE=1`` skips the probes."""
    if os.environ.get("EVOKERNEL_NO_ISA_PROBE") == "1":
        return list(features), []
    failed = [p for p in (probe(compiler, f) for f in probed(features)) if not p.runs]
    out = {p.feature for p in failed}
    return [f for f in features if f not in out], failed
