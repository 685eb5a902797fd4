"""Product over a short last dimension of a (batch, dim, reduce_size) tensor."""
import torch
import torch.nn as nn

CATEGORY = "reduction"


class Model(nn.Module):
    """Returns x.prod(reduce_dim); the reduced axis is short so the product stays in range."""

    def __init__(self, reduce_dim: int):
        super().__init__()
        self.reduce_dim = reduce_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.prod(x, dim=self.reduce_dim)


batch_size = 128
dim = 8192
reduce_size = 16
reduce_dim = 2


def get_inputs():
    return [torch.randn(batch_size, dim, reduce_size)]


def get_init_inputs():
    return [reduce_dim]
