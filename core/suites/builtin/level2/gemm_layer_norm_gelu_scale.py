"""Fused chain: linear layer, LayerNorm over the features, exact GELU, then scaling by a constant."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Returns gelu(layer_norm(linear(x))) * scale."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(self.gemm(x))) * self.scale


batch_size = 512
in_features = 1024
out_features = 2048
scale = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
