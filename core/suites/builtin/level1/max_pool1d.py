"""1-D max pooling over the length of a (batch, channels, length) tensor."""
import torch
import torch.nn as nn

CATEGORY = "pooling"


class Model(nn.Module):
    """nn.MaxPool1d with padding (padded positions never win)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 64
channels = 64
length = 4096
kernel_size = 4
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
