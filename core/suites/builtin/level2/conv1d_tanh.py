"""Fused chain: 1-D convolution of a (batch, in_channels, length) signal, then tanh."""
import torch
import torch.nn as nn

CATEGORY = "fused"


class Model(nn.Module):
    """nn.Conv1d (kernel 5, padding 2, so the length is kept), then tanh."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x))


batch_size = 16
in_channels = 32
out_channels = 64
length = 4096
kernel_size = 5
padding = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
