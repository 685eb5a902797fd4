"""Mish activation over a (batch, dim) tensor."""
import torch
import torch.nn as nn

CATEGORY = "activation"


class Model(nn.Module):
    """Applies x * tanh(softplus(x)) elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mish(x)


batch_size = 128
dim = 65536


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
