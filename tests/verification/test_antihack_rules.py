"""The anti-hack gate's rule table (verifier.gates.antihack.rules) is what the gate enforces: every
static rule's example is refused by the gate, and every rule is stated in the prompts and the verifier's
documentation (docs/verifier.md, linked from the README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier.gates.antihack import check_candidate
from verifier.gates.antihack.rules import RULES, contract_text

import candidates as C

STATIC = [r for r in RULES if r.where != "dynamic"]


def test_the_base_candidate_passes():
    assert check_candidate(C.elementwise(C.RELU), (".cpp",), (".h",)) is None


EXAMPLES = [(r, e) for r in STATIC for e in r.examples]


@pytest.mark.parametrize("rule, example", EXAMPLES, ids=[e.splitlines()[0] for _, e in EXAMPLES])
def test_every_static_rule_is_enforced_by_the_gate(rule, example):
    files = C.elementwise(C.RELU)
    if rule.where == "model":
        files["model.py"] += "\n" + example + "\n"
    else:
        files["kernel.cpp"] = example + "\n" + files["kernel.cpp"]
    problem = check_candidate(files, (".cpp",), (".h",))
    assert problem, f"the gate let through: {example!r} ({rule.says})"


def test_every_rule_is_in_every_prompt_and_in_the_verifier_docs():
    from core import prompts
    from core.tasks import load_suite

    task = load_suite(Path(__file__).parents[1] / "fixtures" / "suite").get("relu")
    text = prompts.draft_prompt(task, "cpu", [], [], [])[1][1]
    assert contract_text() in text
    docs = (Path(__file__).parents[2] / "docs" / "verifier.md").read_text()
    for line in contract_text().splitlines():
        assert line in docs, line


def test_what_the_rules_call_fine_passes_the_gate():
    """A model that read "call no ... thread ... functions" avoided `omp_get_thread_num`; the rules now
    name OpenMP's own functions as fine, and the gate agrees."""
    assert "omp_get_thread_num()" in contract_text() and "call no process, thread," not in contract_text()
    files = C.elementwise(C.RELU)
    files["kernel.cpp"] = ("#include <omp.h>\nstatic int team() { int n = 0;\n#pragma omp parallel\n"
                           "{ if (omp_get_thread_num() == 0) n = omp_get_num_threads(); }\nreturn n; }\n"
                           + files["kernel.cpp"])
    assert check_candidate(files, (".cpp",), (".h",)) is None


