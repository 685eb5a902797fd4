"""The first thing to run on an Ascend NPU workstation: does the Ascend backend work here, end to end, and
does the sandbox let the CANN runtime work? When something fails, which layer failed?

Nothing in EvoKernel has run on an NPU yet. This script writes one report file to send back (``--report``, default
``evokernel-npu-check.json`` in the current folder) in every case, besides printing it: when doctor finds no NPU or
no CANN too (it then says so and lists the ladder it would have climbed), and when a check crashes. It checks, in
order:

1. ``doctor`` for the Ascend backend (CANN, cmake, the exact torch / torch_npu / CANN pairing, the SoC, CANN's
   binary operator package, the toolkit Python and what it lacks, one device op in a candidate's confined job);
   the report also holds this process's euid and groups, each device node's owner, group and mode, and the versions;
2. the worked elementwise example (seed knowledge ``example_add.md``) built into ``libkernels.so``:
   ``ldd -r`` (every symbol resolved?) and a ``ctypes`` load in a fresh interpreter;
3. **the ladder** (``ladder``, one process per rung, ``bench/npu_ladder.py``): a plain process first (each device
   node opened, ``set_device`` and ``torch.ones(1, device="npu") + 1``, the example kernel), then the same checks
   with each layer of a candidate's sandbox added in turn: the job's rlimits, a user and PID namespace of its own,
   every capability dropped, Landlock, bubblewrap, the seccomp filter. The first rung that fails names the layer
   that broke the device, with that rung's CANN log tail;
4. through the whole verifier, each check TWICE, with the job's seccomp filter and without it
   (``[verifier] seccomp``): the elementwise (add) and reduction (row-wise softmax) examples, one correct and one
   wrong candidate each, and a kernel that reads far out of range, which must come back as a correctness failure
   with the NPU error's meaning (not a crash);
5. timing: the add kernel timed with NPU events, and with ``msprof op`` when it is installed;
6. the custom-op project form, on one NPUKernelBench golden answer (``--op``, level1/Math/AddCustom by default:
   an op type no built-in CANN op has; read from ``--npukb``, never copied into the repository), at a shape its
   tiling takes whole (AddCustom splits over BLOCK_DIM = 48 cores in 16 tiles with no tail: its own test cases
   are 48 x 128 x 512): the gates, the custom-op build, ``ldd -r``, a call in a fresh process compared with a CPU
   reference, NPU-event timing; then the same candidate through the whole verifier, with and without seccomp.

    .venv/bin/python bench/npu_check.py [--report FILE] [--keep DIR] [--skip-msprof] [--npukb DIR] [--op TASK]
    .venv/bin/python bench/npu_check.py --dry-run     # what it would run and what the report holds; runs nothing

Exit status: 0 when every outcome is as expected; 1 otherwise; 2 when the Ascend backend cannot run here (no CANN,
no NPU, torch_npu missing or not matching): the report says why, and what would have run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
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
    from verifier.build import build_candidate

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


def check_timing(backend, library: Path, signatures: list[dict], work: Path, say: Report, msprof: bool) -> dict:
    """The add kernel timed with NPU events in a plain process, and by ``msprof op`` when present; what was
    measured, for the report."""
    script = work / "time_add.py"
    script.write_text(TIMING_SCRIPT.format(root=str(ROOT), library=str(library), signatures=json.dumps(signatures),
                                           calls=50))
    env = {**os.environ, **backend.worker_env()}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    m = re.search(r"EVENTS-US ([\d.]+)", ran.stdout)
    if not m:
        say(f"BAD NPU-event timing of add: {(ran.stderr.strip().splitlines() or ['no output'])[-1]}")
        return {"error": ran.stderr[-2000:]}
    events_us = float(m.group(1))
    say(f"ok  NPU events: add (8M floats) median {events_us:.1f} us over 50 calls")
    exe = shutil.which("msprof", path=env.get("PATH"))
    if not msprof or exe is None:
        say("--  msprof op: " + ("skipped" if not msprof else "not installed (not on PATH)"))
        return {"events_us": events_us}
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
        return {"events_us": events_us, "msprof_error": (prof.stdout + prof.stderr)[-2000:]}
    mean = sum(durations) / len(durations)
    say(f"ok  msprof op: add Task Duration mean {mean:.1f} us over {len(durations)} launches; "
        f"NPU events / msprof = {events_us / mean:.2f}")
    return {"events_us": events_us, "msprof_us": mean, "events_over_msprof": events_us / mean}


# NPUKernelBench elementwise answers npu_check can call through the survey's binding:
# task -> (op type, inputs, dtype, the PyTorch expression of the outputs, computed on the CPU, elements). The
# elements are a shape the answer's tiling takes whole: AddCustom's splits the length over BLOCK_DIM = 48 cores and
# 16 tiles of each with no tail, so 64 x 65536 (not a multiple of 48) left 256 outputs unwritten on a healthy
# machine; 48 x 128 x 512 is its own first test case (validation/test_cases.csv).
CUSTOM_OPS = {
    "level1/Math/AddCustom": ("AddCustom", 2, "float16", "x[0] + x[1]", 48 * 128 * 512),
    "level1/Math/Neg": ("Neg", 1, "float", "-x[0]", 512 * 3),
}
DEFAULT_OP = "level1/Math/AddCustom"

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
n = {n}
cpu = [torch.randn(n).to(getattr(torch, {dtype!r})) for _ in range({inputs})]
x = [t.to("npu") for t in cpu]
y = torch.empty_like(x[0])
for _ in range(5):
    run(*x, y, n)
torch.npu.synchronize()
x = cpu       # the reference on the CPU: no NPU op runs in a process whose custom OPP path is set
want = {expression}
err = (y.cpu().float() - want.float()).abs().max().item()
print("MAX-ERROR", err)
assert torch.allclose(y.cpu().float(), want.float(), atol=1e-2, rtol=1e-2), err
x = [t.to("npu") for t in cpu]
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

CUSTOM_OP_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, *x):
        return {expression}


N = {n}


def get_inputs():
    return [torch.randn(N).to(torch.{dtype}) for _ in range({inputs})]


def get_init_inputs():
    return []
"""

