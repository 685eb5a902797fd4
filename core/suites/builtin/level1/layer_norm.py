"""Layer normalization (affine) over the last dimension of a (batch, seq_len, dim) tensor."""
import torch
import torch.nn as nn

CATEGORY = "normalization"


class Model(nn.Module):
    """nn.LayerNorm(dim): (x - mean) / sqrt(var + eps) * weight + bias per row."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 32
seq_len = 256
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
