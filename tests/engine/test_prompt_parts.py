"""Prompt parts without a server: per-backend tolerances, the budget that trims memory and never the
reference or the start point, key lines of long kernels, the "Change:" line of an answer, whole
sentences in rules."""

from __future__ import annotations

import pytest

from core import prompts
from core.memory import rule_title, whole_sentences
from core.responses import change_line, parse_answer
from store import Experience

import candidates as C


@pytest.fixture(scope="module")
def relu(suite):
    return suite.get("relu")


@pytest.mark.parametrize("backend, text", [("cpu", "atol=1e-4 and rtol=1e-4 (float32, cpu backend)"),
                                           ("cuda", "atol=0.001 and rtol=0.001 (float32, cuda backend)"),
                                           ("ascend", "atol=0.01 and rtol=0.01 (float32, ascend backend)")])
def test_each_backend_states_its_own_tolerance(relu, backend, text):
    from verifier.backends import get_backend

    atol, rtol = get_backend(backend).tolerance("float32")
    assert text.startswith(f"atol={prompts._num(atol)} ")
    user = prompts.draft_prompt(relu, backend, [], [], [])[1][1]
    assert text in user and "1e-4" not in user.replace(text, "") if backend != "cpu" else text in user
    if backend != "cpu":
        assert "not measured by EvoKernel on this backend (untested" in user


def test_a_task_tolerance_overrides_the_backend(relu):
    from dataclasses import replace

    task = replace(relu, source=relu.source + "\nATOL = 0.05\nRTOL = 0.02\n")
    assert "atol=0.05 and rtol=0.02" in prompts.draft_prompt(task, "cpu", [], [], [])[1][1]


def _memory_item(i: int, lines: int = 300) -> Experience:
    body = "\n".join(f"    acc{k} += x[i + {k}] * w[{k}];  // filler line {k} of item {i}" for k in range(lines))
    kernel = (f'#include <cstdint>\nextern "C" void k{i}(const float* x, const float* w, float* out, int64_t n) {{\n'
              f"    #pragma omp parallel for simd\n    for (int64_t i = 0; i < n; ++i) {{\n{body}\n    }}\n}}\n")
    return Experience(id=f"item{i:04d}", task_id=f"t{i}", kind="draft_trace", backend="cpu", stage="draft",
                      title=f"t{i} draft #1: feasible", files={"model.py": "x = 1\n", "kernel.cpp": kernel},
                      outcome={"feasible": True, "latency_ms": 1.0, "latency_spread_ms": 0.01},
                      extra={"change": f"change of item {i}"},
                      signature={"ops": ["relu"], "category": "activation"})   # relevant to relu: shown with code


def test_the_budget_trims_memory_and_never_the_reference_or_start_point(relu):
    from dataclasses import replace

    long_doc = '"""' + "\n".join(f"Reference note line {i}: this explains the operator." for i in range(550)) + '"""\n'
    task = replace(relu, source=long_doc + relu.source)
    start_kernel = C.RELU + "".join(f"static const int kPad{i} = {i};\n" for i in range(300))
    start = Experience(id="start000", task_id="relu", kind="draft_trace", backend="cpu", stage="draft",
                       title="relu draft #1: feasible", files=C.elementwise(start_kernel),
                       outcome={"feasible": True, "latency_ms": 2.0, "latency_spread_ms": 0.1})
    memory = [_memory_item(i) for i in range(40)]
    user = prompts.refine_prompt(task, "cpu", [], [], memory, start, [], best=start)[1][1]
    assert task.source.strip() in user                          # the reference, whole
    assert start_kernel.strip() in user                         # the start point, whole
    assert "It is the best kernel so far." in user
    assert len(task.source) + len(start_kernel) > prompts.MAX_PROMPT_CHARS // 2
    assert len(user) <= prompts.MAX_PROMPT_CHARS
    assert "[mem:item0000]" in user and "[mem:item0039]" not in user   # the lowest-ranked items go first
    # with room, memory items keep their key lines: launcher, pragma and loop, not the filler
    roomy = prompts.refine_prompt(relu, "cpu", [], [], memory[:2], start, [])[1][1]
    shown = roomy.split("[mem:item0000]", 1)[1].split("[mem:item0001]")[0]
    assert "Change: change of item 0" in shown and "(key lines of" in shown
    assert 'extern "C" void k0' in shown and "#pragma omp parallel for simd" in shown and "    // ..." in shown
    assert shown.count("filler line") <= prompts.MEMORY_CODE_LINES[0]


