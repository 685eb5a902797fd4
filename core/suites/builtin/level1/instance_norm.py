"""Instance normalization of a (batch, channels, height, width) tensor."""
import torch
import torch.nn as nn

CATEGORY = "normalization"


class Model(nn.Module):
    """nn.InstanceNorm2d: normalizes every (sample, channel) plane over height and width; no affine."""

    def __init__(self, channels: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inorm(x)


batch_size = 12
channels = 64
height = 96
width = 96


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
