"""Exclusive prefix sum along the rows of a (batch, length) tensor: each output omits its own element."""
import torch
import torch.nn as nn

CATEGORY = "scan"


class Model(nn.Module):
    """out[i, 0] = 0 and out[i, j] = sum of x[i, :j]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shifted = torch.nn.functional.pad(x[:, :-1], (1, 0))
        return torch.cumsum(shifted, dim=1)


batch_size = 192
length = 32768


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return []
