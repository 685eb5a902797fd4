"""Cross-entropy loss of (batch, num_classes) logits against integer class labels, mean over the batch."""
import torch
import torch.nn as nn

CATEGORY = "loss"


class Model(nn.Module):
    """Returns mean(logsumexp(logits) - logits[label]) over the rows."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, targets, reduction="mean")


batch_size = 12288
num_classes = 1000


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
