"""Fused chain: 2-D convolution, group normalization, then ReLU."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv2d (3x3, padding 1), nn.GroupNorm(num_groups, out_channels), ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int,
                 num_groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)
        self.gn = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.gn(self.conv(x)))


batch_size = 8
in_channels = 32
out_channels = 32
height = 128
width = 128
kernel_size = 3
padding = 1
num_groups = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, num_groups]
