"""Fused chain: 2-D convolution, sigmoid, then a sum over channels, height and width per sample."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv2d (3x3, no padding), sigmoid, sum over dims (1, 2, 3): one value per sample."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.conv(x)).sum(dim=(1, 2, 3))


batch_size = 8
in_channels = 32
out_channels = 32
height = 128
width = 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
