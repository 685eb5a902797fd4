"""Inclusive prefix sum along the rows of a (batch, length) tensor."""
import torch
import torch.nn as nn

CATEGORY = "scan"


class Model(nn.Module):
    """Returns torch.cumsum(x, dim=scan_axis): out[i, j] = sum of x[i, :j+1]."""

    def __init__(self, scan_axis: int):
        super().__init__()
        self.scan_axis = scan_axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.scan_axis)


batch_size = 128
length = 65536
scan_axis = 1


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [scan_axis]
