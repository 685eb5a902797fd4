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
    """run(ids, answers, method, iterations, load, changes, reference_load, cite) -> (record, store, prompts, events);
    prompts: task -> [(system, user)] in order; changes: task -> the answers' Change lines, in order, or a
    function of the prompt that gives the Change line;
    load / reference_load: the canned verifier's factors on the kernels' / the reference's times per window;
    final_window: the engine's last window per task (off unless a test is about it);
    cite: a function of the prompt giving the memory ids the answer cites."""
    from core import events as ev
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier, ScriptedModel
    from core.tasks import load_suite
    from store import Store

    suite = load_suite(SUITE)
    store = Store.open(tmp_path / "memory.lmdb")

    def run(ids, answers, method="evokernel", iterations=4, load=(), changes=None, reference_load=(),
            final_window=False, cite=None):
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
            return answer_with(queues[task].pop(0), note=note, cite=cite(request.messages[-1][1]) if cite else None)

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
    assert "fix the last attempt" in second                      # it failed: fix it
    assert "faster variant of the start point" in third and "It is the best kernel so far." in third
    for system, user in prompts["relu"]:                          # the refinement baseline shows no memory
        assert "## Memory" not in user and "## Rules kept resident" not in user and "MEMORY USED" not in system


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
    # the next prompt refines the new best (15 ms) with the draft among the ideas tried: the draft's 10 ms
    # from another window is not shown beside it, only the paired words
    third = prompts["relu"][2][1]
    assert "15.000 ms" in third and "10.000 ms" not in third
    assert "2.00x faster than the best then [2.00, 2.00]" in third


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
    streaming = tried.split("streaming stores for the output", 1)[1].split("\n- ")[0]
    assert streaming.count("2.00x slower than PyTorch") == 2
    assert "Change: first (a first version; it is the start point, the best so far)" in tried   # listed too
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


# -- what a capable model read (the reader's notes of the loopback run): one figure per kernel, ----------
# -- successes among the ideas tried, other tasks' attempts as lessons, advice that fits ----------------

TIME = re.compile(r"\b\d+\.\d{3} ms")


def test_a_feedback_prompt_never_sets_a_latency_from_another_window_beside_the_paired_words(scripted):
    """Refinement, as in the reader's 024: the best took 10 ms in a quiet window; the last attempt, 1.05x
    slower beside it in a window 0.8x as loaded, took 8.4 ms. The prompt showed "best 9.285 ms" beside
    "last 7.781 ms ... 1.05x slower than your best". Now: one absolute time (the best's, said with its
    window), the last attempt in paired words only, and the best's idea among those tried. (Since #36 the
    baseline's prompt is evokernel's without the memory: the best is its start point.)"""
    answers = {"relu": [kernel(10.0, 1), kernel(10.5, 2), kernel(9.0, 3)]}
    changes = {"relu": ["Change: one parallel simd loop", "Change: unroll by 4", "Change: prefetch"]}
    _record, _store, prompts, _ = scripted(["relu"], answers, method="refinement", iterations=3,
                                           load=[1.0, 0.8, 1.0], changes=changes)
    third = prompts["relu"][2][1]
    assert TIME.findall(third) == ["10.000 ms"], TIME.findall(third)      # 8.400 ms never beside it
    assert "10.000 ms (IQR 0.000), its median in the window it was verified in" in third
    tried = third.split("### Ideas already tried on this task", 1)[-1].split("## Your answer")[0]
    assert "Change: one parallel simd loop (a first version; it is the start point, the best so far)" in tried
    assert "Change: unroll by 4 (from the start point)" in tried
    assert "1.05x slower than the start point [1.05, 1.05]" in tried