CUSTOM_OP_MODEL = """import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, *x):
        out = torch.empty_like(x[0])
        lib.{entry}(*x, out, x[0].numel())
        return out
"""


def builtin_op_file(op: str, env: dict[str, str]) -> str:
    """The built-in ops-info file of CANN's OPP that names op type ``op`` (a custom op of that name would shadow
    it for every caller in a process with the custom OPP path set), or "" when none does or none is readable."""
    opp = env.get("ASCEND_OPP_PATH") or os.environ.get("ASCEND_OPP_PATH", "")
    for info in sorted(Path(opp).glob("built-in/op_impl/ai_core/tbe/config/*/aic-*-ops-info.json")) if opp else []:
        try:
            if op in json.loads(info.read_text(errors="replace")):
                return str(info)
        except (OSError, ValueError):
            continue
    return ""


def custom_op_candidate(answer: Path, task: str) -> tuple[dict[str, str], str, str]:
    """(the answer as a candidate of the runtime contract: its files, the survey's binding, a model.py; the
    binding's entry; the op type)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from ascend_corpus import binding

    from verifier.backends.ascend_project import read_project, snake_case

    op, inputs, dtype, expression, _ = CUSTOM_OPS[task]
    files = {str(p.relative_to(answer)): p.read_text(errors="replace") for p in sorted(answer.rglob("*")) if p.is_file()}
    spec = read_project(files, binding=False).spec
    entry = f"run_{snake_case(spec.op)}"
    files["binding.cpp"] = binding(spec.op, [io.name for io in spec.inputs], [io.name for io in spec.outputs], dtype)
    files["model.py"] = CUSTOM_OP_MODEL.format(entry=entry)
    return files, entry, spec.op


def check_custom_op(backend, npukb: Path, task: str, work: Path, say: Report, record: dict) -> bool:
    """One golden answer of the custom-op form: gates, the custom-op build, ldd, a call in a plain process
    compared with a CPU reference, NPU-event timing."""
    answer = npukb / "tasks" / task / "answer/0"
    if task not in CUSTOM_OPS:
        say(f"--  custom-op form: skipped: --op must be one of {', '.join(CUSTOM_OPS)}")
        return True
    if not answer.is_dir():
        say(f"--  custom-op form: skipped: no NPUKernelBench answer at {answer} (git clone "
            "https://github.com/weich97/NPUKernelBench and pass --npukb)")
        return True
    from verifier.build import build_candidate
    from verifier.gates.antihack import check_candidate
    from verifier.gates.format import check_format

    _, inputs, dtype, expression, n = CUSTOM_OPS[task]
    files, entry, op = custom_op_candidate(answer, task)
    shadowed = builtin_op_file(op, backend.worker_env())
    if shadowed:
        say(f"BAD custom-op {task}: op type {op} is also a built-in CANN op ({shadowed}): the custom package would "
            "shadow it in the calling process; pick another --op")
        return False
    problem = (check_format(files, backend)
               or check_candidate(files, backend.source_suffixes, backend.header_suffixes, backend))
    if problem:
        say(f"BAD custom-op {task}: refused by the static gates: {problem}")
        return False
    say(f"ok  custom-op {task}: format and anti-hack gates (op {op}, binding entry {entry})")
    result = build_candidate(backend, files, work / "cache", timeout=1800)
    record["build_seconds"] = round(result.seconds, 1)
    if not result.ok:
        say(f"BAD custom-op build ({result.seconds:.0f} s): {result.log.strip().splitlines()[-1:] or ['?']}")
        say("```\n" + result.log[-3000:] + "\n```")
        record["build_log"] = result.log[-6000:]
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
                                              dtype=dtype, inputs=inputs, expression=expression, n=n))
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    err = re.search(r"MAX-ERROR (\S+)", ran.stdout)
    us = re.search(r"EVENTS-US ([\d.]+)", ran.stdout)
    if ran.returncode != 0 or not us:
        tail = (ran.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"BAD custom-op call: {tail}" + (f" (max error {err.group(1)})" if err else ""))
        say(f"      {backend.explain(ran.stderr) or 'send back: this report and the lines below'}")
        say("```\n" + ran.stderr[-2000:] + "\n```")
        record["call_error"] = ran.stderr[-4000:]
        return False
    record.update(max_error=float(err.group(1)) if err else None, events_us=float(us.group(1)))
    say(f"ok  custom-op call: max error {err.group(1) if err else '?'} against the CPU; NPU events median "
        f"{float(us.group(1)):.1f} us over 50 calls ({n} {dtype})")
    return ok


# -------------------------------------------------------------------------------------- the seccomp pairs

SECCOMP_RUNS = (True, False)      # each verifier check with the job's seccomp filter, then without it


def sandbox_finding(kind: str, outcomes: dict[bool, object]) -> str:
    """What a check's pair of runs says: "as expected" both ways; a sandbox failure (not as expected with the
    filter, as expected without it); or the same result both ways (the kernel, the device or the runtime)."""
    good = {on: expected(kind, out) for on, out in outcomes.items()}
    if all(good.values()):
        return "as expected with and without the seccomp filter"
    if not good[True] and good[False]:
        return ("SANDBOX FAILURE: not as expected under the seccomp filter, as expected without it: the CANN runtime "
                "needs something the filter refuses (send this report)")
    if good[True] and not good[False]:
        return "as expected only under the filter (odd: send this report)"
    return "not as expected with or without the filter: the kernel, the device or the runtime, not the sandbox"


# -------------------------------------------------------------------------------------------------- the ladder

sys.path.insert(0, str(ROOT / "bench"))
import npu_ladder  # noqa: E402  (the rung's process: bench/npu_ladder.py)

LADDER_CHECKS = npu_ladder.CHECKS


def ladder_rungs(layers: tuple[str, ...] = npu_ladder.LAYERS) -> list[tuple[str, ...]]:
    """The layers of each rung: none (a plain process), then one more each rung, in the order they are added."""
    return [tuple(layers[:k]) for k in range(len(layers) + 1)]


def rung_name(layers: tuple[str, ...]) -> str:
    return "a plain process" if not layers else f"+ {layers[-1]}"


def run_rung(k: int, layers: tuple[str, ...], work: Path, *, runtime: str, devices: list[str], env: dict[str, str],
             needs: dict, library: str = "", signatures: list[dict] | None = None, give_group: bool = True,
             timeout: float = 300.0) -> dict:
    """One rung's process (``bench/npu_ladder.py``), under bubblewrap from the rung that adds it, started with the
    device nodes' group where the sandbox gives it (``verifier.sandbox.isolation.device_groups``); its result, with
    whether all its checks passed (``ok``), its CANN log tail and its stderr's last line."""
    from verifier.backends.ascend import cann_log_tail
    from verifier.sandbox.isolation import bwrap_argv, bwrap_status, can_join_groups, device_groups, sandbox_view

    job = work / f"rung-{k}"
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    if library:   # inside the job's folder: what Landlock and bubblewrap let the rung read and load
        shutil.copy2(library, job / Path(library).name)
        library = str(job / Path(library).name)
    from verifier.sandbox.client import JOB_TASKS

    config = {"rung": k, "layers": list(layers), "job": str(job), "runtime": runtime, "devices": devices,
              "needs": needs, "open_files": needs.get("open_files", 1024), "tasks": JOB_TASKS, "library": library,
              "signatures": signatures or [], "readable": [*sandbox_view(env, devices=devices), "/proc"]}
    argv = [sys.executable, str(ROOT / "bench/npu_ladder.py"), json.dumps(config)]
    if "bubblewrap" in layers:
        available, why = bwrap_status()
        if not available:
            return {"rung": k, "layers": list(layers), "ok": None, "skipped": why, "checks": []}
        argv = bwrap_argv([str(job)], [], devices, str(job), env=env, readable=[str(ROOT / "bench")]) + argv
    extra = device_groups(devices) if give_group and can_join_groups() else []
    groups = {"extra_groups": [*os.getgroups(), *extra]} if extra else {}
    with open(job / "stdout.txt", "wb") as out, open(job / "stderr.txt", "wb") as err:
        try:
            ran = subprocess.run(argv, env=env, cwd=job, stdout=out, stderr=err, timeout=timeout, **groups)
            code: int | str = ran.returncode
        except subprocess.TimeoutExpired:
            code = f"timed out after {timeout:.0f} s"
    try:
        result = json.loads((job / "result.json").read_text())
    except (OSError, ValueError):
        result = {"rung": k, "layers": list(layers), "checks": [], "error": f"no result (exit {code})"}
    lines = (job / "stderr.txt").read_text(errors="replace").strip().splitlines()
    result.update(exit=code, stderr=lines[-1][-500:] if lines else "", cann_log=cann_log_tail(job),
                  device_group=extra)
    result["ok"] = not result.get("error") and bool(result["checks"]) and all(
        c["ok"] is not False for c in result["checks"])
    return result


