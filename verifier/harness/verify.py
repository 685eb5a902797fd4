"""The verifier: a candidate in, an ``Outcome`` out, gate by gate.

    format -> anti_hack -> build -> correctness -> performance

The build runs while the reference (at seeds of its own) and the sandbox start; the
candidate's correctness and timing jobs run in the sandbox's fork server; timing holds a
machine-wide lock so measurements never overlap. ``Verifier`` is thread-safe: an engine may verify
several candidates at once from worker threads.

A backend whose toolchain or device is missing is refused when the ``Verifier`` is made
(``ToolchainMissing``, one line naming the fix): that is not the candidate's failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from verifier import verdict
from verifier.backends import Backend, backend_device, get_backend, runtime_class, runtime_target
from verifier.cases import timing_order
from verifier.config import VerifyConfig
from verifier.errors import ToolchainMissing, VerifierError
from verifier.gates.antihack import check_candidate
from verifier.gates.build import check_build
from verifier.gates.correctness import call_schedule, judge
from verifier.gates.correctness import plan as correctness_plan
from verifier.gates.format import check_format
from verifier.gates.performance import check_call, judge_cases
from verifier.gates.performance import judge as judge_performance
from verifier.harness.candidate_files import (  # noqa: F401  (re-exported)
    MAX_READ_BYTES,
    candidate_hash,
    candidate_identity,
    read_candidate,
)
from verifier.harness.reference import Reference, ReferenceCache
from verifier.harness.window import Observer, SideFailed
from verifier.jobs import CandidateJob, CandidateResult, write_job
from verifier.machine import priority
from verifier.machine.caches import flush_bytes
from verifier.machine.facts import fingerprint
from verifier.machine.lock import MachineLock, machine_lock_path
from verifier.machine.priority import BACKGROUND_NICENESS
from verifier.machine.roofline import MAX_CEILING_MEASUREMENTS, RooflineMeter, below_floor
from verifier.outcome import TOOL, GateResult, Outcome
from verifier.processes import declared_env, scrubbed_env
from verifier.sandbox.client import ForkServer, JobExit, JobLimits, plain_files_only
from verifier.sandbox.seccomp import CPU_NEEDS, RuntimeNeeds
from verifier.task import TaskSpec
from verifier.tolerance import Tolerance, tolerance_for
from verifier.toolchain.build import BuildResult, default_cache_dir
from verifier.window_stats import Ratio

# The job code both fork servers run, named rather than imported: the sandbox never imports job code, so
# the job's own imports (the runtime, through it the build, through that the sandbox) cannot lead back to it.
JOB_ENTRY = "verifier.job.worker:run_job"
MAX_JOB_TEXT = 4000  # the most of a job's own words (its error, its stderr) a verdict carries
OUTCOME_FORMAT = 7  # bump when the gates change what they decide (3: the link check, the allow-list view;
#                     4: fresh seeds, widened trials, a larger second shape;
#                     5: paired timing, speed verdicts within the noise, every timed call checked;
#                     6: every side in its own process, the clock in the harness, fresh draws every round;
#                     7: drawn tail remainders and a tiny shape, repeated calls, outputs read by the harness)


class Verifier:
    """Verifies candidates for one backend. Close it (or use ``with``) to stop its sandbox."""

    def __init__(self, backend: str | Backend = "cpu", config: VerifyConfig | None = None,
                 cache_dir: str | Path | None = None, hidden_paths: list[str] | None = None):
        self.backend = get_backend(backend) if isinstance(backend, str) else backend
        toolchain = self.backend.toolchain()
        if not toolchain.available:
            raise ToolchainMissing(f"the {self.backend.name} backend cannot run here: {toolchain.reason}")
        self.config = config or VerifyConfig()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # Jobs exchange outputs through files: in memory (/dev/shm) where there is one.
        shm = Path("/dev/shm")
        in_memory = shm.is_dir() and os.access(shm, os.W_OK)
        self.jobs_root = Path(tempfile.mkdtemp(prefix="evokernel-jobs-", dir=shm if in_memory else None))
        self._job_counter = 0
        self._job_lock = threading.Lock()
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
        spawn = getattr(self.backend, "process_model", "fork") == "spawn"
        # What the backend's runtime needs from the seccomp filter and the limits (a plugin without a
        # declaration gets the CPU's)
        self.needs: RuntimeNeeds = getattr(self.backend, "runtime_needs", CPU_NEEDS)
        device_modules = list(runtime_class(self.backend).modules)  # torch_npu
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
        reference_jobs = self.cache_dir / "reference" / f"jobs-{os.getpid()}-{id(self):x}"
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
        self.roofline = RooflineMeter(self.cache_dir, self.backend, cfg.threads, self._lock)
        # its own thread names: closing ends the processes its threads started (verifier.machine.priority)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"verifier-{id(self):x}")
        self.window_observer: Observer | None = None   # tests: what every timed call saw (verifier.harness.window)
        self._warm: Future[None] | None = None
        # A reference made ahead for each task's next verification (``_reference_for``), at most one per task
        self._spares: dict[str, Future[Reference]] = {}
        self._spare_bytes: dict[str, int] = {}    # what each task's last reference held (its outputs)
        self._spares_lock = threading.Lock()

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
        priority.end_started_by(f"verifier-{id(self):x}")
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.jobs_root, ignore_errors=True)
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

    def _reference_for(self, task: TaskSpec) -> Future[Reference]:
        """This verification's reference: the one made ahead for this task (``_make_spare``) when there is
        one, else one made now. Either way it is this verification's alone: a spare is handed out once, its
        seeds came from the operating system when it was made, and no candidate's job ever saw them."""
        with self._spares_lock:
            spare = self._spares.pop(task.key, None)
            self._spare_bytes.pop(task.key, None)
        if spare is not None and not (spare.done() and spare.exception() is not None):
            return spare
        return self._pool.submit(self._live_reference, task)

    def _make_spare(self, task: TaskSpec, unused: Future[Reference] | None = None, nbytes: int = 0) -> None:
        """After a verification of ``task``: keep its reference when no job used it (the build failed),
        else make the next one now, in the background (reference outputs at background priority, under
        the machine lock's shared side, so never beside a timing), while the engine waits on the model.
        It spares the next verification of the task the reference's run (1.3-1.5 s of a fresh L1
        verification here). At most ``MAX_SPARES`` tasks have one, holding at most ``MAX_SPARE_BYTES``
        of outputs in all (``nbytes``: what the reference just used held)."""
        with self._spares_lock:
            if task.key in self._spares or len(self._spares) >= MAX_SPARES:
                return
            if unused is None and sum(self._spare_bytes.values()) + nbytes > MAX_SPARE_BYTES:
                return
            try:
                self._spares[task.key] = unused or self._pool.submit(self._live_reference, task)
                self._spare_bytes[task.key] = nbytes
            except RuntimeError:   # the verifier is closing
                pass

    def verify(self, task: TaskSpec, candidate: str | Path | dict[str, str],
               on_gate: Callable[[GateResult], None] | None = None, *, fresh: bool = False,
               best: dict[str, str] | None = None) -> Outcome:
        """Run every gate; always returns an Outcome (raises only for a broken task or our own bugs).
        ``on_gate`` is called (from this thread) as each gate gets its verdict. ``best``: the files of
        the task's best so far, timed in the same window as the candidate (``Outcome.gain``,
        ``vs_best``). A candidate with the same code (``candidate_identity``: comments and spacing aside)
        verified before on this machine with the same settings (and the same best) returns its recorded
        Outcome (``from_cache``) unless ``fresh``: every gate is deterministic but the timing, which was
        measured here."""
        started = time.perf_counter()
        out = Outcome.start(task.id, self.backend.name)
        out.size_overrides, out.threads, out.created_at = dict(task.size_overrides), self.config.threads, time.time()
        try:
            files = candidate if isinstance(candidate, dict) else read_candidate(Path(candidate))
        except OSError as exc:
            return out.fail("format", f"cannot read the candidate: {exc}").finish()
        out.candidate_hash = candidate_hash(files)
        key = self._outcome_key(task, candidate_identity(files), candidate_identity(best) if best else "")
        if not fresh:
            cached = self._cached_outcome(key)
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
            self._remember_outcome(key, out)
        return out

    # -- the outcome cache ----------------------------------------------------------------------

    def _outcome_key(self, task: TaskSpec, cand_hash: str, best_hash: str = "") -> str:
        text = json.dumps([OUTCOME_FORMAT, cand_hash, best_hash, task.key, task.atol, task.rtol,
                           self.backend.build_key(), self.config.model_dump(mode="json"),
                           fingerprint(self.config.threads, self.backend.name)],
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _cached_outcome(self, key: str) -> Outcome | None:
        try:
            return Outcome.from_dict(json.loads((self.cache_dir / "outcomes" / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _remember_outcome(self, key: str, out: Outcome) -> None:
        folder = self.cache_dir / "outcomes"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(out.to_dict()))
        os.replace(tmp, folder / f"{key}.json")

    def _run_gates(self, task: TaskSpec, files: dict[str, str], out: Outcome,
                   best: dict[str, str] | None = None) -> None:
        backend, cfg = self.backend, self.config
        t = time.perf_counter()
        # the authoring forms the backend takes (Ascend: kernel-launch and the custom-op project)
        problem = check_format(files, backend.source_suffixes, backend.header_suffixes,
                               getattr(backend, "forms", ("kernel-launch",)))
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
        reference = self._reference_for(task)
        self._pool.submit(self.roofline.profile, task)  # counted once per task, cached (verifier.machine.roofline)
        self.warm_up()
        t = time.perf_counter()
        with self._lock.shared():  # compilers stop while something is being timed
            built = check_build(backend, files, self.cache_dir, timeout=cfg.build_timeout_s, sandbox=cfg.use_bwrap,
                                hidden=self.hidden_paths, slow_timeout=cfg.project_build_timeout_s)
        build = built.build
        out.build_cached = build.cached
        if not built.passed:
            out.fail("build", built.message, time.perf_counter() - t)
            self._make_spare(task, unused=reference)   # no job saw it
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
        self._make_spare(task, nbytes=ref.nbytes)   # after the window: never beside this verification

    # -- jobs -----------------------------------------------------------------------------------

    def _job_dir(self, kind: str) -> Path:
        with self._job_lock:
            self._job_counter += 1
            counter = self._job_counter
        # A fresh folder with an unpredictable name (mkdtemp never reuses an existing one): a job cannot
        # pre-create, find or tamper with a later job's folder.
        return Path(tempfile.mkdtemp(prefix=f"{counter:05d}-{kind}-", dir=self.jobs_root))

    def _new_job(self, kind: str, files: dict[str, str], build: BuildResult, job: dict[str, Any] | CandidateJob,
                 job_dir: Path | None = None) -> Path:
        assert build.library is not None  # only a build that passed makes jobs
        job_dir = job_dir or self._job_dir(kind)
        (job_dir / "model.py").write_text(files["model.py"])
        shutil.copy2(build.library, job_dir / build.library.name)
        for folder in build.keep:   # beside the library, where its RUNPATH and call_env find them (a custom op's
            # vendor); links copied as links: the harness never reads what a candidate's link points at
            shutil.copytree(build.library.parent / folder, job_dir / folder, symlinks=True)
        common = dict(kind=kind, library=build.library.name, signatures=[s.to_dict() for s in build.signatures],
                      model="model.py", threads=self.config.threads, runtime=runtime_target(self.backend),
                      timer=getattr(self.backend, "timer", "wall"))
        if isinstance(job, dict):
            job.update(common)
        else:
            for name, value in common.items():
                setattr(job, name, value)
        write_job(job_dir, job)
        return job_dir

    def _job_env(self, job_dir: Path, build: BuildResult | None) -> dict[str, str]:
        """What the job in ``job_dir`` needs in its environment to call its library (``Backend.call_env``: a
        custom op's private vendor, copied into the job's folder): only the variables the backend declares
        (``call_variables``), nothing secret-looking (``verifier.processes.declared_env``)."""
        call_env = getattr(self.backend, "call_env", None)
        if build is None or build.library is None or call_env is None:
            return {}
        return declared_env(call_env(job_dir / build.library.name), getattr(self.backend, "call_variables", ()))

    def _limits(self, background: bool = False) -> JobLimits:
        cfg = self.config
        return JobLimits(
            cpu_seconds=int(cfg.run_timeout_s * max(1, cfg.threads) + 10),
            address_space_mb=cfg.memory_limit_mb if self.backend.memory_limit() else None,
            file_size_mb=cfg.max_output_mb,
            open_files=self.needs.open_files,
            nice=BACKGROUND_NICENESS if background else 0,
        )

    def _run_job(self, job_dir: Path, background: bool = False, env: dict[str, str] | None = None
                 ) -> tuple[JobExit, dict[str, Any] | None, dict[str, Any] | None]:
        """Run one job; ``background``: it is not timed, so at lower priority (verifier.machine.priority);
        ``env``: what its library's call needs (``_job_env``)."""
        exit_ = self.server.run(job_dir, self._limits(background), self.config.run_timeout_s, env)
        plain_files_only(job_dir)   # the job is over; what it left is the candidate's
        result = outputs = None
        try:
            result = json.loads((job_dir / "result.json").read_text())
        except (OSError, ValueError):
            pass
        if not isinstance(result, dict):
            result = None
        path = job_dir / "outputs.pt"
        if result and result.get("ok") and path.exists():
            if path.stat().st_size > self.config.max_output_mb << 20:
                result = {"ok": False, "error": "outputs larger than the output limit"}
            else:
                import torch

                try:
                    outputs = torch.load(path, weights_only=True)  # never unpickles code
                except Exception as exc:
                    result = {"ok": False, "error": f"unreadable outputs: {type(exc).__name__}"}
        return exit_, result, outputs

    def _job_failure(self, job_dir: Path, exit_: JobExit, result: dict[str, Any] | None) -> str:
        """Why a job produced no usable result, in one paragraph (with the device error's meaning)."""
        if result is not None and not result.get("ok"):
            # result.json is the job's own file: its text is capped like the stderr tail
            return self._explained(str(result.get("error") or "the job failed")[:MAX_JOB_TEXT], job_dir)
        where = ""
        try:
            where = f" during {(job_dir / 'progress.txt').read_text(errors='replace').strip()[:200]}"
        except OSError:
            pass
        text = f"the candidate {exit_.describe()}{where}"
        tail = _tail(job_dir / "stderr.txt")
        return self._explained(text + (f"; stderr: {tail}" if tail else ""), job_dir)

    def _explained(self, message: str, job_dir: Path) -> str:
        """``message`` plus what a device error in it (or in the job's stderr) means, if the backend knows."""
        explain = getattr(self.backend, "explain", None)
        if explain is None:
            return message
        meaning = explain(message) or explain(_tail(job_dir / "stderr.txt", limit=4000))
        return f"{message}\n{meaning}" if meaning and meaning not in message else message

    def _correctness(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference,
                     out: Outcome) -> bool:
        schedule = call_schedule(list(ref.trials))
        job = CandidateJob(task=task, trials=list(ref.trials), schedule=schedule, eval_mode=bool(ref.eval_mode))
        job_dir = self._new_job("candidate", files, build, job)
        try:
            with self._lock.shared():  # trials stop while something is being timed
                exit_, result, outputs = self._run_job(job_dir, background=True, env=self._job_env(job_dir, build))
            if not result or not result.get("ok") or outputs is None:
                out.fail("correctness", self._job_failure(job_dir, exit_, result), exit_.seconds,
                         transient=exit_.status in ("timeout", "lost"), **_tool(exit_))
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
        """Time the reference, the candidate and the best in one window (see verifier.gates.performance);
        a multi-case task in one window per case, combined by geometric mean (``judge_cases``).

        A window is measured once more when it was too noisy to judge, or when the kernel came out above
        this machine's FMA ceiling (impossible without skipping work: the ceilings, perhaps measured
        under load, are measured again too). A kernel still above the ceiling is flagged and its speed
        is "implausible": no verdict, no reward, never a new best. A memory-bound kernel, or PyTorch in
        its window, under the triad floor has the ceilings measured again (``_under_memory_floor``)."""
        best_pair = (best, best_build) if best and best_build else None
        best_hash = candidate_hash(best) if best and best_pair else ""
        cases = sorted({t.case for t in ref.trials if t.case is not None})
        cfg = self.config
        settings: dict[str, Any] = dict(min_speed_change=cfg.min_speed_change, best_hash=best_hash,
                                        implausible_speedup=cfg.implausible_speedup, noise_limit=cfg.noise_limit)
        again = ""
        for attempt in (1, 2):
            flags = len(out.flags)
            if len(cases) > 1:
                chosen = timing_order(task.cases, cases)[:cfg.timed_cases] if task.cases else cases
                # the windows' timed rounds share the cases' budget; a side never gets more than on its own
                budget_s = min(cfg.timing_budget_s, cfg.cases_timing_budget_s / (len(chosen) * (2 + bool(best_pair))))
                judged: list[tuple[int, dict[str, Any], dict[str, Any], Reference]] = []
                # every chosen case is timed, whatever the machine's load: which cases a task's speedup is the
                # mean of depends on its cases alone (8 of 44 in one run, 6 in the other for the same kernel)
                for k in chosen:
                    sub = ref.restricted([i for i, t in enumerate(ref.trials) if t.case == k and not t.overrides
                                            and not t.widened][:3])
                    got = self._perf_job(task, files, build, sub, out, best_pair, case=k, budget_s=budget_s)
                    if got is None:
                        return
                    judged.append((k, *got, sub))
                judged.sort(key=lambda j: j[0])
                judge_cases(judged, self.tolerance_for(task), out, **settings)
                out.add_case_times(out.gate("performance").details.get("cases") or [])
                timed = [j[0] for j in judged]
                for c in out.cases:
                    c["timed"] = int(c.get("case", -1)) in timed
                perf = out.gate("performance")
                if perf.passed and len(timed) < len(cases):
                    perf.message += "; " + timed_words(timed, len(cases), cfg.timed_cases)
                    perf.details.update(timed_cases=timed, not_timed=sorted(set(cases) - set(timed)))
            else:
                base = ref.restricted([i for i, t in enumerate(ref.trials) if not t.overrides][:3])
                got = self._perf_job(task, files, build, base, out, best_pair)
                if got is None:
                    return
                judge_performance(*got, base, self.tolerance_for(task), out, **settings)
            perf = out.gate("performance")
            if not perf.passed:
                return
            out.roofline = self.roofline.point(task, out.latency_ms) if len(cases) <= 1 and out.latency_ms else None
            if attempt == 1 and self._under_memory_floor(out):
                # the kernel or PyTorch beside it ran faster than the memory roofline's floor: the triad,
                # perhaps measured under load, is measured again (the best of all measurements is kept)
                self.roofline.ceilings(remeasure=True)
                out.roofline = self.roofline.point(task, out.latency_ms)
            fraction = float(out.roofline.get("fraction") or 0.0) if out.roofline else 0.0
            above = not verdict.plausible(out.roofline)
            noisy = verdict.NOISY in (out.vs_reference, out.vs_best)
            if attempt == 1 and (above or noisy):
                again = ("the first window was too noisy to judge" if noisy else
                         f"the first window put it at {100 * fraction:.0f} % of this "
                         "machine's FMA ceiling")
                if above:
                    self.roofline.ceilings(remeasure=True)
                del out.flags[flags:]
                continue
            break
        if again:
            perf.message += f"; measured twice ({again})"
        if out.roofline:
            perf.message += f"; {out.roofline['summary']}"
            if below_floor(out.roofline):
                out.flags.append(below_floor(out.roofline))
            if above:
                out.flags.append(f"{100 * fraction:.0f} % of this machine's FMA ceiling "
                                 "after measuring the ceilings and the kernel again: impossible without skipping "
                                 "work; review before trusting")
                # the window's ratios judged again, as a kernel this machine cannot have run: "implausible"
                out.vs_reference = verdict.judge(Ratio(out.speedup or 0.0, *(out.speedup_ci or [0.0, 0.0])),
                                                 cfg.min_speed_change, cfg.noise_limit, plausible=False)
                if out.vs_best:
                    out.vs_best = verdict.judge(Ratio(out.gain or 0.0, *(out.gain_ci or [0.0, 0.0])),
                                                cfg.min_speed_change, cfg.noise_limit, plausible=False)

    def _under_memory_floor(self, out: Outcome) -> bool:
        """Whether a memory-bound kernel, or PyTorch in its window, took less than the roofline's floor
        while the ceilings may still be low (measured fewer than ``MAX_CEILING_MEASUREMENTS`` times).
        Either is possible with data kept in a large cache, so it is not flagged; but the first reason to
        suspect is a triad measured while something else ran, and the prompts and the report divide by it."""
        point = out.roofline
        if not point or point.get("bound") != "memory" or not point.get("floor_ms"):
            return False
        ceilings = self.roofline.cached_ceilings() or {}
        if int(ceilings.get("measurements", 1)) >= MAX_CEILING_MEASUREMENTS:
            return False
        floor = float(point["floor_ms"])
        return any(0 < float(ms or 0) < floor for ms in (out.latency_ms, out.reference_ms))

    def _perf_job(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference, out: Outcome,
                  best: tuple[dict[str, str], BuildResult] | None, case: int | None = None,
                  budget_s: float | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Run one timing window (``verifier.harness.window``): the reference, the candidate and the best each in
        a process of its own, the clock and the comparisons here. (result, outputs) for the judge, or
        None when the candidate's side failed (``out`` says why). The best's failure drops the best."""
        try:
            return self._window(task, files, build, ref, out, best, case, budget_s)
        except SideFailed as exc:
            if exc.side != "best" or best is None:
                raise
            got = self._window(task, files, build, ref, out, None, case, budget_s)
            if got is not None:
                got[0]["best_error"] = f"the best {exc}"
            return got

    def _window(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference, out: Outcome,
                best: tuple[dict[str, str], BuildResult] | None, case: int | None, budget_s: float | None = None,
                ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        from verifier.harness.window import Side, WindowSettings, finish, run_window
        from verifier.timing_method import timing_method

        cfg = self.config
        clock = getattr(self.backend, "timer", "wall")
        method = timing_method(cfg.timing)     # what a sample is; a method without a flush: none on the sides either
        base = {"task": task.to_dict(), "trials": [t.to_dict() for t in ref.trials[:2]],
                "eval_mode": bool(ref.eval_mode), "timer": clock,
                "flush_bytes": self._timing["flush_bytes"] if method.flush else 0,
                # a reference whose runs differ (duplicate-index scatter) keeps its trials' integer inputs
                "fixed_integers": any(m is not None for masks in ref.ignore[:2] for m in masks)}
        sides: dict[str, Side] = {}
        ref_dir = Path(tempfile.mkdtemp(prefix="side-", dir=self.reference_server.jobs_root))
        write_job(ref_dir, {**base, "kind": "side", "role": "reference", "threads": cfg.threads,
                            "runtime": runtime_target(self.backend)})
        sides["reference"] = Side("reference", ref_dir, trusted=True)
        sides["candidate"] = Side("candidate", self._new_job("side", files, build, {**base, "role": "candidate"}),
                                  trusted=False)
        if best is not None:
            best_files, best_build = best
            sides["best"] = Side("best", self._new_job("side", best_files, best_build, {**base, "role": "best"}),
                                 trusted=False)
        on_host = backend_device(self.backend.name) in ("cpu", "")
        settings = WindowSettings(warmup=cfg.warmup_calls, max_rounds=cfg.timing_calls,
                                  budget_s=cfg.timing_budget_s if budget_s is None else budget_s,
                                  precision=cfg.timing_precision, samples=cfg.check_samples, case=case, clock=clock,
                                  on_device=not on_host, max_output_bytes=cfg.max_output_mb << 20,
                                  method=method)
        flush = sides["reference"].flush if self._timing["flush_bytes"] and on_host else None
        failure: SideFailed | None = None
        result: dict[str, Any] | None = None
        try:
            builds = {"candidate": build, "best": best[1] if best is not None else None}
            with self._lock.exclusive():
                for side in sides.values():
                    server = self.reference_server if side.trusted else self.server
                    timeout = cfg.reference_timeout_s if side.trusted else cfg.run_timeout_s
                    side.start(server.submit(side.job_dir, self._limits(), timeout,
                                             self._job_env(side.job_dir, builds.get(side.name))))
                try:
                    result = run_window(sides, settings, flush, self.window_observer)
                except SideFailed as exc:
                    failure = exc
                    for side in sides.values():
                        if side.handle is not None:
                            side.handle.kill()
                ended = finish(sides)
            if failure is not None:
                if failure.side == "candidate":
                    exit_, got = ended["candidate"]
                    if (got is not None and not got.get("ok")) or failure.exit is not None:
                        message = self._job_failure(sides["candidate"].job_dir, failure.exit or exit_, got)
                    else:   # it broke the protocol and was stopped
                        message = f"the candidate's timing process {failure}"
                    lost = failure.exit if failure.exit is not None and failure.exit.tool else exit_
                    out.fail("performance", message, exit_.seconds, transient=lost.status == "lost", **_tool(lost))
                    return None
                if failure.side == "reference":   # the task's own code: not this candidate's verdict
                    exit_, got = ended["reference"]
                    why = str((got or {}).get("error") or "") or exit_.describe()
                    raise VerifierError(f"the reference failed in the timing window: {why[:MAX_JOB_TEXT]}")
                raise failure
            assert result is not None
            outputs: dict[str, list[Any]] = {}
            for name in sides:
                exit_, got = ended[name]
                path = sides[name].job_dir / "outputs.pt"
                if exit_.tampered or got is None or not got.get("ok") or not path.exists():
                    if name == "reference":
                        raise VerifierError(f"the reference failed in the timing window: {exit_.describe()}")
                    if name == "best":
                        raise SideFailed("best", exit_.tampered or "ended without its report", exit_)
                    out.fail("performance", exit_.tampered or self._job_failure(sides[name].job_dir, exit_, got),
                             exit_.seconds, transient=exit_.status == "lost", **_tool(exit_))
                    return None
                if path.stat().st_size > cfg.max_output_mb << 20:
                    out.fail("performance", "outputs larger than the output limit")
                    return None
                import torch

                outputs[name] = torch.load(path, weights_only=True)["picks"]   # never unpickles code
            # what each untrusted side's calls returned: read by the harness, or the side's own picks
            checked: dict[str, list[Any]] = {}
            for name, read in result.pop("read").items():
                own = iter(outputs[name])
                checked[name] = [next(own, None) if r == "own" else r for r in read]
            best_checks = checked.get("best", [])
            for meta, expected, got in zip(result["checks"], outputs["reference"], best_checks):
                problem = got is not None and check_call(meta, {"expected": expected, "got": got}, ref,
                                                         self.tolerance_for(task))
                if problem:
                    raise SideFailed("best", f"gave outputs that are not the reference's: {problem}")
            cand = ended["candidate"][1] or {}
            result.update(calls=cand.get("calls", []), forbidden=cand.get("forbidden", []),
                          signals_changed=cand.get("signals_changed", []))
            return result, {"checks": [{"expected": e, "got": g} for e, g in zip(outputs["reference"],
                                                                                   checked["candidate"])]}
        finally:
            for side in sides.values():
                side.close()
                shutil.rmtree(side.job_dir, ignore_errors=True)


def _tool(exit_: JobExit) -> dict[str, str]:
    """The details that mark a job's ending as the tool's failure (``verifier.outcome.TOOL``), or none."""
    return {TOOL: exit_.tool} if exit_.tool else {}


def timed_words(timed: list[int], total: int, most: int) -> str:
    """Which of a multi-case task's cases the windows timed, in words (1-based, as every case is shown)."""
    numbers = ", ".join(f"#{k + 1}" for k in sorted(timed))
    return (f"timed {len(timed)} of {total} cases ({numbers}); the largest of each dtype first, then the "
            f"largest others, at most {most} ([verifier] timed_cases); the others were checked for correctness only")


MAX_SPARES = 4
"""Tasks that may each have a reference made ahead for their next verification (``Verifier._make_spare``)."""
MAX_SPARE_BYTES = 512 << 20
"""The reference outputs those spares may hold in memory, in all."""


def omp_env(threads: int) -> dict[str, str]:
    """The OpenMP settings of every job: the same thread count for all sides, passive waiting, and
    threads bound to cores.

    The candidate's libgomp and PyTorch's own OpenMP runtime (a second copy) each keep their threads
    spinning for a while after a parallel region by default; whichever side runs next in the timing
    window would share the cores with those spinners. Passive waiting puts idle threads to sleep at
    once, the same policy for the reference, the candidate and the best.

    Bound (``OMP_PROC_BIND``): otherwise a team's threads, woken from sleep, often shared one core
    and a parallel region ran serially; builtin relu's candidate took 3.5-6.5 ms per call against a
    steady 3.0-3.3 ms for torch.relu beside it (the same CPU time: one core instead of two), and
    3.5-3.9 ms once bound (both libgomp copies honour it)."""
    return {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE", "OMP_PROC_BIND": "true"}


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-limit:]
