"""Fully connected layer y = x @ W^T + b on a (batch, in_features) input."""
import torch
import torch.nn as nn

CATEGORY = "matmul"


class Model(nn.Module):
    """nn.Linear(in_features, out_features) with bias."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


batch_size = 512
in_features = 1024
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
