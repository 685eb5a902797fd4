"""The first thing to run on an Ascend NPU workstation: does the Ascend backend work here, end to end?

Nothing in EvoKernel has run on an NPU yet. This script checks, in order, and prints a report to
paste into an issue:

1. ``doctor`` for the Ascend backend (CANN, cmake, torch / torch_npu / CANN pairing, the SoC);
2. the worked elementwise example (seed knowledge ``example_add.md``) built into ``libkernels.so``:
   ``ldd -r`` (every symbol resolved?) and a ``ctypes`` load in a fresh interpreter;
3. through the whole verifier: the elementwise (add) and reduction (row-wise softmax) examples, one
   correct and one wrong candidate each, and a kernel that reads far out of range, which must come
   back as a correctness failure with the NPU error's meaning (not a crash);
4. timing: the add kernel timed with NPU events, and with ``msprof op`` when it is installed;
5. the custom-op project form, on one NPUKernelBench golden answer (``--op``, level1/Math/Neg by default,
   read from ``--npukb``, never copied into the repository): the format and anti-hack gates, the build
   gate's custom-op flow (msopgen, build.sh, the package installed into the build's private vendor/, the
   binding linked against it), ``ldd -r``, then in a fresh process with ``ASCEND_CUSTOM_OPP_PATH`` on that
   vendor: the op called through the binding, compared with PyTorch and timed with NPU events. The
   binding is the survey's (``bench/ascend_corpus.py``): one entry over flat tensors of one dtype.

    .venv/bin/python bench/npu_check.py [--keep DIR] [--json PATH] [--skip-msprof] [--npukb DIR] [--op TASK]

Exit status: 0 when every outcome is as expected; 1 otherwise; 2, with one line, when the Ascend
backend cannot run here (no CANN, no NPU, torch_npu missing or not matching).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KNOWLEDGE = ROOT / "core/knowledge/ascend"
BLOCK = re.compile(r"```(\w+) file=(\S+)\n(.*?)```", re.S)


def example(name: str) -> dict[str, str]:
    """The candidate files of a worked example in the Ascend seed knowledge."""
    return {file: text for _, file, text in BLOCK.findall((KNOWLEDGE / name).read_text())}


def _variant(files: dict[str, str], old: str, new: str) -> dict[str, str]:
    assert old in files["kernel.cpp"], f"the seed example changed: {old!r} not found"
    return {**files, "kernel.cpp": files["kernel.cpp"].replace(old, new)}


ADD = example("example_add.md")
SOFTMAX = example("example_softmax.md")

# task -> kind -> (files, what it does, what must happen)
CANDIDATES: dict[str, dict[str, tuple[dict[str, str], str]]] = {
    "add": {
        "correct": (ADD, "the seed example: double-buffered tiles, DataCopyPad tail"),
        "wrong": (_variant(ADD, "AscendC::Add(zLocal, xLocal, yLocal, count);",
                           "AscendC::Sub(zLocal, xLocal, yLocal, count);"), "subtracts instead of adding"),
        "faulting": (_variant(ADD, "xGm.SetGlobalBuffer((__gm__ float *)x + start, length);",
                              "xGm.SetGlobalBuffer((__gm__ float *)x + start + (1ull << 34), length);"),
                     "reads 64 GiB past its input"),
    },
    "softmax": {
        "correct": (SOFTMAX, "the seed example: a tiled row reduction (max, sum of exp, output)"),
        "wrong": (_variant(SOFTMAX, "AscendC::Muls(yLocal, yLocal, inv, count);",
                           "AscendC::Muls(yLocal, yLocal, inv * 0.5f, count);"), "halves every output"),
    },
}


def expected(kind: str, outcome) -> bool:
    if kind == "correct":
        return outcome.feasible
    if kind == "wrong":
        return outcome.failed_gate == "correctness"
    return outcome.failed_gate == "correctness" and "NPU error" in outcome.message


class Report:
    """Lines printed as they come and kept for the paste-able report."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)


