"""Batched matrix multiplication of (batch, M, K) and (batch, K, N) tensors."""
import torch
import torch.nn as nn

CATEGORY = "matmul"


class Model(nn.Module):
    """Returns torch.bmm(a, b): one independent (M, K) @ (K, N) product per batch entry."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


batch_size = 32
M = 256
K = 512
N = 256


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
