"""2-D max pooling (3x3 window, stride 2, padding 1) of a (batch, channels, height, width) tensor."""
import torch
import torch.nn as nn

CATEGORY = "pooling"


class Model(nn.Module):
    """nn.MaxPool2d with padding (padded positions never win)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 8
channels = 32
height = 128
width = 128
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
