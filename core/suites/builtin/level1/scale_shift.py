"""Scalar scale and shift of a (batch, dim) tensor: x * scale + shift."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"


class Model(nn.Module):
    """Multiplies by a scalar, then adds a scalar."""

    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


batch_size = 128
dim = 65536
scale = 1.5
shift = -0.25


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale, shift]
