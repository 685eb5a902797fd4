"""Fused chain: linear layer, swish (x * sigmoid(x)), then multiplication by a constant."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Returns swish(linear(x)) * scale."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        return x * torch.sigmoid(x) * self.scale


batch_size = 512
in_features = 1024
out_features = 2048
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
