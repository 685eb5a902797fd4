"""Adaptive average pooling of a (batch, channels, height, width) tensor to a fixed 7x7 output."""
import torch
import torch.nn as nn

CATEGORY = "pooling"


class Model(nn.Module):
    """nn.AdaptiveAvgPool2d: cell i averages rows floor(i*H/7) to ceil((i+1)*H/7) - 1; columns alike."""

    def __init__(self, output_size: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 16
channels = 64
height = 112
width = 112
output_size = 7


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [output_size]
