"""Fused chain: linear layer, then the mean over the output features of each row (no dropout)."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Linear followed by a row mean kept as a (batch, 1) column."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        return x.mean(dim=1, keepdim=True)


batch_size = 512
in_features = 1024
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