def ladder(work: Path, *, runtime: str, devices: list[str], env: dict[str, str], needs: dict, library: str = "",
           signatures: list[dict] | None = None, give_group: bool = True,
           layers: tuple[str, ...] = npu_ladder.LAYERS) -> dict:
    """Every rung, a plain process first, each layer of a candidate's sandbox added in turn; the first rung that
    fails names the layer (or, on the first rung, the device, the runtime or the kernel itself)."""
    rungs = []
    first: dict | None = None
    for k, on in enumerate(ladder_rungs(layers)):
        result = run_rung(k, on, work, runtime=runtime, devices=devices, env=env, needs=needs, library=library,
                          signatures=signatures, give_group=give_group)
        rungs.append(result)
        if first is None and result["ok"] is False:
            first = result
    if first is None:
        said = "every rung passed: no layer of the sandbox keeps the device from a candidate's job"
    elif not first["layers"]:
        said = ("the plain process fails, before any layer of the sandbox: the device, its driver, the runtime or the "
                "kernel, not the sandbox")
    else:
        said = (f"the first layer that fails: {first['layers'][-1]} (the checks pass up to the rung before it and fail "
                "once it is added)")
    return {"rungs": rungs, "first_failure": first["layers"][-1] if first and first["layers"] else
            ("plain process" if first else None), "said": said}


