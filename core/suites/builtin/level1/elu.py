"""ELU activation over a (batch, dim) tensor."""
import torch
import torch.nn as nn

CATEGORY = "activation"


class Model(nn.Module):
    """Applies x for x > 0 and alpha * (exp(x) - 1) otherwise."""

    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.elu(x, alpha=self.alpha)


batch_size = 128
dim = 65536
alpha = 1.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [alpha]
