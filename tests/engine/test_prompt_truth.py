"""What the model and the user read says only what is true (issue #25): a scripted model and a canned
verifier whose windows differ in load (paired ratios stay, absolute latencies move), read back from
the prompts the model received, the run's lines and the report."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import candidates as C
from openai_server import answer_with

SUITE = Path(__file__).parents[1] / "fixtures" / "suite"


def kernel(latency_ms: float | str | None, tag: int, fail: str = "") -> dict[str, str]:
    """The relu kernel with a distinct constant (different code) and its canned verdict in the source."""
    files = C.elementwise(C.RELU)
    verdict = f"static const char* kCanned = \"{fail or latency_ms}\";"
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kTag{tag} = {tag};\n{verdict}\n"}


def judge(task_id: str, files: dict[str, str]):
    """A failing gate's name, "<ms>", or "span:<factor>:<ms>" (timed with an interval of that factor
    either side of each ratio)."""
    from core.scripted import Canned

    said = re.search(r'kCanned = "([^"]+)"', files.get("kernel.cpp", "")).group(1)
    if said.startswith("span:"):
        _, span, ms = said.split(":")
        return Canned(latency_ms=float(ms), span=float(span))
    try:
        return Canned(latency_ms=float(said))
    except ValueError:
        return Canned(failed_gate=said, message=f"canned {said} failure")


@pytest.fixture
def scripted(tmp_path):
    """run(ids, answers, method, iterations, load, changes, reference_load) -> (record, store, prompts, events);
    prompts: task -> [(system, user)] in order; changes: task -> the answers' Change lines, in order, or a
    function of the prompt that gives the Change line;
    load / reference_load: the canned verifier's factors on the kernels' / the reference's times per window;
    final_window: the engine's last window per task (off unless a test is about it)."""
    from core import events as ev
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel
    from core.tasks import load_suite
    from store import Store

    suite = load_suite(SUITE)
    store = Store.open(tmp_path / "memory.lmdb")

    def run(ids, answers, method="evokernel", iterations=4, load=(), changes=None, reference_load=(),
            final_window=False):
        verifier = CannedVerifier(judge, load=list(load), reference_load=list(reference_load))
        queues = {t: list(a) for t, a in answers.items()}
        notes = {t: c if callable(c) else list(c) for t, c in (changes or {}).items()}
        prompts: dict[str, list[tuple[str, str]]] = {}
        seen: list = []

        def script(request, n):
            task = request.sample.split(":")[-2]        # "<run>:<task>:<iteration>"
            prompts.setdefault(task, []).append((request.messages[0][1], request.messages[-1][1]))
            said = notes.get(task)
            note = said(request.messages[-1][1]) if callable(said) else said.pop(0) if said else f"Change: canned {n}"
            return answer_with(queues[task].pop(0), note=note)

        config = Config()
        config.engine.epsilon = 0.0
        config.engine.final_window = final_window
        bus = ev.EventBus()
        bus.subscribe(seen.append)
        engine = Engine(config, store, verifier, ScriptedModel(script), bus)
        record = asyncio.run(engine.run([suite.get(t) for t in ids], method=method, iterations=iterations))
        return record, store, prompts, seen

    run.store = store
    yield run
    store.close()


def _recorded(events):
    return [e for e in events if type(e).__name__ == "AttemptRecorded"]


# -- item 1: each prompt says only what is true for it -------------------------------------------------


def test_a_first_draft_is_never_told_to_fix_an_attempt_and_no_memory_line_is_asked_without_memory(scripted):
    answers = {"relu": [kernel(None, 1, fail="build"), kernel(10.0, 2), kernel(8.0, 3)]}
    _record, _store, prompts, _ = scripted(["relu"], answers, method="refinement", iterations=3)
    (sys0, first), (_sys1, second), (_sys2, third) = prompts["relu"]
    assert "last attempt" not in first.lower()                   # there is none
    assert "Fix the last attempt" in second                      # it failed: fix it
    assert "faster variant of your best kernel" in third
    for system, user in prompts["relu"]:                          # the refinement baseline shows no memory
        assert "[mem:" not in user and "MEMORY USED" not in system


def test_memory_used_is_asked_exactly_when_items_are_shown():
    from core import prompts
    from core.tasks import load_suite
    from store import Experience

    task = load_suite(SUITE).get("relu")
    item = Experience(task_id="*", kind="best_practice", backend="cpu", stage="", title="Vectorise", text="Use simd.")
    item.id = "m" * 20
    bare = prompts.draft_prompt(task, "cpu", [], [], [])
    shown = prompts.draft_prompt(task, "cpu", [], [], [item])
    assert "MEMORY USED" not in bare[0][1] and "[mem:" not in bare[1][1]
    assert "MEMORY USED" in shown[0][1] and f"[mem:{item.id}]" in shown[1][1]