def say_ladder(result: dict, say: Report) -> None:
    for rung in result["rungs"]:
        mark = "ok " if rung["ok"] else ("-- " if rung["ok"] is None else "BAD")
        checks = "; ".join(f"{c['check']}: {'ok' if c['ok'] else ('--' if c['ok'] is None else 'FAILED')} "
                           f"({c['detail']})" for c in rung.get("checks", []))
        said = rung.get("skipped") or rung.get("error") or checks
        say(f"{mark} ladder rung {rung['rung']} {rung_name(tuple(rung['layers'])):28} {said}")
        if rung.get("cann_log"):
            say(f"      {rung['cann_log']}")
    say(f"{'ok ' if result['first_failure'] is None else 'BAD'} ladder: {result['said']}")


def ladder_plan() -> list[dict]:
    """What the ladder would run, rung by rung (the report of a machine where it cannot run)."""
    return [{"rung": k, "adds": rung_name(on), "layers": list(on), "checks": list(LADDER_CHECKS)}
            for k, on in enumerate(ladder_rungs())]


def device_nodes(devices: list[str]) -> list[dict]:
    """Each device node's owner, group and mode (what decides whether a job with no capability opens it)."""
    import grp
    import pwd

    out = []
    for dev in devices:
        try:
            st = os.stat(dev)
        except OSError as exc:
            out.append({"path": dev, "error": str(exc)})
            continue
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        out.append({"path": dev, "owner": owner, "group": group, "mode": f"{st.st_mode & 0o7777:04o}"})
    return out


