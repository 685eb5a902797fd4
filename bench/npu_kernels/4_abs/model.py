import torch
import torch.nn as nn

from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        if x.dtype == torch.float32:
            lib.abs_f32(x, out, x.numel())
        else:
            lib.abs_16(x, out, x.numel())
        return out
