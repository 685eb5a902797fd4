"""Mean squared error between (batch, dim) predictions and targets, reduced to a scalar mean."""
import torch
import torch.nn as nn

CATEGORY = "loss"


class Model(nn.Module):
    """Returns mean((predictions - targets)^2)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(predictions, targets, reduction="mean")


batch_size = 128
dim = 65536


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
