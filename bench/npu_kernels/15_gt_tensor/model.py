import torch
import torch.nn as nn

from verifier.runtime import load

lib = load()

CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int8: 4, torch.int16: 5,
         torch.int32: 6, torch.int64: 7, torch.uint8: 8, torch.uint16: 9, torch.uint32: 10, torch.uint64: 11,
         torch.bool: 12}


def broadcast(a, b):
    """The shape two shapes broadcast to."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    return tuple(max(p, q) for p, q in zip(a, b))


class ModelNew(nn.Module):
    def forward(self, x, y):
        shape = broadcast(x.shape, y.shape)
        xb = x.expand(shape).contiguous()
        yb = y.expand(shape).contiguous()
        out = torch.empty(shape, dtype=torch.bool)
        lib.gt_tensor(xb, yb, out, out.numel(), CODES[x.dtype])
        return out
