"""Fused chain: x @ W^T (no bias), + bias vector, ReLU, on a (batch, in_features) input."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Bias-free nn.Linear, then a separate (out_features,) bias add, then ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.gemm(x) + self.bias)


batch_size = 512
in_features = 1024
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
