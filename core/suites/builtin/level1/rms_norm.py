"""RMS normalization over the last dimension of a (batch, seq_len, dim) tensor, with a learned scale."""
import torch
import torch.nn as nn

CATEGORY = "normalization"


class Model(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight per row (no mean subtraction, no bias)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


batch_size = 32
seq_len = 192
dim = 1024
eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, eps]
