"""A fourth backend added by one module and one knowledge folder (issue #15): a "cpu-clang" variant
that an installed package declares under the ``evokernel.backends`` entry-point group. Nothing else
in EvoKernel changes: the backend table, doctor, the memory's seeds, the prompts and the verifier
all find it through the table."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

import candidates as C

PLUGIN = '''
"""A CPU backend built by clang++ (g++ where clang++ is not installed): everything it declares."""
import functools
import shutil
import time

from verifier.backends.base import DeviceRuntime
from verifier.backends.cpu import CpuBackend


class ClangBackend(CpuBackend):
    name = "cpu-clang"
    display_name = "CPU (C++ with OpenMP, built by clang++)"
    header_suffixes = (".h", ".hpp", ".inc")
    knowledge_dir = {knowledge!r}

    @functools.cached_property
    def compiler(self):
        return shutil.which("clang++") or shutil.which("g++")


class HostEvent:
    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


class EventRuntime(DeviceRuntime):
    """The host timed by (start, end) event pairs, the way a device is."""

    def events(self):
        return lambda: (HostEvent(), HostEvent())


class ClangEventsBackend(ClangBackend):
    name = "cpu-clang-events"
    timer = "events"
    device_runtime = EventRuntime
'''

SEED = """---
kind: api_template
title: clang vectorisation hints
names: relu, clang, vectorize
---
Use `#pragma clang loop vectorize(enable)` on the inner loop; clang honours `-march=native`.
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin installed the way pip would leave it: a module and a dist-info with its entry point,
    on the path; its knowledge folder beside it."""
    site = tmp_path / "site"
    knowledge = tmp_path / "knowledge"
    (site / "evokernel_clang-0.1.dist-info").mkdir(parents=True)
    knowledge.mkdir()
    (knowledge / "clang.md").write_text(SEED)
    (site / "evokernel_clang.py").write_text(textwrap.dedent(PLUGIN).format(knowledge=str(knowledge)))
    (site / "evokernel_clang-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: evokernel-clang\nVersion: 0.1\n")
    (site / "evokernel_clang-0.1.dist-info" / "entry_points.txt").write_text(
        "[evokernel.backends]\ncpu-clang = evokernel_clang:ClangBackend\n"
        "cpu-clang-events = evokernel_clang:ClangEventsBackend\n")
    monkeypatch.setenv("PYTHONPATH", str(site))   # where the worker imports the plugin's device runtime from
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield "cpu-clang"
    sys.modules.pop("evokernel_clang", None)


def test_the_table_finds_a_plugin_backend_and_never_lets_it_replace_a_built_in(plugin):
    from verifier.backends import backend_names, backend_table, display_name, get_backend, source_suffix

    assert backend_names()[:3] == ["cpu", "cuda", "ascend"] and plugin in backend_names()
    backend = get_backend(plugin)
    assert backend.name == plugin and backend.device == "cpu" and backend.toolchain().available
    assert display_name(plugin) == "CPU (C++ with OpenMP, built by clang++)" and source_suffix(plugin) == ".cpp"
    assert backend_table()["cpu"] == "verifier.backends.cpu:CpuBackend"


def test_doctor_seeds_and_prompts_see_the_plugin(plugin):
    from core import prompts
    from core.doctor import diagnose
    from core.seeds import seed_items

    report = diagnose([plugin])["backends"][plugin]
    assert report["available"], report
    items = seed_items(plugin)
    assert [e.title for e in items] == ["clang vectorisation hints"] and items[0].backend == plugin
    assert "CPU (C++ with OpenMP, built by clang++)" in prompts.system_message(plugin)


def test_answers_and_workspaces_know_the_plugins_file_suffixes(plugin, tmp_path):
    """A suffix only the plugin declares (``.inc`` headers) is a candidate file in an answer and in a
    kernel folder, with no change to the parser or the workspace."""
    from core.responses import parse_answer
    from core.workspace_files import read_candidate_files

    answer = ("```cpp\n// tile.inc\nconstexpr int TILE = 64;\n```\n"
              "```cpp file=kernel.cpp\n#include \"tile.inc\"\nextern \"C\" void k() {}\n```\n"
              "```python\nclass ModelNew: pass\n```\n")
    parsed = parse_answer(answer)
    assert parsed.ok and sorted(parsed.files) == ["kernel.cpp", "model.py", "tile.inc"], parsed
    for name, text in parsed.files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "notes.txt").write_text("not a candidate file")
    assert sorted(read_candidate_files(tmp_path)) == ["kernel.cpp", "model.py", "tile.inc"]


@pytest.mark.slow
def test_the_verifier_runs_every_gate_on_the_plugin_backend(plugin, fast_config, tmp_path, make_candidate, suite):
    from verifier.harness.verify import Verifier

    v = Verifier(plugin, fast_config, cache_dir=tmp_path / "cache")
    try:
        good = v.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.RELU)))
        assert good.feasible and good.backend == plugin, good.message
        bad = v.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.IDENTITY)))
        assert bad.failed_gate == "correctness"
    finally:
        v.close()


@pytest.mark.slow
def test_the_worker_drives_the_device_through_the_runtime_the_plugin_declares(plugin, fast_config, tmp_path,
                                                                             make_candidate, suite):
    """The job names the backend's device runtime and the worker makes that one: this plugin's times
    calls by event pairs, so the window's clock is "events" (the built-in CPU's is the wall clock).
    The plugin lives in pytest's /tmp, which the sandbox replaces with a private one; an installed
    plugin is in site-packages, which the sandbox shows: so this one job runs unconfined."""
    from verifier.backends import runtime_target
    from verifier.harness.verify import Verifier

    assert runtime_target(__import__("evokernel_clang").ClangEventsBackend) == "evokernel_clang:EventRuntime"
    clocks = {}
    for name in (plugin, "cpu-clang-events"):
        v = Verifier(name, fast_config.model_copy(update={"use_bwrap": False}), cache_dir=tmp_path / name)
        try:
            out = v.verify(suite.get("relu").spec(), make_candidate(C.elementwise(C.RELU)))
            assert out.feasible, out.message
            clocks[name] = out.gate("performance").details["timing"]["clock"]
        finally:
            v.close()
    assert clocks == {plugin: "wall", "cpu-clang-events": "events"}
