"""2-D convolution of a (batch, in_channels, height, width) image, 3x3 kernel, no padding."""
import torch
import torch.nn as nn

CATEGORY = "convolution"


class Model(nn.Module):
    """nn.Conv2d(in_channels, out_channels, kernel_size) with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


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
