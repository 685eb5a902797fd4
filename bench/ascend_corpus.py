"""The static gates and the custom-op project generation over real Ascend C: NPUKernelBench's golden answers
and MultiKernelBench's Ascend prompt examples, read from outside the repository.

    .venv/bin/python bench/ascend_corpus.py [--npukb DIR] [--mkb DIR] [--show N] [--json PATH]

``--npukb``: an extracted NPUKernelBench (its ``tasks/``), default ``$EVOKERNEL_NPUKB`` or /tmp/npukb
(make it with ``git -C <mirror> archive HEAD | tar -x -C /tmp/npukb``). ``--mkb``: a MultiKernelBench checkout
(``prompts/ascendc_new_model_*.py``), default ``$EVOKERNEL_MKB`` or /tmp/mkb. Nothing of either is copied into
the repository.

Each answer becomes a candidate of the custom-op form: its ``op_host/``, ``op_kernel/`` and ``CMakeLists.txt``
as the suite ships them, plus two files of ours, because the suites' own are of another contract: a binding
(one ``extern "C"`` launcher calling ``aclnn<Op>``, generated here from the op definition; the suites bind
through a PyTorch extension) and a ``model.py`` that calls it. Then, per answer: the answer round trip (the
candidate written as a model's answer, fenced blocks named by path, read back by the engine's parser), the
format gate, the anti-hack
gate, declaration parsing (the device kernels as ``extern "C" __global__ __aicore__`` entries, the binding's
launchers) and the project generation against a fake CANN tree (the build script, op JSON, command lines).
The link policy needs a built library and is not run here (no CANN). Last, the host stand-in: each answer's
tiling data definitions compiled with g++ against a stand-in ``register/tilingdata_base.h`` (the only CANN
header stood in, ``tests/backends/fake_toolchains.py``); an answer whose tiling header needs another CANN header
is skipped and says which. Prints counts and every refusal.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import sys
import tempfile
from collections import Counter
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


def survey(candidates: dict[str, dict[str, str]], backend: AscendBackend, include: Path | None = None,
           scratch: Path | None = None) -> list[dict[str, str]]:
    from fake_toolchains import compile_tiling_on_host

    takes_forms = "forms" in inspect.signature(check_format).parameters
    rows = []
    for task, files in candidates.items():
        row = {"task": task}
        cand = as_candidate(files)
        forms = {"forms": backend.forms} if takes_forms else {}
        row["answer"] = answer_round_trip(cand)
        row["format"] = check_format(cand, backend.source_suffixes, backend.header_suffixes, **forms) or "ok"
        row["anti_hack"] = check_candidate(cand, backend.source_suffixes, backend.header_suffixes, "ascend") or "ok"
        try:
            find_kernels({n: t for n, t in cand.items() if n.startswith("op_kernel/") and n.endswith(".cpp")})
            backend.launchers({n: t for n, t in cand.items() if n.endswith(backend.source_suffixes)})
            row["declarations"] = "ok"
        except Exception as exc:  # a DeclarationError is the finding; anything else too, with its type
            row["declarations"] = f"{type(exc).__name__}: {exc}"
        project = getattr(backend, "project_plan", None)
        if project is None:
            row["project"] = "no custom-op project generation in this version"
        else:
            with tempfile.TemporaryDirectory() as work:
                for name, text in cand.items():
                    (Path(work) / name).parent.mkdir(parents=True, exist_ok=True)
                    (Path(work) / name).write_text(text)
                try:
                    plan = project(Path(work))
                    row["project"] = "ok" if plan.files else "no files"
                except Exception as exc:
                    row["project"] = f"{type(exc).__name__}: {exc}"
        if include is not None and scratch is not None:
            work = scratch / f"tiling{len(rows)}"
            work.mkdir()
            status, detail = compile_tiling_on_host(files, include, work)
            row["host_tiling"] = status + (f": {detail}" if detail else "")
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npukb", default=os.environ.get("EVOKERNEL_NPUKB", "/tmp/npukb"))
    ap.add_argument("--mkb", default=os.environ.get("EVOKERNEL_MKB", "/tmp/mkb"))
    ap.add_argument("--show", type=int, default=40, help="refusals to print per gate")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()
    candidates: dict[str, dict[str, str]] = {}
    for label, root, read in (("NPUKernelBench", Path(args.npukb), npukb_answers),
                              ("MultiKernelBench", Path(args.mkb), mkb_examples)):
        found = read(root) if root.is_dir() else {}
        print(f"{label}: {len(found)} answers from {root}" + ("" if found else " (absent: skipped)"))
        candidates.update(found)
    if not candidates:
        print("no corpus found: extract NPUKernelBench to /tmp/npukb (see the docstring)")
        return 2
    from fake_toolchains import STOOD_IN_HEADERS, make_cann, make_tiling_standins

    with tempfile.TemporaryDirectory() as tmp:
        root = make_cann(Path(tmp) / "cann", "compiler")
        env = {"ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp"), "PATH": "/usr/bin:/bin"}
        backend = AscendBackend(env, home=tmp, system_root=tmp, machine="x86_64", soc="Ascend910B2",
                                probe_torch=False)
        include = make_tiling_standins(Path(tmp) / "standins")
        rows = survey(candidates, backend, include, Path(tmp))
    gates = ("answer", "format", "anti_hack", "declarations", "project")
    tiling = Counter(r["host_tiling"].split(":")[0] for r in rows)
    print(f"host stand-in (g++ against {', '.join(STOOD_IN_HEADERS)} stood in): tiling data of "
          f"{tiling['ok']} compiled, {tiling['skipped']} skipped (other CANN headers), {tiling['failed']} failed")
    for r in rows:
        if not r["host_tiling"].startswith("ok"):
            print(f"  - {r['task']}: {r['host_tiling'][:160]}")
    print(f"\n{len(rows)} answers; passing each gate:")
    for gate in gates:
        print(f"  {gate:13s} {sum(r[gate] == 'ok' for r in rows):4d} / {len(rows)}")
    print(f"  {'all of them':13s} {sum(all(r[g] == 'ok' for g in gates) for r in rows):4d} / {len(rows)}")
    for gate in gates:
        refused = [r for r in rows if r[gate] != "ok"]
        if not refused:
            continue
        print(f"\n{gate}: {len(refused)} refused; reasons (first words):")
        kinds = Counter(re.sub(r"^(?:\w+Error: )?[^:]*?(?: line \d+)?: ", "", r[gate])[:70] for r in refused)
        for why, n in kinds.most_common(12):
            print(f"  {n:4d}  {why}")
        for r in refused[:args.show]:
            print(f"  - {r['task']}: {r[gate][:240]}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
