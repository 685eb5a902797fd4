"""Fused chain: attention-style scores q @ k^T per batch entry, scaled, then softmax over the keys."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """Returns softmax(bmm(q, k^T) / sqrt(head_dim), dim=-1) for (batch, seq_len, head_dim) inputs."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) / q.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1)


batch_size = 16
seq_len = 512
head_dim = 64


def get_inputs():
    return [torch.randn(batch_size, seq_len, head_dim), torch.randn(batch_size, seq_len, head_dim)]


def get_init_inputs():
    return []
