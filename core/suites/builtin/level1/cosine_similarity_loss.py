"""Cosine similarity loss mean(1 - cos(predictions_i, targets_i)) over rows of (batch, dim) tensors."""
import torch
import torch.nn as nn

CATEGORY = "loss"


class Model(nn.Module):
    """Row-wise cosine similarity (eps = 1e-8), turned into a distance and averaged."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        cos = torch.nn.functional.cosine_similarity(predictions, targets, dim=-1)
        return torch.mean(1 - cos)


batch_size = 128
dim = 32768


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
