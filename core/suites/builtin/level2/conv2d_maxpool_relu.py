"""Fused chain: 2-D convolution, 2x2 max pooling, then ReLU."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv2d (3x3, no padding), nn.MaxPool2d(2) (a ragged last row/column is dropped), ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, pool_kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool2d(pool_kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.pool(self.conv(x)))


batch_size = 8
in_channels = 32
out_channels = 32
height = 128
width = 128
kernel_size = 3
pool_kernel = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_kernel]
