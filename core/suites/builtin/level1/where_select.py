"""Elementwise select between two (batch, dim) tensors by a boolean mask."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"


class Model(nn.Module):
    """Returns a where mask is true, b elsewhere."""

    def __init__(self):
        super().__init__()

    def forward(self, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(mask, a, b)


batch_size = 128
dim = 32768


def get_inputs():
    mask = torch.randint(0, 2, (batch_size, dim)).bool()
    return [mask, torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
