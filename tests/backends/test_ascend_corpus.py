"""The static gates, the custom-op project generation and the host stand-in over real Ascend C: NPUKernelBench's
golden answers and MultiKernelBench's Ascend prompt examples, read from outside the repository
($EVOKERNEL_NPUKB or /tmp/npukb, $EVOKERNEL_MKB or /tmp/mkb; see bench/ascend_corpus.py). Skipped when absent.

The answers the gates refuse are each a rule the answer breaks, named here with the rule; any other refusal
is a defect of the gates."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from verifier.backends.ascend import AscendBackend

from fake_toolchains import make_cann, make_tiling_standins

ROOT = Path(__file__).resolve().parents[2]
NPUKB = Path(os.environ.get("EVOKERNEL_NPUKB", "/tmp/npukb"))
MKB = Path(os.environ.get("EVOKERNEL_MKB", "/tmp/mkb"))

# task -> the rule its golden answer breaks (the anti-hack gate's refusal, in its words)
RULE_BREAKS = {
    "level1/Math/AbsMath": "times is not allowed",                       # a variable named like a timer function
    "level1/Math/StridesliceNegConcatV2": '#include "iostream"',          # a standard header included with quotes
    "level2/Activation/DequantSwigluQuant": "#include <chrono>",          # a timer header in host code (unused)
    "level2/Activation/GeGluV2": "#include <chrono>",
    "level2/Activation/SwiGlu": "#include <chrono>",
    "level2/Activation/SwiGluGrad": "#include <chrono>",
    "level2/Loss/MseLossGradV2": '#include "level0/mse_loss_grad.h"',    # cann-ops' internal op API headers
    "level2/TensorMove/ReverseSequence": "raw string literals",           # the scanner refuses R"(...)"
    "level3/GMM/BatchedMatmul": "#include <acl/acl.h>",                   # the ACL runtime header in a device kernel
    "level3/GMM/FlashAttentionScoreWithLargeHeadDim": '#include "stdarg.h"',   # a standard header with quotes
}


def _bench():
    spec = importlib.util.spec_from_file_location("ascend_corpus", ROOT / "bench/ascend_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ascend_corpus"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    if not (NPUKB / "tasks").is_dir():
        pytest.skip(f"no NPUKernelBench at {NPUKB}: extract it there (see bench/ascend_corpus.py)")
    if not shutil.which("g++"):
        pytest.skip("needs g++ for the host stand-in")
    bench = _bench()
    candidates = {**bench.npukb_answers(NPUKB), **(bench.mkb_examples(MKB) if MKB.is_dir() else {})}
    tmp = tmp_path_factory.mktemp("corpus")
    root = make_cann(tmp / "cann", "compiler")
    env = {"ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp"), "PATH": "/usr/bin:/bin"}
    backend = AscendBackend(env, home=str(tmp), system_root=str(tmp), machine="x86_64", soc="Ascend910B2",
                            probe_torch=False)
    return bench.survey(candidates, backend, make_tiling_standins(tmp / "standins"), tmp)


@pytest.mark.slow
def test_every_answer_passes_format_declarations_and_project_generation(rows):
    """... and comes back whole through the engine's answer parser, written as a model's answer (blocks named
    by their paths in the project)."""
    assert len(rows) >= 150
    for gate in ("answer", "format", "declarations", "project"):
        refused = {r["task"]: r[gate] for r in rows if r[gate] != "ok"}
        assert refused == {}, gate


@pytest.mark.slow
def test_the_anti_hack_gate_refuses_only_answers_that_break_a_named_rule(rows):
    refused = {r["task"]: r["anti_hack"] for r in rows if r["anti_hack"] != "ok"}
    assert set(refused) == set(RULE_BREAKS)
    for task, why in RULE_BREAKS.items():
        assert why in refused[task]


@pytest.mark.slow
def test_the_host_stand_in_compiles_every_tiling_header_it_can(rows):
    failed = {r["task"]: r["host_tiling"] for r in rows if r["host_tiling"].startswith("failed")}
    assert failed == {}
    assert sum(r["host_tiling"] == "ok" for r in rows) >= 130
