"""Which public Ascend C answers a real CANN toolchain would take: NPUKernelBench's golden answers and
MultiKernelBench's Ascend prompt examples, read from outside the repository, through every static stage of the
custom-op form against the stand-in CANN of ``tests/backends/fake_cann`` (stand-ins that fail where the real tools
fail).

    .venv/bin/python bench/ascend_corpus.py [--npukb DIR] [--mkb DIR] [--json FILE] [--jobs N]

``--npukb``: an extracted NPUKernelBench (its ``tasks/``), default ``$EVOKERNEL_NPUKB`` or /tmp/npukb (fetched at
run time: ``git clone https://github.com/weich97/NPUKernelBench /tmp/npukb``). ``--mkb``: a MultiKernelBench
checkout (``prompts/ascendc_new_model_*.py``), default ``$EVOKERNEL_MKB`` or /tmp/mkb. Nothing of either is copied
into the repository.

Each answer becomes a candidate of the custom-op form: its ``op_host/``, ``op_kernel/`` and ``CMakeLists.txt`` as
the suite ships them, plus two files of ours (the suites bind through a PyTorch extension): a binding (one
``extern "C"`` launcher calling ``aclnn<Op>``, generated from the op definition) and a ``model.py``. An answer is
build-ready when it passes, in order: the answer round trip (written as a model's answer, read back by the engine's
parser), the format gate, the anti-hack gate, declaration parsing, then the generated build script up to build.sh:
project generation (the plan, the derived op JSON validated by the stand-in msopgen, msopgen's own sources
removed), op_host (every top-level op_host source compiled and linked into one library with g++ -std=c++14 against
the stand-in CANN host headers, as CANN's opbuild does) and kernel (op_kernel/<snake>.cpp present, CANN's Python
importable). The kernel itself is never compiled (no bisheng here), the package install and the binding's link
are not run (they need the op's generated aclnn API). ``--json`` writes ``{"rows": [{"answer", "build_ready",
"reason"}]}``, the reason being the first stage that refuses, in its words.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests/backends"))

from verifier.backends.ascend import AscendBackend, find_kernels  # noqa: E402
from verifier.gates.antihack import check_candidate  # noqa: E402
from verifier.gates.format import check_format  # noqa: E402

MODEL = '''import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, *args):
        out = torch.empty_like(args[0])
        lib.{entry}(*args, out)
        return out
'''


# msopgen's type names -> ACL's aclDataType names
ACL_TYPES = {"float": "ACL_FLOAT", "float32": "ACL_FLOAT", "float16": "ACL_FLOAT16", "bfloat16": "ACL_BF16",
             "int32": "ACL_INT32", "int8": "ACL_INT8", "int64": "ACL_INT64", "bool": "ACL_BOOL"}


def binding(op: str, inputs: list[str], outputs: list[str], dtype: str = "float") -> str:
    """A binding of the runtime contract for op ``op``: one extern "C" launcher taking each tensor as a data
    pointer (one contiguous vector of n elements of ``dtype``, every tensor alike: enough for an elementwise op
    and for the static gates, not a general binding) that wraps them in aclTensors and calls aclnn<Op>."""
    names = [*inputs, *outputs]
    params = ", ".join(f"void* {n}" for n in names)
    lines = ['#include "acl/acl.h"', f'#include "aclnn_{_snake(op)}.h"', "",
             f'extern "C" uint32_t run_{_snake(op)}(aclrtStream stream, {params}, int64_t n)', "{",
             "    int64_t shape[1] = {n};", "    int64_t strides[1] = {1};"]
    for name in names:
        lines.append(f"    aclTensor* t_{name} = aclCreateTensor(shape, 1, {ACL_TYPES.get(dtype, 'ACL_FLOAT')}, "
                     "strides, 0, ACL_FORMAT_ND, "
                     f"shape, 1, {name});")
    args = ", ".join(f"t_{n}" for n in names)
    # the workspace aclnn asks for (the framework's system workspace at least, on most answers): allocated on
    # the first call that needs more and kept (an older, smaller one is left allocated: it may still be in use)
    lines += ["    static void* workspace = nullptr;", "    static uint64_t capacity = 0;",
              "    uint64_t workspaceSize = 0;", "    aclOpExecutor* executor = nullptr;",
              f"    aclnnStatus status = aclnn{op}GetWorkspaceSize({args}, &workspaceSize, &executor);",
              "    if (status == 0 && workspaceSize > capacity) {",
              "        status = aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);",
              "        capacity = status == 0 ? workspaceSize : 0;", "    }",
              f"    if (status == 0) status = aclnn{op}(workspace, workspaceSize, executor, stream);"]
    lines += [f"    aclDestroyTensor(t_{n});" for n in names]
    lines += ["    return status;", "}"]
    return "\n".join(lines) + "\n"


def _snake(op: str) -> str:
    from verifier.backends.ascend_project import snake_case

    return snake_case(op)


def npukb_answers(root: Path) -> dict[str, dict[str, str]]:
    out = {}
    for answer in sorted(root.glob("tasks/level*/*/*/answer/0")):
        task = "/".join(answer.parts[-5:-2])
        out[task] = {str(p.relative_to(answer)): p.read_text(errors="replace")
                     for p in sorted(answer.rglob("*")) if p.is_file()}
    return out


def mkb_examples(root: Path) -> dict[str, dict[str, str]]:
    """MultiKernelBench's Ascend prompt examples: the module-level strings of prompts/ascendc_new_model_*.py."""
    out = {}
    for path in sorted(root.glob("prompts/ascendc_new_model_*.py")):
        values = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str):
                values[node.targets[0].id if isinstance(node.targets[0], ast.Name) else ""] = node.value.value
        if "host_operator_src" not in values:
            continue
        try:
            op = json.loads(values["project_json_src"])[0]["op"]
        except (KeyError, ValueError, IndexError):
            op = path.stem
        snake = _snake(op)
        out[f"mkb/{path.stem}"] = {f"{snake}.json": values.get("project_json_src", ""),
                                   f"op_host/{snake}_tiling.h": values.get("host_tiling_src", ""),
                                   f"op_host/{snake}.cpp": values["host_operator_src"],
                                   f"op_kernel/{snake}.cpp": values.get("kernel_src", "")}
    return out


