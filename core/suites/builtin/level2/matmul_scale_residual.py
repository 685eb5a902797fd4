"""Fused chain: square matmul x @ W, scaled by a constant, plus the input as a residual."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Returns (x @ weight) * scale + x with a (dim, dim) weight."""

    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight) * self.scale + x


batch_size = 1024
dim = 1024
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, scale]