def check_library(backend, work: Path, say: Report) -> tuple[Path | None, list[dict], bool]:
    """Build the add example; ``ldd -r`` it and load it with ctypes in a fresh interpreter."""
    from verifier.toolchain.build import build_candidate

    result = build_candidate(backend, ADD, work / "cache")
    if not result.ok:
        say(f"BAD build of example_add: {result.log.strip().splitlines()[-1] if result.log.strip() else '?'}")
        say("```\n" + result.log[-3000:] + "\n```")
        return None, [], False
    say(f"ok  build of example_add: {result.library} ({result.seconds:.1f} s)")
    env = {**os.environ, **backend.worker_env()}
    ok = True
    if shutil.which("ldd"):
        ldd = subprocess.run(["ldd", "-r", str(result.library)], capture_output=True, text=True, env=env, timeout=60)
        text = ldd.stdout + ldd.stderr
        undefined = [ln.strip() for ln in text.splitlines() if "undefined symbol" in ln or "not found" in ln]
        ok &= not undefined
        say(f"{'ok ' if not undefined else 'BAD'} ldd -r: {len(undefined)} unresolved")
        for line in text.strip().splitlines():
            say(f"      {line.strip()}")
    load = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('loaded')",
                           str(result.library)], capture_output=True, text=True, env=env, timeout=120)
    loaded = load.returncode == 0 and "loaded" in load.stdout
    ok &= loaded
    say(f"{'ok ' if loaded else 'BAD'} ctypes load in a fresh interpreter"
        + ("" if loaded else f": {(load.stderr.strip().splitlines() or ['?'])[-1]}"))
    return result.library, [s.to_dict() for s in result.signatures], ok


TIMING_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import torch, torch_npu
from verifier.backends.ascend import AscendRuntime
from verifier.runtime import KernelLibrary
device = AscendRuntime()
device.prepare()
lib = KernelLibrary({library!r}, json.loads({signatures!r}), device)
n = 128 * 65536
x, y = torch.randn(n, device="npu"), torch.randn(n, device="npu")
z = torch.empty_like(x)
for _ in range(5):
    lib.add(40, x, y, z, n)
torch.npu.synchronize()
assert torch.allclose(z, x + y)
times = []
for _ in range({calls}):
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    lib.add(40, x, y, z, n)
    end.record()
    end.synchronize()
    times.append(start.elapsed_time(end) * 1000.0)
