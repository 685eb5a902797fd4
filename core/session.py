"""A session on a workspace: its configuration, memory, verifier, LLM client and engine, opened
together and closed together. The commands and the workbench both start here.

The verifier (a sandbox with PyTorch loaded) and the LLM client are created on first use, so
listing tasks or browsing memory stays instant.
"""

from __future__ import annotations

from pathlib import Path

from core.config import Config
from core.engine import Engine
from core.errors import LLMError, WorkspaceError
from core.events import EventBus
from core.llm import OpenAIClient
from core.tasks import Suite, Task, load_suite, scale_task
from core.verification import open_verifier
from core.workspace import Workspace
from store import RunRecord, Store


class Session:
    def __init__(self, workspace: Workspace, config: Config | None = None, *, bus: EventBus | None = None,
                 replay: bool = False, backend: str | None = None):
        self.workspace = workspace
        self.config = config or workspace.config()
        if backend:
            self.config.backend = backend
        self.bus = bus or EventBus()
        self.replaying = replay
        workspace.state_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store.open(workspace.memory_path)
        self._verifier = None
        self._llm = None
        self._engine = None
        self._suite: Suite | None = None

    # -- parts, on first use -----------------------------------------------------------------------

    @property
    def verifier(self):
        if self._verifier is None:
            self._verifier = open_verifier(self.workspace, self.config.backend, self.config.verifier)
        return self._verifier

    def llm_problem(self) -> str | None:
        """Why generation is unavailable (None when an endpoint and model are configured)."""
        try:
            self._client()
        except LLMError as exc:
            return str(exc)
        return None

    def _client(self):
        if self._llm is None:
            self._llm = OpenAIClient(self.config.llm, cache=self.store, replay=self.replaying)
        return self._llm

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            try:
                llm = self._client()
            except LLMError:
                llm = None  # hand edits and verification still work; run() says what to configure
            self._engine = Engine(self.config, self.store, self.verifier, llm, self.bus,
                                  kernels_dir=self.workspace.kernels_dir)
        return self._engine

    # -- tasks ----------------------------------------------------------------------------------------

    def suite(self, spec: str | None = None) -> Suite:
        if spec is not None and spec != self.config.suite:
            return load_suite(self._suite_path(spec))
        if self._suite is None:
            self._suite = load_suite(self._suite_path(self.config.suite))
        return self._suite

    def _suite_path(self, spec: str) -> str:
        if spec == "builtin":
            return spec
        path = Path(spec).expanduser()
        return str(path if path.is_absolute() else self.workspace.root / path)

    def tasks(self, ids: list[str] | None = None, level: int | None = None, suite: str | None = None,
              scale: float | str | None = None) -> list[Task]:
        scale = scale if scale is not None else self.config.size_scale
        return [scale_task(t, scale) for t in self.suite(suite).select(ids, level)]

    # -- runs -----------------------------------------------------------------------------------------

    async def run(self, tasks: list[Task], *, method: str, iterations: int | None, suite: str | None,
                  scale: float | str | None, seed: int = 0) -> RunRecord:
        extra = {"suite": suite or self.config.suite, "size_scale": scale if scale is not None else self.config.size_scale}
        return await self.engine.run(tasks, method=method, iterations=iterations, seed=seed, run_config=extra)

    def latest_run(self, unfinished: bool = False) -> RunRecord | None:
        runs = [r for r in self.store.list_runs() if not unfinished or r.status != "finished"]
        return runs[-1] if runs else None

    def find_run(self, run_id: str | None, *, unfinished: bool = False) -> RunRecord:
        if run_id is None:
            run = self.latest_run(unfinished=unfinished)
            if run is None:
                raise WorkspaceError("no unfinished run to resume" if unfinished else "no runs in this workspace yet")
            return run
        run = self.store.get_run(run_id)
        if run is None:
            known = ", ".join(r.id for r in self.store.list_runs()[-5:]) or "none"
            raise WorkspaceError(f"no run {run_id!r} (recent: {known})")
        return run

    async def resume(self, run: RunRecord) -> RunRecord:
        tasks = self.tasks(run.tasks, suite=run.config.get("suite"), scale=run.config.get("size_scale"))
        return await self.engine.run(tasks, method=run.method, resume=run)

    async def replay(self, run: RunRecord) -> RunRecord:
        """Run ``run``'s configuration again as a new run answering from the LLM cache."""
        tasks = self.tasks(run.tasks, suite=run.config.get("suite"), scale=run.config.get("size_scale"))
        extra = {k: run.config.get(k) for k in ("suite", "size_scale")}
        extra["sample_key"] = run.config.get("sample_key", run.id)
        extra["replay_of"] = run.id
        return await self.engine.run(tasks, method=run.method, iterations=run.config["iterations"],
                                     seed=run.config.get("seed", 0), run_config=extra)

    async def close_async(self) -> None:
        if self._llm is not None:
            await self._llm.close()

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
        self.store.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