def _refusals(module) -> set[int]:
    """The lines of ``module`` that refuse: a ``return`` of anything but None in its checks, or a call of its
    ``fail`` (model.py's AST rules)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    lines = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "fail"}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name.endswith(("_problem", "check_kernel_source")):
            for node in ast.walk(fn):
                if isinstance(node, ast.Return) and node.value is not None and not (
                        isinstance(node.value, ast.Constant) and node.value.value is None):
                    lines.add(node.lineno)
    return lines


def _lines_run(module, call, *args) -> set[int]:
    """The lines of ``module`` that ``call(*args)`` executes."""
    import sys

    path, ran = module.__file__, set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != path:
            return None
        if event == "line":
            ran.add(frame.f_lineno)
        return tracer

    sys.settrace(tracer)
    try:
        call(*args)
    finally:
        sys.settrace(None)
    return ran


# A violation of each entry of a device backend's own table (``KernelRules``), by the entry's key: a backend that
# adds an entry adds its example here (the test below fails until it does). Its rule's words are generated.
DEVICE_EXAMPLES = {
    "streams": "static void* s = (void*) &cudaStreamCreate;",
    "graphs": "static void* g = (void*) &cudaGraphLaunch;",
    "timer": "static void* e = (void*) &cudaEventRecord;",
    "device control": "static void* d = (void*) &cudaSetDevice;",
    "device allocation": "static void* m = (void*) &cudaMalloc;",
    r"^thrust/": "#include <thrust/sort.h>",
    r"cudaStreamPerThread|cudaStreamLegacy": "static void* p = (void*) cudaStreamPerThread;",
    "launch": "__global__ void k(float* x) {}\nvoid go(float* x) { k<<<1, 1>>>(x); }",
    "launch on 0": "__global__ void k(float* x) {}\nvoid go(float* x) { k<<<1, 1, 0, 0>>>(x); }",
    r"^acl/|^aclnn|^hccl": "#include <acl/acl.h>",
    r"acl(?:rt|nn|op)?[A-Z]\w*\s*\(": "void go() { aclrtMalloc(0, 0, 0); }",
}


def _device_examples(table) -> list[str]:
    keys = [*table.words, *(p for p, _ in table.includes), *(p for p, _ in table.prefixes),
            *(("launch", "launch on 0") if table.launch_needs_stream else ())]
    missing = [k for k in keys if k not in DEVICE_EXAMPLES]
    assert not missing, f"no example of these entries of a backend's kernel rules: {missing}"
    return [DEVICE_EXAMPLES[k] for k in keys]


@pytest.mark.parametrize("backend", ["cuda", "ascend"])
def test_every_device_rule_is_stated_for_its_backend_and_refused_there(backend):
    from core import prompts
    from core.tasks import load_suite
    from verifier.gates.antihack import check_kernel_source, devices, kernel_rules
    from verifier.gates.antihack import kernel as K
    from verifier.gates.antihack.rules import device_rules

    table = kernel_rules(backend)
    task = load_suite(Path(__file__).parents[1] / "fixtures" / "suite").get("relu")
    text = prompts.draft_prompt(task, backend, [], [], [])[1][1]
    stated = device_rules(backend)
    assert stated and all(f"- {r.says}." in text for r in stated)
    for what, (words, _why) in table.words.items():
        assert any(what in r.says and words[0] in r.says for r in stated), what
    ran: set[int] = set()
    for example in _device_examples(table):
        problem = check_kernel_source("kernel.cpp", example, {"kernel.cpp"}, backend)
        assert problem, f"the {backend} gate let through {example!r}"
        for module in (K, devices):
            ran |= {(module.__name__, n) for n in
                    _lines_run(module, check_kernel_source, "kernel.cpp", example, {"kernel.cpp"}, backend)}
    if backend == "cuda":     # every refusal of the device checks is reached (Ascend's table has no launch rule)
        missing = {("verifier.gates.antihack.devices", n) for n in _refusals(devices)} - ran
        assert not missing, missing


def test_every_refusal_the_model_gate_can_make_is_a_stated_rule():
    """Every place the model.py gate refuses a candidate is reached by a rule's violating example: 40 of its 48
    were not (global statements, class keywords, star imports, torch.manual_seed ... were refused, never said),
    and one could never be reached (`import verifier.runtime` met the general import refusal first)."""
    from verifier.gates.antihack import model as M

    ran: set[int] = set()
    for rule in RULES:
        if rule.where != "model":
            continue
        for example in rule.examples:
            files = C.elementwise(C.RELU)
            files["model.py"] += "\n" + example + "\n"
            ran |= _lines_run(M, check_candidate, files, (".cpp",), (".h",))
    missing = sorted(_refusals(M) - ran)
    source = Path(M.__file__).read_text().splitlines()
    assert not missing, "refusals no rule's example reaches:\n" + "\n".join(
        f"model.py:{n}: {source[n - 1].strip()}" for n in missing)


def test_every_refusal_the_kernel_gate_can_make_is_a_stated_rule():
    """Every place the kernel-source gate refuses a candidate is reached by a rule's violating example, so
    no refusal goes unstated in the prompts' contract: token pasting, digit separators, raw strings,
    `#pragma GCC push_options` and trigraphs were refused and never said (issue #36, finding 3)."""
    from verifier.gates.antihack import check_kernel_source, kernel_rules
    from verifier.gates.antihack import kernel as K

    ran: set[int] = set()
    for rule in RULES:
        if rule.where != "kernel":
            continue
        for example in rule.examples:
            files = C.elementwise(C.RELU)
            files["kernel.cpp"] = example + "\n" + files["kernel.cpp"]
            ran |= _lines_run(K, check_candidate, files, (".cpp",), (".h",))
    for backend in ("cuda", "ascend"):     # a backend's own refusals (its rules: the test above)
        for example in _device_examples(kernel_rules(backend)):
            ran |= _lines_run(K, check_kernel_source, "kernel.cpp", example, {"kernel.cpp"}, backend)
    missing = sorted(_refusals(K) - ran)
    source = Path(K.__file__).read_text().splitlines()
    assert not missing, "refusals no rule's example reaches:\n" + "\n".join(
        f"kernel.py:{n}: {source[n - 1].strip()}" for n in missing)
