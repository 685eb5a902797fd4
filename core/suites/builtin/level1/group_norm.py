"""Group normalization of a (batch, channels, height, width) tensor with affine weight and bias."""
import torch
import torch.nn as nn

CATEGORY = "normalization"


class Model(nn.Module):
    """nn.GroupNorm: normalizes each group of channels / num_groups channels per sample."""

    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 16
channels = 64
num_groups = 8
height = 112
width = 112


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
