"""Reverse (suffix) prefix sum along the rows of a (batch, length) tensor."""
import torch
import torch.nn as nn

CATEGORY = "scan"


class Model(nn.Module):
    """out[i, j] = sum of x[i, j:], computed by flipping, scanning and flipping back."""

    def __init__(self, scan_axis: int):
        super().__init__()
        self.scan_axis = scan_axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x.flip(self.scan_axis), dim=self.scan_axis).flip(self.scan_axis)


batch_size = 192
length = 32768
scan_axis = 1


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [scan_axis]
