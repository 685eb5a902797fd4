"""Fused chain: 2-D convolution, ReLU, then a per-channel bias add."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv2d (3x3, no padding), ReLU, + a (out_channels, 1, 1) bias broadcast over height and width."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + self.bias


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
