"""The methods a run can use, one strategy object each: how it prepares an attempt (the prompt, the
start point, the context) and whether its attempts teach the shared memory.

- ``evokernel`` (the paper's): drafts, then refines from the task's start points P(x), with
  value-based retrieval over the shared memory; its attempts are credited and become memory.
- ``passk``: independent drafts, no memory; kept for reports, never retrieved.
- ``refinement``: feedback from the last attempt and the run's best only, no shared memory.

The engine (core.engine) runs the loop and commits every attempt through one path; a method decides
what the next attempt is and, through its ``teaching``, what a committed attempt does to the memory
(what it is stored as, which values its reward moves, whether it becomes one of the task's start
points). The commit applies it and asks nothing else of the method.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from core import memory, policy, prompts
from core.attempts import NOT_JUDGED
from core.seeds import api_items
from core.tasks import Task
from store import Experience, RunRecord, TaskState
from verifier import Outcome

if TYPE_CHECKING:
    from core.config import Config
    from core.llm import Message
    from store.protocol import Memory

MAX_RULES = 5
POOL_CANDIDATES = 48     # items the lexical index proposes at least, for the pool to be chosen from by relevance
BASELINE_KIND = "baseline_trace"


@dataclass(frozen=True)
class Teaching:
    """What a method's committed attempts do to the memory. The method decides it; the engine's one
    commit (core.ledger.Ledger.commit) applies it for every attempt of the method's runs."""

    stored_as: str = ""
    """The kind its attempts are stored as; "" for ``<stage>_trace``, the kinds retrieval shows as memory."""
    credits: bool = True
    """The reward moves the values of what the attempt was shown (Q1 when drafting, Q2 when refining) and
    of the start point it refined; a feasible refinement's own Q2 starts at its reward; items adopted with
    value by several tasks become resident rules after each iteration."""
    shared: bool = True
    """The task's state across runs keeps the attempt: its budget, its start points P(x) (a feasible
    attempt becomes one) and its best; otherwise the best is the run's own and the task state is left."""

    def kind(self, stage: str) -> str:
        """The kind an attempt at ``stage`` is stored as."""
        return self.stored_as or f"{stage}_trace"


TEACHES = Teaching()
"""The paper's: attempts become memory, are credited and become start points."""
BASELINE = Teaching(stored_as=BASELINE_KIND, credits=False, shared=False)
"""A baseline's: attempts are kept for reports, never retrieved; nothing learned, the best is the run's own."""
HAND_EDIT = Teaching(stored_as="human_edit")
"""A person's edit, whatever run is going on: it always teaches, like the paper's attempts."""


@dataclass
class Attempt:
    """Everything one step produced, before it is committed."""

    task: Task
    iteration: int
    stage: str
    context: list[Experience] = field(default_factory=list)
    start: Experience | None = None
    messages: list[Message] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    cited: list[str] = field(default_factory=list)
    outcome: Outcome | None = None
    tokens: tuple[int, int] = (0, 0)
    problem: str = ""
    best: Experience | None = None     # the task's best, timed in the same window as this attempt
    source: str = "llm"                # "llm", or "human" for a person's edit
    change: str = ""          # the answer's one-line "Change:" summary
    lineage: str = ""         # a person's edit: why its parent is its parent (core.attempts.closest_version)
    max_tokens: int = 0       # the answer budget its request was sent with (0: not sent)
    answer_model: str = ""    # the model the server said answered (its answer's ``model``)
    compose: Callable[[int], prompts.Prompt] | None = None
    """The prompt for a budget of characters, from the inputs the method chose (``messages`` is it for the engine's
    budget): a server that says the prompt is too long gets the same prompt, shorter, and nothing is chosen again."""

    def ask(self, compose: Callable[..., prompts.Prompt], budget: int) -> None:
        """Set the prompt: ``compose(budget=...)`` now, and kept for a shorter one later."""
        self.compose = lambda chars: compose(budget=chars)
        self.messages = compose(budget=budget)

    @property
    def not_judged(self) -> str:
        """Why the verification says nothing of the kernel (the tool failed: a process lost, the machine out
        of memory, the verifier's own error; ``Outcome.not_judged``), or "": nothing is learned about the
        kernel or the memory that produced it."""
        return self.outcome.not_judged if self.outcome is not None else ""

    @property
    def verified(self) -> Outcome:
        """The outcome, once the attempt has been verified (committing before that is a bug of ours)."""
        if self.outcome is None:
            raise RuntimeError(f"attempt {self.task.id} #{self.iteration} committed before it was verified")
        return self.outcome


class Engine(Protocol):
    """What a method reads of the engine (core.engine.Engine is one): the configuration, the memory,
    the backend's name and the machine facts every prompt carries. A protocol, so that the engine
    imports the methods and not the other way round."""

    config: Config
    store: Memory
    backend: str
    facts: prompts.PromptFacts

    @property
    def prompt_chars(self) -> int:
        """The characters a prompt should fit in (``core.budget``: what the model's context leaves the answer)."""


class Method(Protocol):
    """A run's method: its name, what its committed attempts do to the memory, and its next attempt."""

    name: str
    teaching: Teaching

    def prepare(self, engine: Engine, run: RunRecord, task: Task, iteration: int, rng: random.Random) -> Attempt:
        """The task's next attempt with its prompt (nothing written anywhere)."""


def _words(task: Task) -> set[str]:
    """What API knowledge is chosen by: the task's name, category and ops (never the words of a
    kernel's code, which named unrelated sections: softmax text in gemm prompts)."""
    return policy.words_of(" ".join([task.name, task.category, *task.ops]))


