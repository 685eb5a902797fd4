"""Seed knowledge per backend: the front-matter format, and the worked examples hold up — they pass the
verifier's own static gates, their kernels declare what the build needs, and the CUDA ones compile."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

KNOWLEDGE = Path(__file__).resolve().parents[2] / "core/knowledge"
FRONT = re.compile(r"\A---\nkind: (api_template|best_practice)\ntitle: (.+)\nnames: (.+)\n---\n(.+)\Z", re.S)
BLOCK = re.compile(r"```(\w+) file=(\S+)\n(.*?)```", re.S)


def items(backend: str) -> list[Path]:
    return sorted((KNOWLEDGE / backend).glob("*.md"))


def blocks(path: Path) -> dict[str, str]:
    return {name: text for _, name, text in BLOCK.findall(path.read_text())}


@pytest.mark.parametrize("backend", ["cpu", "cuda", "ascend"])
def test_front_matter(backend):
    found = items(backend)
    assert len(found) >= 5
    for path in found:
        m = FRONT.match(path.read_text())
        assert m, f"{path.name}: expected ---/kind/title/names/--- then a body"
        assert all(n.strip() for n in m.group(3).split(","))


def test_ascend_covers_what_prompts_need():
    titles = " | ".join(FRONT.match(p.read_text()).group(2) for p in items("ascend"))
    for words in ("API subset", "kernel-launch skeleton", "alignment", "elementwise", "row-wise"):
        assert words in titles


@pytest.mark.parametrize("backend, suffixes", [("cuda", (".cu",)), ("ascend", (".cpp",))])
def test_worked_examples_pass_the_static_gates(backend, suffixes):
    from verifier.backends import get_backend
    from verifier.gates.antihack import check_candidate, check_model
    from verifier.gates.format import check_format

    checked = 0
    for path in items(backend):
        files = blocks(path)
        if "model.py" in files:
            assert check_model(files["model.py"]) is None, path.name
        if "model.py" in files and any(n.endswith(suffixes) for n in files):
            assert check_format(files, get_backend(backend)) is None, path.name
            assert check_candidate(files, suffixes, (".h", ".cuh"), backend) is None, path.name
            checked += 1
    assert checked >= (1 if backend == "cuda" else 2)


def test_ascend_examples_declare_launchable_kernels():
    from verifier.backends.ascend import find_kernels, launch_signature

    names = []
    for path in items("ascend"):
        files = blocks(path)
        if "kernel.cpp" in files:
            names += [launch_signature(k).name for k in find_kernels({"kernel.cpp": files["kernel.cpp"]})]
            call = re.search(r"lib\.(\w+)\(", files.get("model.py", ""))
            assert call and f"aclrtlaunch_{call.group(1)}" in names, path.name
    assert {"aclrtlaunch_add", "aclrtlaunch_softmax_rows", "aclrtlaunch_scale"} <= set(names)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_examples_compile(tmp_path):
    compiled = 0
    for path in items("cuda"):
        source = blocks(path).get("kernel.cu")
        if source is None:
            continue
        (tmp_path / "kernel.cu").write_text(source)
        proc = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-Xcompiler", "-fPIC", "-c", "kernel.cu", "-o", "k.o"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{path.name}: {proc.stderr[-2000:]}"
        compiled += 1
    assert compiled >= 3
