"""Issue 26: `evokernel report` per case for multi-case tasks. A task whose verdicts carry cases says how
many passed for its best kernel (a feasible one: all, with each case's time and speedup from its own
window), or for its closest attempt when none was feasible (the failing case named with its inputs);
the same in --json. A single-case task has no per-case part."""

from __future__ import annotations

import json

from test_cli_daily import evokernel, tsv

from memory_content import outcome, relu_files

GELU_CASES = [
    {"case": 0, "inputs": "x float32[64, 33]", "correct": True, "max_abs_error": 1e-6, "max_rel_error": 1e-6},
    {"case": 1, "inputs": "x float16[4, 1024]", "correct": True, "max_abs_error": 2e-3, "max_rel_error": 1e-3},
]


def fill_run(ws) -> None:
    """One run: gelu_cases (a wrong first draft, then a feasible kernel timed per case), abs_cases (never
    feasible: its closer attempt fails one case of three), relu (one case, feasible)."""
    from store import Experience, RunRecord, Store

    with Store.open(ws.memory_path) as store:
        made = []

        def add(task, out):
            made.append(task)   # a body of its own per attempt: the store keeps near-duplicates once
            return store.add_experience(Experience(
                task_id=task, kind="draft_trace", backend="cpu", stage="draft", source="llm", title=f"{task} draft",
                files=relu_files(f"out[i] = x[i] * {len(made)}.f;"), outcome=out))[0]

        wrong = [dict(GELU_CASES[0]), {**GELU_CASES[1], "correct": False, "message": "x float16[4, 1024]: 12 of 4096 "
                                       "elements differ, max abs error 0.5 at [3, 17]"}]
        g1 = add("gelu_cases", {**outcome("gelu_cases", "correctness", "case 2 (x float16[4, 1024]): wrong"),
                                "cases": wrong})
        timed = [{**GELU_CASES[0], "latency_ms": 0.5, "reference_ms": 1.0, "speedup": 2.0, "speedup_ci": [1.9, 2.1],
                  "rounds": 20, "timed": True},
                 {**GELU_CASES[1], "latency_ms": 2.0, "reference_ms": 1.0, "speedup": 0.5, "speedup_ci": [0.45, 0.55],
                  "rounds": 20, "timed": True}]
        g2 = add("gelu_cases", {**outcome("gelu_cases", ms=1.0, ref=1.0), "cases": timed, "speedup": 1.0,
                                "speedup_ci": [0.95, 1.05], "vs_reference": "same"})
        three = [{"case": 0, "inputs": "x float32[1000]", "correct": True},
                 {"case": 1, "inputs": "x bfloat16[5, 7, 48]", "correct": False, "message": "nan where expected 1.0"},
                 {"case": 2, "inputs": "x float16[64]", "correct": False, "message": "shape (32,) != (64,)"}]
        a1 = add("abs_cases", {**outcome("abs_cases", "correctness", "case 2: nan"), "cases": three})
        closer = [three[0], three[1], {**three[2], "correct": True}]
        a2 = add("abs_cases", {**outcome("abs_cases", "correctness", "case 2: nan"), "cases": closer})
        a3 = add("abs_cases", outcome("abs_cases", "build", "error: expected ';'"))
        r1 = add("relu", {**outcome("relu", ms=1.0, ref=2.0), "vs_reference": "faster", "speedup_ci": [1.9, 2.1]})
        progress = {"gelu_cases": {"attempts": [g1, g2], "feasible": True, "best_id": g2, "iterations_used": 2},
                    "abs_cases": {"attempts": [a1, a2, a3], "iterations_used": 3},
                    "relu": {"attempts": [r1], "feasible": True, "best_id": r1, "iterations_used": 1}}
        store.put_run(RunRecord(id="run-cases", method="evokernel", config={"iterations": 3, "model": "m"},
                                tasks=list(progress), status="finished", progress=progress))


def test_report_json_says_per_case_for_the_best_kernel_or_the_closest_attempt(workspace):
    fill_run(workspace)
    proc = evokernel("report", "--json", cwd=workspace.root)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["runs"][0]["per_task"]
    gelu = rows["gelu_cases"]["cases"]
    assert (gelu["of"], gelu["total"], gelu["passed"], gelu["failed"], gelu["failing"]) == ("best", 2, 2, 0, [])
    # a case by its number, as `verify` and every table name it (#51: 0-based here, 1-based in the text)
    assert [(c["case"], c["latency_ms"], c["reference_ms"], c["speedup"]) for c in gelu["per_case"]] == \
        [(1, 0.5, 1.0, 2.0), (2, 2.0, 1.0, 0.5)]
    assert gelu["timed"] == 2
    # never feasible: the attempt with the most cases correct (2 of 3), its failing case named with its inputs
    abs_ = rows["abs_cases"]["cases"]
    assert (abs_["of"], abs_["total"], abs_["passed"], abs_["failed"]) == ("closest", 3, 2, 1)
    assert abs_["failing"] == [{"case": 2, "inputs": "x bfloat16[5, 7, 48]", "message": "nan where expected 1.0"}]
    assert abs_["timed"] == 0 and all(c.get("latency_ms") is None for c in abs_["per_case"])
    assert rows["relu"].get("cases") is None


def test_the_cases_cell_says_how_many_cases_were_timed():
    """Issue #36: the plain report never said how many of 7_sum's 44 cases were timed (8 in one run, 6 in the
    other for the same kernel)."""
    from evotui.cmd_report import _cases_cells

    cases = {"of": "best", "total": 44, "passed": 44, "failing": [], "timed": 8}
    assert _cases_cells(cases) == ["44/44, 8 timed", ""]
    assert _cases_cells({**cases, "timed": 44}) == ["44/44", ""]


def test_report_tables_show_cases_per_task_and_per_case(workspace):
    fill_run(workspace)
    by_task = {r["task"]: r for r in tsv(evokernel("report", "--tasks", cwd=workspace.root).stdout.split("\n\n")[-1])}
    assert by_task["gelu_cases"]["cases"] == "2/2"
    assert by_task["abs_cases"]["cases"] == "2/3 (closest attempt)"
    assert by_task["abs_cases"]["failing"] == "case 2: x bfloat16[5, 7, 48]"
    assert by_task["relu"]["cases"] == "-" and by_task["relu"]["failing"] == ""

    proc = evokernel("report", "--cases", cwd=workspace.root)
    assert proc.returncode == 0, proc.stderr
    per_case = tsv(proc.stdout.split("\n\n")[-1])
    got = [(r["task"], r["case"], r["inputs"], r["correct"], r["ms"], r["ref ms"], r["speedup"]) for r in per_case]
    assert got == [
        ("gelu_cases", "1", "x float32[64, 33]", "yes", "0.500", "1.000", "2.00x [1.90, 2.10]"),
        ("gelu_cases", "2", "x float16[4, 1024]", "yes", "2.000", "1.000", "0.50x [0.45, 0.55]"),
        ("abs_cases", "1", "x float32[1000]", "yes", "not timed", "", ""),
        ("abs_cases", "2", "x bfloat16[5, 7, 48]", "no: nan where expected 1.0", "not timed", "", ""),
        ("abs_cases", "3", "x float16[64]", "yes", "not timed", "", ""),
    ]
