"""The trial plan, input streams, shapes, the comparison's new bounds and the job records (no builds)."""

from __future__ import annotations

from pathlib import Path

import torch

from verifier.compare import Agreement, Mismatch, compare_outputs
from verifier.job.tensors import flatten

SOUNDNESS = Path(__file__).resolve().parent.parent / "fixtures" / "soundness" / "level1"


def _wrap(value):
    structure, leaves = flatten(value)
    return {"structure": structure, "leaves": leaves}


def cmp(expected, got, **kw):
    return compare_outputs(_wrap(expected), _wrap(got), [0.0], lambda d: (1e-4, 1e-4), what="trial 1", **kw)


def test_parameters_and_inputs_come_from_independent_streams():
    """A Linear layer on torch.rand inputs: with one seed for both, input values equal the uniform draws
    behind the weights (correlation 1); with independent streams they are unrelated."""
    from verifier.gates.correctness import plan
    from verifier.inputs import make_inputs
    from verifier.task import TaskSpec, load_task_module

    spec = TaskSpec("linear_rand", (SOUNDNESS / "linear_rand.py").read_text())
    module = load_task_module(spec)
    trials, _ = plan(spec, 5, second_shape=False)
    for trial in trials:
        torch.manual_seed(trial.model_seed)
        weight = module.Model(*module.get_init_inputs()).fc.weight.detach().flatten()
        x = make_inputs(module.get_inputs, trial)[0].flatten()
        corr = torch.corrcoef(torch.stack([weight, x]))[0, 1].abs()
        assert corr < 0.2, (trial, float(corr))
        assert trial.model_seed != trial.seed


def test_seeds_are_drawn_fresh_and_are_not_in_the_source():
    from verifier.inputs import trial_plan

    a, b = trial_plan(5), trial_plan(5)
    seeds_a = {t.seed for t in a} | {t.model_seed for t in a}
    seeds_b = {t.seed for t in b} | {t.model_seed for t in b}
    assert not seeds_a & seeds_b
    assert not seeds_a & set(range(0, 10_000))
    assert a[2].model_seed == a[0].model_seed      # the performance gate's re-check relies on it
    assert [t.distribution for t in a][-2:] == ["signed", "wide"]


def test_widened_inputs_are_sign_symmetric_and_larger_and_leave_integers_alone():
    from verifier.inputs import Trial, make_inputs

    def get_inputs():
        return [torch.rand(256, 256), torch.randint(0, 10, (64,)), torch.rand(8) > 0.5]

    own = make_inputs(get_inputs, Trial(7, "normal"))
    signed = make_inputs(get_inputs, Trial(7, "signed"))
    wide = make_inputs(get_inputs, Trial(7, "wide"))
    assert float(own[0].min()) >= 0 and float(signed[0].min()) < -1 and float(wide[0].abs().max()) > 8
    assert torch.equal(own[1], signed[1]) and torch.equal(own[2], wide[2])


def test_a_larger_second_shape_is_planned_and_a_stated_precondition_turns_widening_off():
    from verifier.task import second_shape_candidates, widen_inputs

    source = "batch_size = 64\ndim = 4096\n"
    larger = second_shape_candidates(source, {})["larger"]
    assert 81 <= larger[0]["batch_size"] < 81 + 16 and 5121 <= larger[0]["dim"] < 5121 + 64
    assert larger[1] == {"batch_size": 64, "dim": larger[0]["dim"]}     # only the largest size grown
    assert widen_inputs(source) and not widen_inputs(source + "WIDEN_INPUTS = False\n")


def test_norm_wise_bound_catches_small_outputs_of_zeros():
    expected = torch.full((8, 32768), 1.0 / 32768)
    assert isinstance(cmp(expected, expected * (1 + 1e-6)), Agreement)
    zeros = cmp(expected, torch.zeros_like(expected))
    assert isinstance(zeros, Mismatch) and "norm-wise relative error" in zeros.message
    half = expected.clone()
    half[:, ::2] = 0
    assert isinstance(cmp(expected, half), Mismatch)


def test_places_nobody_can_judge_are_not_compared():
    expected = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    got = torch.tensor([1.0, 7.0, 3.0, 4.0])
    assert "lacks NaN" in cmp(expected, got).message
    assert isinstance(cmp(expected, got, undefined_ok=True), Agreement)      # a widened trial
    ignore = [torch.tensor([False, False, False, True])]
    other = torch.tensor([1.0, 2.0, 3.0, -9.0])
    assert isinstance(cmp(torch.tensor([1.0, 2.0, 3.0, 4.0]), other, ignore=ignore), Agreement)
    assert isinstance(cmp(torch.tensor([1.0, 2.0, 3.0, 4.0]), other), Mismatch)


def test_reversed_writes_expose_duplicate_index_scatter():
    from verifier.job.worker_reference import WriteOrder

    x, index, src = torch.zeros(4), torch.tensor([0, 0, 2]), torch.tensor([1.0, 2.0, 3.0])
    with WriteOrder() as plain:
        a = x.scatter(0, index, src)
    with WriteOrder(reverse=True):
        b = x.scatter(0, index, src)
        y = torch.zeros(4)
        y[index] = src
    assert plain.seen["scatter"] == 1
    assert a[2] == b[2] == 3.0 and {float(a[0]), float(b[0])} == {1.0, 2.0}
    assert float(y[0]) == float(b[0])


def test_job_records_round_trip():
    from verifier.inputs import shape_trial, trial_plan
    from verifier.jobs import CandidateJob, ReferenceJob, ReferenceResult, ShapeSearch
    from verifier.task import TaskSpec

    spec = TaskSpec("t", "x = 1\n", size_overrides={"n": 8})
    ref = ReferenceJob(spec, trial_plan(5), [ShapeSearch("larger", [{"n": 11}], shape_trial("larger", {}))],
                       noise_ratios={"normal|": [0.5]})
    assert ReferenceJob.from_dict(ref.to_dict()) == ref
    cand = CandidateJob(spec, trial_plan(5), library="lib.so", eval_mode=True)
    assert CandidateJob.from_dict(cand.to_dict()) == cand
    res = ReferenceResult(trial_plan(5), dropped=["x"], eval_mode="why")
    assert ReferenceResult.from_dict(res.to_dict()) == res