# The report file: one JSON object a person can send back; each field and what it holds.
REPORT_FIELDS = {
    "evokernel": "EvoKernel's version",
    "host": "machine, OS, Python",
    "npu_found": "whether doctor found an NPU and CANN to run on (false: the report says why and what would run)",
    "summary": "one line: what went wrong first, or that everything was as expected",
    "euid": "this process's effective user id (root's jobs hold no capability: they open device nodes by group)",
    "groups": "this process's groups",
    "device_nodes": "each device node the sandbox binds: owner, group, mode",
    "versions": "torch, torch_npu and CANN as installed",
    "doctor": "evokernel doctor for the Ascend backend: CANN root, flow, SoC and where it came from, torch / "
              "torch_npu / CANN versions and their pairing, the operator package, the toolkit Python and what it "
              "lacks, one device op in a candidate's confined job, problems and warnings",
    "ladder": "the rungs (a plain process, then rlimits, user and PID namespace, capability drop, Landlock, "
              "bubblewrap, seccomp added in turn): each one's checks (device nodes opened, set_device and "
              "torch.ones(1) + 1, the example kernel), CANN log tail, and the first layer that fails; on a machine "
              "without an NPU, the rungs it would run",
    "sandbox": "the layers available (bubblewrap, seccomp, Landlock) and the Ascend runtime's declared needs "
               "(AscendBackend.runtime_needs: threads, signal timers, socket families, open files, files opened "
               "after set-up, device ioctls, with their sources)",
    "library": "the add example's build: library path, seconds, ldd -r unresolved symbols, ctypes load",
    "checks": "per verifier check (task, candidate, what it does): the outcome with the seccomp filter and without it "
              "(feasible, failed gate, message, latency, speedup, flags) and the pair's finding",
    "timing": "the add kernel by NPU events (median us) and by msprof op (Task Duration mean us), and their ratio",
    "custom_op": "the golden answer of the custom-op form: build seconds (or its log), ldd, the call's max error "
                 "against the CPU and its NPU-event median, and the verifier's pair of runs",
    "lines": "the printed report, line by line",
    "all_as_expected": "true when every outcome was as expected",
}