def test_a_refine_prompt_shows_one_time_and_says_when_the_start_point_is_not_the_best(scripted):
    """evokernel: a failed draft, a correct one (10 ms), a slower variant, a faster one (the best, 8 ms),
    in windows of different load. Where the start point is not the best, the prompt says so and that the
    variant is judged against the best; every prompt shows at most one absolute time, the start point's;
    the fix that became the best is among the ideas tried, with its verdict."""
    answers = {"relu": [kernel(None, 1, fail="correctness"), kernel(10.0, 2), kernel(12.0, 3), kernel(8.0, 4),
                        kernel(7.5, 5), kernel(7.0, 6)]}
    ideas = ["first version", "fix the accumulation", "12x32 tile", "unroll by 4", "streaming stores", "prefetch"]
    changes = {"relu": [f"Change: {i}" for i in ideas]}
    _record, store, prompts, _ = scripted(["relu"], answers, iterations=6, changes=changes,
                                          load=[1.0, 1.0, 2.0, 1.0, 1.5, 1.0])
    refines = [user for _system, user in prompts["relu"] if "## Start point" in user]
    assert refines
    for user in refines:
        start = user.split("## Start point", 1)[1]
        assert len(TIME.findall(user)) == 1 and TIME.findall(start.split("\n")[1]), TIME.findall(user)
    not_best = [u for u in refines if "## Best kernel so far [" in u]
    assert not_best, "no prompt whose start point is not the best"
    for user in not_best:
        assert "It is not the best kernel so far" in user
        assert "Your variant is judged against the best, not against this start point" in user
    after = refines[-1].split("### Ideas already tried on this task", 1)[-1].split("\n## ")[0]
    assert "Change: streaming stores (from the start point; it is the best kernel so far)\n  -> feasible: 1.12x " \
           "slower than PyTorch [1.12, 1.12]; 1.07x faster than the start point [1.07, 1.07]" in after
    assert "Change: unroll by 4 (from [mem:" in after and "; it is the start point)" in after


def test_every_interval_states_its_direction():
    from verifier.verdict import words as speed_words

    assert speed_words("noisy", 1.3, [0.65, 1.66], "the best") == (
        "could not tell against the best: too noisy (speedup interval [0.65, 1.66], above 1 = faster), no verdict")
    assert speed_words("slower", 0.8, [0.75, 0.85], "the best") == "1.25x slower than the best [1.18, 1.33]"


def test_other_tasks_attempts_show_their_code_only_when_they_bear_on_this_task(scripted):
    """Four tasks in lockstep (relu and softmax are activations, scale_bias elementwise, sum_dim a
    reduction), and one stored attempt of another reduction. sum_dim's refine prompts show that
    reduction's code; the activation and elementwise attempts, another family (issue #36: what a kernel is,
    ``core.kinship``), are not shown at all, not even as lessons. The prompts come out smaller than when
    every item carried its code."""
    from store import Experience

    other = Experience(task_id="row_max", kind="refine_trace", backend="cpu", stage="refine",
                       title="row_max refine #3", files=C.elementwise(C.RELU + "\nstatic const int kRowMax = 1;\n"),
                       outcome={"verified": True, "feasible": True, "latency_ms": 1.0, "speedup": 1.5,
                                "speedup_ci": [1.4, 1.6], "vs_reference": "faster"},
                       signature={"ops": ["amax"], "category": "reduction"}, extra={"change": "eight partial maxima"},
                       q1=0.5, q2=0.5)
    scripted.store.add_experience(other)
    ids = ["relu", "scale_bias", "softmax", "sum_dim"]
    answers = {t: [kernel(10.0, 10 * n + 1), kernel(8.0, 10 * n + 2), kernel(7.0, 10 * n + 3)]
               for n, t in enumerate(ids)}
    changes = {t: [f"Change: {t} first", f"Change: {t} unrolled", f"Change: {t} prefetch"] for t in ids}
    _record, _store, prompts, _ = scripted(ids, answers, iterations=3, changes=changes)
    memory = [u.split("## Memory: earlier attempts", 1)[1].split("## Your answer")[0]
              for _s, u in prompts["sum_dim"] if "## Start point" in u and "## Memory: earlier attempts" in u]
    assert memory
    items = [i for m in memory for i in m.split("\n\n[mem:")]
    shown = [i for i in items if "```cpp" in i]
    assert not [i for i in items if "task relu" in i or "task scale_bias" in i or "task softmax" in i]
    assert all("task row_max" in i for i in shown) and any("kRowMax" in i for i in shown)


def test_a_noisy_same_verdict_is_never_called_the_same_speed_in_the_run_line(scripted):
    """A 0.90x gain with an interval of [0.78, 1.04]: its half-width is under the noise limit relative to
    the ratio, but it reaches 22 % from equal. The gate said "same" here while the words said "could not
    tell"; with one rule (issue #38) it is "noisy" wherever it is said, and the run line's reward reason
    never adds "the same speed as the best"."""
    from evotui.cmd_run import Reporter

    answers = {"relu": [kernel(10.0, 1), kernel("span:1.15:11.111", 2)]}
    _record, _store, _prompts, events = scripted(["relu"], answers, iterations=2)
    assert _recorded(events)[1].outcome.vs_best == "noisy"
    reporter = Reporter(quiet=False)
    for e in events:
        reporter.on_event(e)
    line = next(x for x in reporter.lines if "relu #2 refine" in x)
    assert "could not tell against the best" in line
    assert "the same speed as the best" not in line and "too noisy to judge" in line


