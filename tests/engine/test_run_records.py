"""Records and names that stay true (#52): attempt numbers never repeat within a task across runs, answers
without code are attempts of their own, a repeat is named as one, ``--resume`` says which run it picked (never
one another process runs, never one finished meanwhile), evokernel.toml edits reach the next run, a run that
failed before its first answer leaves no row, and the report says n/a where nothing was generated, with the
iterations done, tokens, time and failure reasons. Each of these failed on main (c8af862) before the change."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import candidates as C
from openai_server import answer_with

SUITE = Path(__file__).parents[1] / "fixtures" / "suite"
ROOT = Path(__file__).parents[2]


def _engine(tmp_path, script, store=None):
    from core.config import Config
    from core.engine import Engine
    from core.scripted import Canned, CannedVerifier, ScriptedModel
    from store import Store

    store = store or Store.open(tmp_path / "memory.lmdb")
    config = Config(suite=str(SUITE))
    config.engine.final_window = False
    engine = Engine(config, store, CannedVerifier(lambda task, files: Canned(latency_ms=8.0)),
                    ScriptedModel(script))
    return engine, store


def _relu():
    from core.tasks import load_suite

    return [t for t in load_suite(SUITE).tasks if t.id == "relu"]


def test_answers_without_code_are_attempts_of_their_own_across_runs(tmp_path):
    """A weak model answering prose, twice in each of two runs: four attempts numbered #1-#4, none "the same
    code" as another (main stored one record for every such answer: #1 again and again)."""
    from core import events as ev
    from core.attempts import attempt_numbers

    engine, store = _engine(tmp_path, lambda request, n: "I would use OpenMP for this.")
    seen: list[ev.AttemptRecorded] = []
    engine.bus.subscribe(lambda e: seen.append(e) if isinstance(e, ev.AttemptRecorded) else None)
    for _ in range(2):
        asyncio.run(engine.run(_relu(), iterations=2))
    assert [e.number for e in seen] == [1, 2, 3, 4]
    assert not any(e.duplicate for e in seen)
    assert sorted(attempt_numbers(store, ["relu"]).values()) == [1, 2, 3, 4]
    assert all("no fenced code blocks" in e.outcome.message for e in seen)


def test_a_repeated_answer_is_named_as_the_attempt_it_repeats_not_given_its_number(capsys):
    """The run's line for a model's answer that repeats stored code says so, and carries no number of its own
    (main printed "relu #4 draft" for each repeat of #4: the same number three times)."""
    from core import events as ev
    from evotui.cmd_run import Reporter
    from verifier import Outcome

    out = Outcome.start("relu", "cpu").fail("build", "kernel.cpp:3: error").finish()
    reporter = Reporter(quiet=True)
    reporter.console.file = io.StringIO()
    for duplicate in (False, True):
        reporter.on_event(ev.AttemptRecorded("relu", 5, "e4", None, "draft", "llm", out, -1.0, duplicate=duplicate,
                                             number=4, reason="a failed draft"))
    first, again = reporter.console.file.getvalue().splitlines()
    assert " relu #4 draft: ✗ build" in first
    assert " relu draft (the same code as #4: not stored again): ✗ build" in again and "#4 draft" not in again


def test_a_run_that_failed_before_its_first_answer_leaves_no_row(tmp_path):
    """Each failed configuration try used to add a "failed" run to the report; one that recorded nothing is
    forgotten, and says so."""
    from core import events as ev
    from core.errors import LLMError

    def refuse(request, n):
        raise LLMError("the endpoint refused the API key (401): check OPENAI_API_KEY")

    engine, store = _engine(tmp_path, refuse)
    finished: list[ev.RunFinished] = []
    engine.bus.subscribe(lambda e: finished.append(e) if isinstance(e, ev.RunFinished) else None)
    record = asyncio.run(engine.run(_relu(), iterations=2))
    assert record.status == "failed" and record.extra.get("forgotten")
    assert store.list_runs() == []
    assert finished[0].status == "failed" and finished[0].forgotten


def _run_record(run_id, status, updated, *, pid=None, iterations=3):
    from store import RunRecord, TaskProgress

    run = RunRecord(id=run_id, method="evokernel", config={"iterations": 30}, tasks=["relu"], status=status,
                    started_at=updated - 60, progress={"relu": TaskProgress(iterations_used=iterations)})
    if pid is not None:
        run.extra.update(pid=pid, host=__import__("socket").gethostname())
    return run


def _put(store, run, updated):
    store.put_run(run)
    # put_run stamps now: set the time the record was last written as the test needs it
    from store.codec import pack, text_key

    run.updated_at = updated
    store._write(lambda txn: txn.put(text_key(run.id), pack(run.to_dict()), db=store._t.runs))


def test_resume_names_its_pick_and_the_others_and_skips_a_run_another_process_runs(workspace):
    """``--resume`` without a run: the unfinished run updated last (the CLI run that just failed, not the older
    workbench run that stopped), named with the others; a run whose process is alive is never picked."""
    from core.session import Session

    now = time.time()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Session(workspace) as session:
            _put(session.store, _run_record("20260101-0900-aaaa", "stopped", now - 3600), now - 3600)
            _put(session.store, _run_record("20260101-1000-bbbb", "failed", now - 60), now - 60)
            _put(session.store, _run_record("20260101-1100-cccc", "running", now, pid=alive.pid), now)
            _put(session.store, _run_record("20260101-0800-dddd", "finished", now), now)
            run, said = session.pick_resume(None)
    finally:
        alive.kill()
        alive.wait()
    assert run.id == "20260101-1000-bbbb"
    assert said.startswith("resuming run 20260101-1000-bbbb (failed at ")
    assert "other unfinished runs: 20260101-0900-aaaa (stopped at" in said
    assert "running in another process now: 20260101-1100-cccc" in said
    assert "dddd" not in said


