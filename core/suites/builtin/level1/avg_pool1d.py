"""1-D average pooling over the length of a (batch, channels, length) tensor."""
import torch
import torch.nn as nn

CATEGORY = "pooling"


class Model(nn.Module):
    """nn.AvgPool1d with non-overlapping windows; a ragged tail shorter than the window is dropped."""

    def __init__(self, kernel_size: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 64
channels = 64
length = 4096
kernel_size = 4


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [kernel_size]