def dry_run(args: argparse.Namespace) -> int:
    """What a run on an NPU workstation does and what its report holds; runs nothing."""
    from verifier.backends.ascend import AscendBackend

    print("npu_check --dry-run: nothing is run here; on an NPU workstation a run does this:")
    print(f"\nthe ladder, one process per rung, each with the checks {'; '.join(LADDER_CHECKS)}:")
    for rung in ladder_plan():
        print(f"  rung {rung['rung']}: {rung['adds']}")
    print("  the first rung that fails names the layer (on rung 0: the device, runtime or kernel, not the sandbox)")
    print("\nchecks through the whole verifier, each run twice:")
    for task_id, kinds in CANDIDATES.items():
        for kind, (_, what) in kinds.items():
            runs = ", ".join(f"[{'with' if on else 'without'} seccomp]" for on in SECCOMP_RUNS)
            print(f"  {task_id:8} {kind:9} {runs}  {what}")
    op = CUSTOM_OPS.get(args.op, ("?",))[0]
    runs = ", ".join(f"[{'with' if on else 'without'} seccomp]" for on in SECCOMP_RUNS)
    print(f"  custom-op {args.op} (op {op}): build, ldd -r, a call in a plain process against a CPU reference, "
          f"then through the verifier {runs}")
    print("\na pair's finding: as expected both ways; SANDBOX FAILURE when only the run with the filter is not as "
          "expected; else the kernel, device or runtime")
    needs = AscendBackend.runtime_needs
    print(f"\nthe Ascend runtime's declared needs (seccomp filter and limits): threads {needs.threads}, signal timers "
          f"{needs.signal_timers}, socket families {[socket.AddressFamily(f).name for f in needs.socket_families]}, "
          f"open files {needs.open_files}, "
          f"files opened after set-up {needs.opens_files_after_setup}, device ioctls {needs.device_ioctls}")
    for source in needs.sources:
        print(f"  - {source}")
    print(f"\nthe report file ({args.report}), one JSON object with these fields:")
    for name, what in REPORT_FIELDS.items():
        print(f"  {name}: {what}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", default="evokernel-npu-check.json", help="the report file to send back")
    parser.add_argument("--keep", default=None, help="write candidates, builds and caches here (default: a temp folder)")
    parser.add_argument("--skip-msprof", action="store_true", help="do not run msprof op even when it is installed")
    parser.add_argument("--npukb", default=os.environ.get("EVOKERNEL_NPUKB", "/tmp/npukb"),
                        help="an NPUKernelBench checkout, for the custom-op form's golden answer")
    parser.add_argument("--op", default=DEFAULT_OP, help=f"the golden answer: one of {', '.join(CUSTOM_OPS)}")
    parser.add_argument("--dry-run", action="store_true", help="say what would run and what the report holds")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    say = Report()
    report: dict = {"npu_found": False, "summary": "", "checks": [], "timing": {}, "custom_op": {}}
    code = 1
    try:
        code = check_everything(args, say, report)
    except Exception as exc:   # a check of ours broke: the report still goes out, with what it got to
        report["summary"] = report["summary"] or f"npu_check broke: {type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-4000:]
        say(f"BAD {report['summary']}")
        code = 1
    finally:
        report["lines"] = say.lines
        Path(args.report).write_text(json.dumps(report, indent=1, default=str))
        print(f"\nSend back {Path(args.report).resolve()} (or paste the lines above into an issue)")
    return code


def machine_facts(report: dict, say: Report) -> None:
    """Who this process is and what the device nodes are, into the report, whatever else happens."""
    from verifier.backends.ascend import AscendBackend

    devices = AscendBackend(probe_torch=False).sandbox_devices()
    report.update(euid=os.geteuid(), groups=sorted(os.getgroups()), device_nodes=device_nodes(devices),
                  host={"machine": platform.machine(), "platform": platform.platform(),
                        "python": platform.python_version()})
    say(f"euid {os.geteuid()}, groups {sorted(os.getgroups())}; device nodes: "
        + (", ".join(f"{d['path']} {d.get('owner')}:{d.get('group')} {d.get('mode')}" for d in report["device_nodes"])
           or "none found"))


