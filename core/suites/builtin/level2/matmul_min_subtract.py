"""Fused chain: linear layer, elementwise minimum with a constant, then subtraction of that constant."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Returns min(linear(x), constant) - constant, which is <= 0 everywhere."""

    def __init__(self, in_features: int, out_features: int, constant: float):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.constant = constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        return torch.clamp(x, max=self.constant) - self.constant


batch_size = 512
in_features = 1024
out_features = 2048
constant = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, constant]
