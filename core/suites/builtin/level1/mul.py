"""Elementwise product of a (batch, dim) tensor and a per-column (dim,) vector."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"


class Model(nn.Module):
    """Returns a * b with b broadcast over the rows of a."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b


batch_size = 128
dim = 65536


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(dim)]


def get_init_inputs():
    return []
