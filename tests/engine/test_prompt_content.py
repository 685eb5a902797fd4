"""What the model is told, read from the requests the real loopback server received: the machine
(threads, the ISA -march=native enables, the backend's tolerance), the roofline of the start point,
the variants already tried with their "Change:" summaries, the best kernel's code when it is not the
start point, and resident rules that replace (not sit beside) the item they consolidate. Then
``report`` over that run: a roofline column and a roofline PNG."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import candidates as C
from openai_server import Reply, answer_with, is_refine, task_of

pytestmark = pytest.mark.slow

BEST_MARKER = "kBestSoFarMarker"
BEST_KERNEL = C.RELU + f"\nstatic const char* {BEST_MARKER} = \"best\";\n"


def _user(request: dict) -> str:
    return request["messages"][-1]["content"]


def _run(workspace, ids, iterations):
    import asyncio

    from core.session import Session

    session = Session(workspace)

    async def go():
        try:
            return await session.run(session.tasks(ids), method="evokernel", iterations=iterations, suite=None,
                                     scale=None)
        finally:
            await session.close_async()

    with session:
        return asyncio.run(go())


def test_refine_prompt_carries_machine_roofline_changes_and_best_code(workspace, llm_env):
    from verifier.machine.facts import compiler_target

    answers = iter([
        ("Change: first version, one parallel simd loop", C.elementwise(C.RELU)),
        ("**Change:** dropped the max to save a compare", C.elementwise(C.IDENTITY)),     # wrong: fails
        ("Change: same again with a tag", C.elementwise(C.RELU + "\nstatic const char* kTag = \"third\";\n")),
    ])

    def script(req, n):
        note, files = next(answers)
        return Reply(answer_with(files, note=note))

    server = llm_env(script)
    record = _run(workspace, ["relu"], iterations=3)
    assert record.progress["relu"].feasible
    prompts = [_user(r) for r in server.requests if task_of(r) == "relu"]
    assert len(prompts) == 3 and not is_refine(server.requests[0]) and is_refine(server.requests[2])
    system = server.requests[0]["messages"][0]["content"]
    assert "`Change:" in system

    draft, third = prompts[0], prompts[2]
    reference = (Path(__file__).parents[1] / "fixtures" / "suite" / "level1" / "relu.py").read_text().strip()
    isa = compiler_target("g++", ("-march=native",))["isa"]
    for text in (draft, third):
        assert "runs with 2 OpenMP threads (OMP_NUM_THREADS=2" in text
        if isa:
            assert "-march=native enables" in text and isa[0] in text
        assert "atol=1e-4 and rtol=1e-4 (float32, cpu backend)" in text
        assert reference in text                                  # the reference, whole

    # the first timed kernel measured the ceilings and counted the task at the latest: later prompts carry them
    assert re.search(r"Measured ceilings with 2 threads: memory [\d.]+ GB/s \(STREAM triad\), compute \d+ GFLOP/s", third)
    assert re.search(r"This task's roofline: at least 2\.1 MB moved \(inputs 1\.0 MB, weights 0 B, outputs 1\.0 MB\) "
                     r"and 262\.1 KFLOP \(0\.12 FLOP/byte\): memory-bound on this machine", third)

    # iteration 2 refines the first kernel again (the best, always among the start points; its child
    # failed): the start's roofline and Change, the tried variant with its Change line and verdict
    start = third.split("## Start point", 1)[1].split("## API knowledge")[0]
    assert re.search(r"Roofline: memory-bound: \d+ % of the [\d.]+ GB/s triad ceiling \(2\.1 MB moved at [\d.]+ GB/s", start)
    assert re.search(r"Its own time: [\d.]+ ms \(IQR [\d.]+\), its median in the window it was verified in", start)
    assert "Change that made it: first version, one parallel simd loop" in start
    tried = start.split("### Ideas already tried on this task", 1)[1]
    assert "Change: dropped the max to save a compare (from the start point)\n  -> failed at correctness" in tried
    assert C.RELU.strip() in start                                         # the start point's code, whole
    assert "It is the best kernel so far." in start and "## Best kernel so far" not in third

    # the Change lines are stored with the experiences
    from store import Store

    with Store.open(workspace.memory_path, readonly=True) as store:
        changes = [store.get(i).extra.get("change") for i in record.progress["relu"].attempts]
    assert changes == ["first version, one parallel simd loop", "dropped the max to save a compare",
                       "same again with a tag"]

    # report: a roofline column and a roofline PNG of the best kernels
    proc = subprocess.run([sys.executable, "-m", "evotui.cli", "report", record.id, "--tasks"], cwd=workspace.root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "roofline" in proc.stdout and re.search(r"\d+% memory \([\d.]+ GB/s\)", proc.stdout)
    proc = subprocess.run([sys.executable, "-m", "evotui.cli", "report", record.id, "--json"], cwd=workspace.root,
                          capture_output=True, text=True, timeout=300)
    data = json.loads(proc.stdout)
    png = [Path(p) for p in data["plots"] if p.endswith("roofline.png")]
    assert png and png[0].stat().st_size > 5000
    roof = data["runs"][0]["per_task"]["relu"]["roofline"]
    assert roof["bound"] == "memory" and roof["bytes"] == 2 * 64 * 4096 * 4


def test_a_consolidated_item_is_replaced_by_its_rule_in_the_next_prompt(workspace, llm_env):
    """An item cited by correct kernels of eight operators becomes a rule titled with all eight (four
    named, "and 4 more") and as shipped knowledge, in whole sentences; from then on prompts show the rule,
    never the item beside it."""
    from store import Experience, Store

    sentences = [f"Sentence {i} about relu kernels with omp simd loops and tails handled at the end." for i in range(12)]
    lesson = " ".join(sentences)
    operators = ["softmax", "layer_norm", "conv2d", "matmul", "gelu", "tanh", "sum_dim", "mean_dim"]
    workspace.state_dir.mkdir(parents=True, exist_ok=True)
    with Store.open(workspace.memory_path) as store:
        item = Experience(task_id="*", kind="best_practice", backend="cpu", stage="", title="Vectorise relu loops",
                          text=lesson, source="seed", q1=0.9, q2=0.9, extra={"names": ["relu", "simd"]},
                          signature={"text": "Vectorise relu loops relu simd"})   # knowledge about relu (#36)
        item_id, _ = store.add_experience(item)
        for op in operators:       # each operator's correct draft cited it
            store.add_experience(Experience(task_id=op, kind="draft_trace", backend="cpu", stage="draft",
                                            title=f"{op} draft", reward=1.0, extra={"cited": [item_id]},
                                            outcome={"verified": True, "feasible": True}))
            store.record_adoption(op, [item_id])

    def script(req, n):
        return Reply(answer_with(C.elementwise(C.RELU + f"\nstatic const char* kTag = \"{n}\";\n")))

    server = llm_env(script)
    _run(workspace, ["relu"], iterations=2)
    first, second = (_user(r) for r in server.requests[:2])
    assert f"[mem:{item_id}]" in first                     # retrieved before it became a rule
    with Store.open(workspace.memory_path, readonly=True) as store:
        rules = store.query(kind="rule", limit=None)
        assert store.get(item_id).extra.get("consolidated_into") == rules[0].id
    assert len(rules) == 1
    rule = rules[0]
    assert rule.title == ("Adopted by 8 operators: softmax, layer_norm, conv2d, matmul and 4 more (shipped knowledge, "
                          "not learned here)")
    body = rule.text.split(": ", 1)[1]
    assert lesson.startswith(body) and body.endswith("end.") and len(rule.text) <= 600
    assert f"[mem:{rule.id}] {rule.title}" in second
    assert f"[mem:{item_id}]" not in second                 # replaced, not shown beside the rule


def test_refine_prompt_gives_the_best_kernel_whole_when_it_is_not_the_start_point():
    from core import prompts
    from core.tasks import load_suite
    from store import Experience

    task = load_suite(Path(__file__).parents[1] / "fixtures" / "suite").get("relu")
    start = Experience(task_id="relu", kind="draft_trace", backend="cpu", stage="draft", title="relu draft",
                       files=C.elementwise(C.RELU), outcome={"feasible": True, "latency_ms": 0.2,
                                                              "latency_spread_ms": 0.01}, extra={"change": "first"})
    start.id = "s" * 20
    best = Experience(task_id="relu", kind="refine_trace", backend="cpu", stage="refine", title="relu refine #9",
                      files=C.elementwise(BEST_KERNEL), outcome={"feasible": True, "latency_ms": 0.1,
                                                                  "latency_spread_ms": 0.01},
                      extra={"change": "the best one"})
    best.id = "b" * 20
    text = prompts.refine_prompt(task, "cpu", [], [], [], start, [], best=best)[1][1]
    start_part = text.split("## Start point", 1)[1].split("## Best kernel so far")[0]
    best_part = text.split("## Best kernel so far", 1)[1].split("## Your answer")[0]
    assert BEST_MARKER not in start_part and C.RELU.strip() in start_part
    assert f"[mem:{best.id}]" in best_part and "It differs from the start point" in best_part
    assert BEST_KERNEL.strip() in best_part                                # the best kernel's code, whole
    assert "timed beside the best so far, not beside the start point, in one window and counts only if faster " \
           "than the best there" in text
    assert "0.200 ms" in start_part and "0.100 ms" not in text   # one time, the start point's own
