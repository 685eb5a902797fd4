"""Issue #38: one tolerance function. The tolerance a prompt states is the one the gates apply, whatever
decides it (the task's own ATOL/RTOL, ``[verifier] atol/rtol``, the backend's default floored for the
dtype), on this machine and on a cluster: every verifier answers ``tolerance_for`` from
``verifier.tolerance``, and the prompts ask the verifier.

Seen failing on the code before: a cluster verifier had no ``tolerance_for``, so its prompts fell back
to the backend's defaults and stated atol=1e-4 while the nodes applied ``[verifier] atol``; the
multi-case fallback did the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.prompts import PromptFacts
from core.tasks import load_suite
from verifier import VerifyConfig

import candidates as C

# one output in each floating dtype, one case each (a multi-case task states its tolerance per dtype)
ADD = '''
import json
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return x + y

def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "add.json")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    names = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    return [[torch.randn(i["shape"]).to(names[i["dtype"]]) for i in c["inputs"]] for c in cases]

def get_init_inputs():
    return []
'''
DTYPES = ("float32", "float16", "bfloat16")
SETTINGS = [  # (the task's own constants, the workspace's [verifier] settings, what relu's outputs get per dtype)
    ("", VerifyConfig(),                                     # the backend's defaults, floored per dtype
     {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}),
    ("", VerifyConfig(atol=2e-3, rtol=3e-3),                 # [verifier] atol/rtol, for every dtype
     {d: (2e-3, 3e-3) for d in DTYPES}),
    ("ATOL = 5e-2\n", VerifyConfig(atol=2e-3, rtol=3e-3),    # the task's ATOL over [verifier]; [verifier]'s rtol
     {d: (5e-2, 3e-3) for d in DTYPES}),
]


def suite_with(tmp_path: Path, constants: str):
    folder = tmp_path / "suite" / "level1"
    folder.mkdir(parents=True)
    (folder / "relu.py").write_text(constants + (Path(__file__).parents[1] / "fixtures" / "suite" / "level1"
                                                 / "relu.py").read_text())
    (folder / "add.py").write_text(constants + ADD)
    cases = [{"inputs": [{"name": n, "dtype": d, "shape": [8, 16]} for n in ("x", "y")]} for d in DTYPES]
    (folder / "add.json").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return load_suite(folder.parent)


def stated(text: str, dtype: str = "") -> tuple[float, float]:
    """The (atol, rtol) a prompt section states: for float32 in a single-case task, per dtype under Cases."""
    if dtype:
        m = re.search(rf"{dtype} atol=([0-9.e+-]+) rtol=([0-9.e+-]+)", text)
    else:
        m = re.search(r"within atol=([0-9.e+-]+) and rtol=([0-9.e+-]+)", text)
    assert m, text
    return float(m.group(1)), float(m.group(2))


def cluster_verifier(config: VerifyConfig):
    """The cluster verifier's own class, without joining a cluster: its tolerance_for reads only the
    settings and the backend it sends to every node (``NodeVerifier``)."""
    from verifier.backends import get_backend
    from verifier.harness.cluster import ClusterVerifier

    v = object.__new__(ClusterVerifier)
    v.config, v.backend = config, get_backend("cpu")
    return v


def node_verifier(config: VerifyConfig, tmp_path: Path):
    """What each cluster node runs: a ``Verifier`` made from the settings sent over the network."""
    from verifier.harness.verify import Verifier

    return Verifier("cpu", VerifyConfig.model_validate(config.model_dump(mode="json")), cache_dir=tmp_path / "node")


@pytest.mark.parametrize("constants,config,expected", SETTINGS, ids=["defaults", "verifier-settings", "task-constants"])
def test_the_prompt_states_what_every_verifier_applies(constants, config, expected, tmp_path):
    from verifier.harness.verify import Verifier

    suite = suite_with(tmp_path, constants)
    local = Verifier("cpu", config, cache_dir=tmp_path / "cache")
    node = node_verifier(config, tmp_path)
    try:
        for verifier, applies in ((local, local), (cluster_verifier(config), node)):
            facts = PromptFacts.from_verifier(verifier, "cpu")
            for task in (suite.get("relu"), suite.get("add")):
                applied = applies.tolerance_for(task.spec())
                section = facts.section(task)
                if task.id == "relu":
                    assert stated(section) == applied("float32") == expected["float32"]
                else:
                    for dtype in DTYPES:
                        assert stated(section, dtype) == applied(dtype) == expected[dtype], dtype
    finally:
        local.close()
        node.close()


def test_the_canned_verifier_states_a_real_verifiers_defaults(tmp_path):
    from core.scripted import CannedVerifier
    from verifier.harness.verify import Verifier

    suite = suite_with(tmp_path, "")
    with Verifier("cpu", VerifyConfig(), cache_dir=tmp_path / "cache") as real:
        canned = CannedVerifier(lambda task_id, files: None)
        for task in (suite.get("relu"), suite.get("add")):
            assert all(canned.tolerance_for(task.spec())(d) == real.tolerance_for(task.spec())(d) for d in DTYPES)


def test_a_bare_prompt_states_the_defaults_the_verifier_would_apply(tmp_path):
    """Without a verifier (a prompt built alone), the same function with default settings: never a copy."""
    from verifier.backends import get_backend
    from verifier.tolerance import tolerance_for

    suite = suite_with(tmp_path, "RTOL = 7e-3\n")
    facts = PromptFacts("cpu")
    for task in (suite.get("relu"), suite.get("add")):
        applied = tolerance_for(task.spec(), VerifyConfig(), get_backend("cpu"))
        if task.id == "relu":
            assert stated(facts.section(task)) == applied("float32") == (1e-4, 7e-3)
        else:
            assert all(stated(facts.section(task), d) == applied(d) for d in DTYPES)


@pytest.mark.slow
def test_the_gate_applies_the_tolerance_the_prompt_states(tmp_path, suite, make_candidate):
    """A real verification under ``[verifier] atol/rtol``: the correctness gate's message names the
    tolerance it applied, and it is the one the prompt states."""
    from verifier.harness.verify import Verifier

    config = VerifyConfig(trials=5, timing_calls=5, timing_budget_s=0.2, warmup_calls=1, run_timeout_s=20,
                          threads=1, atol=2e-3, rtol=3e-3)
    task = suite.get("relu")
    with Verifier("cpu", config, cache_dir=tmp_path / "cache") as verifier:
        out = verifier.verify(task.spec(), make_candidate(C.elementwise(C.IDENTITY)))
        said = stated(PromptFacts.from_verifier(verifier, "cpu").section(task))
    assert out.failed_gate == "correctness"
    m = re.search(r"atol ([0-9.e+-]+), rtol ([0-9.e+-]+)", out.message)
    assert m and (float(m.group(1)), float(m.group(2))) == said == (2e-3, 3e-3), out.message
