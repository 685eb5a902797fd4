"""KL divergence KL(P || Q) between row distributions given as (batch, dim) logits, batch-mean reduced."""
import torch
import torch.nn as nn

CATEGORY = "loss"


class Model(nn.Module):
    """P = softmax(p_logits), Q = softmax(q_logits) per row; returns sum(P * (log P - log Q)) / batch."""

    def __init__(self):
        super().__init__()

    def forward(self, p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
        log_q = torch.log_softmax(q_logits, dim=-1)
        p = torch.softmax(p_logits, dim=-1)
        return torch.nn.functional.kl_div(log_q, p, reduction="batchmean")


batch_size = 128
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
