"""The app's readers: thread workers that read the memory for the panes and post what they read to
the screen that asked (with a ``Read*`` request message, ``evotui.messages``). A newer request of a
kind supersedes the older one (exclusive groups), and a worker that fails is turned into a
notification by the app's one handler (never a crash).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.message import Message
from textual.message_pump import MessagePump
from textual.worker import get_current_worker

from core.attempts import default_attempt
from evotui.app_parts import AppParts
from evotui.messages import (
    AnswerLoaded,
    AssemblyLoaded,
    AttemptLoaded,
    AttemptsLoaded,
    ExperienceLoaded,
    MemoryLoaded,
    ReadAnswer,
    ReadAssembly,
    ReadAttempt,
    ReadAttempts,
    ReadExperience,
    ReadMemory,
    TaskRowsLoaded,
)

if TYPE_CHECKING:
    from core.session import Session

MEMORY_PAGE = 500


class Readers(AppParts):
    """Mixed into the app: ``self.host.session`` is open once ``WorkspaceOpened`` has arrived."""

    def _session(self) -> Session:
        session = self.host.session
        if session is None:
            raise RuntimeError("the workspace is still opening")
        return session

    # -- the screens' requests ------------------------------------------------------------------------

    def on_read_attempts(self, request: ReadAttempts) -> None:
        self.load_attempts(request.task_id, request.reply_to)

    def on_read_attempt(self, request: ReadAttempt) -> None:
        self.load_attempt(request.exp_id, request.reply_to)

    def on_read_answer(self, request: ReadAnswer) -> None:
        self.load_answer(request.exp_id, request.reply_to)

    def on_read_assembly(self, request: ReadAssembly) -> None:
        self.load_assembly(request.exp_id, request.reply_to)

    def on_read_memory(self, request: ReadMemory) -> None:
        self.load_memory(request.filters, request.sort, request.reply_to, request.search)

    def on_read_experience(self, request: ReadExperience) -> None:
        self.load_experience(request.exp_id, request.reply_to)

    # -- the workers ---------------------------------------------------------------------------------

    @staticmethod
    def _reply(to: MessagePump, message: Message) -> None:
        if not get_current_worker().is_cancelled:
            to.post_message(message)

    @work(thread=True, exclusive=True, group="tasks", exit_on_error=False, name="reading the tasks")
    def load_task_rows(self, reply_to: MessagePump) -> None:
        self._reply(reply_to, TaskRowsLoaded(self._session().task_rows()))

    @work(thread=True, exclusive=True, group="attempts", exit_on_error=False, name="reading the attempts")
    def load_attempts(self, task_id: str, reply_to: MessagePump) -> None:
        session = self._session()
        lines = session.attempts(task_id)
        first = default_attempt(lines)
        exp, parent = session.attempt(first.id) if first is not None else (None, None)
        self._reply(reply_to, AttemptsLoaded(task_id, lines, exp, parent))

    @work(thread=True, exclusive=True, group="attempt", exit_on_error=False, name="reading an attempt")
    def load_attempt(self, exp_id: str, reply_to: MessagePump) -> None:
        exp, parent = self._session().attempt(exp_id)
        self._reply(reply_to, AttemptLoaded(exp, parent))

    @work(thread=True, exclusive=True, group="memory", exit_on_error=False, name="reading the memory")
    def load_memory(self, filters: dict[str, str | None], sort: str, reply_to: MessagePump, search: str = "") -> None:
        items, total = self._session().browse_memory(filters, sort, limit=MEMORY_PAGE, search=search)
        self._reply(reply_to, MemoryLoaded(items, total, dict(filters), sort, search))

    @work(thread=True, exclusive=True, group="experience", exit_on_error=False, name="reading an experience")
    def load_experience(self, exp_id: str, reply_to: MessagePump) -> None:
        exp, number, parent, children, why = self._session().experience(exp_id)
        self._reply(reply_to, ExperienceLoaded(exp, number, parent, children, why))

    @work(thread=True, exclusive=True, group="assembly", exit_on_error=False, name="reading the assembly")
    def load_assembly(self, exp_id: str, reply_to: MessagePump) -> None:
        self._reply(reply_to, AssemblyLoaded(exp_id, self._session().assembly(exp_id)))

    @work(thread=True, exclusive=True, group="answer", exit_on_error=False, name="reading the model's answer")
    def load_answer(self, exp_id: str, reply_to: MessagePump) -> None:
        self._reply(reply_to, AnswerLoaded(exp_id, self._session().raw_answer(exp_id)))