class PassK:
    name = "passk"
    teaching = BASELINE

    def prepare(self, engine: Engine, run: RunRecord, task: Task, iteration: int, rng: random.Random) -> Attempt:
        progress = run.progress[task.id]
        run_best = engine.store.get(progress.best_id) if progress.best_id else None
        attempt = Attempt(task, iteration, "draft", best=run_best)
        api = policy.select_api(api_items(engine.store, engine.backend), _words(task))
        attempt.ask(functools.partial(prompts.draft_prompt, task, engine.backend, api, [], [], facts=engine.facts),
                    engine.prompt_chars)
        return attempt


class Refinement:
    """Feedback from the run's own attempts only: the evokernel prompt for the same state (the best as the
    start point, every attempt of the run as an idea tried), without the memory."""

    name = "refinement"
    teaching = BASELINE

    def prepare(self, engine: Engine, run: RunRecord, task: Task, iteration: int, rng: random.Random) -> Attempt:
        store, progress = engine.store, run.progress[task.id]
        judged = [e for e in store.get_many(progress.attempts[-8:]) if e.kind != NOT_JUDGED]
        last = judged[-1] if judged else None
        best = store.get(progress.best_id) if progress.best_id else None
        attempt = Attempt(task, iteration, "refine" if best else "draft", start=best or last, best=best)
        api = policy.select_api(api_items(store, engine.backend), _words(task))   # by the task's ops, not its code
        own = [e for e in store.get_many(progress.attempts[-memory.HISTORY_ATTEMPTS:]) if e is not None]
        if best is None:
            attempt.ask(functools.partial(prompts.draft_prompt, task, engine.backend, api, [], [], facts=engine.facts,
                                          history=own), engine.prompt_chars)
        else:
            attempt.ask(functools.partial(prompts.refine_prompt, task, engine.backend, api, [], [], best, own,
                                          best=best, facts=engine.facts), engine.prompt_chars)
        return attempt


class EvoKernel:
    name = "evokernel"
    teaching = TEACHES

    def prepare(self, engine: Engine, run: RunRecord, task: Task, iteration: int, rng: random.Random) -> Attempt:
        cfg, store, backend = engine.config.engine, engine.store, engine.backend
        words = _words(task)
        state = store.get_task(task.id) or TaskState(task.id)
        points = [p for p in store.get_many(state.start_points) if p.files and p.backend == backend]
        stage = "refine" if points else "draft"
        attempt = Attempt(task, iteration, stage)
        best = store.get(state.best_id) if state.best_id else None
        if best is not None and best.files and best.backend == backend:
            attempt.best = best       # always in P(x), and timed beside every attempt
        kind = engine.facts.kind(task)
        query = f"{task.signature()['text']} {kind.terms()} {' '.join(kind.ops)}"
        rules, replaced = memory.resident_rules(store, backend, MAX_RULES)
        # this task's own recent attempts come first, as ideas already tried (never again as memory items)
        history = memory.task_history(store, task.id, backend)
        exclude: list[str] = sorted(replaced | {e.id for e in history})   # a rule's items show as the rule only
        if stage == "refine":
            left = int(run.config.get("iterations", 0)) - run.progress[task.id].iterations_used
            attempt.start = policy.choose_start_point(points, cfg.epsilon, rng, attempt.best, left=left)
            exclude.append(attempt.start.id)
            kernels = " ".join(text for n, text in attempt.start.files.items() if n != "model.py")
            query += " " + kernels[:2000]
        k = policy.pool_size(cfg.n_context, cfg.pool_factor, cfg.pool_growth, iteration)
        # candidates by lexical similarity (the kind's terms among the query's), the pool by what the kernels are
        found = store.retrieve(query, k=max(4 * k, POOL_CANDIDATES), backend=backend, stage=stage,
                               q_floor=cfg.q_floor, kinds=policy.RETRIEVABLE_KINDS, exclude_ids=exclude)
        bests = {s.best_id for s in (store.get_task(t) for t in {e.task_id for e, _ in found}) if s and s.best_id}
        pool = policy.relevance_pool(found, kind, k, words | {f"level{task.level}"}, bests,
                                     uncited_limit=cfg.uncited_limit)
        chosen = policy.choose_by_value(pool, cfg.n_context, stage, cfg.epsilon, rng)
        closeness = {e.id: r for e, r in pool}
        attempt.context = sorted(chosen, key=lambda e: -closeness[e.id])     # shown closest first
        api = policy.select_api([e for e in api_items(store, backend) if e.id not in replaced], words)
        if stage == "draft":
            attempt.ask(functools.partial(prompts.draft_prompt, task, backend, api, rules, attempt.context,
                                          facts=engine.facts, history=history, kind=kind), engine.prompt_chars)
        else:
            start = attempt.start
            assert start is not None   # chosen above for the refine stage
            known = {e.id for e in history}
            # the start point's own variants, also when older than the rest (none the tool failed to judge)
            children = [c for c in sorted(store.children(start.id), key=lambda e: e.created_at)
                        if c.kind != NOT_JUDGED][-5:]
            children = [c for c in children if c.id not in known]
            attempt.ask(functools.partial(prompts.refine_prompt, task, backend, api, rules, attempt.context, start,
                                          [*children, *history], best=best, facts=engine.facts, kind=kind),
                        engine.prompt_chars)
        return attempt


METHODS: dict[str, Method] = {m.name: m for m in (EvoKernel(), PassK(), Refinement())}
