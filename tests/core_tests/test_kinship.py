"""Kernel families read from the traced graph (issue #36, finding 1): a matrix multiplication traces ``mm`` and
a fused GEMM ``addmm`` (its category "fused"), and the two were strangers to retrieval. Each reference here is
counted as the roofline counts it (``count_forward`` on the meta device), then classified."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from core.kinship import KernelKind, kind_of, kind_of_signature, relevance
from verifier.machine.roofline import count_forward


class Lambda(nn.Module):
    def __init__(self, fn, *layers):
        super().__init__()
        self.fn, self.layers = fn, nn.ModuleList(layers)

    def forward(self, *xs):
        return self.fn(self, *xs)


def gemm_group_norm_hardtanh():
    return Lambda(lambda m, x: torch.clamp(m.layers[1](m.layers[0](x)), -2, 2), nn.Linear(256, 256),
                  nn.GroupNorm(8, 256)), [torch.rand(64, 256)]


CASES = {
    "matmul_with_transposed_b": (lambda: (Lambda(lambda m, a, b: a @ b.T), [torch.rand(64, 128), torch.rand(96, 128)]),
                                 "gemm"),
    "gemm_group_norm_hardtanh": (gemm_group_norm_hardtanh, "gemm"),
    "bmm": (lambda: (Lambda(lambda m, a, b: torch.bmm(a, b)), [torch.rand(4, 32, 64), torch.rand(4, 64, 16)]), "gemm"),
    "conv2d_relu": (lambda: (Lambda(lambda m, x: torch.relu(m.layers[0](x)), nn.Conv2d(8, 16, 3)),
                             [torch.rand(2, 8, 32, 32)]), "gemm"),
    "rms_norm": (lambda: (Lambda(lambda m, x: x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)),
                          [torch.rand(16, 64, 8, 8)]), "normalization"),
    "softmax": (lambda: (Lambda(lambda m, x: torch.softmax(x, dim=1)), [torch.rand(16, 512)]), "normalization"),
    "layer_norm": (lambda: (Lambda(lambda m, x: m.layers[0](x), nn.LayerNorm(64)), [torch.rand(16, 64)]),
                   "normalization"),
    "min_over_dim": (lambda: (Lambda(lambda m, x: torch.min(x, dim=1)[0]), [torch.rand(16, 256, 64)]), "reduction"),
    "sum_over_dim": (lambda: (Lambda(lambda m, x: torch.sum(x, dim=1, keepdim=True)), [torch.rand(16, 256)]),
                     "reduction"),
    "argmax": (lambda: (Lambda(lambda m, x: torch.argmax(x, dim=1)), [torch.rand(16, 256)]), "reduction"),
    "max_pool": (lambda: (Lambda(lambda m, x: m.layers[0](x), nn.MaxPool2d(2)), [torch.rand(2, 4, 32, 32)]),
                 "reduction"),
    "mse_loss": (lambda: (Lambda(lambda m, a, b: torch.mean((a - b) ** 2)), [torch.rand(128), torch.rand(128)]),
                 "reduction"),
    "selu": (lambda: (Lambda(lambda m, x: torch.selu(x)), [torch.rand(16, 256)]), "pointwise"),
    "gelu_scale": (lambda: (Lambda(lambda m, x: torch.nn.functional.gelu(x) * 2.0), [torch.rand(16, 256)]),
                   "pointwise"),
    "cumsum": (lambda: (Lambda(lambda m, x: torch.cumsum(x, dim=1)), [torch.rand(16, 256)]), "scan"),
    "transpose": (lambda: (Lambda(lambda m, x: x.t().contiguous()), [torch.rand(16, 256)]), "data_movement"),
}


@pytest.mark.parametrize("name", CASES)
def test_the_family_is_read_from_the_traced_graph(name):
    build, family = CASES[name]
    torch.manual_seed(0)
    with torch.device("meta"):
        model, inputs = build()
        inputs = [x.to("meta") for x in inputs]
    profile = count_forward(model, inputs)
    kind = kind_of([], "", profile, {"triad_gbps": 25.0, "fma_gflops": 170.0})
    assert kind.family == family and kind.source == "graph", (name, profile["by_op"])
    assert kind.dtypes == ("float32",)


def test_a_gemm_and_a_fused_gemm_are_kin_and_a_selu_is_not():
    with torch.device("meta"):
        mm = count_forward(Lambda(lambda m, a, b: a @ b.T), [torch.rand(512, 512), torch.rand(512, 512)])
        fused, inputs = gemm_group_norm_hardtanh()
        fused_profile = count_forward(fused, inputs)
        selu = count_forward(Lambda(lambda m, x: torch.selu(x)), [torch.rand(512, 512)])
    ceilings = {"triad_gbps": 25.0, "fma_gflops": 170.0}
    matmul, gemm, pointwise = (kind_of([], "", p, ceilings) for p in (mm, fused_profile, selu))
    assert matmul.regime == "compute" and pointwise.regime == "memory"
    assert relevance(matmul, gemm) >= 4 and relevance(pointwise, gemm) == 0.0
    # what an experience stores is read back the same
    assert kind_of_signature(matmul.signature()) == KernelKind("gemm", "compute", ("float32",), matmul.ops, "graph")


def test_without_a_graph_the_family_comes_from_the_names_the_source_calls():
    assert kind_of(["linear", "groupnorm", "hardtanh", "gemm", "group_norm"], "fused", None, None).family == "gemm"
    assert kind_of(["matmul"], "matmul", None, None).family == "gemm"
    assert kind_of(["cumsum"], "scan", None, None).family == "scan"
    assert kind_of(["selu"], "activation", None, None).family == "pointwise"
    # an experience recorded before families were: read from its ops and category
    assert kind_of_signature({"ops": ["matmul"], "category": "matmul"}).family == "gemm"
    assert kind_of_signature({"text": "seed knowledge"}) is None
