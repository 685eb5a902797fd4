"""Real-world suites: multi-case tasks with JSON-lines cases, NPU-only imports, sizing by measured
work, categories from traced ops, and ``tasks --check`` over a folder with broken tasks in it.

Every probe here is a real subprocess running the task's own code (with real timeouts); no test
asserts on a wall-clock time, only on what was chosen and reported."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.suite_check import check_tasks
from core.tasks import apply_probe, category_from_ops, load_suite, probe_task, scale_task
from verifier.cases import CaseError, case_geomean, case_performance, parse_case_file, unnumbered
from verifier.inputs import Trial, case_trials, make_inputs, trial_plan
from verifier.npu_source import neutralise_npu
from verifier.sizing.scaling import scale_values
from verifier.task import apply_overrides, load_task_module, size_constants
from verifier.tolerance import floored

WIDE = (1e-3, 1e4)  # a window every probe lands in: these tests check what sizing did, not timings

MULTI_CASE = '''
import json
import os
import torch
import torch.nn as nn


class Model(nn.Module):
    """Leaky ReLU over cases of several shapes and dtypes."""
    def __init__(self):
        super().__init__()

    def forward(self, x, slope):
        return torch.nn.functional.leaky_relu(x, slope)


def get_input_groups():
    path = os.path.join(os.path.dirname(__file__), "7_LeakyRelu.json")
    with open(path, "r") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    groups = []
    for case in cases:
        x_info, slope = case["inputs"]
        x = torch.randn(x_info["shape"], dtype=torch.float32).to(dtypes[x_info["dtype"]])
        groups.append([x, slope["value"]])
    return groups


def get_init_inputs():
    return []
'''

CASES = [
    {"inputs": [{"name": "x", "dtype": "float32", "shape": [64, 96]}, {"name": "slope", "value": 0.1}]},
    {"inputs": [{"name": "x", "dtype": "float16", "shape": [3, 5, 33]}, {"name": "slope", "value": 0.2}]},
    {"inputs": [{"name": "x", "dtype": "bfloat16", "shape": [4096]}, {"name": "slope", "value": 0.01}]},
]

BIG_PARAMETER = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out, bias=False)

    def forward(self, x):
        return self.fc(x)

batch_size = 8
in_features = 16384
out_features = 16384

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
'''

EXPRESSIONS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return x.sum(dim=-1) + y.mean()

N = 2048 * 2
height = width = 256
shape = (128, 384)

def get_inputs():
    return [torch.randn(N, height + width), torch.randn(*shape)]

def get_init_inputs():
    return []
'''

DIVISIBLE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, block_len):
        super().__init__()
        self.block_len = block_len

    def forward(self, x):
        b, s, d = x.shape
        assert s % self.block_len == 0, "seq_length must be a multiple of block_len"
        return x.view(b, s // self.block_len, self.block_len, d).cumsum(2).view(b, s, d)

batch_size = 16
seq_length = 96 * 8
block_len = 96
dim = 320

def get_inputs():
    return [torch.randn(batch_size, seq_length, dim)]

def get_init_inputs():
    return [block_len]
'''

MISSING_PACKAGE = '''
import torch
import torch.nn as nn
import evokernel_no_such_package_xyz

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
'''

NPU_PLACEMENT = '''
import torch
import torch.nn as nn
import torch_npu

class Model(nn.Module):
    """GELU written for an Ascend NPU."""
    def forward(self, x):
        return torch.nn.functional.gelu(x)

batch_size = 64
dim = 4096

def get_inputs():
    x = torch.randn(batch_size, dim).npu()
    return [x.to("npu:0") if torch.npu.is_available() else x]

def get_init_inputs():
    return []
'''

NPU_OPERATOR = '''
import torch
import torch.nn as nn
import torch_npu

class Model(nn.Module):
    def forward(self, x, gamma):
        return torch_npu.npu_rms_norm(x, gamma)[0]

def get_inputs():
    return [torch.randn(8, 64).npu(), torch.ones(64).npu()]

def get_init_inputs():
    return []
'''

HANGS = '''
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(1)

def get_inputs():
    return [torch.randn(8, 8)]

def get_init_inputs():
    return []
'''

EXITS = '''
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        os._exit(3)

def get_inputs():
    return [torch.randn(8, 8)]

def get_init_inputs():
    return []
'''


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def multi_case_suite(root: Path) -> Path:
    return write(root, {"level1/7_LeakyRelu.py": MULTI_CASE,
                        "level1/7_LeakyRelu.json": "".join(json.dumps(c) + "\n" for c in CASES)})


# ----------------------------------------------------------------------------- multi-case tasks


def test_multi_case_task_loads_with_its_cases_and_makes_each_case(tmp_path):
    suite = load_suite(multi_case_suite(tmp_path / "npu"))
    assert suite.errors == []
    task = suite.get("7_LeakyRelu")
    spec = task.spec()
    assert tuple(map(unnumbered, spec.cases)) == tuple(CASES) and spec.case_file == "7_LeakyRelu.json"
    assert [c["number"] for c in spec.cases] == [1, 2, 3]   # what every surface names them by
    module = load_task_module(spec)
    for k, (dtype, shape) in enumerate([(torch.float32, (64, 96)), (torch.float16, (3, 5, 33)),
                                        (torch.bfloat16, (4096,))]):
        x, slope = make_inputs(module.get_inputs, Trial(seed=5, distribution="heavy_tailed", case=k))
        assert (x.dtype, tuple(x.shape)) == (dtype, shape)
        assert slope == CASES[k]["inputs"][1]["value"]
    # the same seed gives the same inputs; plain get_inputs() is case 0
    a = make_inputs(module.get_inputs, Trial(seed=5, distribution="normal", case=1))[0]
    b = make_inputs(module.get_inputs, Trial(seed=5, distribution="normal", case=1))[0]
    assert torch.equal(a, b)
    assert module.get_inputs()[0].shape == (64, 96)


def test_scaled_cases_are_what_the_task_builds(tmp_path):
    task = load_suite(multi_case_suite(tmp_path / "npu")).get("7_LeakyRelu")
    half = scale_task(task, 0.5)
    assert [c["inputs"][0]["shape"] for c in half.cases] == [[32, 48], [3, 5, 16], [2048]]
    assert "3 cases" in half.scale_note()
    module = load_task_module(half.spec())
    x = make_inputs(module.get_inputs, Trial(seed=1, distribution="normal", case=2))[0]
    assert x.shape == (2048,)  # read from the served, scaled case file, not the one on disk


def test_case_trial_plan_gives_every_case_a_trial_set():
    base = trial_plan(5)
    trials = case_trials(base, 3)
    n = len(base)
    assert len(trials) == 3 * n
    assert [t.case for t in trials[:n]] == [0] * n
    assert trials[2].init_seed == trials[0].init_seed  # the perf gate's roles: trial 3 re-checks trial 1's model
    assert {t.case for t in trials} == {0, 1, 2}
    assert len({t.seed for t in trials}) == 3 * n
    assert Trial.from_dict(trials[7].to_dict()) == trials[7]
    assert "case 2" in trials[7].describe()


def test_case_file_errors_are_one_line(tmp_path):
    with pytest.raises(CaseError, match="line 2: not JSON"):
        parse_case_file('{"inputs": []}\n{oops\n', "c.json")
    with pytest.raises(CaseError, match="unknown dtype 'float8'"):
        parse_case_file('{"inputs": [{"name": "x", "dtype": "float8", "shape": [2]}]}\n', "c.json")
    with pytest.raises(CaseError, match="needs a \"shape\""):
        parse_case_file('{"inputs": [{"name": "x", "dtype": "float32"}]}\n', "c.json")
    root = write(tmp_path / "s", {"a.py": MULTI_CASE.replace("7_LeakyRelu.json", "a.json"),
                                  "a.json": '{"inputs": 3}\n', "b.py": MULTI_CASE.replace("7_LeakyRelu.json", "b.json")})
    suite = load_suite(root)
    assert suite.tasks == []
    assert any(e.startswith("a.py") and "line 1" in e for e in suite.errors)
    assert any(e.startswith("b.py") and "b.json, which is not beside it" in e for e in suite.errors)


def test_low_precision_tolerances_and_the_geometric_mean():
    assert floored("float32", 1e-4, 1e-4) == (1e-4, 1e-4)
    assert floored("float16", 1e-4, 1e-4) == (1e-2, 1e-2)
    assert floored("bfloat16", 1e-4, 5e-2) == (3e-2, 5e-2)
    assert case_geomean([1.0, 4.0]) == pytest.approx(2.0)
    perf = case_performance([2.0, 8.0], [1.0, 1.0])
    assert perf["speedup"] == pytest.approx(4.0) and perf["reference_ms"] == pytest.approx(4.0)
    assert [c["speedup"] for c in perf["cases"]] == pytest.approx([2.0, 8.0])
    with pytest.raises(ValueError):
        case_geomean([1.0, 0.0])


@pytest.mark.slow
def test_reference_of_a_multi_case_task_runs_every_case_in_its_dtype(tmp_path, verifier):
    task = load_suite(multi_case_suite(tmp_path / "npu")).get("7_LeakyRelu")
    ref = verifier.reference(task.spec(), want_timing=False)
    assert len(ref.trials) == 3 * len(trial_plan(verifier.config.trials)) and not any(t.overrides for t in ref.trials)
    dtypes = {t.case: ref.outputs[i]["leaves"][0].dtype for i, t in enumerate(ref.trials)}
    assert dtypes == {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
    tolerance = verifier.tolerance_for(task.spec())
    assert tolerance("bfloat16")[1] >= 3e-2 and tolerance("float32")[1] < 1e-2
    # the rounding noise measured for one case (fp32) is never reused for another (bf16): one slot each
    noise = json.loads((verifier.references.root / "noise.json").read_text())
    slots = {slot for entry in noise.values() for slot in entry}
    assert {"normal||0", "normal||1", "normal||2"} <= slots, slots


@pytest.mark.slow
def test_verify_checks_every_case(tmp_path, verifier, make_candidate):
    import candidates as C

    cases = [{"inputs": [{"name": "x", "dtype": "float32", "shape": s}]} for s in ([64, 100], [7, 33], [9000])]
    source = MULTI_CASE.replace("7_LeakyRelu", "relu_cases").replace(
        "leaky_relu(x, slope)", "relu(x)").replace("def forward(self, x, slope)", "def forward(self, x)").replace(
        "x_info, slope = case[\"inputs\"]", "x_info, = case[\"inputs\"]").replace(
        "groups.append([x, slope[\"value\"]])", "groups.append([x])")
    root = write(tmp_path / "s", {"relu_cases.py": source,
                                  "relu_cases.json": "".join(json.dumps(c) + "\n" for c in cases)})
    spec = load_suite(root).get("relu_cases").spec()
    good = verifier.verify(spec, make_candidate(C.elementwise(C.RELU)))
    assert good.feasible, good.message
    assert "over 3 cases" in good.gate("correctness").message
    # performance: one window per case, the speedup their geometric mean, every case reported
    perf = good.gate("performance")
    per_case = perf.details["cases"]
    assert [c["case"] for c in per_case] == [0, 1, 2] and "geometric means over 3 cases" in perf.message
    assert good.speedup == pytest.approx(math.exp(sum(math.log(c["speedup"]) for c in per_case) / 3), rel=1e-9)
    assert good.latency_ms == pytest.approx(case_geomean([c["latency_ms"] for c in per_case]), rel=1e-9)
    assert good.speedup_ci[0] <= good.speedup <= good.speedup_ci[1]
    # right up to 6400 elements only: the third case (9000 elements) finds it out
    partial = C.RELU.replace("for (int64_t i = 0; i < n; ++i)", "for (int64_t i = 0; i < (n < 6400 ? n : 6400); ++i)")
    bad = verifier.verify(spec, make_candidate(C.elementwise(partial)))
    assert bad.failed_gate == "correctness" and "case 3" in bad.message


# ----------------------------------------------------------------------------- sizes


def test_expression_chained_and_tuple_sizes_are_found_and_scaled():
    sizes = size_constants(EXPRESSIONS)
    assert sizes == {"N": 4096, "height": 256, "width": 256, "shape[0]": 128, "shape[1]": 384}
    ns: dict = {}
    exec(apply_overrides(EXPRESSIONS, {"N": 100, "width": 16, "shape[1]": 48}), ns)
    assert (ns["N"], ns["height"], ns["width"], ns["shape"]) == (100, 256, 16, (128, 48))
    half = scale_values(sizes, 0.25)
    assert half == {"N": 1024, "height": 64, "width": 64, "shape[0]": 32, "shape[1]": 96}


def test_scaling_keeps_declared_divisibility(tmp_path):
    sizes = size_constants(DIVISIBLE)
    assert sizes == {"batch_size": 16, "seq_length": 768, "block_len": 96, "dim": 320}
    for factor in (0.9, 0.5, 0.3, 0.17, 0.1, 0.05, 1.7):
        scaled = scale_values(sizes, factor)
        assert scaled["seq_length"] % scaled["block_len"] == 0, (factor, scaled)
        assert scaled["dim"] % scaled["batch_size"] == 0, (factor, scaled)  # 16 | 320 in the file
    task = load_suite(write(tmp_path / "s", {"blocks.py": DIVISIBLE})).get("blocks")
    small = scale_task(task, 0.13)
    module = load_task_module(small.spec())
    model = module.Model(*module.get_init_inputs())
    model(*module.get_inputs())  # the task's own assertion holds at the scaled sizes


@pytest.mark.slow
def test_a_gigabyte_parameter_is_sized_on_the_meta_device_first(tmp_path):
    task = load_suite(write(tmp_path / "s", {"big_gemm.py": BIG_PARAMETER})).get("big_gemm")
    cap = 64 << 20
    probe = probe_task(task, "auto", window=WIDE, bytes_cap=cap, timeout_s=120)
    assert probe.ok, probe.problem
    # never built at full size (16384 x 16384 floats is 1 GiB): every timed step was under the cap
    timed = [s for s in probe.steps if "ms" in s]
    assert timed and all(s["bytes"] <= cap for s in timed) and all(s["factor"] < 1 for s in timed)
    sized = apply_probe(task, probe)
    assert sized.sizes["in_features"] * sized.sizes["out_features"] * 4 <= cap
    assert "shrunk to fit" in " ".join(probe.notes)
    # without auto, the same task is refused before anything is allocated, saying what to do
    fixed = probe_task(task, None, window=WIDE, bytes_cap=cap, timeout_s=120)
    assert not fixed.ok and "--size-scale auto" in fixed.problem


def test_a_task_held_at_the_memory_cap_says_the_cap_would_be_exceeded(tmp_path):
    """Issue 27, item 10: "larger sizes would pass the memory cap" read as if they would be allowed."""
    task = load_suite(write(tmp_path / "s", {"blocks.py": DIVISIBLE})).get("blocks")
    cap = 4 << 20    # tensors this small are timed in microseconds: no size within it reaches the window
    grown = probe_task(task, "auto", window=(1e3, 1e4), bytes_cap=cap, timeout_s=120)
    assert grown.ok and grown.bytes <= cap
    assert "larger sizes would exceed the 4 MiB memory cap" in grown.problem, grown.problem


@pytest.mark.slow
def test_auto_grows_a_fast_task_by_measured_time_up_to_the_memory_cap(tmp_path):
    task = load_suite(write(tmp_path / "s", {"blocks.py": DIVISIBLE})).get("blocks")
    cap = 64 << 20
    # a 1-10 s window: no size within 64 MiB gets there, so auto grows it to the cap and says so
    grown = probe_task(task, "auto", window=(1e3, 1e4), bytes_cap=cap, timeout_s=120)
    assert grown.ok and grown.factor > 1 and grown.bytes <= cap
    assert "growth stopped at the memory cap" in grown.notes
    assert "outside the 1000-10000 ms window" in grown.problem and "64 MiB memory cap" in grown.problem
    sized = apply_probe(task, grown)
    assert sized.sizes["seq_length"] % sized.sizes["block_len"] == 0


# ----------------------------------------------------------------------------- NPU tasks


def test_torch_npu_for_placement_only_loads_and_says_what_was_skipped(tmp_path):
    source, notes = neutralise_npu(NPU_PLACEMENT)
    assert "torch_npu" not in source and ".npu()" not in source and "npu:0" not in source
    assert any("import torch_npu" in n for n in notes) and ".npu() calls" in notes
    assert "torch.npu.is_available() (False here)" in notes
    suite = load_suite(write(tmp_path / "s", {"gelu_npu.py": NPU_PLACEMENT, "rms_npu.py": NPU_OPERATOR}))
    task = suite.get("gelu_npu")
    assert "skipped import torch_npu" in task.notes[0]
    module = load_task_module(task.spec())
    (x,) = module.get_inputs()
    assert x.device.type == "cpu" and module.Model()(x).shape == (64, 4096)
    assert len(suite.errors) == 1
    assert suite.errors[0].startswith("rms_npu.py") and "torch_npu.npu_rms_norm" in suite.errors[0]
    assert "\n" not in suite.errors[0]


# ----------------------------------------------------------------------------- categories


CATEGORY_TASKS = {
    "bilinear_upsample": ("torch.nn.functional.interpolate(x, scale_factor=2, mode='bilinear')", "[torch.randn(2, 3, 32, 32)]"),
    "causal_attention": ("torch.softmax((x @ x.transpose(-1, -2)).masked_fill(torch.ones(64, 64).triu(1).bool(), "
                         "float('-inf')), -1) @ x", "[torch.randn(2, 64, 32)]"),
    "resnet18": ("self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.bn(self.conv(x))), 1), 1))",
                 "[torch.randn(2, 3, 32, 32)]"),
}
CATEGORY_MODEL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return {expr}

def get_inputs():
    return {inputs}

def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_categories_come_from_the_traced_operations(tmp_path):
    root = write(tmp_path / "s", {f"level1/{name}.py": CATEGORY_MODEL.format(expr=e, inputs=i)
                                  for name, (e, i) in CATEGORY_TASKS.items()})
    suite = load_suite(root)
    by_name = {t.id: t.category for t in suite.tasks}
    assert by_name["bilinear_upsample"] != "matmul" and by_name["resnet18"] == "fused"  # the name fallback
    found = {}
    for task in suite.tasks:
        probe = probe_task(task, None, window=WIDE)
        assert probe.ok, probe.problem
        traced = apply_probe(task, probe)
        assert traced.category_source == "ops"
        found[task.id] = traced.category
    assert found == {"bilinear_upsample": "elementwise", "causal_attention": "matmul", "resnet18": "fused"}
    assert category_from_ops({"convolution": 1, "add": 1}) == "convolution"
    assert category_from_ops({"mm": 1, "native_layer_norm": 1}) == "matmul"


# ----------------------------------------------------------------------------- tasks --check


@pytest.mark.slow
def test_check_reports_every_task_in_one_line_and_finishes(tmp_path):
    root = write(multi_case_suite(tmp_path / "suite"), {
        "level1/expr.py": EXPRESSIONS, "level1/missing.py": MISSING_PACKAGE, "level1/hangs.py": HANGS,
        "level1/exits.py": EXITS, "level1/gelu_npu.py": NPU_PLACEMENT, "level1/rms_npu.py": NPU_OPERATOR,
        "level1/not_a_task.py": "x = 1\n",
    })
    suite = load_suite(root)
    # The hanging task alone, with a limit that covers starting its process and loading it (PyTorch's
    # import: a few seconds on a loaded machine), not more: it never finishes, a longer one is only waited
    # out. The others under a limit they never reach, so a loaded machine does not cut a task that finishes.
    hung = check_tasks(suite, [suite.get("hangs")], None, window=WIDE, timeout_s=10)
    assert "did not finish within 10 s" in hung["rows"][-1]["problems"][0] and hung["rows"][-1]["loaded"]
    others = [t for t in suite.tasks if t.id != "hangs"]
    report = check_tasks(suite, others, None, window=WIDE, timeout_s=120)
    rows = {r["id"]: r for r in report["rows"]}
    assert set(rows) == {"7_LeakyRelu", "expr", "missing", "exits", "gelu_npu", "rms_npu", "not_a_task"}
    assert rows["7_LeakyRelu"]["loaded"] and rows["7_LeakyRelu"]["cases"] == 3
    assert len(rows["7_LeakyRelu"]["case_ms"]) == 3
    assert rows["expr"]["in_window"] and rows["gelu_npu"]["in_window"]
    assert "skipped import torch_npu" in rows["gelu_npu"]["notes"][0]
    assert not rows["missing"]["loaded"] and "evokernel_no_such_package_xyz" in rows["missing"]["problems"][0]
    assert "exited with status 3" in rows["exits"]["problems"][0]
    assert not rows["rms_npu"]["loaded"] and "torch_npu.npu_rms_norm" in rows["rms_npu"]["problems"][0]
    assert "no class Model" in rows["not_a_task"]["problems"][0]
    assert all("\n" not in p for r in rows.values() for p in r["problems"])
    s = report["summary"]
    assert (s["tasks"], s["in_window"], s["problems"]) == (7, 3, 4)
    assert report["line"].startswith("7 tasks: 4 loaded, 3 ran, 3 in the 0.001-10000 ms window")
    # #37 item 9: its time and a verification's differ, and the report says why
    assert "best of back-to-back calls" in report["ms_meaning"] and "`evokernel verify`" in report["ms_meaning"]


@pytest.mark.slow
def test_cli_check_json_and_auto_listing_survive_a_bad_task(tmp_path):
    root = write(tmp_path / "suite", {"level1/expr.py": EXPRESSIONS, "level1/missing.py": MISSING_PACKAGE})
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "evokernel.toml").write_text("")  # a workspace: the sizes --check decides are recorded in it
    cmd = [sys.executable, "-m", "evotui.cli", "--workspace", str(ws), "tasks", "--suite", str(root)]
    out = subprocess.run([*cmd, "--check", "--json", "--size-scale", "auto", "--timeout", "60"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["summary"]["tasks"] == 2 and report["summary"]["loaded"] == 1
    assert "Traceback" not in out.stderr
    listing = subprocess.run([*cmd, "--size-scale", "auto", "--json"], capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0, listing.stderr
    data = json.loads(listing.stdout)
    assert [t["id"] for t in data["tasks"]] == ["expr"]
    assert len(data["errors"]) == 1 and "missing" in data["errors"][0]
    assert "evokernel_no_such_package_xyz" in listing.stderr
    # piped, the listing is the table alone: every note goes to stderr (#37 item 9)
    scaled = subprocess.run([*cmd, "--size-scale", "0.5"], capture_output=True, text=True, timeout=300)
    assert scaled.returncode == 0, scaled.stderr
    assert all(line.count("\t") >= 3 for line in scaled.stdout.splitlines()), scaled.stdout
    assert "sizes scaled" in scaled.stderr


LISTED_CASES = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return (a.float() @ b.float()).to(a.dtype)

def get_input_groups():
    groups = []
    for dtype, m, n, k in (("float16", 32, 16, 8), ("bfloat16", 8, 24, 40)):
        t = getattr(torch, dtype)
        groups.append([torch.randn(m, k).to(t), torch.randn(k, n).to(t)])
    return groups

def get_init_inputs():
    return []
'''


def test_cases_listed_in_code_are_each_a_case(tmp_path):
    task = load_suite(write(tmp_path / "s", {"gemm_cases.py": LISTED_CASES})).get("gemm_cases")
    spec = task.spec()
    assert [c["inputs"][0] for c in spec.cases] == [{"name": "in0", "dtype": "float16", "shape": [32, 8]},
                                                   {"name": "in0", "dtype": "bfloat16", "shape": [8, 40]}]
    module = load_task_module(spec)
    a, b = make_inputs(module.get_inputs, Trial(seed=3, distribution="uniform", case=1))
    assert (a.dtype, tuple(a.shape), tuple(b.shape)) == (torch.bfloat16, (8, 40), (40, 24))
    assert len(case_trials(trial_plan(5), len(spec.cases))) == 2 * len(trial_plan(5))


def test_a_level_whose_every_task_is_refused_keeps_its_reasons(tmp_path, capsys):
    """The finding (#51, 3): NPUKernelBench's level 4 calls torch_npu's own operators in all ten tasks;
    `evokernel tasks --suite .../npukernelbench_level4` printed "no task at level None in ... (levels: )",
    exited 2 and dropped the ten reasons. Now each refused file is listed with its reason, the listing exits 0,
    --check has a row per file at its level (4, and level 0 is 0, not "-"), and a run says why it cannot."""
    from core.errors import TaskError
    from evotui import cli

    npu = tmp_path / "reference"
    write(npu, {"npukernelbench_level4/1_rms.py": NPU_OPERATOR,
                "npukernelbench_level4/2_rms.py": NPU_OPERATOR.replace("npu_rms_norm", "npu_ffn"),
                "npukernelbench_level0/10_relu.py": NPU_PLACEMENT})
    level4 = npu / "npukernelbench_level4"
    assert cli.main(["--workspace", str(tmp_path / "ws"), "tasks", "--suite", str(level4)]) == 0
    err = capsys.readouterr().err
    assert "level None" not in err and "torch_npu.npu_rms_norm" in err and "torch_npu.npu_ffn" in err
    assert "0 tasks, 2 files skipped" in err
    # the whole folder at --level 4: the same two reasons, not the other levels' tasks
    assert cli.main(["--workspace", str(tmp_path / "ws"), "tasks", "--suite", str(npu), "--level", "4",
                     "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["tasks"] == [] and len(listing["errors"]) == 2
    assert all("npukernelbench_level4" in e for e in listing["errors"])
    report = check_tasks(load_suite(npu), [], None, level=4)
    assert [(r["id"], r["level"], r["loaded"]) for r in report["rows"]] == [("1_rms", 4, False), ("2_rms", 4, False)]
    suite = load_suite(level4)
    with pytest.raises(TaskError, match=r"no task in .* loads here: 2 files refused \(1_rms.py: it uses torch_npu"):
        suite.select()
    with pytest.raises(TaskError, match="task '2_rms' of suite .* did not load: refused: it uses torch_npu"):
        suite.get("2_rms")


SWISH = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Swish: x / (1 + exp(-beta * x))."""
    def forward(self, x):
        return x / (1 + torch.exp(-1.5 * x))

batch = 64
dim = 4096

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_the_check_table_and_the_listing_show_a_task_from_the_same_record(tmp_path, capsys):
    """The findings (#51, 4): `tasks --check` showed level "-" for tasks the listing put at level 0, "19 not sized"
    beside a "sized: yes" column, and 12_swish was "activation" (its name) in the listing, "elementwise" (its
    traced operators) in the check. The listing now reads what the check recorded in the workspace."""
    from evotui import cli

    root = write(tmp_path / "reference", {"npukernelbench_level0/12_swish.py": SWISH})
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "evokernel.toml").write_text("")
    base = ["--workspace", str(ws), "tasks", "--suite", str(root)]
    assert cli.main([*base, "--check", "--json"]) == 0
    [checked] = json.loads(capsys.readouterr().out)["rows"]
    assert (checked["level"], checked["category"], checked["category_from"]) == (0, "elementwise", "ops"), checked
    assert cli.main([*base, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["tasks"]
    assert (listed["level"], listed["category"]) == (0, "elementwise"), listed
    assert cli.main([*base, "--check"]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.strip().startswith("12_swish"))
    assert row.split()[1:3] == ["0", "elementwise"] and "as given" in row, row
    assert "not sized" not in text, text
