"""The ledger: what one verified attempt leaves behind. Every attempt goes through ``Ledger.commit``, the model's
and a person's, in named steps:

1. ``Judged.of``: the outcome decoded once, with the best it was timed beside, its gain and verdict against that
   best, and what kind of attempt it is (a person's typo, the tool's own failure);
2. in one transaction: its reward (``reward``), its record (``record``), the values it moves (``credit``), the
   task's state and the run's progress (``update_state``, ``count``);
3. after it: the events, and a new best written to the workspace (``announce``).

A kill loses at most the attempt in flight: the transaction holds or nothing does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import events as ev
from core import memory, policy, prompts
from core.attempts import NOT_JUDGED, attempt_numbers, first_change, outcome_of
from core.config import Config
from core.methods import HAND_EDIT, METHODS, Attempt, Teaching
from core.tasks import Task
from core.workspace_files import write_best, write_best_only
from store import Experience, RunRecord, TaskProgress, TaskState
from store.protocol import Memory
from verifier import Outcome, candidate_identity


@dataclass(frozen=True)
class Judged:
    """An attempt's outcome decoded once, and what the commit decides from it."""

    out: Outcome
    best: Outcome | None      # the best it was timed beside, decoded once
    gain: float | None        # best / this one, from their window (``policy.gain_over_best``)
    verdict: str              # against the best, in the verdict's own word
    human: bool               # a person's edit (no run, no budget)
    unjudged: str             # why the tool's own failure makes it judge nothing ("" when it judges)
    slip: bool                # a person's typo: failed before it could say anything of the kernel
    probe: bool               # a person's save marked as a probe (``policy.is_probe``): it teaches nothing

    @classmethod
    def of(cls, attempt: Attempt) -> Judged:
        out = attempt.verified
        best = outcome_of(attempt.best) if attempt.best is not None else None
        gain, verdict = policy.gain_over_best(out, best)
        human = attempt.source == "human"
        unjudged = attempt.not_judged     # the tool failed it (twice): recorded as such, judging nothing
        slip = human and not out.feasible and not unjudged and policy.is_slip(out.failed_gate)
        probe = human and not slip and not unjudged and policy.is_probe(attempt.files)
        return cls(out, best, gain, verdict, human, unjudged, slip, probe)

    @property
    def teaches(self) -> bool:
        """Whether it says anything of the kernel (a typo, a person's probe or the tool's failure does not)."""
        return not self.slip and not self.unjudged and not self.probe


