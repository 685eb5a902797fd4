"""The verifier: a candidate in, an ``Outcome`` out, gate by gate.

    format -> anti_hack -> build -> correctness -> performance

The build runs while the reference (at seeds of its own, made ahead when it can be:
``verifier.harness.reference_cache.Spares``) and the sandbox start; the candidate's correctness and timing
jobs run in the sandbox's fork server (``verifier.harness.job_runner``: job folders and what is read back);
timing holds a machine-wide lock so measurements never overlap; the performance gate decides its own
second window and the verdict (``verifier.gates.performance.check``). A candidate verified before with
the same settings gets its recorded Outcome (``verifier.harness.outcome_cache``). ``Verifier`` is
thread-safe: an engine may verify several candidates at once from worker threads.

A backend whose toolchain or device is missing is refused when the ``Verifier`` is made
(``ToolchainMissing``, one line naming the fix): that is not the candidate's failure.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from verifier import priority
from verifier.backends import Backend, get_backend
from verifier.build import BuildResult, default_cache_dir
from verifier.candidate_files import (  # noqa: F401  (re-exported)
    MAX_READ_BYTES,
    candidate_hash,
    candidate_identity,
    exact_digest,
    read_candidate,
)
from verifier.config import VerifyConfig
from verifier.errors import ToolchainMissing, VerifierError
from verifier.gates import performance
from verifier.gates.antihack import check_candidate
from verifier.gates.build import check_build
from verifier.gates.correctness import call_schedule, judge
from verifier.gates.correctness import plan as correctness_plan
from verifier.gates.format import check_format
from verifier.harness.job_runner import JobRunner, omp_env, tool_failure
from verifier.harness.outcome_cache import OutcomeCache
from verifier.harness.reference_cache import ReferenceCache, Spares
from verifier.jobs import REPEAT_SAMPLES, CandidateJob, CandidateResult
from verifier.machine.caches import flush_bytes
from verifier.machine.lock import MachineLock, machine_lock_path
from verifier.machine.roofline import RooflineMeter
from verifier.outcome import TOOL, WAITING, GateResult, Outcome
from verifier.processes import scrubbed_env
from verifier.reference import Reference
from verifier.sandbox.client import ForkServer
from verifier.sandbox.seccomp import RuntimeNeeds
from verifier.scratch import release, scratch_dir
from verifier.task import TaskSpec
from verifier.tolerance import Tolerance, tolerance_for
from verifier.window.harness import Observer

# The job code both fork servers run, named rather than imported: the sandbox never imports job code, so
# the job's own imports (the runtime, through it the build, through that the sandbox) cannot lead back to it.
JOB_ENTRY = "verifier.worker:run_job"


_OWNERS = itertools.count(1)


class Verifier:
    """Verifies candidates for one backend. Close it (or use ``with``) to stop its sandbox."""

    def __init__(self, backend: str | Backend = "cpu", config: VerifyConfig | None = None,
                 cache_dir: str | Path | None = None, hidden_paths: list[str] | None = None):
        self.backend = get_backend(backend) if isinstance(backend, str) else backend
        # the name its threads start processes under, never another verifier's (an object's id is reused once it is
        # gone, and an ended owner's name starts nothing more: verifier.priority.end_started_by)
        self._owner = f"verifier-{next(_OWNERS)}"
        toolchain = self.backend.toolchain()
        if not toolchain.available:
            raise ToolchainMissing(f"the {self.backend.name} backend cannot run here: {toolchain.reason}")
        self.config = config or VerifyConfig()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # Jobs exchange outputs through files: in memory (/dev/shm) where there is one, never left after any exit
        self.jobs_root = scratch_dir("jobs")
        cfg = self.config
        # Builds and correctness runs hold it shared, timings exclusive (see verifier.machine.lock): one
        # lock per machine and user, whatever the workspace, so two workbenches never time together.
        self._lock = MachineLock(machine_lock_path())
        self._timing = {"warmup": cfg.warmup_calls, "max_calls": cfg.timing_calls, "budget_s": cfg.timing_budget_s,
                        # what evicts the timed cores' caches (verifier.machine.caches.flush_plan), not twice a VM's
                        # reported host L3 (960 MiB, ~330 ms per timed call here)
                        "flush_bytes": flush_bytes(cfg.threads) if cfg.flush_cache else 0}
        # Device backends spawn a fresh interpreter per job (see verifier.sandbox.forkserver): the server itself
        # then imports nothing heavy and never touches the device.
        spawn = self.backend.process_model == "spawn"
        # What the backend's runtime needs from the seccomp filter and the limits (the CPU's by default)
        self.needs: RuntimeNeeds = self.backend.runtime_needs
        device_modules = list(self.backend.device_runtime.modules)  # torch_npu
        preload = [] if spawn else ["torch", "torch._dynamo", JOB_ENTRY.partition(":")[0], *device_modules]
        # What candidates never see, in the run sandbox and in the build sandbox alike.
        self.hidden_paths = [str(self.cache_dir), *(hidden_paths or [])]
        self.server = ForkServer(
            self.jobs_root,
            env=scrubbed_env({**self.backend.worker_env(), **omp_env(cfg.threads)}, home=str(self.jobs_root)),
            preload=preload, use_bwrap=cfg.use_bwrap,
            hidden=list(self.hidden_paths), devices=self.backend.sandbox_devices(),
            spawn=spawn, job_preload=device_modules, entry=JOB_ENTRY,
            needs=self.needs, seccomp=cfg.seccomp,
        )
        # References are the user's own trusted code: their fork server runs outside the sandbox, in
        # the cache folder the sandbox hides, so no candidate can see a reference's outputs.
        reference_jobs = self.cache_dir / "reference" / f"jobs-{os.getpid()}-{self._owner}"
        reference_jobs.mkdir(parents=True, exist_ok=True)
        self.reference_server = ForkServer(
            reference_jobs, env=scrubbed_env({**self.backend.worker_env(), **omp_env(cfg.threads)},
                                             home=str(reference_jobs)),
            preload=preload, use_bwrap=False, hidden=[], devices=self.backend.sandbox_devices(),
            spawn=spawn, job_preload=device_modules, confine=False, entry=JOB_ENTRY,
            needs=self.needs, seccomp=cfg.seccomp,
        )
        self.references = ReferenceCache(self.cache_dir, self.backend, self._lock, threads=cfg.threads,
                                         timing=self._timing, timeout=cfg.reference_timeout_s,
                                         server=self.reference_server)
        self.roofline = RooflineMeter(None, self.backend, cfg.threads, self._lock)   # the machine's, not this cache's
        self.jobs = JobRunner(self.backend, cfg, self.needs, self.server, self.reference_server, self._lock,
                              int(self._timing["flush_bytes"]))
        self.outcomes = OutcomeCache(self.cache_dir / "outcomes")
        # its own thread names: closing ends the processes its threads started (verifier.priority)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=self._owner)
        self.window_observer: Observer | None = None   # tests: what every timed call saw (verifier.window.harness)
        self._warm: Future[None] | None = None
        # the next verification's reference, made ahead (looked up at each call: bench/fresh_reference_cost.py swaps it)
        self.spares = Spares(lambda task: self._live_reference(task), self._pool)

    # -- lifecycle ------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Start the sandbox in the background (it takes a second or two to import torch)."""
        if self._warm is None:
            self._warm = self._pool.submit(self._start_server)

    def _start_server(self) -> None:
        with self._lock.shared():  # it imports torch: never beside a timing
            self.server.start()

    def close(self) -> None:
        """Stop the sandboxes and everything in flight at once: closing never waits on a job, on a count of a
        reference or a probe this verifier's threads started, nor on the lock another process's timing holds."""
        self._lock.abandon()
        self.server.close()
        self.reference_server.close()
        priority.end_started_by(self._owner + "_")   # its pool's threads are named OWNER_N
        self._pool.shutdown(wait=True, cancel_futures=True)
        release(self.jobs_root)
        shutil.rmtree(self.reference_server.jobs_root, ignore_errors=True)

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """How candidates are isolated here, in words (for ``doctor`` and the README)."""
        return self.server.isolation

    # -- verification ---------------------------------------------------------------------------

    def tolerance_for(self, task: TaskSpec) -> Tolerance:
        """The tolerance the gates hold ``task``'s outputs to (``verifier.tolerance``), per output dtype."""
        return tolerance_for(task, self.config, self.backend)

    def reference(self, task: TaskSpec, want_timing: bool = True) -> Reference:
        """The task's reference at a fresh trial plan (new seeds every call), with its timing."""
        trials, shapes = correctness_plan(task, self.config.trials, self.config.second_shape)
        return self.references.get(task, trials, shapes, want_timing=want_timing)

    def _live_reference(self, task: TaskSpec) -> Reference:
        """The reference this verification checks against, made for it alone: its seeds come from the
        operating system and no other verification sees them, so nothing one candidate did in a job
        (a file left behind, outputs learnt) or its author read in a verdict can be replayed by the
        next (issue #24). Its timing is taken beside the candidate, not here."""
        return self.reference(task, want_timing=False)

    def verify(self, task: TaskSpec, candidate: str | Path | dict[str, str],
               on_gate: Callable[[GateResult], None] | None = None, *, fresh: bool = False,
               best: dict[str, str] | None = None) -> Outcome:
        """Run every gate; always returns an Outcome (raises only for a broken task or our own bugs).
        ``on_gate`` is called (from this thread) as each gate gets its verdict. ``best``: the files of
        the task's best so far, timed in the same window as the candidate (``Outcome.gain``,
        ``vs_best``). A candidate of the same bytes (``exact_digest``: every file as the build and the import
        read it, comments included) verified before on this machine with the same settings (and the same best)
        returns its recorded Outcome (``from_cache``) unless ``fresh``: every gate is deterministic but the
        timing, which was measured here."""
        started = time.perf_counter()
        out = Outcome.start(task.id, self.backend.name)
        out.size_overrides, out.threads, out.created_at = dict(task.size_overrides), self.config.threads, time.time()
        try:
            files = candidate if isinstance(candidate, dict) else read_candidate(Path(candidate))
        except OSError as exc:
            return out.fail("format", f"cannot read the candidate: {exc}").finish()
        out.candidate_hash = candidate_hash(files)
        key = self.outcomes.key(task, exact_digest(files), exact_digest(best) if best else "", self.backend,
                                self.config)
        if not fresh:
            cached = self.outcomes.get(key)
            if cached is not None:
                for g in cached.gates:
                    if on_gate is not None and g.status != "skipped":
                        on_gate(g)
                cached.from_cache, cached.seconds = True, time.perf_counter() - started
                cached.candidate_hash = out.candidate_hash   # these files (the same code as the ones timed)
                return cached
        if on_gate is not None:
            out.listener = on_gate
        try:
            self._run_gates(task, files, out, best)
        except VerifierError:
            raise                       # a broken task or a missing toolchain: not this candidate's verdict
        except Exception as exc:        # our own failure: a verdict-less attempt, kept, never cached
            if out.failed_gate is None:
                gate = next((g.name for g in out.gates if g.status == "skipped"), "performance")
                out.fail(gate, f"the verifier itself failed on this candidate ({type(exc).__name__}: {exc}); "
                               "verify it again, and report this if it repeats", transient=True, internal=True)
        finally:
            out.seconds = time.perf_counter() - started
            out.listener = None
        out.finish()
        if not out.not_judged and not any(g.details.get("transient") for g in out.gates):
            self.outcomes.put(key, out)
        return out

    def _run_gates(self, task: TaskSpec, files: dict[str, str], out: Outcome,
                   best: dict[str, str] | None = None) -> None:
        backend, cfg = self.backend, self.config
        t = time.perf_counter()
        # the authoring forms the backend takes (Ascend: kernel-launch and the custom-op project)
        problem = check_format(files, backend)
        if problem:
            out.fail("format", problem, time.perf_counter() - t)
            return
        out.pass_gate("format", seconds=time.perf_counter() - t)

        t = time.perf_counter()
        problem = (check_candidate(files, backend.source_suffixes, backend.header_suffixes, backend.name)
                   if cfg.antihack else None)
        if problem:
            out.fail("anti_hack", problem, time.perf_counter() - t)
            return
        out.pass_gate("anti_hack", "static rules passed" if cfg.antihack else "static rules off",
                      seconds=time.perf_counter() - t)

        # The reference and the sandbox get ready while the compiler works.
        reference = self.spares.take(task)
        self._pool.submit(self.roofline.profile, task)  # counted once per task, cached (verifier.machine.roofline)
        self.warm_up()
        t = time.perf_counter()
        with self._lock.shared(self._waiting(out, "build")):  # compilers stop while something is being timed
            built = check_build(backend, files, self.cache_dir, timeout=cfg.build_timeout_s, sandbox=cfg.use_bwrap,
                                hidden=self.hidden_paths, slow_timeout=cfg.project_build_timeout_s)
        build = built.build
        out.build_cached = build.cached
        if not built.passed:
            out.fail("build", built.message, time.perf_counter() - t)
            self.spares.keep(task, unused=reference)   # no job saw it
            return
        out.pass_gate("build", built.message, seconds=time.perf_counter() - t, warnings=build.log)
        best_build = None
        if best:
            with self._lock.shared():  # the best was built before: normally a cache hit
                best_built = check_build(backend, best, self.cache_dir, timeout=cfg.build_timeout_s,
                                         sandbox=cfg.use_bwrap, hidden=self.hidden_paths,
                                         slow_timeout=cfg.project_build_timeout_s)
            best_build = best_built.build if best_built.passed else None

        ref = reference.result()
        if self._warm is not None:
            self._warm.result()
        t = time.perf_counter()
        passed = self._correctness(task, files, build, ref, out)
        if passed:
            out.gate("correctness").seconds = time.perf_counter() - t
            t = time.perf_counter()
            self._performance(task, files, build, ref, out, best if best_build else None, best_build)
            out.gate("performance").seconds = time.perf_counter() - t
        if not passed:
            out.gate("correctness").seconds = out.gate("correctness").seconds or time.perf_counter() - t
        self.spares.keep(task, nbytes=ref.nbytes)   # after the window: never beside this verification

    @staticmethod
    def _waiting(out: Outcome, gate: str) -> Callable[[str], None]:
        """What a gate's wait for the timing lock tells the verification's listener: who holds the lock."""
        def said(who: str) -> None:
            if out.listener is not None:
                out.listener(GateResult(gate, WAITING, f"waiting for the machine's timing lock, held by {who}"))
        return said

    def _correctness(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference,
                     out: Outcome) -> bool:
        schedule = call_schedule(list(ref.trials))
        job = CandidateJob(task=task, trials=list(ref.trials), schedule=schedule, eval_mode=bool(ref.eval_mode))
        data = job_output_bytes(ref, schedule)
        full = self.jobs.space_problem(data)
        if full:    # the machine's limit, not the kernel's: not judged (verified again)
            out.fail("correctness", full, 0.0, **{TOOL: full})
            return False
        job_dir = self.jobs.new_job("candidate", files, build, job)
        try:
            with self._lock.shared(self._waiting(out, "correctness")):  # trials stop while something is timed
                exit_, result, outputs = self.jobs.run(job_dir, background=True, env=self.jobs.job_env(job_dir, build),
                                                       data_bytes=data)
            if not result or not result.get("ok") or outputs is None:
                met, tool = self.jobs.limit_met(job_dir, data)
                message = met or self.jobs.failure(job_dir, exit_, result)
                out.fail("correctness", message, exit_.seconds, transient=exit_.status in ("timeout", "lost"),
                         **({TOOL: tool} if tool else tool_failure(exit_)))
                return False
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        verdict = judge(ref, CandidateResult.from_dict(result), outputs, self.tolerance_for(task), task.cases, schedule)
        out.max_abs_error, out.max_rel_error = verdict.max_abs_error, verdict.max_rel_error
        out.cases = verdict.details.pop("cases", [])
        if not verdict.passed:
            out.fail(verdict.gate, verdict.message, trial=verdict.trial, **verdict.details)
            return False
        out.pass_gate("correctness", verdict.message, **verdict.details)
        return True

    def _performance(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference, out: Outcome,
                     best: dict[str, str] | None = None, best_build: BuildResult | None = None) -> None:
        """The performance gate (``verifier.gates.performance.check``: the windows, the roofline, a second
        window when it must, the verdict), its windows run by the job runner: the reference, the candidate
        and the best (``best``, built as ``best_build``) in one window; a multi-case task one per case."""
        best_pair = (best, best_build) if best and best_build else None

        def measure(sub: Reference, case: int | None, budget_s: float | None
                    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
            return self.jobs.window(task, files, build, sub, out, best_pair, case, budget_s, self.window_observer)

        performance.check(task, ref, out, measure=measure, roofline=self.roofline, tolerance=self.tolerance_for(task),
                          config=self.config, best_hash=candidate_hash(best) if best and best_pair else "",
                          with_best=best_pair is not None)


def job_output_bytes(ref: Reference, schedule: list[tuple[int, int]]) -> int:
    """What a correctness job writes when its outputs have the reference's shapes and dtypes: every trial's
    outputs whole, and each repeated call's ``REPEAT_SAMPLES`` positions per output (values and positions)."""
    repeated = sum(1 for _, seed in schedule if seed)
    per_call = max((sum(min(leaf.numel(), REPEAT_SAMPLES) * (leaf.element_size() + 8) for leaf in trial["leaves"])
                    for trial in ref.outputs), default=0)
    return ref.nbytes + repeated * per_call