def test_the_memory_bound_advice_fits_a_kernel_that_already_streams_once():
    from core import prompts
    from core.tasks import load_suite
    from store import Experience

    task = load_suite(SUITE).get("relu")
    point = {"bound": "memory", "fraction": 0.65, "summary": "memory-bound: 65 % of the 27.5 GB/s triad ceiling"}
    start = Experience(task_id="relu", kind="draft_trace", backend="cpu", stage="draft", title="relu draft",
                       files=C.elementwise(C.RELU), extra={"change": "first"},
                       outcome={"verified": True, "feasible": True, "latency_ms": 6.2, "roofline": point})
    start.id = "s" * 20
    ask = prompts.refine_prompt(task, "cpu", [], [], [], start, [], best=start)[1][1].split("## Your answer")[1]
    assert "at 65 % of the triad ceiling" in ask and "if it already streams once" in ask
    assert "loop-carried dependencies" in ask


def test_the_compiler_line_says_the_target_name_may_not_be_the_cpu():
    from core.prompts import PromptFacts

    task = __import__("core.tasks", fromlist=["load_suite"]).load_suite(SUITE).get("relu")
    facts = PromptFacts("cpu", machine={"threads": 2, "compiler": "g++", "flags": "-O3 -march=native -fopenmp",
                                        "arch": "rocketlake", "isa": ["avx512f", "avx512bf16", "amx-tile"],
                                        "vector_bits": 512})
    line = next(x for x in facts.section(task).splitlines() if x.startswith("- Compiler"))
    assert "-march=native enables avx512f, avx512bf16, amx-tile; 512-bit vectors: 16 floats per register" in line
    assert "g++ calls this target `rocketlake`" in line and "may not match the CPU model" in line


def test_an_item_cited_by_failed_attempts_is_not_made_a_rule_learned_across_operators(scripted):
    """The reader's 011: the generic seed item came back as "Rules learned across operators ... Adopted by
    3 operators" when one of the three had cited it in a failed draft. Three drafts cite it, one fails:
    two operators' correct kernels are not enough for a rule; a third correct one makes it, titled with
    the successful operators only and as shipped knowledge. (A knowledge item is shown to the tasks its
    names are about, issue #36: here a habits item written for these three.)"""
    from store import Experience

    scripted.store.add_experience(Experience(
        task_id="*", kind="best_practice", backend="cpu", title="Habits of fast, correct CPU kernels",
        text="- Handle tails.\n- Allocate outputs once.", source="seed",
        signature={"text": "Habits of fast, correct CPU kernels relu sum_dim scale_bias tail"},
        extra={"names": ["relu", "sum_dim", "scale_bias", "tail"]}))
    habits = re.compile(r"\[mem:([0-9a-f]{20})\] Habits of fast, correct CPU kernels")

    def cite(prompt):
        return habits.findall(prompt)[:1]

    ids = ["sum_dim", "relu", "scale_bias"]
    answers = {"sum_dim": [kernel(None, 1, fail="correctness"), kernel(10.0, 2)],
               "relu": [kernel(10.0, 3), kernel(9.0, 4)], "scale_bias": [kernel(10.0, 5), kernel(9.0, 6)]}
    _record, store, prompts, _ = scripted(ids, answers, iterations=1, cite=cite)
    item = habits.findall(prompts["relu"][0][1])[0]
    assert sorted(store.get(item).adopted_by) == sorted(ids)     # three operators cited it
    assert store.query(kind="rule", limit=None) == []
    assert "Rules learned across operators" not in prompts["relu"][0][1]
    # a rule stored before failed citations stopped counting (the loopback run's memory holds one) is
    # not shown, and its item is no longer treated as replaced
    from core import memory
    from store import Experience

    stale = Experience(task_id="*", kind="rule", backend="cpu", stage="", title="Adopted by 3 operators: "
                       "sum_dim, relu, scale_bias", text="Habits of fast, correct CPU kernels", extra={"from": item})
    store.add_experience(stale)
    assert memory.resident_rules(store, "cpu") == ([], set())


