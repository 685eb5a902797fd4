"""Format and anti-hack rules on model.py and kernel sources (no build)."""

from __future__ import annotations

import pytest

from verifier.backends import get_backend
from verifier.gates.antihack import check_kernel_source, check_model
from verifier.gates.format import check_format

import candidates as C

GOOD = C.ELEMENTWISE_MODEL.format(fn="relu_forward")


def test_good_model_passes():
    assert check_model(GOOD) is None
    assert check_model(C.SOFTMAX_SCRATCH_MODEL) is None
    assert check_model(C.SCALE_BIAS_MODEL) is None


@pytest.mark.parametrize("edit, words", [
    (lambda s: "import os\n" + s, "import of os"),
    (lambda s: "import threading\n" + s, "import of threading"),
    (lambda s: "import subprocess\n" + s, "import of subprocess"),
    (lambda s: "import socket\n" + s, "import of socket"),
    (lambda s: "import importlib\n" + s, "import of importlib"),
    (lambda s: "import gc\n" + s, "import of gc"),
    (lambda s: "import inspect\n" + s, "import of inspect"),
    (lambda s: "import ctypes\n" + s, "verifier.runtime.load"),
    (lambda s: "import torch.nn.functional as F\n" + s, "nn.functional"),
    (lambda s: "from torch.utils.cpp_extension import load_inline\n" + s, "cpp_extension"),
    (lambda s: s.replace("return out", "return torch.nn.functional.relu(x)"), "nn.functional"),
    (lambda s: s.replace("return out", "return torch.relu(x)"), "torch.relu"),
    (lambda s: s.replace("return out", "return x.clamp(min=0)"), ".clamp()"),
    (lambda s: s.replace("return out", "return x @ x.T"), "@ operator"),
    (lambda s: s.replace("class ModelNew(nn.Module)", "class ModelNew(Model)"), "reuse the reference Model"),
    (lambda s: s.replace("lib.relu_forward(x, out, x.numel())",
                         "try:\n            lib.relu_forward(x, out, x.numel())\n        except Exception:\n            pass"),
     "try/except"),
    (lambda s: s + "\ntorch.relu = lambda x: x\n", "patches"),
    (lambda s: s + "\nimport time\ntime.perf_counter = lambda: 0.0\n", "import of time"),
    (lambda s: s + "\ntorch.set_num_threads(64)\n", "set_num_threads"),
    (lambda s: s.replace("lib = load()", "lib = load('/usr/lib/libopenblas.so')"), "without arguments"),
    (lambda s: s.replace("lib = load()", "lib = None"), "never loads"),
    (lambda s: s + "\nx = eval('1')\n", "eval"),
    (lambda s: s + "\nk = ModelNew.__subclasses__\n", "__subclasses__"),
    (lambda s: s + "\nsetattr(torch, 'relu', None)\n", "setattr"),
    (lambda s: s.replace("out = torch.empty_like(x)", "out = torch.empty_like(x)\n        p = x.data_ptr()"),
     "data_ptr"),
    (lambda s: s.replace("lib.relu_forward(x, out, x.numel())", "lib.relu_forward(x, out, x.numel())\n        global CACHE"),
     "global"),
])
def test_model_rules(edit, words):
    problem = check_model(edit(GOOD))
    assert problem is not None and words in problem, problem


def test_launcher_named_like_a_torch_op_is_fine():
    src = GOOD.replace("relu_forward", "relu").replace("lib.relu(", "self.lib.relu(").replace(
        "    def forward", "    def __init__(self):\n        super().__init__()\n        self.lib = lib\n\n    def forward")
    assert check_model(src) is None


@pytest.mark.parametrize("src, words", [
    ('#include <torch/extension.h>\n', "PyTorch"),
    ('#include <cblas.h>\n', "BLAS"),
    ('#include "/etc/passwd"\n', "candidate's own files"),
    ('#include <../../secret.h>\n', "parent paths"),
    ('#include <fstream>\n', "file access"),
    ('#include <chrono>\n', "timers"),
    ('void f() { system("ls"); }', "system"),
    ('void f() { auto p = popen("ls", "r"); }', "popen"),
    ('void f() { auto v = getenv("HOME"); }', "getenv"),
    ('extern char** environ;', "environ"),
    ('void f() { asm volatile("nop"); }', "asm"),
    ('__attribute__((constructor)) void init() {}', "constructor"),
    ('#define F(a, b) a##b\n', "token pasting"),
    ('void f() { FILE* fp = fopen("x", "r"); }', "fopen"),
])
def test_kernel_source_rules(src, words):
    problem = check_kernel_source("kernel.cpp", src, {"kernel.cpp"})
    assert problem is not None and words in problem, problem


def test_kernel_rules_ignore_comments_and_strings():
    src = '#include <cstdint>\n// we never fork() here\n/* system() */\nconst char* s = "getenv(x)";\n'
    assert check_kernel_source("kernel.cpp", src, {"kernel.cpp"}) is None
    assert check_kernel_source("kernel.cpp", '#include "util.h"\n', {"kernel.cpp", "util.h"}) is None


@pytest.mark.parametrize("files, words", [
    ({"kernel.cpp": "x"}, "model.py is missing"),
    ({"model.py": GOOD}, "no kernel source"),
    ({"model.py": GOOD, "kernel.cpp": "x", "run.sh": "rm -rf /"}, "unexpected file type"),
    ({"model.py": GOOD, "kernel.cpp": "x", "helper.py": ""}, "only model.py"),
    ({"model.py": "def (:", "kernel.cpp": "x"}, "syntax error"),
    ({"model.py": "class Other: pass", "kernel.cpp": "x"}, "no class ModelNew"),
    ({"model.py": GOOD, "kernel.cpp": "x" * 300_000}, "at most 256 KiB"),
    ({"model.py": GOOD, "../kernel.cpp": "x"}, "not allowed"),
])
def test_format_rules(files, words):
    problem = check_format(files, get_backend("cpu"))
    assert problem is not None and words in problem, problem