def as_candidate(files: dict[str, str]) -> dict[str, str]:
    from verifier.backends.ascend_project import ProjectError, parse_op_def

    files = dict(files)
    entry = "run"
    for name, text in files.items():
        if name.startswith("op_host/") and "OP_ADD" in text:
            try:
                spec = parse_op_def(text)
            except ProjectError:
                break
            files["binding.cpp"] = binding(spec.op, [io.name for io in spec.inputs], [io.name for io in spec.outputs])
            entry = f"run_{_snake(spec.op)}"
            break
    files["model.py"] = MODEL.format(entry=entry)
    return files


FENCE_LANGUAGES = {".py": "python", ".json": "json", ".txt": "cmake"}


def answer_round_trip(files: dict[str, str]) -> str:
    """The candidate written as a model's answer (a ``Change:`` line, then one fenced block per file named by its
    path) and read back by the engine's parser (``core.responses.parse_answer``): "ok" when every file comes
    back under its own path with its text, else what differs."""
    from core.responses import parse_answer

    blocks = [f"```{FENCE_LANGUAGES.get(Path(n).suffix, 'cpp')} file={n}\n{t if t.endswith(chr(10)) else t + chr(10)}```"
              for n, t in files.items()]
    parsed = parse_answer("Change: the suite's own answer.\n\n" + "\n\n".join(blocks))
    if parsed.problem:
        return f"parse: {parsed.problem}"
    want = {n: t if t.endswith("\n") else t + "\n" for n, t in files.items()}
    lost = sorted(set(want) - set(parsed.files))
    changed = sorted(n for n in want if n in parsed.files and parsed.files[n] != want[n])
    extra = sorted(set(parsed.files) - set(want))
    if lost or changed or extra:
        return f"lost {lost}, changed {changed}, extra {extra}"
    return "ok"


# The stages of "build-ready", in order; an answer's reason is the first that refuses it.
STAGES = ("answer", "format", "anti_hack", "declarations", "project", "op_host", "kernel")
# Where the generated build script stops here: after build.sh (the package install and the binding's link need
# the op's own generated aclnn API, which the stand-in package provides for AddCustom only).
STOP_AFTER = "bash build.sh)"


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "[ERROR]" in ln or "error:" in ln or "multiple definition" in ln or "No such file" in ln:
            return re.sub(r"^.*?_evokernel_project/", "", ln)[:300]
    return (lines[-1] if lines else "no output")[:300]


