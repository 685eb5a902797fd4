"""``--size-scale auto``: how the run session sizes, and task shapes seen in public KernelBench suites
that the sizer once left outside its time window. No test asserts on a time; each asserts on the sizes
chosen or on what the probe recorded."""

from __future__ import annotations

import json
from pathlib import Path

RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 16
dim = 1024

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''


def _workspace(root: Path, toml: str):
    from core.workspace import Workspace

    ws = Workspace(root)
    ws.init()
    ws.config_path.write_text(toml)
    return ws


def test_run_session_sizes_with_the_verifiers_threads_and_caches_in_the_workspace(tmp_path):
    from core.session import Session

    suite = tmp_path / "suite" / "level1"
    suite.mkdir(parents=True)
    (suite / "relu.py").write_text(RELU)
    ws = _workspace(tmp_path / "ws", f'backend = "cpu"\nsuite = "{suite.parent}"\n[verifier]\nthreads = 3\n')
    with Session(ws) as session:
        (task,) = session.tasks(["relu"], scale="auto")
    cache = ws.cache_dir / "sizing.json"
    assert cache.exists(), "auto sizing in a run is cached in the workspace"
    (key,) = json.loads(cache.read_text())
    assert json.loads(key)[6] == 3, "the probe measured with the verifier's thread count"
    assert task.size_overrides  # 16x1024 is far under the window: grown
