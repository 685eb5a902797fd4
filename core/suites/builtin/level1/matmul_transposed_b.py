"""Matrix multiplication C = A @ B^T of an (M, K) matrix and an (N, K) matrix."""
import torch
import torch.nn as nn

CATEGORY = "matmul"


class Model(nn.Module):
    """Returns a @ b.T; b is stored row-major as (N, K)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


M = 1024
K = 1024
N = 1024


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
