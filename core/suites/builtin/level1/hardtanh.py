"""HardTanh activation over a (batch, dim) tensor."""
import torch
import torch.nn as nn

CATEGORY = "activation"


class Model(nn.Module):
    """Clamps every element to [min_val, max_val]."""

    def __init__(self, min_val: float, max_val: float):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


batch_size = 128
dim = 65536
min_val = -1.0
max_val = 1.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [min_val, max_val]