def check_everything(args: argparse.Namespace, say: Report, report: dict) -> int:
    say("## EvoKernel npu_check")
    machine_facts(report, say)
    from core.doctor import diagnose

    doctor = diagnose(["ascend"])
    ascend = doctor["backends"]["ascend"]
    details = ascend["details"]
    report.update(evokernel=doctor["evokernel"], doctor=ascend,
                  versions={"torch": doctor["torch"], "torch_npu": doctor["torch_npu"],
                            "cann": details.get("versions", "")})
    if not ascend["available"]:
        no_npu = not ascend["device"]["present"]
        report["summary"] = (f"{'no NPU found' if no_npu else 'the Ascend backend cannot run here'}: "
                             f"{ascend['reason']}")
        report["ladder"] = {"ran": False, "would_run": ladder_plan()}
        say(f"BAD {report['summary']}")
        say("nothing was run; the ladder it would climb, each rung with the checks "
            f"({'; '.join(LADDER_CHECKS)}):")
        for rung in report["ladder"]["would_run"]:
            say(f"      rung {rung['rung']}: {rung['adds']}")
        return 2
    report["npu_found"] = True

    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.backends import get_backend, runtime_target
    from verifier.harness.verify import Verifier
    from verifier.processes import scrubbed_env

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="evokernel-npu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"host {platform.machine()} {platform.platform()}, python {doctor['python']}, evokernel {doctor['evokernel']}")
    say(f"device {ascend['device']['name']} (SoC from {details.get('soc_source')}); {ascend['toolchain']['version']} "
        f"at {details.get('cann_root')} ({details.get('flow')} flow, module {details.get('cmake_module')})")
    say(f"versions: {details.get('versions')} (pairing: {details.get('versions_wanted')})")
    say(f"toolkit Python: {details.get('toolkit_python') or 'none'} ({details.get('toolkit_python_found_by')})")
    for warning in ascend.get("warnings", []):
        say(f"!   {warning}")
    backend = get_backend("ascend")
    report["sandbox"] = {**doctor["sandbox"], "runtime_needs": backend.runtime_needs.to_dict()}
    say(f"sandbox: bubblewrap {doctor['sandbox']['bubblewrap']['available']}, "
        f"seccomp {doctor['sandbox']['seccomp']['available']}; every verifier check runs with and without the filter")
    started = time.perf_counter()
    library, signatures, ok = check_library(backend, work, say)
    report["library"] = {"path": str(library or ""), "ok": ok}
    climbed = ladder(work / "ladder", runtime=runtime_target(backend), devices=backend.sandbox_devices(),
                     env=scrubbed_env(backend.worker_env()), needs=backend.runtime_needs.to_dict(),
                     library=str(library or ""), signatures=signatures)
    report["ladder"] = {"ran": True, **climbed}
    say_ladder(climbed, say)
    ok &= climbed["first_failure"] is None
    suite = load_suite("builtin")
    outcomes: dict[tuple[str, str], dict[bool, object]] = {}
    for on in SECCOMP_RUNS:
        with Verifier(backend, VerifyConfig(seccomp=on), cache_dir=work / "cache") as verifier:
            say(f"verifier sandbox ({'with' if on else 'without'} seccomp): {verifier.isolation}")
            for task_id, kinds in CANDIDATES.items():
                spec = suite.get(task_id).spec()
                for kind, (files, what) in kinds.items():
                    folder = work / f"{task_id}-{kind}"
                    folder.mkdir(exist_ok=True)
                    for name, text in files.items():
                        (folder / name).write_text(text)
                    outcome = verifier.verify(spec, folder)
                    outcomes.setdefault((task_id, kind), {})[on] = outcome
                    good = expected(kind, outcome)
                    verdict = "feasible" if outcome.feasible else f"failed at {outcome.failed_gate}"
                    timing = (f"{outcome.latency_ms:.3f} ms vs torch {outcome.reference_ms:.3f} ms, "
                              f"speedup {outcome.speedup:.2f}x" if outcome.speedup is not None else "")
                    say(f"{'ok ' if good else 'BAD'} {task_id:8} {kind:9} {'seccomp' if on else 'no seccomp':10} "
                        f"{verdict:24} {timing}")
                    say(f"      {what}: {' '.join(outcome.message.split())[:400]}")
                    for flag in outcome.flags:
                        say(f"      flag: {flag}")
    for (task_id, kind), pair in outcomes.items():
        finding = sandbox_finding(kind, pair)
        ok &= all(expected(kind, out) for out in pair.values())
        say(f"{'ok ' if 'as expected with and' in finding else 'BAD'} {task_id} {kind}: {finding}")
        report["checks"].append({"task": task_id, "candidate": kind, "what": CANDIDATES[task_id][kind][1],
                                 "finding": finding,
                                 **{("with_seccomp" if on else "without_seccomp"): {
                                     "expected": expected(kind, out), "feasible": out.feasible,
                                     "failed_gate": out.failed_gate, "message": out.message,
                                     "latency_ms": out.latency_ms, "reference_ms": out.reference_ms,
                                     "speedup": out.speedup, "flags": out.flags}
                                    for on, out in pair.items()}})
    if library is not None:
        report["timing"] = check_timing(backend, library, signatures, work, say, msprof=not args.skip_msprof) or {}
    record: dict = {"task": args.op}
    custom_ok = check_custom_op(backend, Path(args.npukb), args.op, work, say, record)
    if custom_ok and args.op in CUSTOM_OPS and (Path(args.npukb) / "tasks" / args.op / "answer/0").is_dir():
        custom_ok &= check_custom_op_in_verifier(backend, Path(args.npukb), args.op, work, say, record)
    ok &= custom_ok
    report["custom_op"] = record
    report["summary"] = ("all as expected" if ok else
                         (climbed["said"] if climbed["first_failure"] else "some outcomes not as expected"))
    say(f"{'all as expected' if ok else 'SOME OUTCOMES NOT AS EXPECTED'} in {time.perf_counter() - started:.1f} s")
    report["all_as_expected"] = bool(ok)
    return 0 if ok else 1


