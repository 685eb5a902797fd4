"""Clamp a (batch, dim) tensor into [lower, upper]."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"


class Model(nn.Module):
    """Returns min(max(x, lower), upper) elementwise."""

    def __init__(self, lower: float, upper: float):
        super().__init__()
        self.lower = lower
        self.upper = upper

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=self.lower, max=self.upper)


batch_size = 128
dim = 65536
lower = -0.5
upper = 0.75


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [lower, upper]
