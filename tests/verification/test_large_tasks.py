"""A task whose tensors fit in memory verifies (issue #47): the limits on what a job writes and holds grow with
the task's own outputs, and a limit that is still met is said with what raises it, never as the kernel's bug.

Before: relu at 128x262144 (128 MiB in) failed correctness with "RuntimeError: [enforce fail at
inline_container.cc:672] . unexpected pos 1087376408 vs 873717244": the candidate's job wrote its trials'
outputs (9 of 128 MiB) into a file cut at ``[verifier] max_output_mb`` (1 GiB). Here the same happens at the
setting's least (16 MiB) with a relu whose trials' outputs take about 40 MiB."""

from __future__ import annotations

from dataclasses import replace

import pytest

import candidates as C

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_limit(tmp_path_factory, fast_config):
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config.model_copy(update={"max_output_mb": 16}),
                 cache_dir=tmp_path_factory.mktemp("large-cache"))
    yield v
    v.close()


def test_a_task_whose_outputs_exceed_the_output_setting_verifies(small_limit, suite):
    spec = replace(suite.get("relu").spec(), size_overrides={"dim": 16384})    # 4 MiB out per trial
    out = small_limit.verify(spec, C.elementwise(C.RELU), fresh=True)
    assert out.feasible, out.message
    assert out.gate("correctness").passed


# Returns 16 times the reference's output (the right values first, then more): the file it writes meets the limit
# sized from the reference's outputs.
OVERSIZED_MODEL = '''
import torch
import torch.nn as nn
from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty((x.shape[0] * 16,) + tuple(x.shape[1:]))
        lib.relu_forward(x, out, x.numel())
        return out
'''


def test_outputs_beyond_what_the_reference_returns_meet_the_limit_as_the_candidates_failure(small_limit, suite):
    files = {**C.elementwise(C.RELU), "model.py": OVERSIZED_MODEL}
    out = small_limit.verify(suite.get("relu").spec(), files, fresh=True)
    assert out.failed_gate == "correctness", out.message
    assert "file-size limit" in out.message and "max_output_mb" in out.message, out.message
    assert not out.not_judged


def test_outputs_the_jobs_folder_cannot_hold_are_the_tools_limit_said_with_its_remedy(small_limit):
    """Checked before the job runs, from the jobs' folder's real free space: a task of 1 PiB of outputs."""
    problem = small_limit.jobs.space_problem(1 << 50)
    assert "MiB free" in problem and "--size-scale" in problem, problem
    assert small_limit.jobs.space_problem(1 << 20) == ""
