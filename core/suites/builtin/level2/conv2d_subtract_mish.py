"""Fused chain: 2-D convolution, subtraction of a constant, then Mish."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv2d (3x3, no padding), - shift, then mish(x) = x * tanh(softplus(x))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, shift: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mish(self.conv(x) - self.shift)


batch_size = 8
in_channels = 32
out_channels = 32
height = 128
width = 128
kernel_size = 3
shift = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, shift]
