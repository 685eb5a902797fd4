"""Prefix sum along the rows of a (batch, length) tensor over only the elements a boolean mask keeps."""
import torch
import torch.nn as nn

CATEGORY = "scan"


class Model(nn.Module):
    """Returns torch.cumsum(x * mask, dim=scan_axis); masked-out elements contribute 0."""

    def __init__(self, scan_axis: int):
        super().__init__()
        self.scan_axis = scan_axis

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * mask, dim=self.scan_axis)


batch_size = 128
length = 32768
scan_axis = 1


def get_inputs():
    return [torch.randn(batch_size, length), torch.randint(0, 2, (batch_size, length)).bool()]


def get_init_inputs():
    return [scan_axis]
