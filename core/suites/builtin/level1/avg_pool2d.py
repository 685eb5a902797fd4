"""2-D average pooling (3x3 window, stride 2, padding 1) of a (batch, channels, height, width) tensor."""
import torch
import torch.nn as nn

CATEGORY = "pooling"


class Model(nn.Module):
    """nn.AvgPool2d; zero padding counts toward each window's divisor (count_include_pad=True)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 8
channels = 64
height = 128
width = 128
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
