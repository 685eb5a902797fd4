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


@pytest.mark.parametrize("rule", STATIC, ids=[r.example.splitlines()[0] for r in STATIC])
def test_every_static_rule_is_enforced_by_the_gate(rule):
    files = C.elementwise(C.RELU)
    if rule.where == "model":
        files["model.py"] += "\n" + rule.example + "\n"
    else:
        files["kernel.cpp"] = rule.example + "\n" + files["kernel.cpp"]
    problem = check_candidate(files, (".cpp",), (".h",))
    assert problem, f"the gate let through: {rule.example!r} ({rule.says})"


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
