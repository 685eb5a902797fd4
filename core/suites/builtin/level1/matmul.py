"""Dense matrix multiplication C = A @ B of an (M, K) and a (K, N) matrix."""
import torch
import torch.nn as nn

CATEGORY = "matmul"


class Model(nn.Module):
    """Returns torch.matmul(a, b)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


M = 1024
K = 1024
N = 1024


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
