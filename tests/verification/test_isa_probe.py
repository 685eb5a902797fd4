"""What ``-march=native`` enables is said to a kernel's author only where it runs (#52): a CPU or a VM can report
an extension that faults when used (AMX's tiles on a VM that does not grant them). Each probed extension is built
into a tiny program and run once; on this machine's CPU, extensions it lacks but the compiler is told to enable
stand in for one the VM refuses: the compiler enables them, the program is killed, and the prompt and doctor
leave them out (main listed them as usable)."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest

CPU_FLAGS = set()
for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
    if line.startswith("flags"):
        CPU_FLAGS = set(line.split(":", 1)[1].split())
        break
# g++'s name -> /proc/cpuinfo's
LACKING = [f for f, cpu in (("avx512fp16", "avx512_fp16"), ("amx-tile", "amx_tile"), ("amx-bf16", "amx_bf16"))
           if cpu not in CPU_FLAGS]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not LACKING or platform.machine() != "x86_64",
                                reason="needs g++ on an x86-64 CPU lacking one of AMX or AVX-512 FP16")


def test_an_extension_the_compiler_enables_but_the_cpu_refuses_is_not_said_to_run():
    from verifier.machine.facts import compiler_target, usable_target

    flags = ("-march=native", *(f"-m{f}" for f in LACKING))
    enabled = compiler_target("g++", flags)["isa"]
    assert set(LACKING) <= set(enabled)                 # the compiler enables them, as -march=native does on a VM
    usable = usable_target("g++", flags)
    assert not set(LACKING) & set(usable["isa"])
    assert [r.split(":")[0] for r in usable["refused"]] == [f for f in enabled if f in LACKING]
    assert all("killed by SIGILL" in r or "does not build" in r or "did not grant" in r for r in usable["refused"])


def test_the_prompt_says_only_what_runs_and_names_what_does_not():
    from core.prompts import _compiler_line
    from verifier.machine.facts import usable_target

    target = usable_target("g++", ("-march=native", *(f"-m{f}" for f in LACKING)))
    line = _compiler_line({"compiler": "g++", "flags": "-O3 -march=native", "isa": target["isa"],
                           "isa_refused": target["refused"], "vector_bits": 512})
    enables, refused = line.split(" It also enables ")
    assert not any(f in enables for f in LACKING)
    assert all(f in refused for f in LACKING) and "do not run here" in refused and "do not use them" in refused


def test_an_extension_that_runs_is_kept():
    """The baseline of this machine (AVX2 everywhere the suite runs) is not probed away."""
    from verifier.machine.facts import usable_target

    native = usable_target("g++", ("-march=native",))
    assert "avx2" in native["isa"] or "avx2" not in CPU_FLAGS
    assert not [r for r in native["refused"] if r.split(":")[0] not in LACKING]
