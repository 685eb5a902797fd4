"""Hinge loss mean(max(0, 1 - predictions * targets)) over (batch, dim) tensors, targets in {-1, +1}."""
import torch
import torch.nn as nn

CATEGORY = "loss"


class Model(nn.Module):
    """Returns the mean of clamp(1 - predictions * targets, min=0)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.clamp(1 - predictions * targets, min=0).mean()


batch_size = 192
dim = 32768


def get_inputs():
    targets = torch.randint(0, 2, (batch_size, dim)).float() * 2 - 1
    return [torch.randn(batch_size, dim), targets]


def get_init_inputs():
    return []
