"""Smooth L1 (Huber-like, beta = 1) loss between (batch, dim) predictions and targets, mean-reduced."""
import torch
import torch.nn as nn

CATEGORY = "loss"


class Model(nn.Module):
    """With d = predictions - targets: 0.5 * d^2 / beta if |d| < beta else |d| - 0.5 * beta, averaged."""

    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.smooth_l1_loss(predictions, targets, reduction="mean", beta=self.beta)


batch_size = 128
dim = 65536
beta = 1.0


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [beta]
