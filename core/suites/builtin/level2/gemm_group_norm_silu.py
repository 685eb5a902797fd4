"""Fused chain: linear layer, group normalization over the output features, then SiLU."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Linear, nn.GroupNorm(num_groups, out_features) on the (batch, features) result, x * sigmoid(x)."""

    def __init__(self, in_features: int, out_features: int, num_groups: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.gn = nn.GroupNorm(num_groups, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.gn(self.gemm(x)))


batch_size = 512
in_features = 1024
out_features = 2048
num_groups = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]
