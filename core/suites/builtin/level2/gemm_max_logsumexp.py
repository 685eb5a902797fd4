"""Fused chain: token-wise linear layer, max over the tokens, then logsumexp over the features."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Returns logsumexp(max_over_seq(linear(x)), dim=-1): one value per batch entry."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = torch.max(x, dim=1).values
        return torch.logsumexp(x, dim=-1)


batch_size = 16
seq_len = 64
in_features = 1024
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, seq_len, in_features)]


def get_init_inputs():
    return [in_features, out_features]
