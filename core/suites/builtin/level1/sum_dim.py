"""Sum over the middle dimension of a (batch, dim1, dim2) tensor, keeping it as size 1."""
import torch
import torch.nn as nn

CATEGORY = "reduction"


class Model(nn.Module):
    """Returns x.sum(reduce_dim, keepdim=True)."""

    def __init__(self, reduce_dim: int):
        super().__init__()
        self.reduce_dim = reduce_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.reduce_dim, keepdim=True)


batch_size = 64
dim1 = 512
dim2 = 512
reduce_dim = 1


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