def check_custom_op_in_verifier(backend, npukb: Path, task: str, work: Path, say: Report, record: dict) -> bool:
    """The golden answer through the whole verifier (its correctness and timing jobs in the sandbox, each with the
    build's private vendor), with the seccomp filter and without it."""
    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    _, inputs, dtype, expression, n = CUSTOM_OPS[task]
    files, _, _ = custom_op_candidate(npukb / "tasks" / task / "answer/0", task)
    suite = work / "custom_op_suite"
    suite.mkdir(exist_ok=True)
    (suite / "custom_op.py").write_text(CUSTOM_OP_TASK.format(expression=expression,
                                                              dtype=dtype, inputs=inputs, n=n))
    spec = load_suite(suite).get("custom_op").spec()
    pair = {}
    for on in SECCOMP_RUNS:
        with Verifier(backend, VerifyConfig(seccomp=on), cache_dir=work / "cache") as verifier:
            out = verifier.verify(spec, dict(files))
        pair[on] = out
        verdict = "feasible" if out.feasible else f"failed at {out.failed_gate}"
        say(f"{'ok ' if out.feasible else 'BAD'} custom-op {'seccomp' if on else 'no seccomp':10} {verdict:24} "
            f"{' '.join(out.message.split())[:300]}")
    finding = sandbox_finding("correct", pair)
    say(f"{'ok ' if 'as expected with and' in finding else 'BAD'} custom-op through the verifier: {finding}")
    record["verifier"] = {"finding": finding, **{("with_seccomp" if on else "without_seccomp"): {
        "feasible": out.feasible, "failed_gate": out.failed_gate, "message": out.message,
        "speedup": out.speedup} for on, out in pair.items()}}
    return all(out.feasible for out in pair.values())


if __name__ == "__main__":
    sys.exit(main())
