"""Mean over the middle dimension of a (batch, dim1, dim2) tensor."""
import torch
import torch.nn as nn

CATEGORY = "reduction"


class Model(nn.Module):
    """Returns x.mean(reduce_dim)."""

    def __init__(self, reduce_dim: int):
        super().__init__()
        self.reduce_dim = reduce_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.reduce_dim)


batch_size = 64
dim1 = 512
dim2 = 512
reduce_dim = 1


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
