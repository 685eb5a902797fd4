"""Softsign activation over a (batch, dim) tensor."""
import torch
import torch.nn as nn

CATEGORY = "activation"


class Model(nn.Module):
    """Applies x / (1 + |x|) elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (1 + torch.abs(x))


batch_size = 192
dim = 32768


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
