"""The engine: draft/refine loops over a batch of tasks, in lockstep iterations, with the memory.

Per iteration every active task prepares its prompt first (so what any task learned in iteration t
is visible to all in t + 1, and none sees another's iteration-t writes), then the LLM calls run
concurrently under the client's limit, verifications in a small pool (timing is exclusive inside
the verifier), and each attempt is committed to the store in one transaction as soon as it is
verified: the experience, the value updates, the task state and the run's progress. A kill loses
at most the attempts in flight; ``run(resume=...)`` continues from the store.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core import events as ev
from core import memory, policy, prompts
from core.asking import Asking
from core.attempts import NOT_JUDGED, attempt_numbers, first_change, outcome_of
from core.config import Config
from core.errors import EvoKernelError, LLMError
from core.llm import BudgetExceeded, LLMClient
from core.methods import HAND_EDIT, METHODS, Attempt, Teaching
from core.responses import parse_answer
from core.seeds import ensure_seeded
from core.tasks import Task
from core.workspace_files import write_best, write_best_only
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
        task, progress = attempt.task, run.progress[attempt.task.id]
        if self.llm is None:
            raise RuntimeError("a run needs a model: this engine was made without one")
        answer = await self.asking.ask(run, attempt)
        if answer is None:     # it cannot fit the model's context: the task ended early, saying why
            self.store.put_run(run)
            return
        parsed = parse_answer(answer.text, source_suffix=source_suffix(self.backend),
                              truncated=answer.finish_reason == "length", max_tokens=attempt.max_tokens or None)
        attempt.files, attempt.cited, attempt.problem = parsed.files, parsed.cited, parsed.problem
        attempt.change = parsed.change
        attempt.tokens = (answer.tokens_in, answer.tokens_out)
        attempt.answer_model = answer.model
        run.tokens_in += answer.tokens_in if not answer.cached else 0
        run.tokens_out += answer.tokens_out if not answer.cached else 0
        run.cost += answer.cost
        self.bus.emit(ev.ResponseReceived(task.id, attempt.iteration, answer.tokens_in, answer.tokens_out, answer.cost,
                                          answer.seconds, answer.cached, tuple(parsed.files), parsed.problem))
        self.bus.emit(ev.UsageUpdated(run.tokens_in, run.tokens_out, run.cost))
        if parsed.ok:
            attempt.outcome = await self._verify(task, attempt.iteration, parsed.files, attempt.best)
        else:
            attempt.outcome = Outcome.start(task.id, self.backend).fail("format", parsed.problem).finish()
            self.bus.emit(ev.GateChecked(task.id, attempt.iteration, "format", "failed", parsed.problem))
        t0 = time.perf_counter()
        self._commit(run, attempt)
        self.timings["engine"] += time.perf_counter() - t0
        if progress.iterations_used >= run.config["iterations"]:
            self.bus.emit(ev.BudgetSpent(task.id, progress.iterations_used))
        else:
            self._end_on_unusable_streak(run, attempt)

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

    # -- committing -----------------------------------------------------------------------------

    def _reward(self, attempt: Attempt, slip: bool = False, probe: bool = False) -> tuple[float, str]:
        """The reward and why, in words (``policy.reward_reason``): r1 for drafts; r2 for refinements, from
        the gain over the task's best in the same timing window, scaled without a mean shift (see
        core.policy). Both come from one verdict, so the reason said is the one the reward was given for."""
        out = attempt.verified
        if slip or probe or attempt.not_judged:   # a typo, a person's probe, or the tool's own failure
            return 0.0, policy.reward_reason(attempt.stage, out.feasible, "", slip=slip, probe=probe,
                                             ours=bool(attempt.not_judged))
        if attempt.stage == "draft":
            return policy.draft_reward(out.feasible), policy.reward_reason("draft", out.feasible, "")
        gain, verdict = policy.gain_over_best(out, outcome_of(attempt.best) if attempt.best else None)
        paired = policy.paired(out)
        reason = policy.reward_reason("refine", out.feasible, verdict, has_gain=gain is not None,
                                      gain_ci=out.gain_ci if paired else None, paired=paired)
        raw = policy.refine_reward_raw(out.feasible, gain, verdict)
        if not out.feasible or raw == 0.0:
            return raw, reason
        key = f"refine-gain:{self.backend}"
        reward = policy.scale(raw, self.store.reward_stats(key))
        self.store.update_reward_stats(key, raw)
        return reward, reason

    def _commit(self, run: RunRecord | None, attempt: Attempt) -> tuple[Experience, float, bool]:
        """The one commit path of every attempt, the model's (``run``) and a person's (``run`` None,
        ``attempt.source == "human"``): the experience, its reward, the value updates, the task state
        and the run's progress, in one transaction; then the events and the workspace's best."""
        task, out = attempt.task, attempt.verified
        progress = run.progress[task.id] if run is not None else None
        teaching = self._teaching(run)
        human = attempt.source == "human"
        unjudged = attempt.not_judged     # the tool failed it (twice): recorded as such, judging nothing
        slip = human and not out.feasible and not unjudged and policy.is_slip(out.failed_gate)   # a typo
        probe = human and not slip and not unjudged and policy.is_probe(attempt.files)   # marked: teaches nothing
        with self.store.transaction():
            state = self.store.get_task(task.id) or TaskState(task.id)
            reward, reason = self._reward(attempt, slip, probe)
            kind = NOT_JUDGED if unjudged else teaching.kind(attempt.stage)
            # no number in the title: the workbench numbers a task's attempts #n (tree, memory browser),
            # and the run's iteration here would give the same attempt a second, different one
            what = "hand edit" if human else attempt.stage
            extra = {"context": [e.id for e in attempt.context], "cited": attempt.cited, "tokens": list(attempt.tokens),
                     "problem": attempt.problem, "best": attempt.best.id if attempt.best else None,
                     "change": attempt.change, "reason": reason}
            if slip:
                extra["slip"] = True
            if probe:
                extra["probe"] = True
            if attempt.lineage:
                extra["lineage"] = attempt.lineage
            if unjudged:
                extra["not_judged"] = unjudged
            if run is not None:
                extra["method"] = run.method
            if attempt.answer_model and self.llm is not None and attempt.answer_model != self.llm.model:
                extra["answered_by"] = attempt.answer_model   # the server's own name for the model that answered
            exp = Experience(
                task_id=task.id, kind=kind, backend=self.backend, stage=attempt.stage,
                title=f"{task.id} {what}: {self._verdict_words(out)}"
                      + (f" · {change}" if (change := self._change_words(attempt)) else ""),
                text=prompts.attempt_text(out), files=attempt.files, outcome=out.to_dict(),
                reward=None if unjudged else reward,
                # a person's edit keeps the attempt it was made from as its parent, at either stage
                parent_id=(attempt.start.id if attempt.start is not None and (attempt.stage == "refine" or human)
                           else None),
                source=attempt.source, model="" if human or self.llm is None else self.llm.model,
                run_id=run.id if run is not None else None, iteration=attempt.iteration if run is not None else None,
                signature={**task.signature(), **self.facts.kind(task).signature()}, extra=extra,
                code_id=candidate_identity(attempt.files) if attempt.files else "",
            )
            # an answer without code is an attempt of its own: two such answers are two attempts, never "the same
            # code" (no-code attempts used to share one record and so one number, #1 again and again)
            exp_id, created = self.store.add_experience(exp, dedupe=bool(attempt.files))
            exp.id = exp_id
            changes: list[tuple[str, float, float]] = []
            # A person's near-duplicate of a stored attempt (the same code up to comments and spacing) is
            # not stored again: nothing is credited and the task's state is left as it was (the event
            # says it was a repeat of exp.id). A model's repeat still credits what it was shown.
            repeat = human and not created
            if teaching.credits and not repeat and not slip and not unjudged and not probe:
                changes = self._credit(task, attempt, reward, state.start_points, by=exp_id)
                if out.failed_gate == "anti_hack":     # learned once, for every later prompt of this backend
                    memory.learn_refusal(self.store, self.backend, task.id, out.message, run.id if run else "")
                if created and attempt.stage == "refine" and out.feasible:
                    # A variant's own measured reward is its first Q2 sample: a start point slower than
                    # the best starts below it, a faster one above, a same-speed one at zero.
                    self.store.update_values([exp_id], stage="refine", reward=reward, alpha=1.0, task_id=task.id,
                                             by=exp_id)
            new_best = (False if repeat or unjudged or probe
                        else self._update_state(run, state, progress, attempt, exp, teaching.shared))
            if created:   # what it decided, kept with it for the memory browser (core.memory.decisions)
                numbers = attempt_numbers(self.store, [task.id])
                self.store.update_extra(exp_id, {"new_best": new_best, "moved": [
                    {"id": i, "number": numbers.get(i), "stage": attempt.stage, "before": b, "after": a}
                    for i, b, a in changes]})
            if progress is not None and run is not None:
                progress.iterations_used += 1
                progress.attempts.append(exp_id)
                progress.stage = "refine" if progress.feasible else "draft"
                self._account(run)
                self.store.put_run(run)
        if changes:
            self.bus.emit(ev.ValuesUpdated(task.id, attempt.stage, reward, tuple(changes)))
        self.bus.emit(ev.AttemptRecorded(task.id, attempt.iteration, exp_id, exp.parent_id, attempt.stage,
                                         attempt.source, out, reward, new_best, duplicate=not created,
                                         replaced_ms=outcome_of(attempt.best).latency_ms if attempt.best else None,
                                         slip=slip, number=attempt_numbers(self.store, [task.id]).get(exp_id),
                                         reason=reason, not_judged=unjudged, probe=probe))
        if new_best and teaching.shared and not human:
            self.bus.emit(ev.TaskStageChanged(task.id, "refine"))
        if new_best and self.kernels_dir is not None:
            if human:
                write_best_only(self.kernels_dir / task.id, attempt.files)  # their own folder already holds it
            else:
                self._write_workspace(task, attempt.files, exp_id)
        return exp, reward, new_best

    @staticmethod
    def _teaching(run: RunRecord | None) -> Teaching:
        """What the attempt does to the memory: its run's method decides (core.methods.Teaching); a person's
        edit (no run) always teaches."""
        return METHODS[run.method].teaching if run is not None else HAND_EDIT

    @staticmethod
    def _verdict_words(out: Outcome) -> str:
        """An attempt's verdict in its title: feasible, failed at a gate, or not judged (the tool failed)."""
        if out.not_judged:
            return "not judged"
        return "feasible" if out.feasible else f"failed at {out.failed_gate}"

    @staticmethod
    def _change_words(attempt: Attempt) -> str:
        """What the attempt changed, for its title: the answer's ``Change:`` line, or for a person's edit
        the first changed line of its diff against the attempt it was made from."""
        if attempt.change:
            return " ".join(str(attempt.change).split())[:60]
        if attempt.source == "human" and attempt.start is not None and attempt.start.files:
            return first_change(dict(attempt.start.files), attempt.files)
        return ""

    def _credit(self, task: Task, attempt: Attempt, reward: float, start_points: Sequence[str] = (),
                by: str | None = None) -> list[tuple[str, float, float]]:
        """Q <- Q + alpha w (r - Q) for the context and the start point. When refining, the task's own
        start points in the context are left out: a start point's Q2 is learned from its own role (its
        reward, then its children's), so that it says how good a place it is to refine from, not how
        the variants refined beside it happened to do."""
        cfg = self.config.engine
        own = set(start_points) if attempt.stage == "refine" else set()
        ids = [e.id for e in attempt.context if e.id not in own]
        weights = policy.credit_weights(ids, attempt.cited, cfg.adoption_weight, cfg.ignored_weight)
        if attempt.start is not None and attempt.stage == "refine":
            ids.append(attempt.start.id)
            weights[attempt.start.id] = 1.0
        before = {e.id: e.q(attempt.stage) for e in [*attempt.context, *([attempt.start] if attempt.start else [])]}
        after = self.store.update_values(ids, stage=attempt.stage, reward=reward, alpha=cfg.alpha, task_id=task.id,
                                         weights=weights, cited=attempt.cited, by=by)
        self.store.record_retrieval(task.id, [e.id for e in attempt.context])
        adopted = [i for i in attempt.cited if i in set(ids)]
        if adopted:
            self.store.record_adoption(task.id, adopted)
        return [(i, before.get(i, 0.0), q) for i, q in after.items()]

    def _update_state(self, run: RunRecord | None, state: TaskState, progress: TaskProgress | None, attempt: Attempt,
                      exp: Experience, shared: bool) -> bool:
        """Task state and run progress after an attempt; returns whether it is the new best (feasible,
        and significantly faster than the best it was timed beside, or the first feasible one). ``shared``
        (the method's teaching): the task's state across runs keeps the attempt and holds the best it is
        judged against; otherwise the best is the run's own and the task's state is left as it was."""
        out = attempt.verified
        counts = attempt.source != "human"   # a person's edit spends no budget
        if progress is not None and out.reference_ms:
            progress.reference_ms = out.reference_ms
        if not out.feasible or out.latency_ms is None:
            if shared and counts:
                state.iterations_used += 1
                self.store.put_task(state)
            return False
        _gain, verdict = policy.gain_over_best(out, outcome_of(attempt.best) if attempt.best else None)
        had_best = state.best_id is not None if shared else bool(progress and progress.best_id)
        new_best = policy.is_new_best(True, had_best, verdict)
        if progress is not None:
            progress.feasible = True
            if progress.first_ms is None:
                progress.first_ms = out.latency_ms
            if new_best or progress.best_ms is None:
                progress.best_ms, progress.best_id = out.latency_ms, exp.id
        if shared:
            state.iterations_used += 1 if counts else 0
            state.feasible = True
            state.stage = "refine"
            if exp.id not in state.start_points:
                state.start_points.append(exp.id)
            if state.first_feasible_latency_ms is None:
                state.first_feasible_latency_ms = out.latency_ms
            if new_best:
                state.best_latency_ms, state.best_id = out.latency_ms, exp.id
            elif out.best_ms and attempt.best is not None and attempt.best.id == state.best_id:
                state.best_latency_ms = out.best_ms   # the best as timed in the latest window
            self.store.put_task(state)
        return new_best

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
        if self._teaching(run).credits:
            memory.consolidate_rules(self.store, self.backend, run.id)

    # -- the workspace ----------------------------------------------------------------------------

    def _write_workspace(self, task: Task, files: dict[str, str], attempt_id: str) -> None:
        """A new best goes to kernels/<task>/best/, and to kernels/<task>/ unless a person changed it."""
        if self.kernels_dir is not None:
            write_best(self.kernels_dir / task.id, files, attempt_id)