# -- item 3: one figure per kernel in a prompt ---------------------------------------------------------


def test_a_prompt_gives_each_kernel_one_latency_never_one_from_another_window(scripted):
    """The draft took 10 ms in a quiet window; timed again beside a variant in a window twice as loaded
    it took 20 ms. The next prompt shows the draft (start point and best) with one figure: 10 ms."""
    answers = {"relu": [kernel(10.0, 1), kernel(12.0, 2), kernel(9.0, 3)]}
    _record, _store, prompts, _ = scripted(["relu"], answers, iterations=3, load=[1.0, 2.0, 1.0])
    third = prompts["relu"][2][1]
    assert "10.000 ms" in third
    assert "20.000 ms" not in third                 # the draft's time in the variant's window: never beside it


# -- item 4: verdict words from the interval, never a ratio beside a contradicting word -----------------


def _contradictions(text: str) -> list[str]:
    """A ratio beside a verdict word that the ratio contradicts, or "same speed ... ±" wider than noise."""
    found = re.findall(r"\d+\.\d+x[^;\n]{0,40}\((?:same|faster|slower|noisy)\)", text)
    found += [m for m in re.findall(r"same speed[^;\n]*?±(\d+) %", text) if int(m) > 15]
    return found


def test_verdict_words_follow_the_interval_in_prompts_and_run_lines(scripted):
    from evotui.cmd_run import attempt_words

    # a 1.02x gain in a clean window is "same speed"; 1.3x in a window whose interval holds 1 is unknown
    answers = {"relu": [kernel(10.0, 1), kernel("span:1.02:9.8", 2), kernel("span:1.6:7.7", 3), kernel(8.0, 4)]}
    _record, _store, prompts, events = scripted(["relu"], answers, iterations=4)
    lines = [attempt_words(e) for e in _recorded(events) if e.outcome.feasible]
    for line in lines:
        assert not _contradictions(line), line
    assert "same speed as the best within ±" in lines[1] and "x vs the best" not in lines[1]
    assert "could not tell against the best: too noisy" in lines[2]
    last = prompts["relu"][3][1]
    assert not _contradictions(last)
    assert "same speed as" in last and "could not tell" in last


def test_a_new_best_slower_in_absolute_time_says_why(scripted):
    """The draft took 10 ms in a quiet window; a variant twice as fast in a window three times as loaded
    took 15 ms: it is the new best (2x faster beside the draft), and the line says why its time is higher."""
    from evotui.cmd_run import attempt_words

    answers = {"relu": [kernel(10.0, 1), kernel(5.0, 2), kernel(6.0, 3)]}
    _record, _store, prompts, events = scripted(["relu"], answers, iterations=3, load=[1.0, 3.0, 1.0])
    draft, variant, _third = _recorded(events)
    assert variant.new_best and variant.outcome.latency_ms == pytest.approx(15.0)
    line = attempt_words(variant)
    assert "new best" in line and "2.00x faster than the best" in line
    assert "10.000 ms" in line and "another window" in line
    # the next prompt refines the new best (15 ms) with the draft (10 ms) among the ideas tried: it says why
    assert "It is the best although some earlier attempts below show a lower time" in prompts["relu"][2][1]


# -- item 8: the report from verdicts ------------------------------------------------------------------


def test_fast_1_counts_only_kernels_whose_interval_says_faster(scripted):
    from core.report import run_metrics

    # 1.02x over PyTorch (10 ms / 9.8 ms) with an exact interval is "same speed" (below the 3 % change)
    record, store, _prompts, _ = scripted(["relu"], {"relu": [kernel(9.8, 1)]}, iterations=1)
    metrics = run_metrics(store, record)
    assert metrics.per_task["relu"]["speedup"] == pytest.approx(10 / 9.8)
    assert metrics.fast_1 == 0.0