times.sort()
print("EVENTS-US", times[len(times) // 2])
"""


def check_timing(backend, library: Path, signatures: list[dict], work: Path, say: Report, msprof: bool) -> None:
    """The add kernel timed with NPU events in a plain process, and by ``msprof op`` when present."""
    script = work / "time_add.py"
    script.write_text(TIMING_SCRIPT.format(root=str(ROOT), library=str(library), signatures=json.dumps(signatures),
                                           calls=50))
    env = {**os.environ, **backend.worker_env()}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    m = re.search(r"EVENTS-US ([\d.]+)", ran.stdout)
    if not m:
        say(f"BAD NPU-event timing of add: {(ran.stderr.strip().splitlines() or ['no output'])[-1]}")
        return
    events_us = float(m.group(1))
    say(f"ok  NPU events: add (8M floats) median {events_us:.1f} us over 50 calls")
    exe = shutil.which("msprof", path=env.get("PATH"))
    if not msprof or exe is None:
        say("--  msprof op: " + ("skipped" if not msprof else "not installed (not on PATH)"))
        return
    out = work / "msprof"
    out.mkdir(mode=0o700, exist_ok=True)
    prof = subprocess.run([exe, "op", "--warm-up=5", "--launch-count=10", "--kernel-name=add", f"--output={out}",
                           sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    durations = []
    for table in sorted(out.glob("OPPROF_*/OpBasicInfo.csv")):
        with table.open() as handle:
            for row in csv.DictReader(handle):
                key = next((k for k in row if "Task Duration" in k), None)
                value = (row.get(key) or "").strip() if key else ""
                if re.fullmatch(r"[\d.]+", value):
                    durations.append(float(value))
    if not durations:
        say(f"BAD msprof op gave no Task Duration (exit {prof.returncode}): "
            f"{(prof.stdout + prof.stderr).strip().splitlines()[-1:] or ['no output']}")
        return
    mean = sum(durations) / len(durations)
    say(f"ok  msprof op: add Task Duration mean {mean:.1f} us over {len(durations)} launches; "
        f"NPU events / msprof = {events_us / mean:.2f}")


# NPUKernelBench elementwise answers npu_check can call through the survey's binding:
# task -> (inputs, dtype, the PyTorch expression of the outputs)
CUSTOM_OPS = {
    "level1/Math/Neg": (1, "float", "-x[0]"),
    "level1/Math/AddCustom": (2, "float16", "x[0] + x[1]"),
}

CUSTOM_OP_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import torch, torch_npu
from verifier.backends.ascend import AscendRuntime
from verifier.runtime import KernelLibrary
device = AscendRuntime()
device.prepare()
lib = KernelLibrary({library!r}, json.loads({signatures!r}), device)
run = getattr(lib, {entry!r})
n = 64 * 65536
x = [torch.randn(n, device="npu").to(getattr(torch, {dtype!r})) for _ in range({inputs})]
y = torch.empty_like(x[0])
for _ in range(5):
    run(*x, y, n)
torch.npu.synchronize()
want = {expression}
err = (y.float() - want.float()).abs().max().item()
print("MAX-ERROR", err)
assert torch.allclose(y.float(), want.float(), atol=1e-2, rtol=1e-2), err
times = []
for _ in range(50):
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    run(*x, y, n)
    end.record()
    end.synchronize()
    times.append(start.elapsed_time(end) * 1000.0)
times.sort()
print("EVENTS-US", times[len(times) // 2])
"""


def check_custom_op(backend, npukb: Path, task: str, work: Path, say: Report) -> bool:
    """One golden answer of the custom-op form: gates, the custom-op build, ldd, a call and NPU-event timing."""
    answer = npukb / "tasks" / task / "answer/0"
    if task not in CUSTOM_OPS:
        say(f"--  custom-op form: skipped: --op must be one of {', '.join(CUSTOM_OPS)}")
        return True
    if not answer.is_dir():
        say(f"--  custom-op form: skipped: no NPUKernelBench answer at {answer} (git clone "
            "https://github.com/weich97/NPUKernelBench and pass --npukb)")
        return True
    sys.path.insert(0, str(ROOT / "bench"))
    from ascend_corpus import binding

    from verifier.backends.ascend_project import read_project, snake_case
    from verifier.gates.antihack import check_candidate
    from verifier.gates.format import check_format
    from verifier.toolchain.build import build_candidate

    inputs, dtype, expression = CUSTOM_OPS[task]
    files = {str(p.relative_to(answer)): p.read_text(errors="replace") for p in sorted(answer.rglob("*")) if p.is_file()}
    spec = read_project(files, binding=False).spec
    entry = f"run_{snake_case(spec.op)}"
    files["binding.cpp"] = binding(spec.op, [io.name for io in spec.inputs], [io.name for io in spec.outputs], dtype)
    files["model.py"] = ("import torch.nn as nn\nfrom verifier.runtime import load\n\nlib = load()\n\n\n"
                         "class ModelNew(nn.Module):\n    pass\n")
    problem = (check_format(files, backend.source_suffixes, backend.header_suffixes, backend.forms)
               or check_candidate(files, backend.source_suffixes, backend.header_suffixes, backend))
    if problem:
        say(f"BAD custom-op {task}: refused by the static gates: {problem}")
        return False
    say(f"ok  custom-op {task}: format and anti-hack gates (op {spec.op}, binding entry {entry})")
    result = build_candidate(backend, files, work / "cache", timeout=1800)
    if not result.ok:
        say(f"BAD custom-op build ({result.seconds:.0f} s): {result.log.strip().splitlines()[-1:] or ['?']}")
        say("```\n" + result.log[-3000:] + "\n```")
        say("send back: this report, and the build folder's _evokernel_build.sh output (rerun it by hand in a copy "
            "of the candidate with the pieces: bash -x _evokernel_build.sh)")
        return False
    say(f"ok  custom-op build (msopgen, build.sh, private install, binding): {result.library} ({result.seconds:.0f} s)")
    env = {**os.environ, **backend.worker_env(), **backend.call_env(result.library)}
    say(f"      ASCEND_CUSTOM_OPP_PATH={env.get('ASCEND_CUSTOM_OPP_PATH', '')}")
    ok = True
    if shutil.which("ldd"):
        ldd = subprocess.run(["ldd", "-r", str(result.library)], capture_output=True, text=True, env=env, timeout=60)
        undefined = [ln.strip() for ln in (ldd.stdout + ldd.stderr).splitlines()
                     if "undefined symbol" in ln or "not found" in ln]
        ok &= not undefined
        say(f"{'ok ' if not undefined else 'BAD'} ldd -r of the binding: {len(undefined)} unresolved")
        for line in undefined[:10]:
            say(f"      {line}")
    script = work / "call_custom_op.py"
    script.write_text(CUSTOM_OP_SCRIPT.format(root=str(ROOT), library=str(result.library), entry=entry,
                                              signatures=json.dumps([s.to_dict() for s in result.signatures]),
                                              dtype=dtype, inputs=inputs, expression=expression))
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    err = re.search(r"MAX-ERROR (\S+)", ran.stdout)
    us = re.search(r"EVENTS-US ([\d.]+)", ran.stdout)
    if ran.returncode != 0 or not us:
        tail = (ran.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"BAD custom-op call: {tail}" + (f" (max error {err.group(1)})" if err else ""))
        say(f"      {backend.explain(ran.stderr) or 'send back: this report and the lines below'}")
        say("```\n" + ran.stderr[-2000:] + "\n```")
        return False
    say(f"ok  custom-op call: max error {err.group(1) if err else '?'}; NPU events median {float(us.group(1)):.1f} us "
        f"over 50 calls (4M {dtype})")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default=None, help="write candidates, builds and caches here (default: a temp folder)")
    parser.add_argument("--json", default=None, help="also write the outcomes to this JSON file")
    parser.add_argument("--skip-msprof", action="store_true", help="do not run msprof op even when it is installed")
    parser.add_argument("--npukb", default=os.environ.get("EVOKERNEL_NPUKB", "/tmp/npukb"),
                        help="an NPUKernelBench checkout, for the custom-op form's golden answer")
    parser.add_argument("--op", default="level1/Math/Neg", help=f"the golden answer: one of {', '.join(CUSTOM_OPS)}")
    args = parser.parse_args(argv)

    from core.doctor import diagnose

    doctor = diagnose(["ascend"])
    ascend = doctor["backends"]["ascend"]
    if not ascend["available"]:
        print(f"npu_check: the Ascend backend cannot run here: {ascend['reason']}")
        return 2

    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.backends import get_backend
    from verifier.harness.verify import Verifier

    say = Report()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="evokernel-npu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    details = ascend["details"]
    say("## EvoKernel npu_check")
    say(f"host {platform.machine()} {platform.platform()}, python {doctor['python']}, evokernel {doctor['evokernel']}")
    say(f"device {ascend['device']['name']} (SoC from {details.get('soc_source')}); {ascend['toolchain']['version']} "
        f"at {details.get('cann_root')} ({details.get('flow')} flow, module {details.get('cmake_module')})")
    say(f"versions: {details.get('versions')} (pairing: {details.get('versions_wanted')})")
    say(f"sandbox: bubblewrap {doctor['sandbox']['bubblewrap']['available']}, "
        f"seccomp {doctor['sandbox']['seccomp']['available']}")
    backend = get_backend("ascend")
    started = time.perf_counter()
    library, signatures, ok = check_library(backend, work, say)
    rows = []
    suite = load_suite("builtin")
    with Verifier(backend, VerifyConfig(), cache_dir=work / "cache") as verifier:
        say(f"verifier sandbox: {verifier.isolation}")
        for task_id, kinds in CANDIDATES.items():
            spec = suite.get(task_id).spec()
            for kind, (files, what) in kinds.items():
                folder = work / f"{task_id}-{kind}"
                folder.mkdir(exist_ok=True)
                for name, text in files.items():
                    (folder / name).write_text(text)
                outcome = verifier.verify(spec, folder)
                good = expected(kind, outcome)
                ok &= good
                verdict = "feasible" if outcome.feasible else f"failed at {outcome.failed_gate}"
                timing = (f"{outcome.latency_ms:.3f} ms vs torch {outcome.reference_ms:.3f} ms, "
                          f"speedup {outcome.speedup:.2f}x" if outcome.speedup is not None else "")
                say(f"{'ok ' if good else 'BAD'} {task_id:8} {kind:9} {verdict:24} {timing}")
                say(f"      {what}: {' '.join(outcome.message.split())[:400]}")
                for flag in outcome.flags:
                    say(f"      flag: {flag}")
                rows.append({"task": task_id, "candidate": kind, "what": what, "expected": good,
                             "feasible": outcome.feasible, "failed_gate": outcome.failed_gate,
                             "latency_ms": outcome.latency_ms, "reference_ms": outcome.reference_ms,
                             "speedup": outcome.speedup, "message": outcome.message, "flags": outcome.flags})
    if library is not None:
        check_timing(backend, library, signatures, work, say, msprof=not args.skip_msprof)
    ok &= check_custom_op(backend, Path(args.npukb), args.op, work, say)
    say(f"{'all as expected' if ok else 'SOME OUTCOMES NOT AS EXPECTED'} in {time.perf_counter() - started:.1f} s")
    print("\nPaste this into an issue:\n\n````\n" + "\n".join(say.lines) + "\n````")
    if args.json:
        Path(args.json).write_text(json.dumps({"doctor": doctor, "rows": rows, "report": say.lines}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
