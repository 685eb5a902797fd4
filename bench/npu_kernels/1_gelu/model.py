import torch
import torch.nn as nn

from verifier.runtime import load

lib = load()


class ModelNew(nn.Module):
    def forward(self, x, approximate="none"):
        x = x.contiguous()
        out = torch.empty_like(x)
        tanh_form = 1 if approximate == "tanh" else 0
        if x.dtype == torch.float32:
            lib.gelu_f32(x, out, x.numel(), tanh_form)
        elif x.dtype == torch.float16:
            lib.gelu_f16(x, out, x.numel(), tanh_form)
        else:
            lib.gelu_bf16(x, out, x.numel(), tanh_form)
        return out
