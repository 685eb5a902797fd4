"""Multi-case tasks of the NPU benchmark's kind end to end: case files written with short dtype names
(``bf16``), complex and unsigned dtypes, inputs that are lists of tensors; the tasks here are written
for these tests (never copied from a public suite), with constraints of their own (even last
dimensions, divisible channels) and cases too large for the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from case_tasks import FLATTEN

from core.tasks import load_suite, scale_task
from verifier.cases import canonical_dtype, case_dtypes, describe_case, parse_case_file, unnumbered
from verifier.inputs import Trial, make_inputs
from verifier.task import load_task_module
from verifier.tolerance import floored

ROOT = Path(__file__).resolve().parents[2]


def write(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def jsonl(cases: list[dict]) -> str:
    return "".join(json.dumps(c) + "\n" for c in cases)


# a task that maps the short names itself, as the NPU benchmark's do
SHORT_NAMES = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return x != y

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "ne.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    names = {"bf16": torch.bfloat16, "fp16": torch.float16, "complex128": torch.complex128,
             "uint16": torch.uint16, "float32": torch.float32}
    groups = []
    for case in cases:
        x, y = case["inputs"]
        groups.append([torch.randn(x["shape"]).to(names[x["dtype"]]), torch.randn(y["shape"]).to(names[y["dtype"]])])
    return groups

def get_init_inputs():
    return []
'''

SHORT_CASES = [
    {"inputs": [{"name": "x", "dtype": "bf16", "shape": [4, 16]}, {"name": "y", "dtype": "bf16", "shape": [4, 1]}]},
    {"inputs": [{"name": "x", "dtype": "complex128", "shape": [32]}, {"name": "y", "dtype": "complex128",
                                                                     "shape": [32]}]},
    {"inputs": [{"name": "x", "dtype": "uint16", "shape": [9]}, {"name": "y", "dtype": "fp16", "shape": [9]}]},
]

# an input that is a list of tensors ("shapes"), beside an attribute
CAT = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, tensors, dim):
        return torch.cat(tensors, dim=dim)

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "cat.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    groups = []
    for case in cases:
        ts, dim = case["inputs"]
        dtype = {"float32": torch.float32, "float16": torch.float16}[ts["dtype"]]
        groups.append([[torch.randn(s, dtype=dtype) for s in ts["shapes"]], dim["value"]])
    return groups

def get_init_inputs():
    return []
'''

CAT_CASES = [
    {"inputs": [{"name": "tensors", "type": "tensor_list", "dtype": "float32", "shapes": [[64, 32], [64, 32]]},
                {"name": "dim", "value": 0}]},
    {"inputs": [{"name": "tensors", "type": "tensor_list", "dtype": "float16",
                 "shapes": [[16, 40], [16, 24], [16, 8]]}, {"name": "dim", "value": 1}]},
]


def test_short_dtype_names_complex_and_unsigned_cases_load_and_build(tmp_path):
    suite = load_suite(write(tmp_path / "s", {"ne.py": SHORT_NAMES, "ne.json": jsonl(SHORT_CASES)}))
    assert suite.errors == []
    task = suite.get("ne")
    assert tuple(map(unnumbered, task.cases)) == tuple(SHORT_CASES)  # kept as written: the task's own code reads "bf16"
    assert canonical_dtype("bf16") == "bfloat16" and case_dtypes(task.cases[0]) == ["bfloat16"]
    assert floored("bf16", 1e-4, 1e-4) == floored("bfloat16", 1e-4, 1e-4)
    module = load_task_module(task.spec())
    got = [make_inputs(module.get_inputs, Trial(seed=3, distribution="normal", case=k))[0].dtype for k in range(3)]
    assert got == [torch.bfloat16, torch.complex128, torch.uint16]


def test_a_list_of_tensors_input_loads_scales_and_builds(tmp_path):
    suite = load_suite(write(tmp_path / "s", {"cat.py": CAT, "cat.json": jsonl(CAT_CASES)}))
    assert suite.errors == []
    task = suite.get("cat")
    assert "tensors [3 tensors] float16[16, 40], float16[16, 24], float16[16, 8]" in describe_case(task.cases[1])
    half = scale_task(task, 0.5)
    # per case, so the extents the concatenation needs equal stay equal (8 divides the others: it still does)
    assert [e["shapes"] for e in (c["inputs"][0] for c in half.cases)] == [[[32, 16], [32, 16]],
                                                                          [[8, 16], [8, 16], [8, 8]]]
    module = load_task_module(half.spec())
    tensors, dim = make_inputs(module.get_inputs, Trial(seed=1, distribution="normal", case=1))
    assert [tuple(t.shape) for t in tensors] == [(8, 16), (8, 16), (8, 8)] and dim == 1
    assert module.Model()(tensors, dim).shape == (8, 40)


def test_a_case_file_that_cannot_be_used_still_says_why_in_one_line():
    from verifier.cases import CaseError

    with pytest.raises(CaseError, match="unknown dtype 'float8'.*bf16"):
        parse_case_file('{"inputs": [{"name": "x", "dtype": "float8", "shape": [2]}]}\n', "c.json")
    with pytest.raises(CaseError, match="\"shapes\", a list of them"):
        parse_case_file('{"inputs": [{"name": "x", "dtype": "float32", "shapes": [[2], "three"]}]}\n', "c.json")


def evokernel(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVOKERNEL_MODEL")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "evotui.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


# a multi-case task whose reference fails on its second case
BROKEN_REFERENCE = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        if x.shape[0] == 48:
            raise RuntimeError("reference broke on the second case")
        return torch.relu(x)

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "broken.json")) as f:
        return [[torch.randn(json.loads(line)["inputs"][0]["shape"])] for line in f if line.strip()]

def get_init_inputs():
    return []
'''
BROKEN_CASES = [{"inputs": [{"name": "x", "dtype": "float32", "shape": [s, 64]}]} for s in (32, 48)]


@pytest.mark.parametrize("task, words", [("no_such_task", "no task 'no_such_task'"),
                                         pytest.param("broken", "reference broke", marks=pytest.mark.slow)])
def test_verify_json_prints_a_json_outcome_for_a_failure_before_the_verdict(tmp_path, task, words):
    from tests.fixtures.candidates import ELEMENTWISE_MODEL, RELU

    suite = write(tmp_path / "s", {"broken.py": BROKEN_REFERENCE, "broken.json": jsonl(BROKEN_CASES)})
    write(tmp_path / "cand", {"model.py": ELEMENTWISE_MODEL.replace("{fn}", "relu_forward"), "kernel.cpp": RELU})
    proc = evokernel("verify", "cand", "--task", task, "--suite", str(suite), "--json", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["feasible"] is False and words in (data.get("error") or data.get("message")), data


# a unary task over cases, some far too large for a verification to keep every trial's results of
UNARY = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.abs(x)

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "unary.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    d = {"float32": torch.float32, "float16": torch.float16}
    return [[torch.randn(c["inputs"][0]["shape"]).to(d[c["inputs"][0]["dtype"]])] for c in cases]

def get_init_inputs():
    return []
'''


def unary_case(shape: list[int], dtype: str = "float32") -> dict:
    return {"inputs": [{"name": "x", "dtype": dtype, "shape": shape}]}


def test_oversized_cases_shrink_to_the_budget_and_an_unshrinkable_one_is_dropped_with_a_note(tmp_path):
    from verifier.cases import case_bytes
    from verifier.sizing.limits import CASES_BYTES_BUDGET

    cases = [unary_case([64, 100]), unary_case([8192, 16384]), unary_case([4096, 8192], "float16"),
             unary_case([7] * 10), unary_case([33, 17])]  # 7**10 elements: extents under 8 never scale
    suite = load_suite(write(tmp_path / "s", {"unary.py": UNARY, "unary.json": jsonl(cases)}))
    task = scale_task(suite.get("unary"), None)   # as written: still within the budget
    kept = task.cases
    assert sum(case_bytes(c) for c in kept) <= CASES_BYTES_BUDGET
    assert len(kept) == 4 and unnumbered(kept[0]) == cases[0] and unnumbered(kept[-1]) == cases[4]   # as written
    assert [c["number"] for c in kept] == [1, 2, 3, 5]   # each keeps its number: #4 was dropped
    assert kept[1]["inputs"][0]["shape"][0] < 8192 and kept[2]["inputs"][0]["dtype"] == "float16"
    note = task.scale_note()
    assert "2 of 5 cases shrunk" in note and "dropped 1 case (#4)" in note   # by its number, 1-based
    module = load_task_module(task.spec())
    x = make_inputs(module.get_inputs, Trial(seed=1, distribution="normal", case=1))[0]
    assert list(x.shape) == kept[1]["inputs"][0]["shape"]
    # a factor or "auto" never grows them past it either
    assert sum(case_bytes(c) for c in scale_task(suite.get("unary"), 0.9).cases) <= CASES_BYTES_BUDGET


SIZED = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

rows = 64
cols = 4096

def get_inputs():
    return [torch.randn(rows, cols)]

def get_init_inputs():
    return []
'''


def no_probe(*args, **kwargs):
    raise AssertionError("a probe ran where the recorded sizes should have answered")


def test_auto_sizes_are_decided_once_recorded_beside_the_memory_and_redecided_only_when_asked(tmp_path, monkeypatch):
    import core.tasks
    from core.tasks import record_sizes, recorded_sizes, sizes_path
    from core.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    suite = load_suite(write(tmp_path / "s", {"relu.py": SIZED, "unary.py": UNARY,
                                              "unary.json": jsonl([unary_case([64, 100]), unary_case([8, 4096])])}))
    task = suite.get("relu")
    # the window is wide enough that the first measurement lands in it: what is tested is what is kept
    first = scale_task(task, "auto", cache_dir=ws.cache_dir, window=(0.01, 1e4), threads=1)
    assert sizes_path(ws.cache_dir) == ws.memory_path.parent / "sizes.json" and sizes_path(ws.cache_dir).exists()
    monkeypatch.setattr(core.tasks, "run_probe", no_probe)
    # a later call (another run, method, verification; any load on the machine) sees the same sizes
    again = scale_task(task, "auto", cache_dir=ws.cache_dir, window=(0.5, 0.6), threads=4)
    assert (again.sizes, again.cases) == (first.sizes, first.cases)
    # an edited file is another task: not answered from the old record
    edited = load_suite(write(tmp_path / "s", {"relu.py": SIZED.replace("torch.relu(x)", "torch.relu(x) * 2")}))
    assert recorded_sizes(edited.get("relu"), ws.cache_dir) is None
    with pytest.raises(AssertionError, match="a probe ran"):   # and asked to re-decide, it probes again
        scale_task(task, "auto", cache_dir=ws.cache_dir, resize=True)
    # a recorded sizing of a multi-case task keeps its cases within their budget
    probe = recorded_sizes(task, ws.cache_dir)
    assert probe is not None
    record_sizes(suite.get("unary"), core.tasks.Probe(ok=True, cases=[unary_case([64, 100]), unary_case([9000, 9000])]),
                 ws.cache_dir)
    from verifier.cases import case_bytes
    from verifier.sizing.limits import CASES_BYTES_BUDGET

    unary = scale_task(suite.get("unary"), "auto", cache_dir=ws.cache_dir)
    assert sum(case_bytes(c) for c in unary.cases) <= CASES_BYTES_BUDGET and "shrunk" in unary.scale_note()


def test_a_listing_under_auto_answers_from_the_files_and_the_recorded_sizes_without_a_probe(tmp_path, monkeypatch,
                                                                                           capsys):
    import core.tasks
    from core.tasks import Probe, record_sizes
    from core.workspace import Workspace
    from evotui import cli

    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    (ws.root / "evokernel.toml").write_text('size_scale = "auto"\n')
    root = write(tmp_path / "s", {"relu.py": SIZED, "other.py": SIZED.replace("cols = 4096", "cols = 512")})
    record_sizes(load_suite(root).get("relu"), Probe(ok=True, overrides={"cols": 1000}, ms=5.0), ws.cache_dir)
    monkeypatch.setattr(core.tasks, "run_probe", no_probe)
    for _ in range(2):  # the same sizes every call
        assert cli.main(["--workspace", str(ws.root), "tasks", "--suite", str(root), "--json"]) == 0
        out, err = capsys.readouterr()
        rows = {r["id"]: r for r in json.loads(out)["tasks"]}
        assert rows["relu"]["sizes"] == {"rows": 64, "cols": 1000} and rows["other"]["sizes"]["cols"] == 512
        assert "1 task not sized yet" in err and "(other)" in err and "tasks --check --size-scale auto" in err


# tasks with constraints of their own: SwiGLU halves its last dimension (it must stay even), GroupNorm's
# channels must stay a multiple of the case's num_groups and equal to its weight's length
SWIGLU = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, dim):
        a, b = torch.chunk(x, 2, dim=dim)
        return torch.nn.functional.silu(a) * b

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "swiglu.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    return [[torch.randn(c["inputs"][0]["shape"]), c["inputs"][1]["value"]] for c in cases]

def get_init_inputs():
    return []
'''

GROUPNORM = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, num_groups, weight, bias):
        return torch.nn.functional.group_norm(x, num_groups, weight, bias)

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "gn.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    out = []
    for c in cases:
        x, g, w, b = c["inputs"]
        out.append([torch.randn(x["shape"]), g["value"], torch.randn(w["shape"]), torch.randn(b["shape"])])
    return out

def get_init_inputs():
    return []
'''


def gn_case(n: int, c: int, h: int, w: int, groups: int) -> dict:
    return {"inputs": [{"name": "x", "dtype": "float32", "shape": [n, c, h, w]},
                       {"name": "num_groups", "dtype": "int", "value": groups},
                       {"name": "weight", "dtype": "float32", "shape": [c]},
                       {"name": "bias", "dtype": "float32", "shape": [c]}]}


def test_scaling_keeps_a_tasks_own_constraints_and_never_swaps_larger_and_smaller(tmp_path):
    from verifier.sizing.scaling import scale_values

    swiglu = [{"inputs": [{"name": "x", "dtype": "float32", "shape": s}, {"name": "dim", "value": -1}]}
              for s in ([130], [690, 346], [48, 1002])]
    gn = [gn_case(2, 96, 28, 28, 12), gn_case(1, 320, 17, 33, 32), gn_case(4, 64, 56, 56, 8)]
    root = write(tmp_path / "s", {"swiglu.py": SWIGLU, "swiglu.json": jsonl(swiglu), "gn.py": GROUPNORM,
                                  "gn.json": jsonl(gn)})
    suite = load_suite(root)
    for factor in (0.13, 0.3, 0.55, 0.77):
        for tid in ("swiglu", "gn"):
            task = scale_task(suite.get(tid), factor)
            module = load_task_module(task.spec())
            model = module.Model()
            for k in range(len(task.cases)):   # the reference runs at every scaled case
                model(*make_inputs(module.get_inputs, Trial(seed=k, distribution="normal", case=k)))
        for case in scale_task(suite.get("gn"), factor).cases:
            x, groups, w, _ = case["inputs"]
            assert x["shape"][1] % groups["value"] == 0 and w["shape"] == [x["shape"][1]]
        assert all(c["inputs"][0]["shape"][-1] % 2 == 0 for c in scale_task(suite.get("swiglu"), factor).cases)
    # a normalized_shape written as an attribute follows the extents it names; a repeat count is no size
    from verifier.sizing.scaling import scale_cases

    ln = {"inputs": [{"name": "x", "dtype": "float32", "shape": [4, 128, 4096]},
                     {"name": "normalized_shape", "value": [4096]}, {"name": "repeats", "value": [16, 1]}]}
    (half,) = scale_cases((ln,), 0.5)
    assert [e.get("shape") or e.get("value") for e in half["inputs"]] == [[4, 64, 2048], [2048], [16, 1]]
    # group count equal to the channels: the channels stay as written
    (g,) = scale_cases((gn_case(2, 64, 64, 64, 64),), 0.5)
    assert g["inputs"][0]["shape"][1] == 64 and g["inputs"][2]["shape"] == [64]
    # an argmax's 4096 x 4095 beside a batch of 128 that divides one of them: the larger stays the larger
    for f in range(5, 1000, 7):
        out = scale_values({"batch": 128, "dim1": 4096, "dim2": 4095}, f / 1000)
        assert out["dim1"] >= out["dim2"], (f, out)


GELU = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, approximate):
        return torch.nn.functional.gelu(x, approximate=approximate)

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "gelu.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    d = {"float32": torch.float32, "float16": torch.float16, "bf16": torch.bfloat16}
    return [[torch.randn(c["inputs"][0]["shape"]).to(d[c["inputs"][0]["dtype"]]), c["inputs"][1]["value"]]
            for c in cases]

def get_init_inputs():
    return []
'''


def test_draft_and_refine_prompts_of_a_multi_case_task_show_its_cases_types_and_tolerances(tmp_path):
    from core import prompts
    from store import Experience
    from tests.fixtures import candidates as C

    cases = [{"inputs": [{"name": "x", "dtype": dt, "shape": shape}, {"name": "approximate", "value": ap}]}
             for dt, shape, ap in [("float32", [1000], "none"), ("float16", [64, 96], "tanh"),
                                   ("bf16", [33, 17], "none")] * 6]
    task = load_suite(write(tmp_path / "s", {"gelu.py": GELU, "gelu.json": jsonl(cases)})).get("gelu")
    draft = prompts.draft_prompt(task, "cpu", [], [], [])[1][1]
    start = Experience(task_id="gelu", kind="draft_trace", backend="cpu", stage="draft", title="gelu draft",
                       files=C.elementwise(C.RELU), outcome={"feasible": True, "latency_ms": 0.2})
    start.id = "s" * 20
    refine = prompts.refine_prompt(task, "cpu", [], [], [], start, [])[1][1]
    for text in (draft, refine):
        assert "## Cases: 18," in text
        assert "it must serve all of these dtypes, float32, float16, bfloat16" in text
        assert "case #2 (timed): x float16[64, 96], approximate='tanh'" in text
        assert "case #3 (timed): x bf16[33, 17]" in text and "case #4: x float32[1000]" in text
        # the first 12 and the 8 timed ([verifier] timed_cases) listed, the others summed up (issue #36)
        assert "8 timed, the same ones in every verification (#1, #2, #3, #5, #8, #11, #14, #17" in text
        assert "... 4 more" in text and "Attribute approximate takes 2 values: 'none', 'tanh'" in text
        assert "float16: uint16_t*" in text and "_Float16*" in text and "bfloat16: uint16_t*" in text
        assert "float32 atol=0.0001 rtol=0.0001; float16 atol=0.01 rtol=0.01; bfloat16 atol=0.03 rtol=0.03" in text
        # one tolerance statement, per dtype (a loopback run's reader: "atol=1e-4 (float32)" beside fp16 cases),
        # and sizes that are the cases, not "as written"
        assert "atol=0.0001 and rtol=0.0001 (float32" not in text and "Sizes: as written" not in text
        assert "Sizes: the cases listed under Cases below" in text
    assert "within each dtype's tolerance (under Cases)" in draft
    # a single-case task's prompt has no such section
    relu = load_suite(ROOT / "tests" / "fixtures" / "suite").get("relu")
    assert "## Cases" not in prompts.draft_prompt(relu, "cpu", [], [], [])[1][1]


def test_auto_learns_a_case_constraint_from_the_reference_failing_and_keeps_or_drops_that_case(tmp_path):
    """A flattened length written as an attribute is a constraint no rule names: scaled, the tensor no
    longer has 6400 elements. The sizer learns it from the reference's failure at those sizes: that case
    stays as written; a case whose reference fails even as written is dropped; the others are still sized."""
    from verifier.sizing.driver import probe
    from verifier.sizing.record import Progress

    def flat_case(width: int, length: int) -> dict:
        return {"inputs": [{"name": "x", "dtype": "float32", "shape": [64, width]},
                           {"name": "length", "dtype": "int", "value": length}]}

    cases = [flat_case(96, -1), flat_case(100, 6400), flat_case(90, 5000)]
    spec = load_suite(write(tmp_path / "s", {"flat.py": FLATTEN, "flat.json": jsonl(cases)})).get("flat").spec()
    def measure(spec, threads, call_cap, trace=False):   # the reference's own check, and a time by bytes
        module = load_task_module(spec)
        for k in range(len(spec.cases)):
            try:
                module.Model()(*make_inputs(module.get_inputs, Trial(seed=k, distribution="normal", case=k)))
            except Exception as exc:
                exc.evokernel_case = k
                raise
        from verifier.cases import case_bytes

        # 1 ns a byte: the count (now possible, the failing cases pinned from it) sizes it, the time confirms
        case_ms = [case_bytes(c) / 1e6 for c in spec.cases]
        return {"ms": max(case_ms), "case_ms": case_ms, "ops": {}}

    job = {"spec": spec.to_dict(), "mode": "auto", "factor": 1.0, "window": [2.0, 50.0], "bytes_cap": 1 << 30,
           "threads": 1, "trace": False}
    out = probe(job, Progress(str(tmp_path / "progress.jsonl")), measure=measure)
    assert out["ok"], out
    got = out["cases"]
    assert len(got) == 2 and unnumbered(got[1]) == cases[1]   # kept as written; the third dropped
    assert got[0]["inputs"][0]["shape"][1] > 96, out     # the other case still grown toward the window
    notes = " ".join(out["notes"])
    assert "case #2 kept as written" in notes and "case #3 dropped" in notes and "shape '[5000]' is invalid" in notes


def test_auto_says_when_the_cases_memory_budget_stops_growth(tmp_path):
    from verifier.sizing.driver import probe
    from verifier.sizing.record import Progress

    cases = [unary_case([2048, 4096]), unary_case([1024, 4096]), unary_case([64, 64])]
    spec = load_suite(write(tmp_path / "s", {"unary.py": UNARY, "unary.json": jsonl(cases)})).get("unary").spec()

    def measure(spec, threads, call_cap, trace=False):   # a fast machine: every case well under the window
        return {"ms": 0.1, "case_ms": [0.1] * len(spec.cases), "ops": {}}

    job = {"spec": spec.to_dict(), "mode": "auto", "factor": 1.0, "window": [2.0, 50.0], "bytes_cap": 1 << 30,
           "threads": 1, "trace": False}
    out = probe(job, Progress(str(tmp_path / "progress.jsonl")), measure=measure)
    assert out["ok"] and out["reason"] == "memory_cap", out
    assert "3 cases are at their memory budget (48 MiB" in out["problem"]


# |x| for fp32 and 16-bit cases: our own kernels, one right for every dtype, one whose 16-bit launcher
# forgets to clear the sign bit (right for fp32, wrong for every fp16 case)
ABS_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        if x.dtype == torch.float32:
            lib.abs_f32(x, out, x.numel())
        else:
            lib.abs_16(x, out, x.numel())
        return out
'''

ABS_KERNEL = '''
#include <cstdint>
#include <cmath>
extern "C" void abs_f32(const float* x, float* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = std::fabs(x[i]);
}
// float16 and bfloat16 alike: the sign is the top bit
extern "C" void abs_16(const uint16_t* x, uint16_t* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] & 0x7FFFu;
}
'''


@pytest.mark.slow   # real builds, sandboxed trials and a timing window per case, through the CLI
def test_verify_json_gives_each_cases_verdict_the_failing_cases_shapes_and_dtypes_and_each_cases_time(tmp_path):
    cases = [unary_case([64, 100]), unary_case([32, 48], "float16"), unary_case([1000]),
             unary_case([16, 3, 40], "float16")]
    suite = write(tmp_path / "s", {"unary.py": UNARY, "unary.json": jsonl(cases)})
    write(tmp_path / "good", {"model.py": ABS_MODEL, "kernel.cpp": ABS_KERNEL})
    write(tmp_path / "bad", {"model.py": ABS_MODEL, "kernel.cpp": ABS_KERNEL.replace("x[i] & 0x7FFFu", "x[i]")})

    bad = json.loads(evokernel("verify", "bad", "--task", "unary", "--suite", str(suite), "--json",
                               cwd=tmp_path).stdout)
    assert bad["feasible"] is False and bad["failed_gate"] == "correctness"
    assert [c["correct"] for c in bad["cases"]] == [True, False, True, False], bad["cases"]
    assert [c["inputs"] for c in bad["cases"]] == ["x float32[64, 100]", "x float16[32, 48]", "x float32[1000]",
                                                   "x float16[16, 3, 40]"]
    assert "case 2 (x float16[32, 48])" in bad["message"] and "2 of 4 cases failed" in bad["message"], bad["message"]
    assert "case 4 (x float16[16, 3, 40])" in bad["message"]
    # --json names a case by its number, as the text does (#51: 0-based there, 1-based here)
    assert all(c["message"].startswith(f"case {c['case']} (") for c in bad["cases"] if not c["correct"])

    proc = evokernel("verify", "good", "--task", "unary", "--suite", str(suite), "--json", cwd=tmp_path)
    good = json.loads(proc.stdout)
    assert good["feasible"] is True, good["message"]
    assert [c["case"] for c in good["cases"]] == [1, 2, 3, 4]
    for c in good["cases"]:
        assert c["correct"] and c["trials"] > 0 and c["latency_ms"] > 0 and c["reference_ms"] > 0, c
        assert c["speedup"] > 0 and c["rounds"] >= 3, c
    # the same per case in words
    text = evokernel("verify", "good", "--task", "unary", "--suite", str(suite), cwd=tmp_path).stdout
    assert "per case" in text and "float16[16, 3, 40]" in text


BIG = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

rows = 20000
cols = 16000

def get_inputs():
    return [torch.rand(rows, cols)]  # 1.2 GiB: over the memory cap, shrunk before any timing

def get_init_inputs():
    return []
'''


@pytest.mark.slow   # a real probe through the CLI
def test_tasks_check_puts_a_deliberate_shrink_under_notes_and_only_problems_under_problems(tmp_path):
    suite = write(tmp_path / "s", {"big.py": BIG})
    out = evokernel("tasks", "--suite", str(suite), "--check", "--size-scale", "auto", cwd=tmp_path).stdout
    lines = out.splitlines()
    header = next(line for line in lines if " problems " in line and line.rstrip().endswith("notes"))
    row = next(line for line in lines if line.lstrip().startswith("big "))
    notes_at = header.index("notes")
    assert "shrunk to fit 1.0 GiB before timing" in out
    assert row.index("shrunk") >= notes_at or "shrunk" not in row, (header, row)
    assert row[header.index("problems"):notes_at].strip() == "", (header, row)  # no problem: it is in the window


def test_an_output_size_attribute_scales_with_the_inputs_so_a_shrunk_case_does_less_work():
    """interpolate's ``size`` is the output's extents: left as written, a case shrunk for time or memory
    would still produce the full-size output (its work unchanged) and time out as before."""
    from verifier.sizing.scaling import scale_cases

    case = {"inputs": [{"name": "x", "dtype": "float32", "shape": [1, 3, 256, 256]},
                       {"name": "size", "value": [512, 384]}, {"name": "mode", "value": "bilinear"}]}
    (half,) = scale_cases((case,), 0.5)
    assert half["inputs"][0]["shape"] == [1, 3, 128, 128]
    assert half["inputs"][1]["value"] == [256, 192] and half["inputs"][2]["value"] == "bilinear"
    repeat = {"inputs": [{"name": "x", "dtype": "float32", "shape": [64, 64]}, {"name": "repeats", "value": [2, 3]}]}
    assert scale_cases((repeat,), 0.5)[0]["inputs"][1]["value"] == [2, 3]   # counts, not extents: kept


def test_the_cases_timed_are_a_deterministic_choice_the_largest_of_each_dtype_first():
    """Issue 26: a task with many cases times a bounded subset, the same for every candidate: the largest
    case of each dtype first (so every dtype is timed), then the largest others, ties by case order."""
    from verifier.cases import case_bytes, timing_order

    cases = [unary_case([64, 100]), unary_case([32, 48], "float16"), unary_case([1000]), unary_case([512, 512]),
             unary_case([16, 3, 40], "float16"), unary_case([8, 8], "bf16"), unary_case([300, 300]),
             unary_case([64, 64], "float16"), unary_case([1000])]
    assert case_bytes(cases[3]) == 512 * 512 * 4 and case_bytes(cases[5]) == 8 * 8 * 2
    order = timing_order(cases, range(len(cases)))
    # the largest float32 (#3), float16 (#7: 64x64), bf16 (#5), largest first; then the others by size
    assert order[:3] == [3, 7, 5]
    assert order[3:] == [6, 0, 2, 8, 4, 1]
    assert order == timing_order(list(cases), [8, 7, 6, 5, 4, 3, 2, 1, 0])   # the order asked in does not matter
    assert timing_order(cases, [0, 2, 8]) == [0, 2, 8]   # only the cases given (equal sizes: case order)


def verifier_workspace(root: Path, **settings) -> Path:
    """A workspace whose verifier times briefly: the tests read which cases are timed, not how fast."""
    root.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{k} = {v}\n" for k, v in settings.items())
    (root / "evokernel.toml").write_text("[verifier]\ntrials = 5\nwarmup_calls = 1\nthreads = 2\ntiming_calls = 5\n"
                                         f"timing_budget_s = 0.2\n{lines}")
    return root


@pytest.mark.slow   # real builds, sandboxed trials and timing windows, through the CLI
def test_a_task_with_many_cases_times_a_bounded_subset_within_the_cases_timing_budget(tmp_path):
    """12 cases, at most 4 timed ([verifier] timed_cases): the 4 the order chooses, each with its time, the
    others checked for correctness only, and the verdict says which. A cases' timing budget spent after the
    first window still times all 4 (issue #36: the set of timed cases depended on load, 8 of 44 in one run
    and 6 in the other for the same kernel); the windows get fewer rounds, never fewer cases."""
    shapes = [([64, 100], "float32"), ([32, 48], "float16"), ([1000], "float32"), ([200, 200], "float32"),
              ([16, 3, 40], "float16"), ([90, 90], "float16"), ([20, 20], "float32"), ([7, 7], "float16"),
              ([128, 64], "float32"), ([10], "float32"), ([33, 33], "float16"), ([5, 5, 5], "float32")]
    cases = [unary_case(s, d) for s, d in shapes]
    suite = write(tmp_path / "s", {"unary.py": UNARY, "unary.json": jsonl(cases)})
    write(tmp_path / "good", {"model.py": ABS_MODEL, "kernel.cpp": ABS_KERNEL})
    ws = verifier_workspace(tmp_path / "ws", timed_cases=4)

    proc = evokernel("verify", str(tmp_path / "good"), "--task", "unary", "--suite", str(suite), "--json", cwd=ws)
    good = json.loads(proc.stdout)
    assert good["feasible"] is True, (good["message"], proc.stderr[-2000:])
    assert all(c["correct"] for c in good["cases"]) and len(good["cases"]) == 12
    timed = [c["case"] for c in good["cases"] if c.get("latency_ms") is not None]
    assert timed == [1, 4, 6, 9], timed     # float32's largest (#4), float16's (#6), then the largest others
    assert [c["case"] for c in good["cases"] if c["timed"]] == timed
    perf = next(g for g in good["gates"] if g["name"] == "performance")
    assert perf["details"]["timed_cases"] == [1, 4, 6, 9]   # numbers in --json, as everywhere
    assert "timed 4 of 12 cases (#1, #4, #6, #9)" in perf["message"], perf["message"]

    ws = verifier_workspace(tmp_path / "ws2", timed_cases=4, cases_timing_budget_s=0.01)
    once = json.loads(evokernel("verify", str(tmp_path / "good"), "--task", "unary", "--suite", str(suite), "--json",
                                cwd=ws).stdout)
    assert once["feasible"] is True, once["message"]
    assert [c["case"] for c in once["cases"] if c["timed"]] == [1, 4, 6, 9]
    perf = next(g for g in once["gates"] if g["name"] == "performance")
    assert "timed 4 of 12 cases (#1, #4, #6, #9)" in perf["message"] and "not timed" not in perf["message"]
