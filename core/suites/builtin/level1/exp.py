"""Elementwise exponential of a (batch, dim) tensor with entries in [0, 1]."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"


class Model(nn.Module):
    """Returns exp(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


batch_size = 128
dim = 65536


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
