"""Elementwise squared difference (a - b)^2 of two (batch, dim) tensors."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"


class Model(nn.Module):
    """Returns (a - b) * (a - b)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = a - b
        return diff * diff


batch_size = 128
dim = 65536


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
