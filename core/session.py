"""A session on a workspace: its configuration, memory, verifier, LLM client and engine, opened
together and closed together. The commands and the workbench both start here.

The verifier (a sandbox with PyTorch loaded) and the LLM client are created on first use, so
listing tasks or browsing memory stays instant.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from core.attempts import AttemptLine, TaskRow, attempt_lines, attempt_with_parent, closest_version, task_rows
from core.config import Config
from core.demo import DEMO, DEMO_MODEL, demo_model
from core.engine import Engine
from core.errors import LLMError, RunAlreadyFinished, TaskError, WorkspaceError
from core.events import EventBus, Notice
from core.identity import keyed, resolve_key, task_keys
from core.llm import LLMClient, OpenAIClient
from core.tasks import (
    ProbeOptions,
    Suite,
    Task,
    apply_probe,
    load_suite,
    probe_task,
    recorded_sizes,
    scale_task,
    within_budget,
)
from core.watcher import EditWatcher, SavedElsewhere
from core.workspace import Workspace
from core.workspace_files import read_candidate_files, starter_candidate, write_candidate
from core.workspace_verifier import open_verifier
from store import Experience, RunRecord, Store
from verifier import Outcome, ProbeSandbox, VerifierProtocol

if TYPE_CHECKING:
    from core.cluster import StatusRelay


def running_elsewhere(run: RunRecord) -> bool:
    """Whether another process on this machine is running ``run`` now (its record says "running" with the pid of a
    live process that is not this one; a killed run's pid is gone)."""
    import os
    import socket

    from verifier import process_alive

    pid = run.extra.get("pid")
    if run.status != "running" or not isinstance(pid, int) or pid == os.getpid():
        return False
    if run.extra.get("host") not in (None, socket.gethostname()):
        return False
    return process_alive(pid)


def describe_run(run: RunRecord) -> str:
    """A run in a few words: "20260101-1200-ab12 (failed at 12:04, 2 tasks, 3 of 30 iterations, evokernel)"."""
    done = max((p.iterations_used for p in run.progress.values()), default=0)
    return (f"{run.id} ({run.status} at {_clock(run.updated_at)}, {len(run.tasks)} task"
            f"{'s' if len(run.tasks) != 1 else ''}, {done} of {run.config.get('iterations', '?')} iterations, "
            f"{run.method})")


def _clock(at: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "?"


def leave(code: int) -> NoReturn:
    """End this process at once, once everything a session opened is closed (the workbench after its last
    screen): the processes its threads still run (a build, a count of a reference) are ended, never left
    behind, and the interpreter is not torn down (PyTorch's teardown alone takes a second)."""
    import os
    import sys

    from verifier import end_started_by, remove_scratch

    end_started_by("")
    remove_scratch()   # os._exit runs no exit handler: the jobs' and probes' folders in /dev/shm go now
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Session:
    def __init__(self, workspace: Workspace, config: Config | None = None, *, bus: EventBus | None = None,
                 replay: bool = False, backend: str | None = None, cluster: str | None = None,
                 model: str | None = None, verifier: VerifierProtocol | None = None, llm: LLMClient | None = None):
        """``replay``: answers come from the response cache only (no endpoint); ``model``: the model to ask
        (``demo``: the shipped canned model, ``core.demo``, no endpoint). ``verifier`` and ``llm`` are parts
        given whole instead of opened from the configuration (the workbench's tests give the canned verifier
        and a scripted model of ``core.scripted``)."""
        self.workspace = workspace
        self.config = config or workspace.config()
        self._file_config = self.config.model_copy(deep=True)   # as read, before this session's own overrides
        self._model_given = model if model and model != DEMO else None
        self.demo = model == DEMO
        if model and not self.demo:
            self.config.llm.model = model
        if backend:
            self.config.backend = backend
        if cluster:
            self.config.cluster.address = cluster
        self.bus = bus or EventBus()
        self.replaying = replay
        workspace.state_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store.open(workspace.memory_path)
        self._verifier: VerifierProtocol | None = verifier
        self._llm: LLMClient | None = llm
        self._llm_given = llm is not None
        self._engine: Engine | None = None
        self._suite: Suite | None = None
        self._keys: dict[str, dict[str, str]] = {}   # suite name -> {task id in it: its key in the workspace}
        self._relay: StatusRelay | None = None     # cluster news -> events, when verification runs on a Ray cluster
        self._sizing = threading.Lock()   # one probe of a task at a time: the background sizer's and a run's

    # -- parts, on first use -----------------------------------------------------------------------

    @property
    def verifier(self) -> VerifierProtocol:
        if self._verifier is None:
            if self.config.cluster.address:
                from core.cluster import StatusRelay, open_cluster_verifier

                self._relay = relay = StatusRelay(self.bus, self.config.cluster.address)
                verifier: VerifierProtocol = open_cluster_verifier(self.workspace, self.config, relay)
            else:
                verifier = open_verifier(self.workspace, self.config.backend, self.config.verifier)
            self._verifier = verifier
        return self._verifier

    def _in_loop(self) -> None:
        """Cluster news reach subscribers in this (the engine's) loop thread."""
        if self._relay is not None:
            self._relay.loop = asyncio.get_running_loop()

    def _cancel_verifications(self) -> None:
        """Abandon verifications in flight where the verifier can (a cluster's outstanding Ray tasks)."""
        cancel = getattr(self._verifier, "cancel", None)
        if cancel is not None:
            cancel()

    def llm_problem(self) -> str | None:
        """Why generation is unavailable (None when an endpoint and model are configured)."""
        try:
            self._client()
        except LLMError as exc:
            return str(exc)
        return None

    def _client(self) -> LLMClient:
        if self._llm is None:
            self._llm = demo_model() if self.demo else OpenAIClient(self.config.llm, cache=self.store,
                                                                    replay=self.replaying)
        return self._llm

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            try:
                llm = self._client()
            except LLMError:
                llm = None  # hand edits and verification still work; run() says what to configure
            self._engine = Engine(self.config, self.store, self.verifier, llm, self.bus,
                                  kernels_dir=self.workspace.kernels_dir,
                                  prompt_log=self.workspace.logs_dir / "prompts")
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

    def task_keys(self, suite: Suite) -> dict[str, str]:
        """Each task id of ``suite`` -> its key in this workspace (``core.identity``): the id, or the id with
        the suite's name beside it when another suite's task holds the id here; the same key whatever folder
        the suite was opened from. Two keys an earlier EvoKernel gave one task file are merged (said in the log)."""
        if suite.label not in self._keys:
            merges: list[tuple[str, str, int]] = []
            with self.store.transaction():   # a suite's new keys in one write
                self._keys[suite.label] = task_keys(self.store, suite.label, suite.tasks, spec=suite.spec,
                                                    merged=lambda *m: merges.append(m))
            for source, into, moved in merges:
                self._merged(source, into, moved)
        return self._keys[suite.label]

    def _merged(self, source: str, into: str, moved: int) -> None:
        """Two keys of one task became one history: its kernels folder follows where it can, and the log says so."""
        old, new = self.workspace.kernels_dir / source, self.workspace.kernels_dir / into
        folder = ""
        if old.is_dir():
            if not new.exists():
                old.rename(new)
                folder = f"; kernels/{source}/ is now kernels/{into}/"
            else:
                folder = (f"; kernels/{source}/ stays as it was (kernels/{into}/ holds the task's files): copy what "
                          "you need")
        self.bus.emit(Notice(f"{source} is the same task file as {into} (seen through another folder): its "
                             f"{moved} attempt{'s' * (moved != 1)} joined {into}'s history{folder}", task=into))

    def task_elsewhere(self, key: str) -> Task:
        """The task of key ``key`` from whichever suite of this workspace holds it (not necessarily the one
        shown), at the sizes that suite is used with here; raises SavedElsewhere (where it belongs, how to open
        it) when its suite cannot be opened from here."""
        claims = self.store.task_claims()
        claim = claims.get(resolve_key(claims, key)) or {}
        label, name = str(claim.get("suite") or "?"), str(claim.get("name") or key)
        spec = str(claim.get("suite_spec") or ("builtin" if label == "builtin" else ""))
        opened = f"`evokernel ui --suite {spec if spec else '<the folder of suite ' + label + '>'}`"
        if not spec or (spec != "builtin" and not Path(spec).is_dir()):
            raise SavedElsewhere(f"kernels/{key}/ holds task {name} of suite {label}, not of the suite shown "
                                 f"({self.suite().label}), and that suite's folder is not known here: open it with "
                                 f"{opened} to verify this save (it stays noted until then)")
        try:
            [task] = self.tasks([name], suite=spec, scale=self._scale_of(spec))
        except (TaskError, ValueError) as exc:
            raise SavedElsewhere(f"kernels/{key}/ holds task {name} of suite {label}, which does not load here "
                                 f"({exc}): open it with {opened} to verify this save") from None
        return task

    def _scale_of(self, spec: str) -> float | str | None:
        """The sizes suite ``spec`` is used with in this workspace: evokernel.toml's when it names that suite, else
        its latest run's, else as written."""
        def same(other: object) -> bool:
            return isinstance(other, str) and bool(other) and (
                other == spec or (spec != "builtin" and other != "builtin"
                                  and Path(self._suite_path(other)).resolve() == Path(spec).resolve()))

        saved = self.workspace.config()
        if same(saved.suite):
            return saved.size_scale
        for run in reversed(self.store.list_runs()):
            if same(run.config.get("suite")):
                return cast(float | str | None, run.config.get("size_scale"))
        return None

    def tasks(self, ids: list[str] | None = None, level: int | None = None, suite: str | None = None,
              scale: float | str | None = None) -> list[Task]:
        """The suite's tasks (``ids``: those named, by their id in the suite or their key here), sized, each
        under its key in this workspace (``Task.id``; ``Task.name`` is its id in the suite)."""
        scale = scale if scale is not None else self.config.size_scale
        # "auto" measures the reference: with the verifier's thread count, so the window it sizes for is
        # the one verification times in, and cached in the workspace, so a resumed run sizes the same
        chosen = self.suite(suite)
        keys = self.task_keys(chosen)
        names = {key: name for name, key in keys.items()}
        if ids is not None and any(i not in names for i in ids):   # a key merged into another stands for it
            claims = self.store.task_claims()
            names.update({i: names[k] for i in ids if (k := resolve_key(claims, i)) in names})
        wanted = [names.get(i, i) for i in ids] if ids is not None else None
        if scale != "auto":
            return keyed([scale_task(t, scale) for t in chosen.select(wanted, level)], keys)
        vconfig = self.config.verifier
        # the probes of the tasks not sized yet share one sandbox (started only when one runs)
        with ProbeSandbox(vconfig.threads, use_bwrap=vconfig.use_bwrap, seccomp=vconfig.seccomp) as sandbox:
            probe: ProbeOptions = {"threads": vconfig.threads, "cache_dir": self.workspace.cache_dir,
                                   "sandbox": sandbox}
            sized = []
            for t in chosen.select(wanted, level):
                with self._sizing:   # the background sizer may be probing it now: then its record serves
                    sized.append(scale_task(t, scale, **probe))
            return keyed(sized, keys)

    def listed_tasks(self) -> list[Task]:
        """The suite's tasks at once, for what lists them (the task table, the folders the watcher knows, a
        starter): never a probe. Under ``auto`` each at the sizes recorded in this workspace, else as written until
        it is sized (``size_unsized`` in the background; a run, a save or a verification sizes its own task first).
        #51: the workbench sized all 376 tasks of a suite before showing any (about 2 h), blocked at "opening"."""
        if self.config.size_scale != "auto":
            return self.tasks()
        chosen = self.suite()
        listed = []
        for t in chosen.tasks:
            probe = recorded_sizes(t, self.workspace.cache_dir)
            listed.append(apply_probe(t, probe) if probe is not None and probe.ok else within_budget(t))
        return keyed(listed, self.task_keys(chosen))

    def size_unsized(self, progress: Callable[[int, int, str, str, str], None],
                     stop: threading.Event | None = None) -> int:
        """Size (``auto``) every task of the suite that this workspace has not sized yet, one at a time in one
        probe sandbox, telling ``progress(done, total, task key, said, category)`` after each (and ``(0, 0, ...)``
        when none is left); between tasks it stops when ``stop`` is set. A task whose sizing failed before is tried
        again only by the run or save that needs it. Returns how many it sized. Blocking: run it in a thread."""
        if self.config.size_scale != "auto":
            return 0
        chosen = self.suite()
        keys = self.task_keys(chosen)
        todo = [t for t in chosen.tasks if recorded_sizes(t, self.workspace.cache_dir) is None]
        if not todo:
            progress(0, 0, "", "", "")
            return 0
        vconfig = self.config.verifier
        done = 0
        with ProbeSandbox(vconfig.threads, use_bwrap=vconfig.use_bwrap, seccomp=vconfig.seccomp) as sandbox:
            for k, t in enumerate(todo, 1):
                if stop is not None and stop.is_set():
                    break
                with self._sizing:
                    probe = (recorded_sizes(t, self.workspace.cache_dir)
                             or probe_task(t, "auto", threads=vconfig.threads, cache_dir=self.workspace.cache_dir,
                                           sandbox=sandbox))
                done += 1
                sized = apply_probe(t, probe) if probe.ok else t
                said = (f"{probe.ms:.3g} ms" if probe.ok and probe.ms is not None else
                        f"not sized: {probe.problem}" if not probe.ok else "sized")
                progress(k, len(todo), keys.get(t.name, t.id), said, sized.category)
        return done

    # -- runs -----------------------------------------------------------------------------------------

    async def run(self, tasks: list[Task], *, method: str, iterations: int | None, suite: str | None,
                  scale: float | str | None, seed: int = 0) -> RunRecord:
        extra = {"suite": suite or self.config.suite,
                 "size_scale": scale if scale is not None else self.config.size_scale}
        engine = self.engine
        self._in_loop()
        return await engine.run(tasks, method=method, iterations=iterations, seed=seed, run_config=extra)

    def latest_run(self, unfinished: bool = False) -> RunRecord | None:
        runs = [r for r in self.store.list_runs() if not unfinished or r.status != "finished"]
        return runs[-1] if runs else None

    def pick_resume(self, run_id: str | None) -> tuple[RunRecord, str]:
        """The run ``--resume`` continues, and a line saying which and why: ``run_id``'s, else the unfinished run
        updated last (the one that just stopped or failed, whoever started it), never one another process is
        running now; the line lists the other unfinished runs, with how to pick one of them."""
        if run_id is not None:
            run = self.find_run(run_id)
            self._resumable(run)
            return run, f"resuming run {describe_run(run)}"
        unfinished = [r for r in self.store.list_runs() if r.status != "finished"]
        busy = [r for r in unfinished if running_elsewhere(r)]
        choices = sorted((r for r in unfinished if r not in busy), key=lambda r: r.updated_at)
        if not choices:
            said = (f"; run {busy[-1].id} is running in another process (pid {busy[-1].extra.get('pid')})"
                    if busy else "")
            raise WorkspaceError(f"no unfinished run to resume{said}")
        run, others = choices[-1], choices[-2::-1]
        line = f"resuming run {describe_run(run)}, the unfinished run updated last"
        if others:
            line += (f"; other unfinished runs: {'; '.join(describe_run(r) for r in others[:4])}"
                     f"{f' and {len(others) - 4} more' if len(others) > 4 else ''}"
                     " (`evokernel run --resume RUN` continues one of them)")
        if busy:
            line += f"; running in another process now: {', '.join(r.id for r in busy)}"
        return run, line

    def _resumable(self, run: RunRecord) -> RunRecord:
        """``run`` as the store holds it now, if it can be resumed here: not finished (another process may have run
        it to its end since it was listed), not running in another process."""
        fresh = self.store.get_run(run.id) or run
        if fresh.status == "finished":
            raise RunAlreadyFinished(f"run {fresh.id} has finished (at {_clock(fresh.updated_at)}, in another "
                                     "process): nothing to resume; `evokernel report` shows it")
        if running_elsewhere(fresh):
            raise WorkspaceError(f"run {fresh.id} is running in another process (pid {fresh.extra.get('pid')}): "
                                 "stop it there first")
        return fresh

    def reload_config(self) -> tuple[list[str], list[str]]:
        """Read evokernel.toml again (the workbench, before each run): changes under [llm] and [engine] are taken
        now (the next run's client and engine are new); the others (backend, suite, sizes, verifier, cluster,
        theme) need the workbench opened again. Returns (taken, needing a restart), as "[llm] max_tokens" words;
        a file that no longer reads raises its ``ConfigError``."""
        new = self.workspace.config()
        old = self._file_config
        taken: list[str] = []
        restart: list[str] = []
        for section in ("llm", "engine"):
            before, after = getattr(old, section).model_dump(), getattr(new, section).model_dump()
            changed = [k for k in after if after[k] != before.get(k)]
            if changed:
                taken += [f"[{section}] {k}" for k in changed if k != "api_key"] or [f"[{section}] api_key"]
                setattr(self.config, section, getattr(new, section).model_copy(deep=True))
        if taken:
            if self._model_given:
                self.config.llm.model = self._model_given
            if not self._llm_given:
                self._llm = None    # the next run asks with the new settings
            self._engine = None
        for name in Config.model_fields:
            if name not in ("llm", "engine") and getattr(new, name) != getattr(old, name):
                restart.append(name if name in ("backend", "form", "suite", "size_scale", "theme") else f"[{name}]")
        self._file_config = new
        return taken, restart

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
        """Continue ``run`` as the store holds it now (``RunAlreadyFinished`` when another process finished it)."""
        run = self._resumable(run)
        tasks = self.tasks(run.tasks, suite=run.config.get("suite"), scale=run.config.get("size_scale"))
        engine = self.engine
        self._in_loop()
        return await engine.run(tasks, method=run.method, resume=run)

    async def replay(self, run: RunRecord) -> RunRecord:
        """Run ``run``'s configuration again as a new run answering from the LLM cache: no endpoint, and the
        recorded run's model unless one is configured (its name is part of every cached request)."""
        if self._llm is None:
            recorded = str(run.config.get("model") or "")
            if recorded == DEMO_MODEL:   # its answers are canned, never cached: the demo answers again, the same
                self.demo = True
            else:
                self.config.llm.model = self.config.llm.model or recorded
        tasks = self.tasks(run.tasks, suite=run.config.get("suite"), scale=run.config.get("size_scale"))
        extra = {k: run.config.get(k) for k in ("suite", "size_scale")}
        extra["sample_key"] = run.config.get("sample_key", run.id)
        extra["replay_of"] = run.id
        engine = self.engine
        self._in_loop()
        return await engine.run(tasks, method=run.method, iterations=run.config["iterations"],
                                     seed=run.config.get("seed", 0), run_config=extra)

    # -- hand edits and the workspace folder ------------------------------------------------------

    def edit_watcher(self) -> EditWatcher:
        """A watcher that re-verifies saves in kernels/<task>/ and logs them as human experiences: the tasks of
        the suite shown and every other task this workspace's memory knows (another suite's folder is
        verified as that suite's task; ``task_elsewhere``)."""
        tasks = {t.id: t for t in self.listed_tasks()}
        claims = self.store.task_claims()
        elsewhere = {key: str(c.get("suite") or "") for key, c in claims.items()
                     if key not in tasks and not c.get("legacy") and "merged_into" not in c}
        found: dict[str, Task] = {}

        async def verify(task_id: str, files: dict[str, str], parent: str | None) -> str | None:
            task = found.get(task_id)
            if task is None and task_id in tasks:   # at its sizes (under auto, sized now if it is not yet)
                task = found[task_id] = (await asyncio.to_thread(self.tasks, [task_id]))[0] \
                    if self.config.size_scale == "auto" else tasks[task_id]
            if task is None:
                task = found[task_id] = await asyncio.to_thread(self.task_elsewhere, task_id)
            # its parent is where its code came from: the closest earlier working version (the folder's last
            # working version wins a tie), never merely the last save that passed
            parent, lineage = await asyncio.to_thread(closest_version, self.store, task.id, files, parent)
            exp, out = await self.engine.record_human(task, files, parent, lineage)
            # A typo, a wrong result, a probe or a verification the tool failed is recorded, but is no start
            # point for the next edit.
            correct = out.gate_or_none("correctness")
            teaches = not (exp.extra or {}).get("probe")
            return exp.id if correct is not None and correct.passed and not out.not_judged and teaches else None

        def stranger(name: str) -> str:
            import difflib

            close = difflib.get_close_matches(name, [*tasks, *elsewhere], n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            return (f"kernels/{name}/: no task of suite {self.suite().label} or of this workspace is called {name}"
                    f"{hint}; saves there are not verified (`evokernel tasks` lists the tasks)")

        return EditWatcher(self.workspace.kernels_dir, set(tasks), verify, self.bus, elsewhere=elsewhere,
                           stranger=stranger)

    def task_folder(self, task_id: str, *, create: bool = True) -> Path:
        """kernels/<task>/, seeded with the best attempt or a starter candidate when empty."""
        folder = self.workspace.kernels_dir / task_id
        if create and not read_candidate_files(folder):
            state = self.store.get_task(task_id)
            best = self.store.get(state.best_id) if state and state.best_id else None
            if best is not None and best.files:
                write_candidate(folder, best.files, best.id)
            else:
                task = next((t for t in self.listed_tasks() if t.id == task_id), None)
                write_candidate(folder, starter_candidate(task.name, task.input_dtypes) if task is not None
                                else starter_candidate(task_id))
        return folder

    def promote(self, exp_id: str) -> Path:
        """Put an attempt's files in kernels/<task>/ (the person asked: it replaces what is there)."""
        exp = self.store.get(exp_id)
        if exp is None or not exp.files:
            raise WorkspaceError(f"attempt {exp_id} has no files to promote")
        folder = self.workspace.kernels_dir / exp.task_id
        write_candidate(folder, exp.files, exp.id)
        return folder

    def verify_files(self, task_id: str, files: dict[str, str]) -> Outcome:
        """Verify files for a task without recording anything (the re-verify key)."""
        [task] = self.tasks([task_id])
        return self.verifier.verify(task.spec(), files, fresh=True)

    # -- the workbench's views: read-only, quick, safe from any thread -----------------------------

    def task_rows(self) -> list[TaskRow]:
        """One row per task of the suite: stage, progress in its latest run, best speedup."""
        return task_rows(self.store, self.listed_tasks(), self.config.engine.iterations)

    def attempts(self, task_id: str) -> list[AttemptLine]:
        """The task's attempts as a tree, flattened for display."""
        return attempt_lines(self.store, task_id)

    def attempt(self, exp_id: str) -> tuple[Experience | None, Experience | None]:
        """An experience with its files, and its parent (for a diff)."""
        return attempt_with_parent(self.store, exp_id)

    def assembly(self, exp_id: str) -> str:
        """The hot loops of attempt ``exp_id``'s kernel (``core.inspection.assembly``: built as the verifier built it,
        from its cache), in words and instructions."""
        from core.inspection import assembly

        exp = self.store.get(exp_id)
        if exp is None or not exp.files:
            return "this attempt has no files to build"
        return assembly(self.workspace, exp.backend or self.config.backend, exp.files)

    def raw_answer(self, exp_id: str) -> str | None:
        """The model's answer that gave attempt ``exp_id``, as it came (from the response cache), or
        None (a hand edit, a seed, or an answer no longer cached)."""
        exp = self.store.get(exp_id)
        if exp is None or exp.source != "llm" or not exp.run_id or exp.iteration is None:
            return None
        run = self.store.get_run(exp.run_id)
        sample = f"{(run.config.get('sample_key', run.id) if run else exp.run_id)}:{exp.task_id}:{exp.iteration}"
        alias = self.store.cache_get("sample:" + sample)
        hit = self.store.cache_get(alias["key"]) if alias else None
        return hit.get("text") if hit else None

    def browse_memory(self, filters: dict[str, str | None], sort: str = "recency", *, descending: bool = True,
                      limit: int | None = 500, search: str = "") -> tuple[list[dict[str, Any]], int]:
        """A page of experience summaries passing ``filters`` (task, kind, stage, backend, source) and, with
        ``search``, whose title or code holds every one of its words (case aside), and how many pass in all."""
        from core.memory import numbered_summaries

        active: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
        words = search.lower().split()
        if not words:
            items = self.store.query(**active, sort=sort, descending=descending, limit=limit)
            return numbered_summaries(self.store, items), self.store.count(**active)

        def found(exp: Experience) -> bool:
            text = "\n".join([exp.title, exp.task_id, *exp.files.values()]).lower()
            return all(word in text for word in words)

        hits = [e for e in self.store.query(**active, sort=sort, descending=descending) if found(e)]
        return numbered_summaries(self.store, hits[:limit] if limit is not None else hits), len(hits)

    def experience(self, exp_id: str) -> tuple[Experience | None, int | None, dict[str, Any] | None,
                                                list[dict[str, Any]], list[tuple[str, str]]]:
        """One experience in full for the memory browser: it, its ``#n`` among its task's attempts (None
        for knowledge), its parent's summary and its children's (numbered the same way), and what was decided
        about it and why (``core.memory.decisions``)."""
        from core.memory import decisions, family

        exp = self.store.get(exp_id)
        if exp is None:
            return None, None, None, [], []
        return (exp, *family(self.store, exp), decisions(self.store, exp))

    def memory_backends(self) -> list[str]:
        """The backends the memory holds experiences for ("" is backend-agnostic knowledge)."""
        return sorted(self.store.stats()["by_backend"])

    # -- stopping and restarting runs -------------------------------------------------------------

    def stop_run(self) -> None:
        """Ask the run in flight to stop after its attempts in flight (call from the engine's loop); on a
        cluster, the verifications in flight are cancelled instead (their attempts are redone on resume)."""
        if self._engine is not None:
            self._engine.stop()
            self._cancel_verifications()

    def reset_engine(self) -> None:
        """Give the next run a fresh engine: a stopped engine stays stopped (call between runs)."""
        self._engine = None

    async def close_async(self) -> None:
        self._cancel_verifications()   # a run cancelled by Ctrl-C leaves no Ray task behind
        if self._llm is not None:
            await self._llm.close()

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
        self.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