def test_a_final_window_row_takes_every_time_and_the_roofline_from_that_window(tmp_path):
    """The loopback run's 38_L1Norm_ row said window "final" beside first_ms 4.056 (the draft's own window)
    and best_ms 2.752 (the best's own window): 1.47 divided, while the final window said 1.53. With a final
    window the row's first, best and reference times and the best's roofline point all come from it."""
    from core.report import run_metrics
    from store import Experience, RunRecord, Store
    from verifier.machine.roofline import assess

    ceilings = {"triad_gbps": 27.5, "fma_gflops": 273.0}
    profile = {"bytes": 75_000_000, "flops": 28_000_000}
    with Store.open(tmp_path / "memory.lmdb") as store:
        ids = []
        for tag, ms, ref in ((1, 4.0, 8.0), (2, 2.8, 8.0)):        # each timed in its own window
            outcome = {"verified": True, "feasible": True, "latency_ms": ms, "reference_ms": ref, "speedup": ref / ms,
                       "vs_reference": "faster", "roofline": assess(profile, ms, ceilings)}
            exp_id, _ = store.add_experience(Experience(task_id="relu", kind="draft_trace", backend="cpu", stage="draft",
                                                        title="relu", files=kernel(ms, tag), outcome=outcome))
            ids.append(exp_id)
        final = {"best": ids[1], "first": ids[0], "feasible": True, "latency_ms": 2.6, "first_ms": 3.9,
                 "reference_ms": 7.8, "speedup": 3.0, "speedup_ci": [2.9, 3.1], "vs_reference": "faster",
                 "gain": 1.5, "gain_ci": [1.45, 1.55], "vs_first": "faster"}
        record = RunRecord(id="20261204-000000-abcd", method="evokernel", status="finished",
                           config={"iterations": 2, "model": "m"}, tasks=["relu"],
                           progress={"relu": {"attempts": ids, "iterations_used": 2, "feasible": True,
                                              "best_id": ids[1], "extra": {"final": final}}})
        store.put_run(record)
        metrics = run_metrics(store, store.get_run(record.id))
    row = metrics.per_task["relu"]
    assert row["window"] == "final"
    assert (row["first_ms"], row["best_ms"], row["reference_ms"]) == (3.9, 2.6, 7.8)
    assert row["roofline"]["latency_ms"] == 2.6
    assert row["roofline"]["fraction"] == pytest.approx(assess(profile, 2.6, ceilings)["fraction"])
    assert metrics.roofline_fraction == [pytest.approx(row["roofline"]["fraction"])]


def test_a_roofline_floor_that_pytorch_beat_in_the_same_window_is_said_to_be_no_limit():
    """The loopback run's refinement prompt for 4_Matrix_vector_multiplication_: "1.07x slower than PyTorch"
    beside "memory-bound: 101 % of the 27.5 GB/s triad ceiling (floor 10.759 ms)": PyTorch ran above the
    ceiling in that window, and nothing said the ceiling was too low. The line now says so, in ratios."""
    from core import prompts
    from core.tasks import load_suite
    from store import Experience
    from verifier.machine.roofline import assess

    task = load_suite(SUITE).get("relu")
    ceilings = {"triad_gbps": 27.5, "fma_gflops": 273.0}
    profile = {"bytes": 295_870_000, "flops": 147_000_000}          # floor 10.759 ms at 27.5 GB/s

    def best(reference_ms: float) -> Experience:
        exp = Experience(task_id="relu", kind="draft_trace", backend="cpu", stage="draft", title="relu draft",
                         files=C.elementwise(C.RELU), extra={"change": "first"},
                         outcome={"verified": True, "feasible": True, "latency_ms": 10.705, "reference_ms": reference_ms,
                                  "speedup": reference_ms / 10.705, "speedup_ci": [0.92, 0.95], "vs_reference": "slower",
                                  "roofline": assess(profile, 10.705, ceilings)})
        exp.id = "b" * 20
        return exp

    slower = best(10.0)
    user = prompts.refine_prompt(task, "cpu", [], [], [], slower, [slower], best=slower)[1][1]
    line = next(x for x in user.splitlines() if x.startswith("Roofline:"))
    assert "101 % of the 27.5 GB/s triad ceiling" in line and "floor 10.759 ms) (from its own time above)" in line
    assert "PyTorch ran at 108 % of this ceiling in the same window" in line and "no limit" in line
    assert "10.000" not in user                                       # still one absolute time
    start = prompts.refine_prompt(task, "cpu", [], [], [], slower, [], best=slower)[1][1]
    assert "(from its own time above); PyTorch ran at 108 % of this ceiling" in start
    faster = best(12.0)                                              # PyTorch below the floor: nothing to say
    user = prompts.refine_prompt(task, "cpu", [], [], [], faster, [faster], best=faster)[1][1]
    assert "PyTorch ran at" not in user and "(from its own time above)" in user


