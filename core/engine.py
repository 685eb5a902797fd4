"""The engine: draft/refine loops over a batch of tasks, in lockstep iterations, with the memory.

Per iteration every active task prepares its prompt first (so what any task learned in iteration t
is visible to all in t + 1, and none sees another's iteration-t writes), then the LLM calls run
concurrently under the client's limit, verifications in a small pool (timing is exclusive inside
the verifier), and each attempt is committed to the store in one transaction as soon as it is
verified (``core.ledger``: the experience, its reward, the value updates, the task state and the run's
progress). A kill loses at most the attempts in flight; ``run(resume=...)`` continues from the store.

The loop (``_loop``) prepares each active task's attempt (its method drafts or refines: ``_prepare``), then runs
them together (``_execute``: ask the model, verify its answer, commit).

Methods: ``evokernel`` (the paper's), and the baselines ``passk`` (independent samples, no memory)
and ``refinement`` (feedback from the last attempt only, no shared memory).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import random
import socket
import time
from pathlib import Path
from typing import Any

from core import events as ev
from core import memory, policy, prompts
from core.asking import Asking
from core.attempts import attempt_numbers, outcome_of
from core.config import Config
from core.errors import EvoKernelError, LLMError
from core.ledger import Ledger, teaching_of
from core.llm import BudgetExceeded, LLMClient
from core.methods import METHODS, Attempt
from core.responses import Parsed, parse_answer
from core.seeds import ensure_seeded
from core.tasks import Task
from store import Experience, RunRecord, TaskProgress, TaskState
from store.protocol import Memory
from verifier import (
    SAME,
    GateResult,
    Outcome,
    ReferenceFailed,
    VerificationCancelled,
    VerifierProtocol,
    candidate_identity,
    source_suffix,
)

TOOL_TRIES = 2            # verifications the tool failed (a process lost, the machine out of memory) are tried
#                           this many times in all before the attempt is recorded as not judged
SAME_CODE_KINDS = ("human_edit", "refine_trace", "draft_trace", "baseline_trace")
"""The judged attempts whose verdict a save of the same code gets at once (never a not-judged one)."""
UNUSABLE_STREAK = 3       # answers in a row without usable code (refusals, empty) that end a task early


class RunStopped(EvoKernelError):
    """The run was asked to stop; its state is committed and it can be resumed."""


class Engine:
    """Runs methods over tasks. ``store`` and ``verifier`` are owned by the caller."""

    def __init__(self, config: Config, store: Memory, verifier: VerifierProtocol, llm: LLMClient | None,
                 bus: ev.EventBus | None = None, kernels_dir: Path | None = None, prompt_log: Path | None = None):
        """``prompt_log``: a folder where every request sent is written as it was sent (``<run>/<task>.<n>.md``),
        with what it left out to fit the model's context."""
        self.config = config
        self.store = store
        self.verifier = verifier
        self.llm = llm
        self.bus = bus or ev.EventBus()
        self.kernels_dir = kernels_dir
        self.backend = getattr(getattr(verifier, "backend", None), "name", config.backend)
        self._verify_slots = asyncio.Semaphore(config.engine.parallel_builds)
        self._stop = asyncio.Event()
        self.timings: dict[str, float] = {"engine": 0.0, "llm": 0.0, "verify": 0.0}
        self.facts = prompts.PromptFacts.from_verifier(verifier, self.backend)   # machine facts for every prompt
        self.facts.form = config.form                                            # and the form they ask for
        self._facts_ready: asyncio.Future[None] | None = None
        self.asking = Asking(config, llm, self.bus, self.facts, self.backend, prompt_log, self.timings)
        self.ledger = Ledger(config, store, self.bus, self.backend,
                             signature=lambda task: {**task.signature(), **self.facts.kind(task).signature()},
                             model=lambda: self.llm.model if self.llm is not None else None, kernels_dir=kernels_dir)

    @property
    def prompt_chars(self) -> int:
        """The characters a prompt should fit in (``core.budget``): what the model's context leaves beside the
        answer budget."""
        return self.asking.budget.prompt_chars()

    # -- public ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the attempts in flight, commit, and end the run as "stopped" (resumable)."""
        self._stop.set()

    async def run(self, tasks: list[Task], *, method: str = "evokernel", iterations: int | None = None,
                  resume: RunRecord | None = None, seed: int = 0,
                  run_config: dict[str, Any] | None = None) -> RunRecord:
        """Run ``method`` over ``tasks`` for ``iterations`` verifier calls each (or continue ``resume``)."""
        if method not in METHODS:
            raise EvoKernelError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
        if self.llm is None:
            raise LLMError("no LLM endpoint configured: set OPENAI_BASE_URL and EVOKERNEL_MODEL "
                           "(or [llm] base_url and model in evokernel.toml) to generate kernels")
        self._stop.clear()   # a stop asked of an earlier run does not end this one
        await asyncio.to_thread(ensure_seeded, self.store, self.backend)
        if iterations is not None and iterations < 1:
            raise EvoKernelError(f"a run needs at least 1 iteration per task (got {iterations})")
        if not tasks and resume is None:
            raise EvoKernelError("a run needs at least one task")
        limits = await self.asking.know_the_model(tasks)    # nothing recorded when the model cannot take them
        run = resume or self._new_run(tasks, method, iterations or self.config.engine.iterations, seed, run_config)
        # Task rooflines and machine ceilings, counted beside the first attempts: prompts carry them once known.
        # Each task's traced graph first (a few seconds): the first prompt already knows what its kernel is.
        await asyncio.to_thread(self.facts.prepare, tasks, False)
        self._facts_ready = asyncio.ensure_future(asyncio.to_thread(self.facts.prepare, tasks))
        run.status = "running"
        run.extra.update(pid=os.getpid(), host=socket.gethostname())   # who runs it (core.session.running_elsewhere)
        self.store.put_run(run)
        self.bus.emit(ev.RunStarted(run.id, run.method, tuple(run.tasks), run.config["iterations"],
                                    self.llm.model, self.backend, resumed=resume is not None, limits=limits))
        status = "finished"
        began = time.monotonic()
        try:
            await self._loop(run, tasks)
            if self.config.engine.final_window:
                await self.final_windows(run, tasks)
        except RunStopped:
            status = "stopped"
        except BudgetExceeded as exc:
            status = "budget"
            self.bus.emit(ev.EngineProblem(str(exc), fatal=True))
        except LLMError as exc:
            status = "failed"
            kept = (f"; the run is kept: `evokernel run --resume {run.id}` continues it" if self._kept(run, resume)
                    else "; nothing was recorded, so no run is kept")
            self.bus.emit(ev.EngineProblem(f"{exc}{kept}", fatal=True))
        except asyncio.CancelledError:
            status = "stopped"
            raise
        except Exception as exc:    # anything else: the run stays resumable and says why it ended
            status = "failed"
            self.bus.emit(ev.EngineProblem(f"the run stopped on an error ({type(exc).__name__}: {exc}); "
                                           "`evokernel run --resume` continues it", fatal=True))
            raise
        finally:
            run.status = status
            seconds = run.extra.get("seconds")   # the run's time running, its sessions together (the report's)
            run.extra["seconds"] = (seconds if isinstance(seconds, (int, float)) else 0.0) + time.monotonic() - began
            self._account(run)
            if status == "failed" and not self._kept(run, resume):
                # failed before any answer was recorded (the endpoint went away, a setting to fix): no run to
                # resume or report, so none is kept (each such try used to leave a "failed" row in the report)
                self.store.delete_run(run.id)
                run.extra["forgotten"] = True
            else:
                self.store.put_run(run)
            self.bus.emit(ev.RunFinished(run.id, status, self.summary(run), forgotten=bool(run.extra.get("forgotten"))))
        return run

    @staticmethod
    def _kept(run: RunRecord, resume: RunRecord | None) -> bool:
        """Whether a failed run is kept: a resumed one always, a new one once it recorded an attempt."""
        return resume is not None or any(p.attempts for p in run.progress.values())

    async def record_human(self, task: Task, files: dict[str, str], parent_id: str | None,
                           lineage: str = "") -> tuple[Experience, Outcome]:
        """Verify a person's edit and log it as a human experience, through the same commit as the
        model's attempts: the same reward (against the task's best, timed in the same window), the
        same value updates (the parent's Q2 when it refines one) and the same records; a feasible,
        significantly faster edit becomes the new best."""
        # ``lineage``: why ``parent_id`` is its parent, in words (core.attempts.closest_version), kept with it
        same = await asyncio.to_thread(self.same_code, task, files)
        if same is not None:   # the same code as a judged attempt: its verdict, at once, nothing stored again
            out = outcome_of(same)
            self.bus.emit(ev.AttemptRecorded(task.id, -1, same.id, same.parent_id, same.stage, "human", out,
                                             same.reward or 0.0, duplicate=True, slip=bool(same.extra.get("slip")),
                                             number=attempt_numbers(self.store, [task.id]).get(same.id)))
            return same, out
        await asyncio.to_thread(ensure_seeded, self.store, self.backend)
        state = self.store.get_task(task.id) or TaskState(task.id)
        parent = self.store.get(parent_id) if parent_id else None
        best = self.store.get(state.best_id) if state.best_id else None
        stage = "refine" if state.feasible and parent is not None else "draft"
        attempt = Attempt(task, -1, stage, start=parent, files=files,
                          best=best if best is not None and best.files else None, source="human", lineage=lineage)
        attempt.outcome = await self._verify(task, -1, files, attempt.best)
        exp, _reward, _new_best = self._commit(None, attempt)
        return exp, attempt.outcome

    def same_code(self, task: Task, files: dict[str, str]) -> Experience | None:
        """The task's judged attempt with exactly these files (every byte, comments included), or None: a person's
        save of it gets that attempt's verdict without a verification. The store finds it by the code's identity
        (comments and spacing aside, ``candidate_identity``), which only names it: a comment can change what the
        compiler or Python reads (``__LINE__``, a coding declaration), so a save that differs in any byte is
        verified, and said to be the same code as that attempt when it is stored as its repeat."""
        found = self.store.same_code(task.id, SAME_CODE_KINDS, self.backend, candidate_identity(files), files)
        same = self.store.get(found) if found is not None else None
        return same if same is not None and same.files == files else None

    def summary(self, run: RunRecord) -> dict[str, Any]:
        feasible = sum(1 for p in run.progress.values() if p.feasible)
        return {"tasks": len(run.tasks), "feasible": feasible, "iteration": run.iteration,
                "tokens": run.tokens_in + run.tokens_out, "cost": run.cost}

    # -- the loop -------------------------------------------------------------------------------

    def _new_run(self, tasks: list[Task], method: str, iterations: int, seed: int,
                 extra: dict[str, Any] | None) -> RunRecord:
        run_id = time.strftime("%Y%m%d-%H%M%S-") + hashlib.sha1(str(time.time_ns()).encode()).hexdigest()[:4]
        config = {"iterations": iterations, "seed": seed, "backend": self.backend,
                  "model": self.llm.model if self.llm is not None else "",
                  "engine": self.config.engine.model_dump(), **(extra or {})}
        progress = {t.id: TaskProgress() for t in tasks}
        return RunRecord(id=run_id, method=method, config=config, tasks=[t.id for t in tasks],
                         started_at=time.time(), progress=progress)

    async def _vet_references(self, run: RunRecord, tasks: list[Task]) -> None:
        """Run each task's reference once before any model call (a task not started yet): a reference that
        cannot run here (killed for memory or time, a failure at its sizes) marks the task broken with
        its reason, and no answer is asked for it. Skipped where the verifier has no ``reference``."""
        reference = getattr(self.verifier, "reference", None)
        if reference is None:
            return
        for task in tasks:
            progress = run.progress.get(task.id)
            if progress is None or progress.iterations_used or progress.broken:
                continue
            try:
                await asyncio.to_thread(reference, task.spec(), False)
            except ReferenceFailed as exc:
                progress.broken = str(exc)
                self.store.put_run(run)
                self.bus.emit(ev.EngineProblem(str(exc), task=task.id))

    async def _loop(self, run: RunRecord, tasks: list[Task]) -> None:
        budget = run.config["iterations"]
        by_id = {t.id: t for t in tasks}
        await self._vet_references(run, tasks)
        while True:
            if self._stop.is_set():
                raise RunStopped("stopped")
            active = [by_id[i] for i in run.tasks if i in by_id and run.progress[i].iterations_used < budget
                      and not run.progress[i].broken]
            if not active:
                return
            iteration = min(run.progress[t.id].iterations_used for t in active)
            run.iteration = iteration
            now = [t for t in active if run.progress[t.id].iterations_used == iteration]
            self.bus.emit(ev.IterationStarted(run.id, iteration, len(now)))
            started = time.perf_counter()
            attempts = [self._prepare(run, t, iteration) for t in now]   # all prompts before any write
            self.timings["engine"] += time.perf_counter() - started
            results = await asyncio.gather(*(self._execute(run, a) for a in attempts), return_exceptions=True)
            for attempt, result in zip(attempts, results):
                if isinstance(result, (LLMError, asyncio.CancelledError)):
                    raise result
                if isinstance(result, ReferenceFailed):
                    run.progress[attempt.task.id].broken = str(result)
                    self.store.put_run(run)
                    self.bus.emit(ev.EngineProblem(str(result), task=attempt.task.id))
                elif isinstance(result, BaseException):
                    raise result
            self._consolidate_rules(run)

    # -- preparing a prompt -------------------------------------------------------------------

    def _rng(self, run: RunRecord, task: Task, iteration: int) -> random.Random:
        return random.Random(f"{run.id}|{run.config.get('seed', 0)}|{task.id}|{iteration}")

    def _prepare(self, run: RunRecord, task: Task, iteration: int) -> Attempt:
        return METHODS[run.method].prepare(self, run, task, iteration, self._rng(run, task, iteration))

    # -- running an attempt ---------------------------------------------------------------------

    async def _execute(self, run: RunRecord, attempt: Attempt) -> None:
        """One attempt, prepared (drafted or refined: ``_prepare``), in its steps: ask the model, verify its
        answer, commit what it left; then the task's budget or a streak of unusable answers may end it."""
        if self.llm is None:
            raise RuntimeError("a run needs a model: this engine was made without one")
        parsed = await self._ask(run, attempt)
        if parsed is None:     # it cannot fit the model's context: the task ended early, saying why
            self.store.put_run(run)
            return
        attempt.outcome = await self._verify_answer(attempt, parsed)
        t0 = time.perf_counter()
        self._commit(run, attempt)
        self.timings["engine"] += time.perf_counter() - t0
        progress = run.progress[attempt.task.id]
        if progress.iterations_used >= run.config["iterations"]:
            self.bus.emit(ev.BudgetSpent(attempt.task.id, progress.iterations_used))
        else:
            self._end_on_unusable_streak(run, attempt)

    async def _ask(self, run: RunRecord, attempt: Attempt) -> Parsed | None:
        """The model's answer to the attempt's prompt, read into files, citations and its change (None: the
        prompt cannot fit the model's context); its tokens and cost counted."""
        answer = await self.asking.ask(run, attempt)
        if answer is None:
            return None
        parsed = parse_answer(answer.text, source_suffix=source_suffix(self.backend),
                              truncated=answer.finish_reason == "length", max_tokens=attempt.max_tokens or None)
        attempt.files, attempt.cited, attempt.problem = parsed.files, parsed.cited, parsed.problem
        attempt.change = parsed.change
        attempt.tokens = (answer.tokens_in, answer.tokens_out)
        attempt.answer_model = answer.model
        run.tokens_in += answer.tokens_in if not answer.cached else 0
        run.tokens_out += answer.tokens_out if not answer.cached else 0
        run.cost += answer.cost
        self.bus.emit(ev.ResponseReceived(attempt.task.id, attempt.iteration, answer.tokens_in, answer.tokens_out,
                                          answer.cost, answer.seconds, answer.cached, tuple(parsed.files),
                                          parsed.problem))
        self.bus.emit(ev.UsageUpdated(run.tokens_in, run.tokens_out, run.cost))
        return parsed

    async def _verify_answer(self, attempt: Attempt, parsed: Parsed) -> Outcome:
        """The answer's files verified (beside the task's best when refining), or a format failure when it
        held no usable code."""
        task = attempt.task
        if parsed.ok:
            return await self._verify(task, attempt.iteration, parsed.files, attempt.best)
        self.bus.emit(ev.GateChecked(task.id, attempt.iteration, "format", "failed", parsed.problem))
        return Outcome.start(task.id, self.backend).fail("format", parsed.problem).finish()

    def _end_on_unusable_streak(self, run: RunRecord, attempt: Attempt) -> None:
        """A model that refuses an operator (or answers without code) keeps doing so: after
        ``UNUSABLE_STREAK`` such answers in a row the task ends early instead of spending its budget."""
        progress = run.progress[attempt.task.id]
        progress.unusable_streak = progress.unusable_streak + 1 if attempt.problem else 0
        if progress.unusable_streak >= UNUSABLE_STREAK:
            progress.broken = (f"{attempt.task.id} ended early: {UNUSABLE_STREAK} answers in a row without usable "
                                  f"code (last: {attempt.problem})")
            self.store.put_run(run)
            self.bus.emit(ev.EngineProblem(progress.broken, task=attempt.task.id))

    async def _verify(self, task: Task, iteration: int, files: dict[str, str],
                      best: Experience | None = None, *, gates: bool = True, fresh: bool = False) -> Outcome:
        """Verify ``files``; with ``best``, the best's files are timed in the same window. ``gates``: emit
        each gate's result (the final window, which is no attempt, emits none); ``fresh``: a new window even
        when these files were verified beside this best before (the final window)."""
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {"best": best.files} if best is not None and best.files else {}
        if fresh:
            extra["fresh"] = True

        def on_gate(g: GateResult) -> None:
            if gates:
                loop.call_soon_threadsafe(self.bus.emit,
                                          ev.GateChecked(task.id, iteration, g.name, g.status, g.message))

        async with self._verify_slots:
            t0 = time.perf_counter()
            try:
                for tries in range(1, TOOL_TRIES + 1):
                    out = await asyncio.to_thread(functools.partial(self.verifier.verify, task.spec(), files,
                                                                    on_gate, **extra))
                    if not out.not_judged or tries == TOOL_TRIES:
                        return out
                    # the tool's failure, not the kernel's (Outcome.not_judged): once more before giving up
                    self.bus.emit(ev.EngineProblem(f"{task.id}: the verification failed for a reason of the tool's "
                                                   f"own ({' '.join(out.not_judged.split())[:160]}): verifying again"))
                return out
            except VerificationCancelled:   # stopped mid-verification (a cluster's): nothing to record
                raise RunStopped("stopped") from None
            finally:
                self.timings["verify"] += time.perf_counter() - t0

    # -- committing: the ledger -----------------------------------------------------------------

    def _commit(self, run: RunRecord | None, attempt: Attempt) -> tuple[Experience, float, bool]:
        """The one commit path of every attempt, the model's and a person's (``core.ledger.Ledger.commit``): its
        record, reward, values, the task's state and the run's progress, then the events."""
        return self.ledger.commit(run, attempt)

    def _account(self, run: RunRecord) -> None:
        run.updated_at = time.time()

    # -- the final window ------------------------------------------------------------------------------

    async def final_windows(self, run: RunRecord, tasks: list[Task], *, again: bool = False) -> None:
        """Each task's best timed beside its first feasible kernel and the reference in one window, now (a
        fresh window: the verifier's recorded verdict of the same files is never reused, and the best was
        usually verified beside the first when it became the best), kept in the run's progress
        (``extra["final"]``) for the report: best/first and best/ref from one window, never two speedups from
        two windows divided. A best that is the first is timed beside the reference alone (best/first is 1).
        A task already measured (a resumed run) is measured again only with ``again`` (``report --retime``)."""
        by_id = {t.id: t for t in tasks}
        for task_id in run.tasks:
            progress, task = run.progress.get(task_id), by_id.get(task_id)
            if self._stop.is_set():
                raise RunStopped("stopped")
            if task is None or progress is None or not progress.best_id or ("final" in progress.extra and not again):
                continue
            first = next((e for e in self.store.get_many(progress.attempts)
                          if e is not None and outcome_of(e).timed), None)
            best = self.store.get(progress.best_id)
            if first is None or best is None or not best.files or not first.files:
                continue
            alone = first.id == best.id
            out = await self._verify(task, progress.iterations_used, best.files, None if alone else first,
                                     gates=False, fresh=True)
            final: dict[str, Any] = {"best": best.id, "first": first.id, "feasible": out.feasible}
            if out.feasible:
                final.update(latency_ms=out.latency_ms, reference_ms=out.reference_ms, speedup=out.speedup,
                             speedup_ci=out.speedup_ci, vs_reference=out.vs_reference, first_ms=out.best_ms,
                             gain=out.gain, gain_ci=out.gain_ci, vs_first=out.vs_best)
                if alone:    # the same kernel: best/first is 1 by definition, its time is the first's
                    final.update(first_ms=out.latency_ms, gain=1.0, gain_ci=[1.0, 1.0], vs_first=SAME)
                over_first = ("is the first feasible kernel" if alone else
                              policy.speed_words(out.vs_best, out.gain, out.gain_ci, "the first feasible kernel"))
                over_ref = policy.speed_words(out.vs_reference, out.speedup, out.speedup_ci, "PyTorch")
                words = f"the best {over_first}, {over_ref}"
            else:
                final["message"] = out.message
                words = f"the best could not be timed again: {' '.join(out.message.split())[:200]}"
            progress.extra["final"] = final
            self.store.put_run(run)
            self.bus.emit(ev.FinalWindow(task_id, out.feasible, words))

    # -- beyond the paper: resident rules ----------------------------------------------------------

    def _consolidate_rules(self, run: RunRecord) -> None:
        """Items adopted with positive value by several operators become short resident rules (core.memory)."""
        if teaching_of(run).credits:
            memory.consolidate_rules(self.store, self.backend, run.id)