def test_the_change_line_is_read_outside_code():
    answer = ("Here is my plan.\n**Change**: tile rows by 64 so a tile stays in L2\n```cpp file=kernel.cpp\n"
              "// Change: not this one\n" + C.RELU + "```\n```python file=model.py\n"
              + C.ELEMENTWISE_MODEL.format(fn="relu_forward") + "```\n")
    parsed = parse_answer(answer)
    assert parsed.ok and parsed.change == "tile rows by 64 so a tile stays in L2"
    assert change_line("```cpp\nChange: inside code\n```\n") == ""
    long = change_line("Change: " + "word " * 100)
    assert len(long) <= 244 and long.endswith(" ...") and "wor ..." not in long


def test_rules_keep_whole_sentences_and_true_counts():
    text = "Handle tails: sizes are not multiples of the vector width. " * 20
    kept = whole_sentences(text, 200)
    assert kept.endswith("vector width.") and len(kept) <= 200 and text.startswith(kept)
    assert rule_title(["a", "b", "c"]) == "Adopted by 3 operators: a, b, c"
    assert rule_title(list("abcdefgh")) == "Adopted by 8 operators: a, b, c, d and 4 more"
    assert rule_title(["a", "a", "b"]) == "Adopted by 2 operators: a, b"


def test_the_model_reads_a_noisy_window_as_an_unknown_speed():
    from core.prompts import verdict
    from verifier.outcome import Outcome

    noisy = Outcome(feasible=True, latency_ms=2.0, reference_ms=3.48, speedup=1.74,
                    speedup_ci=[0.969, 2.626], vs_reference="noisy", gain=1.1, gain_ci=[0.6, 2.0],
                    vs_best="noisy")
    line = verdict(noisy)
    assert "could not tell against PyTorch: too noisy (speedup interval [0.97, 2.63], above 1 = faster), no verdict" in line
    assert "could not tell against the best then: too noisy" in line
    assert "same speed" not in line and "±" not in line and "1.74x" not in line


def test_the_custom_op_form_asks_for_the_project_s_files_and_kernel_launch_stays_as_it_was(relu):
    """With ``form = "custom-op"`` (an Ascend workspace) the draft and refine prompts ask for the project's
    files by name and layout; kernel-launch, and a backend that takes one form, ask as before."""
    start = Experience(id="start000", task_id="relu", kind="draft_trace", backend="ascend", stage="draft",
                       title="relu draft #1: feasible", files=C.elementwise(C.RELU),
                       outcome={"feasible": True, "latency_ms": 2.0, "latency_spread_ms": 0.1})

    def asks(backend: str, form: str) -> list[str]:
        facts = prompts.PromptFacts(backend, form=form)
        draft = prompts.draft_prompt(relu, backend, [], [], [], facts=facts)
        refine = prompts.refine_prompt(relu, backend, [], [], [], start, [], best=start, facts=facts)
        return [draft[0][1], refine[0][1]]

    for system in asks("ascend", "custom-op"):
        for piece in ("file=op_host/<op>_tiling.h", "file=op_host/<op>.cpp", "file=op_kernel/<op>.cpp",
                      "file=binding.cpp", "OP_ADD(<Op>)", "aclnn<Op>"):
            assert piece in system, piece
    for backend in ("ascend", "cpu"):
        assert asks(backend, "kernel-launch") == [prompts.system_message(backend)] * 2
    assert asks("cpu", "custom-op") == [prompts.system_message("cpu")] * 2     # the CPU takes one form