def test_best_over_first_is_the_paired_gain_and_reference_from_the_best_window(scripted):
    """The draft: 10 ms beside PyTorch's 10 ms (1.0x). The variant is 2x faster than the draft in one
    window loaded twice as much for the kernels: 10 ms beside PyTorch's 10 ms (1.0x again). Dividing the
    two speedups says 1.0; the paired window says 2.0. A third, slower variant is timed in a window
    where PyTorch took 40 ms: the report's reference is the best's window's 10 ms."""
    from core.report import run_metrics

    answers = {"relu": [kernel(10.0, 1), kernel(5.0, 2), kernel(8.0, 3)]}
    record, store, _prompts, _ = scripted(["relu"], answers, iterations=3, load=[1.0, 2.0, 4.0],
                                          reference_load=[1.0, 1.0, 4.0])
    metrics = run_metrics(store, record)
    row = metrics.per_task["relu"]
    assert record.progress["relu"].best_id == record.progress["relu"].attempts[1]
    assert row["speedup_over_first"] == pytest.approx(2.0)
    assert row["reference_ms"] == pytest.approx(10.0)


# -- item 2: this task's own history, whatever start point it hung under --------------------------------


def test_an_idea_tried_under_another_start_point_is_shown_and_not_proposed_again(scripted):
    """The model proposes the first idea its prompt does not mention. A 12x32 tile tried from the draft
    was slower; an unrolled variant became the best. Refining the best, the prompt lists the draft's
    idea and the tile (they hung under another start point), so no idea is proposed twice."""
    ideas = ["first version", "12x32 tile", "unroll by 4", "streaming stores", "prefetch next row"]

    def change(prompt: str) -> str:
        return "Change: " + next(i for i in ideas if i not in prompt)

    from store import Experience

    for n in range(8):   # a memory full of other tasks' well-valued successes that mention relu
        other = Experience(task_id=f"other{n}", kind="refine_trace", backend="cpu", stage="refine",
                           title=f"other{n} refine: relu kernel omp simd loop", text=f"relu simd loop {n}",
                           files=C.elementwise(C.RELU + f"\nstatic const int kOther{n} = {n};\n"),
                           outcome={"verified": True, "feasible": True, "latency_ms": 1.0}, q1=0.9, q2=0.9)
        scripted.store.add_experience(other)
    answers = {"relu": [kernel(10.0, 1), kernel(12.0, 2), kernel(5.0, 3), kernel(4.0, 4)]}
    record, store, prompts, _ = scripted(["relu"], answers, iterations=4, changes={"relu": change})
    said = [store.get(i).extra["change"] for i in record.progress["relu"].attempts]
    assert len(set(said)) == len(said) == 4, said
    last = prompts["relu"][3][1]
    tried = last.split("### Ideas already tried on this task", 1)[1].split("## ", 1)[0]
    assert "Change: 12x32 tile (from [mem:" in tried and "1.20x slower than the best then" in tried
    assert "Change: first version (a first version)" in tried


def test_an_idea_tried_twice_is_listed_once_with_both_verdicts():
    from core import prompts
    from core.tasks import load_suite
    from store import Experience

    task = load_suite(SUITE).get("relu")

    def attempt(i, change, outcome, parent=None):
        exp = Experience(task_id="relu", kind="refine_trace", backend="cpu", stage="refine", title=f"relu #{i}",
                         files=C.elementwise(C.RELU), outcome=outcome, extra={"change": change}, parent_id=parent,
                         created_at=float(i))
        exp.id = str(i) * 20
        return exp

    ok = {"verified": True, "feasible": True, "latency_ms": 3.0, "latency_spread_ms": 0.1, "speedup": 0.5,
          "speedup_ci": [0.45, 0.55], "vs_reference": "slower"}
    start = attempt(1, "first", ok)
    start.stage, start.kind = "draft", "draft_trace"
    history = [attempt(2, "Streaming stores for the output.", ok, start.id),
               attempt(3, "a cheaper softplus formula", {"verified": True, "feasible": False,
                                                         "failed_gate": "correctness", "message": "max error 0.3"},
                       start.id),
               attempt(4, "streaming stores for the output", ok, "x" * 20)]
    text = prompts.refine_prompt(task, "cpu", [], [], [], start, history, best=start)[1][1]
    tried = text.split("### Ideas already tried on this task", 1)[1]
    assert tried.count("streaming stores for the output") == 1 and "tried 2 times:" in tried
    assert tried.count("2.00x slower than PyTorch") == 2
    assert "Change: a cheaper softplus formula (from the start point)\n  -> failed at correctness" in tried


# -- item 6: knowledge sections chosen by the task's own ops ---------------------------------------------


