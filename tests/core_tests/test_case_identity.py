"""A multi-case task's cases are known by their index in the task, never by their place among the cases
left: once the memory budget drops a case, the later ones must keep their own index, their own sizes
and their own notes (issue 26, the public 14_split keeping 27-35 of its 57 cases). The task here is
written for this test (never copied from a public suite); every case carries an ``id`` of its own so
the test can tell which one came back where."""

from __future__ import annotations

import json
from pathlib import Path

from case_tasks import FLATTEN

from core.tasks import load_suite
from verifier.cases import case_bytes, unnumbered
from verifier.inputs import Trial, make_inputs
from verifier.sizing.case_limits import fit_cases
from verifier.sizing.limits import CASES_BYTES_BUDGET
from verifier.task import load_task_module


def case(k: int, shape: list[int], length: int = -1) -> dict:
    return {"id": k, "inputs": [{"name": "x", "dtype": "float32", "shape": shape},
                                {"name": "length", "dtype": "int", "value": length}]}


# 7**9 float32 elements (161 MB): extents under 8 never scale, so it is over the 48 MiB budget at any size
HUGE = [7] * 9


def test_fit_cases_keeps_each_case_at_its_own_index_when_one_is_dropped():
    cases = (case(0, [64, 96]), case(1, [100, 64]), case(2, HUGE), case(3, [32, 80]), case(4, [50, 128]),
             case(5, [16, 40]))
    assert case_bytes(cases[2]) > CASES_BYTES_BUDGET
    got, notes = fit_cases(cases, keep=frozenset({1, 4}))
    assert [c["id"] for c in got] == [0, 1, 3, 4, 5]             # each case in its own place, in order
    assert got[1] == cases[1] and got[3] == cases[4]             # the kept ones as written
    assert any("(#3)" in n for n in notes), notes                # the dropped one named by its own number (1-based)
    from verifier.sizing.case_limits import fit_case_indices

    placed, notes = fit_case_indices(cases, keep=frozenset({1, 4}))
    assert [k for k, _ in placed] == [0, 1, 3, 4, 5] and all(c["id"] == k for k, c in placed)
    # without cases to keep: the same, the note by index
    placed, notes = fit_case_indices(cases)
    assert [k for k, _ in placed] == [0, 1, 3, 4, 5] and all(c["id"] == k for k, c in placed)
    assert any("(#3)" in n for n in notes), notes


def test_auto_pins_and_drops_the_case_that_failed_after_the_budget_dropped_an_earlier_one(tmp_path):
    """Case 1 is over the budget at any size (dropped by it); case 3's reference fails at scaled sizes
    (a flattened length written as an attribute: kept as written); case 5's fails even as written
    (dropped). Every other case is sized, and each case left is the one its index names."""
    from verifier.sizing.driver import probe
    from verifier.sizing.record import Progress

    cases = [case(0, [64, 96]), case(1, HUGE), case(2, [48, 72]), case(3, [100, 64], 6400), case(4, [32, 80]),
             case(5, [90, 64], 5000), case(6, [16, 40])]
    root = tmp_path / "s"
    root.mkdir()
    (root / "flat.py").write_text(FLATTEN)
    (root / "flat.json").write_text("".join(json.dumps(c) + "\n" for c in cases))
    spec = load_suite(root).get("flat").spec()

    def measure(spec, threads, call_cap, trace=False):   # the reference's own check, and a time by bytes
        module = load_task_module(spec)
        for k in range(len(spec.cases)):
            try:
                module.Model()(*make_inputs(module.get_inputs, Trial(seed=k, distribution="normal", case=k)))
            except Exception as exc:
                exc.evokernel_case = k
                raise
        case_ms = [case_bytes(c) / 1e6 for c in spec.cases]
        return {"ms": max(case_ms), "case_ms": case_ms, "ops": {}}

    # started at half the sizes: the scaled cases differ from the written ones from the first count on
    job = {"spec": spec.to_dict(), "mode": "auto", "factor": 0.5, "window": [2.0, 50.0], "bytes_cap": 1 << 30,
           "threads": 1, "trace": False}
    out = probe(job, Progress(str(Path(tmp_path) / "progress.jsonl")), measure=measure)
    assert out["ok"], out
    got = out["cases"]
    assert [c["id"] for c in got] == [0, 2, 3, 4, 6], (out["notes"], [c["id"] for c in got])
    assert unnumbered(got[2]) == cases[3]                         # kept as written (with its number, #4)
    assert got[2]["number"] == 4
    for c in got:                                                 # the others scaled alike: their own sizes
        if c["id"] != 3:
            (r, w), (r0, w0) = c["inputs"][0]["shape"], cases[c["id"]]["inputs"][0]["shape"]
            assert abs(r / w - r0 / w0) < 0.1 * r0 / w0, (c, cases[c["id"]])
    notes = " ".join(out["notes"])
    # each case named by its number (its index plus one; #51: one convention everywhere)
    assert "case #4 kept as written" in notes and "case #6 dropped" in notes, out["notes"]
    assert "case #2 dropped: over the cases' 48 MiB memory budget at its smallest sizes" in notes, out["notes"]
    assert "case #3 " not in notes and "case #5 " not in notes and "case #7 " not in notes, out["notes"]
