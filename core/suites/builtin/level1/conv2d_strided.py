"""Strided 2-D convolution (3x3, stride 2, padding 1) of a (batch, in_channels, height, width) image."""
import torch
import torch.nn as nn

CATEGORY = "convolution"


class Model(nn.Module):
    """nn.Conv2d with stride and zero padding, which halves the spatial size."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 8
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
