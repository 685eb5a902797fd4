"""The timing window's inputs as its processes exchange them (verifier.jobs input_layout, and the side's
views over its mapping): every kind a task's ``get_inputs()`` returns goes through unchanged."""

from __future__ import annotations

import json
import mmap

import pytest
import torch

from verifier.jobs import input_layout, layout_bytes, tensor_bytes
from verifier.window.side import _tensors, _views


def through_the_window(xs: list) -> list:
    layout = json.loads(json.dumps(input_layout(xs), separators=(",", ":")))   # as the side sends it
    buf = mmap.mmap(-1, layout_bytes(layout))
    for view, x in zip(_views(buf, layout), xs):
        for dst, src in zip(_tensors(view), _tensors(x)):
            dst.copy_(src)
    assert tensor_bytes(layout) == sum(t.numel() * t.element_size() for x in xs for t in _tensors(x))
    return _views(buf, layout)


def test_tensors_numbers_and_lists_of_tensors_come_back_equal():
    xs = [torch.randn(3, 5), torch.randint(0, 9, (4,)), 7, 0.25, None, "mean",
          [torch.randn(2, 3), torch.randn(4, 3)], (torch.arange(6), torch.ones(2, dtype=torch.bfloat16)),
          torch.zeros(0), torch.randn(2, dtype=torch.complex64), torch.tensor([True, False])]
    back = through_the_window(xs)
    assert back[2:6] == [7, 0.25, None, "mean"]
    assert isinstance(back[6], list) and isinstance(back[7], tuple)
    for a, b in zip(_tensors(back), _tensors(xs)):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_every_tensor_is_aligned_and_apart():
    xs = [torch.randn(3), torch.randn(5, dtype=torch.float64), torch.randint(0, 2, (7,), dtype=torch.int8)]
    placed = input_layout(xs)
    assert all(e["offset"] % 64 == 0 for e in placed)
    spans = sorted((e["offset"], e["offset"] + e["nbytes"]) for e in placed)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_an_input_no_process_can_receive_is_refused_in_words():
    with pytest.raises(TypeError, match="cannot be passed to the timing window"):
        input_layout([torch.randn(2), object()])