class Ledger:
    """Commits attempts to the memory (see the module's docstring). ``model`` names the model a run asks (None
    without one); ``signature`` is a task's record signature (its ops and shapes, and its kernel's kind)."""

    def __init__(self, config: Config, store: Memory, bus: ev.EventBus, backend: str,
                 signature: Callable[[Task], dict[str, Any]], model: Callable[[], str | None],
                 kernels_dir: Path | None = None):
        self.config, self.store, self.bus, self.backend = config, store, bus, backend
        self.signature, self.model, self.kernels_dir = signature, model, kernels_dir

    def commit(self, run: RunRecord | None, attempt: Attempt) -> tuple[Experience, float, bool]:
        """The one commit path of every attempt, the model's (``run``) and a person's (``run`` None,
        ``attempt.source == "human"``): returns its record, its reward and whether it is the new best."""
        judged = Judged.of(attempt)
        teaching = teaching_of(run)
        with self.store.transaction():
            state = self.store.get_task(attempt.task.id) or TaskState(attempt.task.id)
            reward, reason = self.reward(attempt, judged)
            exp, created = self.record(run, attempt, judged, reward, reason, teaching)
            # A person's near-duplicate of a stored attempt (the same code up to comments and spacing) is
            # not stored again: nothing is credited and the task's state is left as it was (the event
            # says it was a repeat of exp.id). A model's repeat still credits what it was shown.
            repeat = judged.human and not created
            changes: list[tuple[str, float, float]] = []
            if teaching.credits and not repeat and judged.teaches:
                changes = self.credit(run, attempt, judged, exp, created, reward, state.start_points)
            new_best = (False if repeat or judged.unjudged or judged.probe
                        else self.update_state(run, state, attempt, judged, exp, teaching.shared))
            if created:   # what it decided, kept with it for the memory browser (core.memory.decisions)
                self.decided(attempt, exp, new_best, changes)
            self.count(run, attempt.task, exp.id)
        self.announce(attempt, judged, exp, created, reward, reason, new_best, changes, teaching)
        return exp, reward, new_best

    # -- in the transaction ------------------------------------------------------------------------

    def reward(self, attempt: Attempt, judged: Judged) -> tuple[float, str]:
        """The reward and why, in words (``policy.reward_reason``): r1 for drafts; r2 for refinements, from
        the gain over the task's best in the same timing window, scaled without a mean shift (see
        core.policy). Both come from one verdict, so the reason said is the one the reward was given for."""
        out = judged.out
        if not judged.teaches:   # a typo, a person's probe, or the tool's own failure: says nothing of the kernel
            return 0.0, policy.reward_reason(attempt.stage, out.feasible, "", slip=judged.slip, probe=judged.probe,
                                             ours=bool(judged.unjudged))
        if attempt.stage == "draft":
            return policy.draft_reward(out.feasible), policy.reward_reason("draft", out.feasible, "")
        paired = policy.paired(out)
        reason = policy.reward_reason("refine", out.feasible, judged.verdict, has_gain=judged.gain is not None,
                                      gain_ci=out.gain_ci if paired else None, paired=paired)
        raw = policy.refine_reward_raw(out.feasible, judged.gain, judged.verdict)
        if not out.feasible or raw == 0.0:
            return raw, reason
        key = f"refine-gain:{self.backend}"
        reward = policy.scale(raw, self.store.reward_stats(key))
        self.store.update_reward_stats(key, raw)
        return reward, reason

    def record(self, run: RunRecord | None, attempt: Attempt, judged: Judged, reward: float, reason: str,
               teaching: Teaching) -> tuple[Experience, bool]:
        """The attempt's experience, stored (or the stored one it repeats); whether it was created."""
        task, out = attempt.task, judged.out
        extra = {"context": [e.id for e in attempt.context], "cited": attempt.cited, "tokens": list(attempt.tokens),
                 "problem": attempt.problem, "best": attempt.best.id if attempt.best else None,
                 "change": attempt.change, "reason": reason}
        if judged.slip:
            extra["slip"] = True
        if judged.probe:
            extra["probe"] = True
        if attempt.lineage:
            extra["lineage"] = attempt.lineage   # why its parent is its parent (core.attempts.closest_version)
        if judged.unjudged:
            extra["not_judged"] = judged.unjudged
        if run is not None:
            extra["method"] = run.method
        model = self.model()
        if attempt.answer_model and model is not None and attempt.answer_model != model:
            extra["answered_by"] = attempt.answer_model   # the server's own name for the model that answered
        # no number in the title: the workbench numbers a task's attempts #n (tree, memory browser), and the run's
        # iteration here would give the same attempt a second, different one
        what = "hand edit" if judged.human else attempt.stage
        change = change_words(attempt)
        exp = Experience(
            task_id=task.id, kind=NOT_JUDGED if judged.unjudged else teaching.kind(attempt.stage),
            backend=self.backend, stage=attempt.stage,
            title=f"{task.id} {what}: {verdict_words(out)}" + (f" · {change}" if change else ""),
            text=prompts.attempt_text(out), files=attempt.files, outcome=out.to_dict(),
            reward=None if judged.unjudged else reward,
            # a person's edit keeps the attempt it was made from as its parent, at either stage
            parent_id=(attempt.start.id if attempt.start is not None and (attempt.stage == "refine" or judged.human)
                       else None),
            source=attempt.source, model="" if judged.human or model is None else model,
            run_id=run.id if run is not None else None, iteration=attempt.iteration if run is not None else None,
            signature=self.signature(task), extra=extra,
            code_id=candidate_identity(attempt.files) if attempt.files else "",
        )
        # an answer without code is an attempt of its own: two such answers are two attempts, never "the same
        # code" (no-code attempts used to share one record and so one number, #1 again and again)
        exp.id, created = self.store.add_experience(exp, dedupe=bool(attempt.files))
        return exp, created

    def credit(self, run: RunRecord | None, attempt: Attempt, judged: Judged, exp: Experience, created: bool,
               reward: float, start_points: Sequence[str]) -> list[tuple[str, float, float]]:
        """Q <- Q + alpha w (r - Q) for the context and the start point; (id, before, after) of each value moved.
        When refining, the task's own start points in the context are left out: a start point's Q2 is learned
        from its own role (its reward, then its children's), so that it says how good a place it is to refine
        from, not how the variants refined beside it happened to do. A refusal by the anti-hack gate is learned
        once for every later prompt of this backend; a feasible variant's own reward is its first Q2 sample."""
        task, cfg = attempt.task, self.config.engine
        own = set(start_points) if attempt.stage == "refine" else set()
        ids = [e.id for e in attempt.context if e.id not in own]
        weights = policy.credit_weights(ids, attempt.cited, cfg.adoption_weight, cfg.ignored_weight)
        if attempt.start is not None and attempt.stage == "refine":
            ids.append(attempt.start.id)
            weights[attempt.start.id] = 1.0
        before = {e.id: e.q(attempt.stage) for e in [*attempt.context, *([attempt.start] if attempt.start else [])]}
        after = self.store.update_values(ids, stage=attempt.stage, reward=reward, alpha=cfg.alpha, task_id=task.id,
                                         weights=weights, cited=attempt.cited, by=exp.id)
        self.store.record_retrieval(task.id, [e.id for e in attempt.context])
        adopted = [i for i in attempt.cited if i in set(ids)]
        if adopted:
            self.store.record_adoption(task.id, adopted)
        if judged.out.failed_gate == "anti_hack":
            memory.learn_refusal(self.store, self.backend, task.id, judged.out.message, run.id if run else "")
        if created and attempt.stage == "refine" and judged.out.feasible:
            # A start point slower than the best starts below it, a faster one above, a same-speed one at zero.
            self.store.update_values([exp.id], stage="refine", reward=reward, alpha=1.0, task_id=task.id,
                                     by=exp.id)
        return [(i, before.get(i, 0.0), q) for i, q in after.items()]

    def update_state(self, run: RunRecord | None, state: TaskState, attempt: Attempt, judged: Judged,
                     exp: Experience, shared: bool) -> bool:
        """Task state and run progress after an attempt; returns whether it is the new best (feasible,
        and significantly faster than the best it was timed beside, or the first feasible one). ``shared``
        (the method's teaching): the task's state across runs keeps the attempt and holds the best it is
        judged against; otherwise the best is the run's own and the task's state is left as it was."""
        out = judged.out
        progress = run.progress[attempt.task.id] if run is not None else None
        counts = not judged.human   # a person's edit spends no budget
        if progress is not None and out.reference_ms:
            progress.reference_ms = out.reference_ms
        if not out.feasible or out.latency_ms is None:
            if shared and counts:
                state.iterations_used += 1
                self.store.put_task(state)
            return False
        had_best = state.best_id is not None if shared else bool(progress and progress.best_id)
        new_best = policy.is_new_best(True, had_best, judged.verdict)
        if progress is not None:
            _progress_after(progress, out, exp.id, new_best)
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

    def decided(self, attempt: Attempt, exp: Experience, new_best: bool, changes: list[tuple[str, float, float]]
                ) -> None:
        """What the commit decided, kept with the attempt's record for the memory browser (``core.memory.decisions``):
        whether it became the best, and each value it moved, by the moved attempt's number."""
        numbers = attempt_numbers(self.store, [attempt.task.id])
        self.store.update_extra(exp.id, {"new_best": new_best, "moved": [
            {"id": i, "number": numbers.get(i), "stage": attempt.stage, "before": b, "after": a}
            for i, b, a in changes]})

    def count(self, run: RunRecord | None, task: Task, exp_id: str) -> None:
        """The run's progress: one more attempt of its budget (a person's edit has no run)."""
        if run is None:
            return
        progress = run.progress[task.id]
        progress.iterations_used += 1
        progress.attempts.append(exp_id)
        progress.stage = "refine" if progress.feasible else "draft"
        run.updated_at = time.time()
        self.store.put_run(run)

    # -- after it ----------------------------------------------------------------------------------

    def announce(self, attempt: Attempt, judged: Judged, exp: Experience, created: bool, reward: float, reason: str,
                 new_best: bool, changes: list[tuple[str, float, float]], teaching: Teaching) -> None:
        """The events of the commit, and a new best written to the workspace."""
        task = attempt.task
        if changes:
            self.bus.emit(ev.ValuesUpdated(task.id, attempt.stage, reward, tuple(changes)))
        self.bus.emit(ev.AttemptRecorded(task.id, attempt.iteration, exp.id, exp.parent_id, attempt.stage,
                                         attempt.source, judged.out, reward, new_best, duplicate=not created,
                                         replaced_ms=judged.best.latency_ms if judged.best is not None else None,
                                         slip=judged.slip, number=attempt_numbers(self.store, [task.id]).get(exp.id),
                                         reason=reason, not_judged=judged.unjudged, probe=judged.probe))
        if new_best and teaching.shared and not judged.human:
            self.bus.emit(ev.TaskStageChanged(task.id, "refine"))
        if new_best and self.kernels_dir is not None:
            if judged.human:
                write_best_only(self.kernels_dir / task.id, attempt.files)  # their own folder already holds it
            else:
                write_best(self.kernels_dir / task.id, attempt.files, exp.id)


