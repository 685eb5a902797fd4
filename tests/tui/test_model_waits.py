"""The workbench while a model call is in flight (#52): the task's status says how long it has waited and how many
tokens came, a retry is a line in the log, a run that ends leaves no task "asking", and evokernel.toml edited while
the workbench is open reaches the next run. On the real app, engine and store, with a model slower than a second
(``SlowModel``) and the canned verifier."""

from __future__ import annotations

import asyncio

import candidates as C
from openai_server import answer_with
from waiting import wait_for

SIZE = (160, 40)


class SlowModel:
    """A model client that takes ``seconds`` to answer, telling its listener of the tokens as they come (as the
    real client does for a streamed answer), or raises ``error`` after the wait."""

    def __init__(self, seconds: float, error: Exception | None = None):
        from core.llm import Usage
        from core.servers import ServerFacts

        self.model, self.usage, self.seconds, self.error = "slow-coder", Usage(), seconds, error
        self.facts = ServerFacts()

    async def server(self):
        return self.facts

    async def complete(self, request, listen=None):
        from core.llm import CallNews, ChatAnswer

        if listen is not None:
            listen(CallNews("sent"))
        steps = int(self.seconds / 0.25)
        for step in range(steps):
            await asyncio.sleep(0.25)
            if listen is not None and step >= steps // 2:
                listen(CallNews("progress", seconds=step * 0.25, tokens=40 * (step - steps // 2 + 1)))
        if self.error is not None:
            if listen is not None:
                listen(CallNews("retry", reason="connection failed (the server went away)", next_try=2, tries=2,
                                wait_s=0.0))
            raise self.error
        return ChatAnswer(text=answer_with(C.elementwise(C.RELU)), tokens_in=900, tokens_out=400, model=self.model)

    async def close(self):
        return None


def _app(workspace, model):
    from core.scripted import Canned, CannedVerifier
    from core.session import Session
    from evotui.app import make_app

    verifier = CannedVerifier(lambda task_id, files: Canned(latency_ms=8.0))
    return make_app(workspace.root, session_factory=lambda ws, config, bus: Session(ws, config, bus=bus,
                                                                                     verifier=verifier, llm=model))


async def test_the_status_shows_the_wait_and_the_tokens_then_the_verdict(workspace):
    """main showed "draft: asking" for minutes, with no time or tokens."""
    from evotui.widgets.task_table import TaskTable

    app = _app(workspace, SlowModel(3.5))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        status = lambda: app.main.query_one(TaskTable).status.get("relu", ("", ""))[0]  # noqa: E731
        app.start_run(["relu"])
        await wait_for(pilot, lambda: status().startswith("draft: asking ") and status() != "draft: asking",
                       what="the wait in the status")
        await wait_for(pilot, lambda: "draft: answering" in status() and " tok" in status(), what="the tokens")
        await wait_for(pilot, lambda: app.run_status.state == "finished", what="the run's end")
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert "relu: answered in" in log and "400 tokens" in log
        assert "asking" not in status() and "answering" not in status()


async def test_a_failed_run_leaves_no_task_asking_and_the_retry_is_in_the_log(workspace):
    """main left both tasks at "draft: asking" after "✗ failed", and said nothing of retries."""
    from core.errors import LLMError
    from evotui.widgets.task_table import TaskTable

    error = LLMError("the LLM endpoint at http://127.0.0.1:1/v1 kept failing after 2 tries: connection failed")
    app = _app(workspace, SlowModel(1.5, error=error))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        app.start_run(["relu", "softmax"])
        await wait_for(pilot, lambda: app.run_status.state == "failed", what="the run to fail")
        await pilot.pause(0.3)
        statuses = {t: app.main.query_one(TaskTable).status.get(t, ("", ""))[0] for t in ("relu", "softmax")}
        assert not any("asking" in s or "answering" in s for s in statuses.values()), statuses
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert "connection failed (the server went away); try 2 of 2" in log
        assert "nothing was recorded, so no run is kept" in log


async def test_an_edited_config_reaches_the_next_run(workspace):
    """evokernel.toml edited while the workbench is open: the next run takes [llm] and says so (main kept the
    settings it opened with until a restart, silently)."""
    app = _app(workspace, SlowModel(0.3))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        text = workspace.config_path.read_text().replace("[llm]\n", "[llm]\nmax_tokens = 2000\n")
        workspace.config_path.write_text(text)
        app.start_run(["relu"])
        await wait_for(pilot, lambda: app.run_status.state == "finished", what="the run's end")
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert "evokernel.toml changed: [llm] max_tokens taken from this run on" in log
        assert app.host.session.config.llm.max_tokens == 2000
