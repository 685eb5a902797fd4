"""Fused chain: 2-D convolution, instance normalization, then division by a constant."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv2d (3x3, no padding), nn.InstanceNorm2d (no affine), / divisor."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, divisor: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.inorm = nn.InstanceNorm2d(out_channels)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inorm(self.conv(x)) / self.divisor


batch_size = 8
in_channels = 32
out_channels = 32
height = 128
width = 128
kernel_size = 3
divisor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, divisor]