def test_knowledge_sections_follow_the_task_not_the_words_in_its_kernel(scripted):
    """A relu kernel whose code mentions softmax, gemm and cumsum does not pull the reductions, blocking
    or scan sections into relu's prompts; the elementwise section stays."""
    noisy = kernel(10.0, 1)
    noisy["kernel.cpp"] += 'static const char* kNote = "softmax gemm cumsum expf";\n'
    _record, _store, prompts, _ = scripted(["relu"], {"relu": [noisy, kernel(9.0, 2)]}, iterations=2)
    refine = prompts["relu"][1][1]
    assert "## Start point" in refine and "### Vectorising inner loops" in refine
    for title in ("### Row reductions", "### Cache blocking", "### Prefix sums", "### Elementary functions"):
        assert title not in refine, title


def test_a_best_never_timed_beside_the_first_is_not_measured_together(scripted):
    """draft 10 ms -> 8 ms (best, beside the draft) -> 5 ms (best, beside the 8 ms one): the 5 ms kernel
    was never timed beside the draft, so without a final window best/first is not measured."""
    from core.report import run_metrics

    answers = {"relu": [kernel(10.0, 1), kernel(8.0, 2), kernel(5.0, 3)]}
    record, store, _prompts, _ = scripted(["relu"], answers, iterations=3, load=[1.0, 2.0, 3.0])
    row = run_metrics(store, record).per_task["relu"]
    assert row["speedup_over_first"] is None and row["over_first"] == "not measured together"
    assert run_metrics(store, record).not_measured_together == 1


def test_the_final_window_times_best_first_and_reference_together(scripted):
    """The same run with the final window: the best (5 ms), the first (10 ms) and PyTorch timed in one
    window at the end, in a window loaded 4x for the kernels and 2x for PyTorch; the report takes all
    three figures from it (2x over the first, 1.0x over PyTorch, reference 20 ms), never 10/5 divided
    from other windows."""
    from core.report import run_metrics

    answers = {"relu": [kernel(10.0, 1), kernel(8.0, 2), kernel(5.0, 3)]}
    record, store, _prompts, _ = scripted(["relu"], answers, iterations=3, load=[1.0, 2.0, 3.0, 4.0],
                                          reference_load=[1.0, 1.0, 1.0, 2.0], final_window=True)
    final = record.progress["relu"].extra["final"]
    assert final["best"] == record.progress["relu"].best_id and final["first"] == record.progress["relu"].attempts[0]
    metrics = run_metrics(store, record)
    row = metrics.per_task["relu"]
    assert row["window"] == "final" and row["speedup_over_first"] == pytest.approx(2.0)
    assert row["reference_ms"] == pytest.approx(20.0) and row["speedup"] == pytest.approx(1.0)
    assert metrics.fast_1 == 0.0 and metrics.not_measured_together == 0


# -- item 5: the machine as a kernel can use it ---------------------------------------------------------


def test_caches_are_said_as_a_kernel_can_use_them_and_ceilings_with_how_they_were_had():
    from core.prompts import PromptFacts
    from core.tasks import load_suite

    task = load_suite(SUITE).get("relu")
    vm = [{"level": 1, "type": "Data", "bytes": 48 << 10, "shared_by": 1},
          {"level": 2, "type": "Unified", "bytes": 2 << 20, "shared_by": 1},
          {"level": 3, "type": "Unified", "bytes": 480 << 20, "shared_by": 2}]
    facts = PromptFacts("cpu", machine={"threads": 2, "caches": vm},
                        ceilings={"threads": 2, "triad_gbps": 31.7, "fma_gflops": 203.0, "measurements": 3,
                                  "load": 0.4})
    text = facts.section(task)
    assert "Caches your kernel can count on: L1d 48 KiB and L2 2 MiB per core; at most 32 MiB of the shared L3" in text
    assert "L3 480 MiB shared by 2 cpus" not in text
    assert "203 GFLOP/s fp32 (FMA loop) (best of 3 measurements; load 0.4 when last measured)" in text
    real = [*vm[:2], {"level": 3, "type": "Unified", "bytes": 16 << 20, "shared_by": 8}]
    assert "L3 16 MiB shared by 8 cpus" in PromptFacts("cpu", machine={"caches": real}).section(task)


def test_the_final_window_is_said_in_one_line(scripted):
    from evotui.cmd_run import Reporter

    answers = {"relu": [kernel(10.0, 1), kernel(8.0, 2), kernel(5.0, 3)]}
    _record, _store, _prompts, events = scripted(["relu"], answers, iterations=3, final_window=True)
    reporter = Reporter(quiet=False)
    for e in events:
        reporter.on_event(e)
    line = reporter.lines[-1]
    assert line.endswith("relu final window: the best 2.00x faster than the first feasible kernel [2.00, 2.00], "
                         "2.00x faster than PyTorch [2.00, 2.00]"), line
