"""A device's outputs are spoiled where the harness stages the next call (issue #50, finding 5). Outputs were spoiled
in host memory only (``verifier.job.allocator.spoil`` skips device tensors); torch_npu's caching allocator hands a
freed output block back to the next call untouched, so a kernel that wrote only part of its outputs would find the
last result there. Spoiling a device tensor while the side settles would hang (the harness holds every other thread
of the side then, torch_npu's queue thread among them, blocked in ``eventfd_read``): it happens at ``stage``.

The side's command loop (``verifier.window.side._side``) runs here in a thread, on the host, speaking to this test
over its two FIFOs as the harness does; the fill is recorded where it happens."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch

from verifier.backends import DeviceRuntime
from verifier.inputs import Trial
from verifier.job.allocator import SPOILED, spoil_device
from verifier.jobs import input_layout, layout_bytes
from verifier.task import TaskSpec
from verifier.window.messages import Done, Finish, Go, Layout, Ok, Ready, Settle, Stage, parse_answer

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""


class Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


class Harness:
    """The harness's end of a side's channel."""

    def __init__(self, job_dir: Path):
        os.mkfifo(job_dir / "ctl.in")
        os.mkfifo(job_dir / "ctl.out")
        self._out = os.open(job_dir / "ctl.out", os.O_RDONLY | os.O_NONBLOCK)
        self._in = os.open(job_dir / "ctl.in", os.O_RDWR)
        self._buffer = b""

    def read(self, timeout: float = 30.0):
        import select

        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._out], [], [], timeout)
            assert ready, "the side did not answer"
            self._buffer += os.read(self._out, 65536)
        line, self._buffer = self._buffer.split(b"\n", 1)
        return parse_answer(line.decode())

    def call(self, command):
        os.write(self._in, (command.line() + "\n").encode())
        return self.read()


@pytest.mark.parametrize("role", ["candidate", "reference"])
def test_an_untrusted_side_spoils_its_last_device_outputs_where_it_is_staged_never_while_it_settles(
        tmp_path, monkeypatch, role):
    from verifier.window import side as side_module

    events: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(side_module, "spoil_device",  # raising=False: main has none (#50), and then spoils nothing
                        lambda tensors: events.append(("spoil_device", [t.data_ptr() for t in tensors])), raising=False)
    monkeypatch.setattr(side_module, "_load_candidate", lambda *args, **kwargs: Relu)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "task.py").write_text(TASK)
    x = torch.randn(64)
    layout = input_layout([x])
    (job_dir / "inputs.bin").write_bytes(x.numpy().tobytes().ljust(layout_bytes(layout), b"\0"))
    harness = Harness(job_dir)
    job = {"task": TaskSpec("t", TASK, path=str(job_dir / "task.py")).to_dict(), "role": role,
           "trials": [Trial(1, "normal").to_dict(), Trial(2, "normal").to_dict()], "timer": "wall", "flush_bytes": 0}
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(side_module._side(job, job_dir, DeviceRuntime())))
    worker.start()
    try:
        assert isinstance(harness.read(), Ready)
        if role == "reference":
            (job_dir / "inputs.bin").unlink()       # the reference makes its own
        assert isinstance(harness.call(Layout(layout)), Ok)
        done_at: list[int] = []
        for round_ in range(3):
            assert isinstance(harness.call(Stage(round_ % 2)), Ok)
            done = harness.call(Go(f"n{round_}", round_ % 2))
            assert isinstance(done, Done) and done.outputs is not None
            done_at.append(done.outputs.leaves[0].address)
            events.append(("done", []))
            assert isinstance(harness.call(Settle(spoil=False)), Ok)
            events.append(("settled", []))
        assert isinstance(harness.call(Finish()), Ok)
    finally:
        worker.join(30)
    assert not worker.is_alive()
    spoiled = [ptrs for what, ptrs in events if what == "spoil_device"]
    if role == "reference":
        assert spoiled == []                        # the trusted reference keeps its outputs for its picks
        return
    # one spoil per staging after a call, of that call's outputs, between its settle and the next call
    assert spoiled == [[done_at[0]], [done_at[1]]]
    order = [what for what, _ in events]
    assert order == ["done", "settled", "spoil_device", "done", "settled", "spoil_device", "done", "settled"]


def test_spoiling_fills_each_storage_once_with_the_spoiled_bytes():
    out = torch.zeros(16)
    view = out[4:8]
    ints = torch.zeros(4, dtype=torch.int32)
    spoil_device([out, view, ints])
    assert torch.equal(out, torch.zeros(16))          # host tensors are the harness's or the settle's to spoil
    spoil_device([out, view, ints], host_too=True)
    assert torch.isnan(out).all() and (ints == -1).all()
    assert out.view(torch.uint8).eq(SPOILED).all()
