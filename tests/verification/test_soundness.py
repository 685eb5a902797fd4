"""Soundness of the correctness gate on tasks that fool weak checks (issue #10): each cheating
candidate is rejected at correctness with a message naming the trial; the correct candidate for
the same task is accepted. Real builds, real sandboxed runs, tasks in tests/fixtures/soundness."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import soundness_candidates as S

import candidates as C

pytestmark = pytest.mark.slow

SOUNDNESS = Path(__file__).resolve().parent.parent / "fixtures" / "soundness"
TRIAL = re.compile(r"trial \d+ \([^)]*seed \d+")


@pytest.fixture(scope="module")
def tasks():
    from core.tasks import load_suite

    return load_suite(SOUNDNESS)


def check(verifier, suite, task_id, files, make_candidate):
    return verifier.verify(suite.get(task_id).spec(), make_candidate(files))


def rejected(out, *words):
    assert not out.feasible
    assert out.failed_gate == "correctness", out.message
    assert TRIAL.search(out.message), out.message       # names the trial: distribution, seed
    for w in words:
        assert w in out.message, out.message


# 1. Widened inputs: torch.rand tasks whose own draw never reaches a branch.

@pytest.mark.parametrize("task_id, good, bad", [
    ("selu_rand", S.SELU, S.SELU_NO_ALPHA),
    ("leaky_relu_rand", S.LEAKY_RELU, S.LEAKY_RELU_COPY),
    ("huber_rand", S.HUBER, S.HUBER_QUADRATIC_ONLY),
])
def test_widened_trials_reject_a_branch_the_task_never_draws(verifier, tasks, make_candidate, task_id, good, bad):
    out = check(verifier, tasks, task_id, bad, make_candidate)
    rejected(out, "widened inputs")
    assert out.gate("correctness").details.get("trial", 0) >= 4   # the trials over the task's own range agree
    ok = check(verifier, tasks, task_id, good, make_candidate)
    assert ok.feasible, ok.message


def test_a_task_precondition_is_respected(verifier, tasks, make_candidate):
    """log of positive inputs: the widened trials are dropped (the reference is NaN on half of them) and
    said so; a kernel right only where x > 0 passes."""
    out = check(verifier, tasks, "log_positive", S.LOG_ASSUMES_POSITIVE, make_candidate)
    assert out.feasible, out.message
    assert "dropped" in out.gate("correctness").message and "precondition" in out.gate("correctness").message


# 2. Norm-wise bound: small outputs.

def test_zeros_for_a_long_row_softmax_fail_norm_wise(verifier, tasks, make_candidate):
    out = check(verifier, tasks, "long_softmax", S.LONG_SOFTMAX_ZEROS, make_candidate)
    rejected(out, "norm-wise relative error", "trial 1 ")
    ok = check(verifier, tasks, "long_softmax", S.LONG_SOFTMAX, make_candidate)
    assert ok.feasible, ok.message


# 3. A larger second shape.

def test_a_loop_clamped_to_the_default_size_fails_at_the_larger_shape(verifier, suite, make_candidate):
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(S.RELU_CLAMPED)))
    rejected(out, "second shape (larger)")


# 5. Random and nondeterministic references.

def test_dropout_is_compared_in_eval_mode(verifier, tasks, make_candidate):
    ok = check(verifier, tasks, "dropout_scale", S.SCALE_TWO, make_candidate)
    assert ok.feasible, ok.message
    assert "eval mode" in ok.gate("correctness").message and "Dropout" in ok.gate("correctness").message
    out = check(verifier, tasks, "dropout_scale", S.SCALE_ONE, make_candidate)
    rejected(out, "values differ", "eval mode")


def test_duplicate_index_scatter_is_detected_and_either_winner_accepted(verifier, tasks, make_candidate):
    for files in (S.SCATTER_LAST_WINS, S.SCATTER_FIRST_WINS):
        ok = check(verifier, tasks, "scatter_dup", files, make_candidate)
        assert ok.feasible, ok.message
        message = ok.gate("correctness").message
        assert "nondeterministic" in message and "aten.scatter" in message and "not compared" in message
    out = check(verifier, tasks, "scatter_dup", S.SCATTER_IGNORES_SRC, make_candidate)
    rejected(out, "values differ")


def test_a_reference_random_in_every_mode_is_the_task_s_fault(verifier, tasks, make_candidate):
    from verifier.errors import NondeterministicReference

    with pytest.raises(NondeterministicReference, match=r"nondeterministic: output 0 differs between two runs"):
        check(verifier, tasks, "noise_forward", C.elementwise(C.IDENTITY), make_candidate)


# 6. The tolerance formula.

def test_the_message_gives_the_tolerance_formula(verifier, suite, make_candidate):
    out = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.IDENTITY)))
    rejected(out, "|got - expected| <= atol + rtol * |expected|", "atol 0.0001, rtol 0.0001")


# 7. Unpredictable seeds.

def test_trial_seeds_are_fresh_every_verification(verifier, suite, make_candidate):
    a = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.CONSTANT)))
    b = verifier.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.CONSTANT)), fresh=True)
    seeds_a = re.findall(r"seed (\d+)", a.message)
    seeds_b = re.findall(r"seed (\d+)", b.message)
    assert seeds_a and seeds_b and seeds_a != seeds_b
    assert not {int(s) for s in seeds_a + seeds_b} & set(range(900, 3000))   # nothing a source could predict

