"""Batch normalization of a (batch, channels, height, width) tensor using the batch's own statistics."""
import torch
import torch.nn as nn

CATEGORY = "normalization"


class Model(nn.Module):
    """nn.BatchNorm2d in training mode: per-channel mean and variance over (batch, height, width)."""

    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


batch_size = 12
channels = 64
height = 96
width = 96


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