def test_a_run_finished_elsewhere_is_not_resumed(workspace):
    """The workbench offered to resume a run that another process then ran to its end: resuming it says so and
    starts nothing (main "resumed" it: every task sat at "queued")."""
    from core.errors import RunAlreadyFinished
    from core.scripted import Canned, CannedVerifier, ScriptedModel
    from core.session import Session

    with Session(workspace, verifier=CannedVerifier(lambda t, f: Canned(latency_ms=8.0)),
                 llm=ScriptedModel(lambda r, n: answer_with(C.elementwise(C.RELU)))) as session:
        offered = _run_record("20260101-1000-bbbb", "stopped", time.time() - 60)
        _put(session.store, offered, offered.started_at + 60)
        done = _run_record("20260101-1000-bbbb", "finished", time.time(), iterations=30)
        _put(session.store, done, time.time())
        with pytest.raises(RunAlreadyFinished, match="has finished .* nothing to resume"):
            asyncio.run(session.resume(offered))


def test_config_edits_reach_the_next_run_or_ask_for_a_restart(workspace):
    """evokernel.toml edited while a session is open: [llm] and [engine] are taken for the next run; the backend
    and [verifier] need the workbench opened again, and say so (main kept the settings read at opening)."""
    from core.session import Session

    with Session(workspace) as session:
        assert session.config.llm.max_tokens == 4096
        text = workspace.config_path.read_text()
        text = text.replace("[llm]\n", "[llm]\nmax_tokens = 1500\n").replace("threads = 2\n", "threads = 1\n")
        workspace.config_path.write_text(text)
        taken, restart = session.reload_config()
        assert taken == ["[llm] max_tokens"] and restart == ["[verifier]"]
        assert session.config.llm.max_tokens == 1500
        assert session.reload_config() == ([], [])      # nothing changed since


def test_run_in_an_empty_folder_makes_the_whole_workspace(tmp_path):
    """``evokernel run`` where there is no workspace makes evokernel.toml and kernels/ beside .evokernel/ once the run
    starts, as the workbench does (main made .evokernel/ alone); a run refused first (bad input) makes nothing more.
    The model here answers without code, so nothing is built."""
    from openai_server import Reply, ScriptedLLM

    cli = str(Path(sys.executable).parent / "evokernel")
    with ScriptedLLM(lambda req, n: Reply("I would use OpenMP.")) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "EVOKERNEL_MODEL": server.model}
        refused = subprocess.run([cli, "run", "--tasks", "relu", "--iterations", "0"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and refused.stderr.strip().count("\n") == 0     # one line, nothing made
        assert not (tmp_path / "evokernel.toml").exists()
        ran = subprocess.run([cli, "run", "--tasks", "relu", "--iterations", "1", "--quiet"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert (tmp_path / "evokernel.toml").is_file() and (tmp_path / "kernels").is_dir()
    assert "made a workspace here: evokernel.toml, kernels/ beside .evokernel/" in ran.stderr
    assert ran.stdout.strip().splitlines()[-1].startswith("run ")


def test_the_report_says_n_a_iterations_done_tokens_time_and_failure_reasons(tmp_path, capsys):
    """A run that recorded nothing is n/a, not 0 %; a run's row gives its iterations done of the budget, its
    tokens and time, and why its attempts failed (main: CR 0 %, Acc 0 %, the budget as iters, none of the rest)."""
    from core.report import run_metrics
    from evotui.cmd_report import _print_runs
    from store import RunRecord, TaskProgress

    calls = iter(["I would use OpenMP.", answer_with({"kernel.cpp": "int x;\n"}), "no code again"])
    engine, store = _engine(tmp_path, lambda request, n: next(calls))
    run = asyncio.run(engine.run(_relu(), iterations=30))
    empty = RunRecord(id="20260101-0000-none", method="evokernel", config={"iterations": 30}, tasks=["relu"],
                      status="stopped", progress={"relu": TaskProgress()})
    metrics = [run_metrics(store, run), run_metrics(store, empty)]
    assert metrics[1].cr is metrics[1].acc is metrics[1].fast_1 is None
    assert metrics[0].done == 3 and metrics[0].failures == {"no code": 2, "format": 1}
    assert metrics[0].tokens == run.tokens_in + run.tokens_out > 0 and metrics[0].seconds > 0
    assert metrics[0].ended_early and "3 answers in a row without usable code" in metrics[0].ended_early[0]
    _print_runs(metrics, False)
    rows = capsys.readouterr().out.splitlines()
    header = rows[0].split("\t")
    row, none = (dict(zip(header, r.split("\t"))) for r in rows[1:3])
    assert row["iters"] == "3/30" and row["failures"] == "no code 2, format 1; 1 ended early"
    assert none["CR"] == none["Acc"] == none["fast_1"] == "n/a" and none["iters"] == "0/30"
