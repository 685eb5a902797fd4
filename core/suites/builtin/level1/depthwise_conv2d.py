"""Depthwise 2-D convolution (one 3x3 filter per channel, padding 1) of a (batch, channels, H, W) image."""
import torch
import torch.nn as nn

CATEGORY = "convolution"


class Model(nn.Module):
    """nn.Conv2d with groups == channels, so channels never mix."""

    def __init__(self, channels: int, kernel_size: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=padding, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 8
channels = 64
height = 96
width = 96
kernel_size = 3
padding = 1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, padding]