def _progress_after(progress: TaskProgress, out: Outcome, exp_id: str, new_best: bool) -> None:
    """A run's progress after a feasible attempt: feasible, its first time, its best."""
    progress.feasible = True
    if progress.first_ms is None:
        progress.first_ms = out.latency_ms
    if new_best or progress.best_ms is None:
        progress.best_ms, progress.best_id = out.latency_ms, exp_id


def teaching_of(run: RunRecord | None) -> Teaching:
    """What the attempt does to the memory: its run's method decides (core.methods.Teaching); a person's edit (no
    run) always teaches."""
    return METHODS[run.method].teaching if run is not None else HAND_EDIT


def verdict_words(out: Outcome) -> str:
    """An attempt's verdict in its title: feasible, failed at a gate, or not judged (the tool failed)."""
    if out.not_judged:
        return "not judged"
    return "feasible" if out.feasible else f"failed at {out.failed_gate}"


def change_words(attempt: Attempt) -> str:
    """What the attempt changed, for its title: the answer's ``Change:`` line, or for a person's edit the first
    changed line of its diff against the attempt it was made from."""
    if attempt.change:
        return " ".join(str(attempt.change).split())[:60]
    if attempt.source == "human" and attempt.start is not None and attempt.start.files:
        return first_change(dict(attempt.start.files), attempt.files)
    return ""
