"""Figures that agree (#51, 4): one convention for case numbers, per-case rows that say what their speedup is,
and a timed-case choice that does what its message says."""

from __future__ import annotations

import json

from verifier.cases import parse_case_file, timing_order

# NPUKernelBench's 15_gt_tensor in small: thirteen dtypes, two cases each (the larger second), x and y alike
DTYPES = ["bf16", "bool", "fp16", "fp32", "fp64", "int16", "int32", "int64", "int8", "uint16", "uint32", "uint64",
          "uint8"]


def gt_cases() -> tuple[dict, ...]:
    """Two cases per dtype, the floating ones far the largest (as in the suite's case file)."""
    lines = []
    for k, d in enumerate(DTYPES):
        big = d.startswith(("fp", "bf"))
        for n in ((256 + k, 512 + k) if big else (8 + k, 64 + k)):
            lines.append({"inputs": [{"name": "x", "dtype": d, "shape": [n, 4]}, {"name": "y", "dtype": d,
                                                                               "shape": [n, 4]}]})
    return parse_case_file("".join(json.dumps(c) + "\n" for c in lines))


def test_the_timed_cases_cover_every_dtype_the_slots_allow_and_name_the_rest():
    """The finding: "the largest case of each dtype first (so every dtype is timed)" timed fp16 and fp32 twice
    and never int8/int16/int32/unsigned in a 13-dtype task: only floating dtypes counted."""
    cases = gt_cases()
    chosen = timing_order(cases, range(len(cases)))[:8]
    dtypes = [cases[k]["inputs"][0]["dtype"] for k in chosen]
    assert len(set(dtypes)) == 8, dtypes                        # eight slots, eight dtypes, none twice
    assert sum(d.startswith(("fp", "bf")) for d in dtypes) == 4, dtypes   # the floats once each, then the others
    assert all(cases[k]["inputs"][0]["shape"][0] >= 64 for k in chosen)   # each dtype's larger case
    from verifier.cases import canonical_dtype, untimed_dtypes
    from verifier.gates.performance import timed_words

    dtypes = [canonical_dtype(d) for d in dtypes]
    left = untimed_dtypes(cases, range(len(cases)), chosen)
    assert sorted(left) == sorted({canonical_dtype(d) for d in DTYPES} - set(dtypes)) and len(left) == 5
    said = timed_words(chosen, len(cases), 8, cases, left)
    assert "no slot left to time " + ", ".join(left) in said
    # with a slot per dtype every dtype is timed, and the message says so
    every = timing_order(cases, range(len(cases)))[:13]
    assert not untimed_dtypes(cases, range(len(cases)), every)
    assert "every dtype timed at least once" in timed_words(every, len(cases), 13, cases, [])


def test_a_case_is_named_by_its_number_in_text_and_in_json_alike():
    """The finding: case numbers were 1-based in `verify`'s text, 0-based in `--json` and in `tasks` notes."""
    from verifier.sizing.case_limits import fit_cases

    # a case dropped by the memory budget is named by its number, and the cases after it keep theirs
    huge = parse_case_file("".join(json.dumps({"inputs": [{"name": "x", "dtype": "float32", "shape": s}]}) + "\n"
                                   for s in ([4, 4], [7] * 10, [8, 8])))
    kept, notes = fit_cases(huge)
    assert any("(#2)" in n for n in notes), notes
    assert [c.get("number") for c in kept] == [1, 3]
    from verifier.cases import case_number, numbered_entry

    cases = gt_cases()
    assert [case_number(cases, k) for k in (0, 1, 25)] == [1, 2, 26]
    # a verdict's entry keeps its index; JSON readers get its number, as the text says it
    assert numbered_entry({"case": 7, "number": 8, "speedup": 2.0}) == {"case": 8, "speedup": 2.0}
    assert numbered_entry({"case": 7, "speedup": 2.0}) == {"case": 8, "speedup": 2.0}   # stored before #51


def test_a_case_row_says_what_its_speedup_is_and_its_verdict():
    """The finding: per-case rows gave each side's median and a speedup that is the median of paired ratios
    (case 8: 4.961 ms against 16.041 ms, "2.36x"), with nothing saying so."""
    from rich.console import Console

    from evotui.cmd_verify import case_table

    console = Console(width=200, record=True)
    console.print(case_table([{"case": 7, "number": 8, "inputs": "x float16[8, 4]", "correct": True,
                               "max_abs_error": 0.0, "latency_ms": 4.961, "reference_ms": 16.041, "speedup": 2.36,
                               "speedup_ci": [1.9, 2.8], "vs_reference": "faster", "timed": True},
                              {"case": 8, "number": 9, "inputs": "x float16[2]", "correct": True, "timed": False}]))
    text = console.export_text()
    assert "median over the window's rounds of the paired ratio" in text and "need not equal ref ms / ms" in text
    row = next(line for line in text.splitlines() if "4.961" in line)
    assert row.split()[0] == "8" and "faster" in row
