"""Leaky ReLU activation over a (batch, dim) tensor."""
import torch
import torch.nn as nn

CATEGORY = "activation"


class Model(nn.Module):
    """Applies x for x >= 0 and negative_slope * x otherwise."""

    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 128
dim = 65536
negative_slope = 0.01


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]
