"""Matrix-vector product of an (M, K) matrix and a (K, 1) column vector."""
import torch
import torch.nn as nn

CATEGORY = "matmul"


class Model(nn.Module):
    """Returns a @ v, an (M, 1) column."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, v)


M = 4096
K = 8192


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