def test_a_prompt_states_one_set_of_ceilings_the_latest_for_every_kernel_it_shows(tmp_path):
    """A model-played run (relu, softmax, gemm_bias_relu, linear_layer_norm; load 4-7): the verifier measured the
    ceilings again mid-run (22.1 -> 24.1 GB/s, 124 -> 139 GFLOP/s), but the prompts kept the first ones in
    "Where your kernel runs" while the start point and the memory items were said against the ceilings of the
    moment they were verified: softmax's refine prompt gave "memory 22.1 GB/s ... roofline floor 3.043 ms" above
    "72 % of the 24.1 GB/s triad ceiling (...; floor 2.788 ms)", and a gemm prompt listed items at "the 124 GFLOP/s"
    and "the 139 GFLOP/s FMA ceiling" side by side. Every figure of a prompt is now said against the ceilings the
    meter holds when the prompt is made."""
    from core import prompts
    from core.tasks import load_suite
    from store import Experience
    from verifier.backends import get_backend
    from verifier.machine.roofline import RooflineMeter, assess

    task = load_suite(SUITE).get("relu")
    old = {"threads": 2, "triad_gbps": 22.1, "fma_gflops": 124.0}
    new = {"threads": 2, "triad_gbps": 24.1, "fma_gflops": 139.0}
    held = dict(old)
    meter = RooflineMeter(tmp_path / "cache", get_backend("cpu"), 2)
    meter.cached_ceilings = lambda: dict(held)                 # what the verifier's meter holds now
    facts = prompts.PromptFacts("cpu", meter=meter)
    facts.prepare([task], ceilings=False)                      # the task's profile, counted for real
    profile = facts.profile(task)
    assert profile and profile["bytes"] > 0

    def attempt(task_id: str, ms: float, n: int) -> Experience:
        exp = Experience(task_id=task_id, kind="draft_trace", backend="cpu", stage="draft", title=f"{task_id} draft",
                         files=C.elementwise(C.RELU + f"\nstatic const int kTag{n} = {n};\n"),
                         extra={"change": f"first {n}"}, signature={"ops": ["relu"], "category": "activation"},
                         outcome={"verified": True, "feasible": True, "latency_ms": ms, "latency_spread_ms": 0.01,
                                  "speedup": 1.1, "speedup_ci": [1.05, 1.15], "vs_reference": "faster",
                                  "roofline": assess(profile, ms, old)})   # said when it was verified
        exp.id = str(n) * 20
        return exp

    start, other = attempt("relu", 4.0, 1), attempt("leaky_relu", 5.0, 2)
    first = prompts.refine_prompt(task, "cpu", [], [], [other], start, [start], best=start, facts=facts)[1][1]
    assert "memory 22.1 GB/s" in first and "24.1" not in first     # before a new measurement: one set, the old one
    held.update(new)                                               # the gate measured the ceilings again
    user = prompts.refine_prompt(task, "cpu", [], [], [other], start, [start], best=start, facts=facts)[1][1]
    assert "memory 24.1 GB/s (STREAM triad), compute 139 GFLOP/s" in user
    assert "22.1" not in user and "124 GFLOP/s" not in user, user
    floors = set(re.findall(r"floor (\d+\.\d+) ms", user))
    assert floors == {f"{assess(profile, 1.0, new)['floor_ms']:.3f}"}, floors   # one floor for the task
    share = round(100 * assess(profile, 4.0, new)["fraction"])
    assert f"memory-bound: {share} % of the 24.1 GB/s triad ceiling" in user
    assert f"at {share} % of the triad ceiling" in user.split("## Your answer")[1]   # the ask says the same share


def test_the_start_point_s_spread_is_said_as_the_width_it_is():
    """A model-played softmax refine prompt: "Its own time: 10.206 ms ± 4.728 (IQR)" beside "IQR 46 % of its
    median" in the roofline line: the IQR is the width of the middle half of the times, and "±" made it a
    half-width, twice the spread there was."""
    from core import prompts
    from core.tasks import load_suite
    from store import Experience

    task = load_suite(SUITE).get("relu")
    start = Experience(task_id="relu", kind="draft_trace", backend="cpu", stage="draft", title="relu draft",
                       files=C.elementwise(C.RELU), extra={"change": "first"},
                       outcome={"verified": True, "feasible": True, "latency_ms": 10.206, "latency_spread_ms": 4.728,
                                "speedup": 1.1, "speedup_ci": [0.73, 2.12], "vs_reference": "noisy"})
    start.id = "s" * 20
    user = prompts.refine_prompt(task, "cpu", [], [], [], start, [start], best=start)[1][1]
    assert "Its own time: 10.206 ms (IQR 4.728), its median in the window it was verified in." in user
    assert "±" not in user
