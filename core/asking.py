"""Asking the model: every request inside the model's context, its wait told, and the request logged as sent.

Before a run, ``know_the_model`` reads what the endpoint says of itself (``LLMClient.server``: the models it serves,
its context, how many requests it serves at once) and refuses, before anything is sent or recorded, tasks whose
shortest prompt leaves no answer its budget (``core.budget``). For each attempt, ``ask`` sends the method's prompt
with the answer budget the context leaves it; a server's 400 "too long" teaches the budget and the same prompt,
fitted (``Attempt.compose``), is sent once more; while the call is in flight the user hears, about once a second,
how long it has waited and the tokens so far (``AnswerProgress``), and each retry (``CallRetried``). Every request
is written as sent to the prompt log, headed by its budget and what it left out to fit.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from core import events as ev
from core import prompts
from core.budget import ContextBudget
from core.config import Config
from core.errors import LLMError
from core.llm import CallNews, ChatAnswer, ChatRequest, ContextOverflow, LLMClient

if TYPE_CHECKING:
    from core.methods import Attempt
    from core.tasks import Task
    from store import RunRecord

PROGRESS_EVERY_S = 1.0    # how often a call in flight says how long it has waited (AnswerProgress)


class Asking:
    """The engine's side of the model: one per engine (its budget learns the server's context over a run)."""

    def __init__(self, config: Config, llm: LLMClient | None, bus: ev.EventBus, facts: prompts.PromptFacts,
                 backend: str, prompt_log: Path | None, timings: dict[str, float]):
        self.config, self.llm, self.bus, self.facts, self.backend = config, llm, bus, facts, backend
        self.prompt_log = prompt_log
        self.timings = timings        # the engine's: seconds spent waiting for the model go to "llm"
        self.budget = ContextBudget(config.llm.max_tokens, config.llm.context_tokens,
                                    "[llm] context_tokens" if config.llm.context_tokens else "")

    async def know_the_model(self, tasks: list[Task]) -> str:
        """Read what the endpoint says of the model (its context, requests at once; ``LLMClient.server``, which
        also refuses a model it does not serve) and check that the tasks' shortest prompts leave an answer its budget
        (``core.budget``): when none can fit the run is refused here, before anything is sent or recorded, naming
        the setting to change. Returns the limits in words for the run's start line."""
        assert self.llm is not None
        server = await self.llm.server()
        if server.context_tokens:
            self.budget.learn_context(server.context_tokens, server.context_source)
        if self.budget.context_tokens is not None:
            too_long = []
            for task in tasks:
                smallest = prompts.draft_prompt(task, self.backend, [], [], [], facts=self.facts, budget=0)
                if not self.budget.fits(smallest.chars):
                    too_long.append((task, smallest.chars))
            if too_long and len(too_long) == len(tasks):     # none can be asked: nothing starts
                task, chars = min(too_long, key=lambda tc: tc[1])
                others = f" (the shortest of {len(tasks)} tasks' prompts)" if len(tasks) > 1 else ""
                raise LLMError(self.budget.too_long(f"{task.id}{others}", chars))
            # a task among others that does not fit ends early when its turn comes (``ask``), by then with the
            # server's own count of a prompt, which may let it fit after all
        words = [self.budget.words()]
        concurrency = getattr(self.llm, "concurrency", None)
        if concurrency:
            said = (f" ({server.slots_source})" if server.slots and self.config.llm.concurrency is None
                    else " ([llm] concurrency)" if self.config.llm.concurrency else " (not said by the server)")
            words.append(f"{concurrency} request{'s' if concurrency != 1 else ''} at once{said}")
        return "; ".join(words + list(server.notes))

    async def ask(self, run: RunRecord, attempt: Attempt) -> ChatAnswer | None:
        """Send the attempt's prompt with the answer budget the model's context leaves it, and wait for the
        answer, telling the user how long it has waited and how many tokens came (``AnswerProgress``, about once
        a second) and each retry (``CallRetried``). A server that says the prompt is too long (its 400's numbers)
        teaches the budget its context and token rate, and gets the same prompt fitted to them, once. None: the
        prompt cannot fit even at its shortest; the task ends early, saying which setting to change."""
        task, progress = attempt.task, run.progress[attempt.task.id]
        assert self.llm is not None
        for fitted in (False, True):
            chars = sum(len(c) for _, c in attempt.messages)
            max_tokens = self.budget.answer_tokens(chars)
            if max_tokens < self.budget.floor:
                progress.broken = self.budget.too_long(f"{task.id} ended early", chars)
                self.bus.emit(ev.EngineProblem(progress.broken, task=task.id))
                return None
            request = ChatRequest(model=self.llm.model, messages=tuple(attempt.messages),
                                  temperature=self.config.llm.temperature, max_tokens=max_tokens,
                                  sample=f"{run.config.get('sample_key', run.id)}:{task.id}:{attempt.iteration}")
            attempt.max_tokens = max_tokens
            left_out = tuple(getattr(attempt.messages, "left_out", ()))
            shown = getattr(attempt.messages, "shown", None)
            if shown is not None:   # the items the prompt left out to fit were never seen: not retrieved, not credited
                attempt.context = [e for e in attempt.context if e.id in set(shown)]
            self.bus.emit(ev.PromptSent(task.id, attempt.iteration, attempt.stage,
                                        tuple(e.id for e in attempt.context),
                                        attempt.start.id if attempt.start else None, chars))
            if left_out or max_tokens < self.config.llm.max_tokens:
                self.bus.emit(ev.PromptFitted(task.id, attempt.iteration, left_out, max_tokens,
                                              self.budget.tokens(chars)))
            self._log_prompt(run, attempt, request, left_out)
            t0 = time.perf_counter()
            try:
                answer = await self._call(request, task.id, attempt.iteration)
            except ContextOverflow as exc:
                if fitted or attempt.compose is None:
                    raise
                self.budget.learn_context(exc.numbers.context_tokens, "the server's 400 answer")
                if exc.numbers.prompt_tokens:
                    self.budget.learn(chars, exc.numbers.prompt_tokens)
                self.bus.emit(ev.EngineProblem(f"{task.id}: {exc}: asking again with the prompt fitted to "
                                               f"{self.budget.words()}", task=task.id))
                attempt.messages = attempt.compose(self.budget.prompt_chars())
                continue
            finally:
                self.timings["llm"] += time.perf_counter() - t0
            if answer.counted and not answer.cached:
                self.budget.learn(chars, answer.tokens_in)
            return answer
        return None

    async def _call(self, request: ChatRequest, task_id: str, iteration: int) -> ChatAnswer:
        """``llm.complete`` with the user told, about once a second, how long the call has waited (in the queue for
        a request slot, then at the server) and how many answer tokens came, and of each retry."""
        assert self.llm is not None
        state = {"sent": False, "tokens": 0, "since": time.perf_counter()}

        def listen(news: CallNews) -> None:
            if news.kind == "sent":
                state.update(sent=True, since=time.perf_counter())
            elif news.kind == "progress":
                state["tokens"] = news.tokens
            else:
                state["tokens"] = 0
                self.bus.emit(ev.CallRetried(task_id, iteration, news.reason, news.next_try, news.tries, news.wait_s))

        async def tick() -> None:
            while True:
                await asyncio.sleep(PROGRESS_EVERY_S)
                self.bus.emit(ev.AnswerProgress(task_id, iteration, time.perf_counter() - float(state["since"]),
                                                int(state["tokens"]), bool(state["sent"])))

        ticker = asyncio.ensure_future(tick())
        try:
            return await self.llm.complete(request, listen)
        finally:
            ticker.cancel()

    def _log_prompt(self, run: RunRecord, attempt: Attempt, request: ChatRequest, left_out: tuple[str, ...]) -> None:
        """The request as sent, to ``<prompt_log>/<run>/<task>.<iteration>.md``: its budget and what it left out
        first, then each message. Best effort: a log that cannot be written stops nothing."""
        if self.prompt_log is None:
            return
        chars = request.chars()
        head = [f"# {attempt.task.id} · iteration {attempt.iteration + 1} · {attempt.stage} · model {request.model}",
                f"- prompt: {chars:,} characters, about {self.budget.tokens(chars):,} tokens; answer budget "
                f"(max_tokens): {request.max_tokens:,}",
                f"- budget: {self.budget.words()}",
                "- left out to fit: " + ("; ".join(left_out) if left_out else "nothing")]
        body = "\n\n".join(f"## {role}\n\n{content}" for role, content in request.messages)
        try:
            folder = self.prompt_log / run.id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{attempt.task.id}.{attempt.iteration + 1}.md").write_text("\n".join(head) + "\n\n" + body,
                                                                                encoding="utf-8")
        except OSError:
            pass