def project_stage(backend: AscendBackend, cand: dict[str, str], env: dict[str, str]) -> tuple[str, str]:
    """The custom-op flow up to build.sh, run against the stand-in CANN: (stage, "ok" or the first error), the
    stage being "project" (the plan, msopgen and its JSON validation), "op_host" (opbuild: every top-level
    op_host source compiled and linked with g++ against the stand-in headers) or "kernel" (the kernel file, the
    CANN Python)."""
    from verifier.backends.ascend_project import BUILD_SCRIPT

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, text in cand.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
        try:
            plan = backend.project_plan(work)
        except Exception as exc:
            return "project", f"{type(exc).__name__}: {exc}"
        script = plan.files[BUILD_SCRIPT]
        script = script[:script.index(STOP_AFTER) + len(STOP_AFTER)] + "\n"
        for name, text in {**plan.files, BUILD_SCRIPT: script}.items():
            (work / name).write_text(text)
        ran = subprocess.run(["bash", BUILD_SCRIPT], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        out = ran.stdout + ran.stderr
        if ran.returncode == 0:
            return "kernel", "ok"
        if "opbuild run failed" in out:
            return "op_host", _first_error(out)
        if "[ERROR]" in out and not (work / "_evokernel_project/build_out").is_dir():
            return "project", "msopgen: " + _first_error(out)
        return "kernel", _first_error(out)


def survey_one(task: str, files: dict[str, str], backend: AscendBackend, env: dict[str, str]) -> dict[str, object]:
    """One answer through every stage: {"answer", "build_ready", "reason", "stages": {stage: "ok" or why}}."""
    params = inspect.signature(check_format).parameters   # the gate as of the commit surveyed
    cand = as_candidate(files)
    stages: dict[str, str] = {"answer": answer_round_trip(cand)}
    if "backend" in params:
        stages["format"] = check_format(cand, backend) or "ok"
    else:
        forms = {"forms": backend.forms} if "forms" in params else {}
        stages["format"] = check_format(cand, backend.source_suffixes, backend.header_suffixes, **forms) or "ok"
    stages["anti_hack"] = check_candidate(cand, backend.source_suffixes, backend.header_suffixes, "ascend") or "ok"
    try:
        find_kernels({n: t for n, t in cand.items() if n.startswith("op_kernel/") and n.endswith(".cpp")})
        backend.launchers({n: t for n, t in cand.items() if n.endswith(backend.source_suffixes)})
        stages["declarations"] = "ok"
    except Exception as exc:  # a DeclarationError is the finding; anything else too, with its type
        stages["declarations"] = f"{type(exc).__name__}: {exc}"
    if stages["format"] == "ok":
        stage, said = project_stage(backend, cand, env)
        for name in STAGES[STAGES.index("project"):]:
            stages[name] = "ok" if said == "ok" or STAGES.index(name) < STAGES.index(stage) else (
                said if name == stage else "not reached")
    else:
        stages.update({name: "not reached" for name in STAGES[STAGES.index("project"):]})
    first = next((name for name in STAGES if stages[name] != "ok"), None)
    return {"answer": task, "build_ready": first is None,
            "reason": "" if first is None else f"{first}: {stages[first]}", "stages": stages}


def survey(candidates: dict[str, dict[str, str]], backend: AscendBackend, env: dict[str, str],
           jobs: int = 2) -> list[dict[str, object]]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda item: survey_one(item[0], item[1], backend, env), candidates.items()))


def stand_in_cann(tmp: Path) -> tuple[AscendBackend, dict[str, str]]:
    """The Ascend backend over the stand-in CANN (tests/backends/fake_cann) with a toolkit Python that has CANN's
    requirements, and the environment its builds run in (CANN's set_env.sh sourced)."""
    from verifier.sandbox import scrubbed_env

    from fake_toolchains import make_custom_op_cann, make_toolkit_python

    root = make_custom_op_cann(tmp / "cann")
    python = make_toolkit_python(tmp / "toolkit") / "python3"
    shell = {"ASCEND_HOME_PATH": str(root), "PATH": "/usr/bin:/bin", "EVOKERNEL_ASCEND_PYTHON": str(python)}
    backend = AscendBackend(shell, home=str(tmp), system_root=str(tmp), machine="x86_64", soc="Ascend910B2",
                            probe_torch=False)
    return backend, scrubbed_env({**shell, **backend.worker_env()}, home=str(tmp))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npukb", default=os.environ.get("EVOKERNEL_NPUKB", "/tmp/npukb"))
    ap.add_argument("--mkb", default=os.environ.get("EVOKERNEL_MKB", "/tmp/mkb"))
    ap.add_argument("--json", help="write {rows: [{answer, build_ready, reason}]} here")
    ap.add_argument("--jobs", type=int, default=2, help="answers surveyed at once")
    args = ap.parse_args()
    sets: dict[str, dict[str, dict[str, str]]] = {}
    for label, root, read in (("NPUKernelBench", Path(args.npukb), npukb_answers),
                              ("MultiKernelBench", Path(args.mkb), mkb_examples)):
        found = read(root) if root.is_dir() else {}
        print(f"{label}: {len(found)} answers from {root}" + ("" if found else " (absent: skipped)"))
        sets[label] = found
    if not any(sets.values()):
        print("no corpus found: extract NPUKernelBench to /tmp/npukb (see the docstring)")
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        backend, env = stand_in_cann(Path(tmp))
        rows = survey({t: f for found in sets.values() for t, f in found.items()}, backend, env, args.jobs)
    print(f"surveyed in {time.perf_counter() - started:.0f} s")
    by_task = {str(r["answer"]): r for r in rows}
    for label, found in sets.items():
        if not found:
            continue
        mine = [by_task[t] for t in found]
        print(f"\n{label}: {sum(bool(r['build_ready']) for r in mine)} of {len(mine)} build-ready; passing each stage:")
        for stage in STAGES:
            passed = sum(r["stages"][stage] == "ok" for r in mine)  # type: ignore[index]
            print(f"  {stage:13s} {passed:4d} / {len(mine)}")
        refused = [r for r in mine if not r["build_ready"]]
        if refused:
            print(f"  not build-ready ({len(refused)}), with the first stage that refuses each:")
            for r in refused:
                print(f"  - {r['answer']}: {str(r['reason'])[:300]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [{k: r[k] for k in ("answer", "build_ready", "reason")}
                                                        for r in rows]}, indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
