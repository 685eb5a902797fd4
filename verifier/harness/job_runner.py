"""The job runner: it owns job folders and what is read back from them.

Every job a verification runs (a candidate's correctness trials, each side of a timing window) gets a
fresh folder with an unpredictable name in the jobs root (a job cannot pre-create, find or tamper with a
later job's folder), holding the candidate's ``model.py``, its built library and what the library needs
beside it, and the job's description. The job runs in a fork server (``verifier.sandbox.client``) with the
limits, environment and priority given here. What it leaves is the candidate's: only plain files are read
back (a symlink would have the harness read a host file into the verdict, a FIFO would block it for ever),
outputs are loaded without unpickling code and within the output limit, and a job's own words (its error,
its stderr) are capped. A job that produced no usable result is explained in one paragraph, with what a
device error means where the backend knows.

``window`` runs one timing window's sides (``verifier.window.harness``): the trusted reference in the
reference server, the candidate and the best in the sandbox, under the machine lock's exclusive side,
and reads back the outputs the window compares.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from verifier.backends import Backend, backend_device, runtime_target
from verifier.build import BuildResult
from verifier.config import VerifyConfig
from verifier.errors import VerifierError
from verifier.gates.performance import check_call, samples_checked
from verifier.jobs import CandidateJob, write_job
from verifier.machine.lock import MachineLock
from verifier.outcome import TOOL, Outcome
from verifier.priority import BACKGROUND_NICENESS
from verifier.processes import declared_env
from verifier.reference import Reference
from verifier.sandbox.client import ForkServer, JobExit, JobLimits, plain_files_only
from verifier.sandbox.seccomp import RuntimeNeeds
from verifier.task import TaskSpec
from verifier.tolerance import tolerance_for
from verifier.window import harness as timing_window
from verifier.window.harness import MAX_SETS_BYTES, Observer, Side, SideFailed, WindowSettings, finish

MAX_JOB_TEXT = 4000  # the most of a job's own words (its error, its stderr) a verdict carries


class JobRunner:
    """Job folders, limits and read-back for one verifier's fork servers (see the module's docstring)."""

    def __init__(self, backend: Backend, config: VerifyConfig, needs: RuntimeNeeds, server: ForkServer,
                 reference_server: ForkServer, lock: MachineLock, flush_bytes: int):
        self.backend, self.config, self.needs = backend, config, needs
        self.server, self.reference_server, self.lock = server, reference_server, lock
        self.flush_bytes = flush_bytes   # the cache flush before each timed call (verifier.machine.caches)
        self._counter = 0
        self._counter_lock = threading.Lock()

    def job_dir(self, kind: str) -> Path:
        """A fresh folder for a job of ``kind`` in the sandbox's jobs root."""
        with self._counter_lock:
            self._counter += 1
            counter = self._counter
        # A fresh folder with an unpredictable name (mkdtemp never reuses an existing one): a job cannot
        # pre-create, find or tamper with a later job's folder.
        return Path(tempfile.mkdtemp(prefix=f"{counter:05d}-{kind}-", dir=self.server.jobs_root))

    def new_job(self, kind: str, files: dict[str, str], build: BuildResult, job: dict[str, Any] | CandidateJob,
                 job_dir: Path | None = None) -> Path:
        assert build.library is not None  # only a build that passed makes jobs
        job_dir = job_dir or self.job_dir(kind)
        (job_dir / "model.py").write_text(files["model.py"])
        shutil.copy2(build.library, job_dir / build.library.name)
        for folder in build.keep:   # beside the library, where its RUNPATH and call_env find them (a custom op's
            # vendor); links copied as links: the harness never reads what a candidate's link points at
            shutil.copytree(build.library.parent / folder, job_dir / folder, symlinks=True)
        common = dict(kind=kind, library=build.library.name, signatures=[s.to_dict() for s in build.signatures],
                      model="model.py", threads=self.config.threads, runtime=runtime_target(self.backend),
                      timer=self.backend.timer)
        if isinstance(job, dict):
            job.update(common)
        else:
            for name, value in common.items():
                setattr(job, name, value)
        write_job(job_dir, job)
        return job_dir

    def job_env(self, job_dir: Path, build: BuildResult | None) -> dict[str, str]:
        """What the job in ``job_dir`` needs in its environment to call its library (``Backend.call_env``: a
        custom op's private vendor, copied into the job's folder): only the variables the backend declares
        (``call_variables``), nothing secret-looking (``verifier.processes.declared_env``)."""
        if build is None or build.library is None:
            return {}
        return declared_env(self.backend.call_env(job_dir / build.library.name), self.backend.call_variables)

    def limits(self, background: bool = False, data_bytes: int = 0) -> JobLimits:
        """The limits of a job (a CPU-time cap from the run timeout, the address space where the backend allows
        one, the output size, the open files its runtime needs); ``background``: lower priority (not timed);
        ``data_bytes``: what the task's own tensors make the job hold and write (``task_data_bytes``): the
        file-size limit and the address space grow with it, so a task whose tensors fit in memory is never
        cut short by a limit made for smaller ones (issue #47: relu at 128x262144 failed as the kernel's fault)."""
        cfg = self.config
        data_mb = -(-data_bytes // (1 << 20))
        return JobLimits(
            cpu_seconds=int(cfg.run_timeout_s * max(1, cfg.threads) + 10),
            address_space_mb=cfg.memory_limit_mb + 4 * data_mb if self.backend.memory_limit() else None,
            file_size_mb=output_limit_mb(cfg.max_output_mb, data_bytes),
            open_files=self.needs.open_files,
            nice=BACKGROUND_NICENESS if background else 0,
        )

    def space_problem(self, data_bytes: int) -> str:
        """Why the jobs' folder cannot hold what a job of a task with ``data_bytes`` of tensors writes (its outputs,
        and their copy while they are read back), or "": the tool's limit, said with what raises it."""
        need = 2 * output_limit_mb(0, data_bytes)
        try:
            st = os.statvfs(self.server.jobs_root)
        except OSError:
            return ""
        free = (st.f_bavail * st.f_frsize) >> 20
        if need <= free:
            return ""
        return (f"the task's outputs need about {need} MiB in the jobs' folder ({self.server.jobs_root.parent}), which "
                f"has {free} MiB free: free memory there (it is /dev/shm where the machine has one) or run the task at "
                "a smaller size (--size-scale)")

    def run(self, job_dir: Path, background: bool = False, env: dict[str, str] | None = None, data_bytes: int = 0,
            ) -> tuple[JobExit, dict[str, Any] | None, dict[str, Any] | None]:
        """Run one candidate job; ``background``: it is not timed, so at lower priority (verifier.priority);
        ``env``: what its library's call needs (``job_env``); ``data_bytes``: its task's tensors (``limits``). The job
        stops at its candidate phase, before any of the candidate's code runs, and goes on only once the harness has
        counted its seccomp filters from outside (``JobHandle.check_phase``): a job with another count, or one that
        ends without stopping there and says it succeeded, left nothing that counts."""
        limits = self.limits(background, data_bytes)
        exit_, refused = self.server.run_candidate(job_dir, limits, self.config.run_timeout_s, env)
        plain_files_only(job_dir)   # the job is over; what it left is the candidate's
        result = outputs = None
        if exit_.over_disk_mb or exit_.over_tasks:   # over a limit the fork server watches: nothing it left counts
            return exit_, None, None
        if refused and refused != "ended":
            return exit_, {"ok": False, "error": f"the candidate's job {refused}"}, None
        try:
            result = json.loads((job_dir / "result.json").read_text())
        except (OSError, ValueError):
            pass
        if not isinstance(result, dict):
            result = None
        if refused == "ended" and result and result.get("ok"):
            result = {"ok": False, "error": "the candidate's job ended without stopping at its candidate phase (where "
                                            "the harness counts its filters): what it left does not count"}
        path = job_dir / "outputs.pt"
        if result and result.get("ok") and path.exists():
            if path.stat().st_size > limits.file_size_mb << 20:
                result = {"ok": False, "error": "outputs larger than the output limit"}
            else:
                import torch

                try:
                    outputs = torch.load(path, weights_only=True)  # never unpickles code
                except Exception as exc:
                    result = {"ok": False, "error": f"unreadable outputs: {type(exc).__name__}"}
        return exit_, result, outputs

    def failure(self, job_dir: Path, exit_: JobExit, result: dict[str, Any] | None) -> str:
        """Why a job produced no usable result, in one paragraph (with the device error's meaning)."""
        if result is not None and not result.get("ok"):
            # result.json is the job's own file: its text is capped like the stderr tail
            return self.explained(str(result.get("error") or "the job failed")[:MAX_JOB_TEXT], job_dir)
        where = ""
        try:
            where = f" during {(job_dir / 'progress.txt').read_text(errors='replace').strip()[:200]}"
        except OSError:
            pass
        text = f"the candidate {exit_.describe()}{where}"
        tail = _tail(job_dir / "stderr.txt")
        return self.explained(text + (f"; stderr: {tail}" if tail else ""), job_dir)

    def limit_met(self, job_dir: Path, data_bytes: int) -> tuple[str, str]:
        """After a job that produced no usable result: (why, the tool's reason or "") when it met a limit on what
        it writes, else ("", ""). Decided from the harness's side: the outputs' file at the file-size limit (sized
        from the task's own outputs, ``limits``: the job wrote more than the reference's outputs take, the
        candidate's doing), or the jobs' folder full (the tool's: nothing of the kernel's)."""
        limit_mb = output_limit_mb(self.config.max_output_mb, data_bytes)
        try:
            size = (job_dir / "outputs.pt").stat().st_size
        except OSError:
            size = 0
        if size >= limit_mb << 20:
            return (f"the job's outputs reached its file-size limit ({limit_mb} MiB, from [verifier] max_output_mb and "
                    f"the reference's outputs, {-(-data_bytes // (1 << 20))} MiB): more than outputs of the "
                    "reference's shapes and dtypes take"), ""
        try:
            st = os.statvfs(job_dir)
        except OSError:
            return "", ""
        free = (st.f_bavail * st.f_frsize) >> 20
        if size and free < FULL_MB:
            why = (f"the jobs' folder ({self.server.jobs_root.parent}) ran out of space while the job wrote its "
                   f"outputs ({size >> 20} MiB written, {free} MiB left): free memory there (it is /dev/shm where the "
                   "machine has one) or run the task at a smaller size (--size-scale)")
            return why, why
        return "", ""

    def explained(self, message: str, job_dir: Path) -> str:
        """``message`` plus what a device error in it (or in the job's stderr) means, if the backend knows, and the
        device runtime's own log of the job (CANN's error lines), where the backend reads one (``log_tail``)."""
        explain = self.backend.explain
        meaning = explain(message) or explain(_tail(job_dir / "stderr.txt", limit=4000))
        message = f"{message}\n{meaning}" if meaning and meaning not in message else message
        tail = self.backend.log_tail(job_dir)
        return f"{message}\n{tail}" if tail else message

    def window(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference, out: Outcome,
               best: tuple[dict[str, str], BuildResult] | None, case: int | None = None,
               budget_s: float | None = None, observer: Observer | None = None,
               ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Run one timing window (``verifier.window.harness``): the reference, the candidate and the best each in
        a process of its own, the clock and the comparisons here. (result, outputs) for the judge, or
        None when the candidate's side failed (``out`` says why). The best's failure drops the best."""
        try:
            return self._sides(task, files, build, ref, out, best, case, budget_s, observer)
        except SideFailed as exc:
            if exc.side != "best" or best is None:
                raise
            got = self._sides(task, files, build, ref, out, None, case, budget_s, observer)
            if got is not None:
                got[0]["best_error"] = f"the best {exc}"
            return got

    def _sides(self, task: TaskSpec, files: dict[str, str], build: BuildResult, ref: Reference, out: Outcome,
               best: tuple[dict[str, str], BuildResult] | None, case: int | None, budget_s: float | None = None,
               observer: Observer | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
        from verifier.window.methods import timing_method

        cfg = self.config
        clock = self.backend.timer
        method = timing_method(cfg.timing)     # what a sample is; a method without a flush: none on the sides either
        base = {"task": task.to_dict(), "trials": [t.to_dict() for t in ref.trials[:2]],
                "eval_mode": bool(ref.eval_mode), "timer": clock,
                "flush_bytes": self.flush_bytes if method.flush else 0,
                # a reference whose runs differ (duplicate-index scatter) keeps its trials' integer inputs
                "fixed_integers": any(m is not None for masks in ref.ignore[:2] for m in masks)}
        sides: dict[str, Side] = {}
        # the reference's side runs in the sandbox's fork server beside the others, confined as they are (issue #47:
        # in the reference server, outside bubblewrap, its side answered its channel ~0.2 ms sooner a call than a
        # candidate's running the same code: a cost the candidate paid alone); its own folder, which no job can
        # find or read (an unlistable jobs root, Landlock), and never the candidate phase's narrower filter
        ref_dir = self.job_dir("side")
        write_job(ref_dir, {**base, "kind": "side", "role": "reference", "threads": cfg.threads,
                            "runtime": runtime_target(self.backend)})
        sides["reference"] = Side("reference", ref_dir, trusted=True)
        sides["candidate"] = Side("candidate", self.new_job("side", files, build, {**base, "role": "candidate"}),
                                  trusted=False)
        if best is not None:
            best_files, best_build = best
            sides["best"] = Side("best", self.new_job("side", best_files, best_build, {**base, "role": "best"}),
                                 trusted=False)
        on_host = backend_device(self.backend.name) in ("cpu", "")
        self.server.start()
        if on_host and self.server.memory:
            # on the CPU the harness reads every timed call's outputs itself: never the side's own report
            out.fail("performance", f"{self.server.memory}; on the CPU every timed call's outputs are read by the "
                                    "harness, so there is no speed verdict without that (run the verifier as root, or "
                                    "where bubblewrap can make a user namespace)", 0.0, **{TOOL: self.server.memory})
            return None
        settings = WindowSettings(warmup=cfg.warmup_calls, max_rounds=cfg.timing_calls,
                                  budget_s=cfg.timing_budget_s if budget_s is None else budget_s,
                                  precision=cfg.timing_precision, samples=cfg.check_samples, case=case, clock=clock,
                                  on_device=not on_host,
                                  max_output_bytes=output_limit_mb(cfg.max_output_mb, ref.nbytes) << 20,
                                  method=method)
        flush = sides["reference"].flush if self.flush_bytes and on_host else None
        failure: SideFailed | None = None
        result: dict[str, Any] | None = None
        try:
            builds = {"candidate": build, "best": best[1] if best is not None else None}
            with self.lock.exclusive():
                for side in sides.values():
                    server = self.server
                    timeout = cfg.reference_timeout_s if side.trusted else cfg.run_timeout_s
                    # the reference's draw and every side's inputs hold up to MAX_SETS_BYTES of input sets
                    handle = server.submit(side.job_dir, self.limits(data_bytes=ref.nbytes + MAX_SETS_BYTES), timeout,
                                           self.job_env(side.job_dir, builds.get(side.name)))
                    # what the harness decided from how the job was started, not from the job; every side's memory
                    # is read the same way, the reference's too; only the candidates' jobs enter a candidate phase
                    side.start(handle, memory=server.memory, probe=server.probe,
                               phase=None if side.trusted else server.phase_filters())
                try:
                    # looked up at each call (tests record the windows: test_timing_method.py)
                    result = timing_window.run_window(sides, settings, flush, observer)
                except SideFailed as exc:
                    failure = exc
                    for side in sides.values():
                        if side.handle is not None:
                            side.handle.kill()
                ended = finish(sides)
            if failure is not None:
                if failure.side != "candidate" and ended["candidate"][0].tool:
                    # the sandbox worker went under every side (they share it): the tool's failure, whichever side
                    # the window reached first, never a best's failure to time again without it nor the task's
                    failure = SideFailed("candidate", str(failure), ended["candidate"][0])
                if failure.side == "candidate":
                    exit_, got = ended["candidate"]
                    if (got is not None and not got.get("ok")) or failure.exit is not None:
                        message = self.failure(sides["candidate"].job_dir, failure.exit or exit_, got)
                    else:   # it broke the protocol and was stopped
                        message = f"the candidate's timing process {failure}"
                    lost = failure.exit if failure.exit is not None and failure.exit.tool else exit_
                    out.fail("performance", message, exit_.seconds, transient=lost.status == "lost",
                             **tool_failure(lost))
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
                        if not exit_.tool:
                            raise VerifierError(f"the reference failed in the timing window: {exit_.describe()}")
                        out.fail("performance", f"the reference's timing process {exit_.describe()}", exit_.seconds,
                                 transient=True, **tool_failure(exit_))   # the sandbox worker went under it
                        return None
                    if name == "best":
                        raise SideFailed("best", exit_.tampered or "ended without its report", exit_)
                    out.fail("performance", exit_.tampered or self.failure(sides[name].job_dir, exit_, got),
                             exit_.seconds, transient=exit_.status == "lost", **tool_failure(exit_))
                    return None
                if path.stat().st_size > output_limit_mb(cfg.max_output_mb, ref.nbytes) << 20:
                    out.fail("performance", "outputs larger than the output limit")
                    return None
                import torch

                outputs[name] = torch.load(path, weights_only=True)["picks"]   # never unpickles code
            # what each side's calls returned: read by the harness, or the side's own picks (the reference's are what
            # the others' are compared with)
            checked: dict[str, list[Any]] = {}
            for name, read in result.pop("read").items():
                own = iter(outputs[name])
                checked[name] = [next(own, None) if r == "own" else r for r in read]
            expected = checked["reference"]
            tolerance = tolerance_for(task, cfg, self.backend)
            pairs = [{"expected": want, "got": got} for want, got in zip(expected, checked.get("best", []))]
            for meta, pair in samples_checked(result["checks"], pairs, ref):
                problem = pair["got"] is not None and check_call(meta, pair, ref, tolerance)
                if problem:
                    raise SideFailed("best", f"gave outputs that are not the reference's: {problem}")
            cand = ended["candidate"][1] or {}
            result.update(calls=cand.get("calls", []), forbidden=cand.get("forbidden", []),
                          signals_changed=cand.get("signals_changed", []))
            return result, {"checks": [{"expected": e, "got": g} for e, g in zip(expected, checked["candidate"])]}
        finally:
            for side in sides.values():
                side.close()
                shutil.rmtree(side.job_dir, ignore_errors=True)


FULL_MB = 64
"""Free space (MiB) under which a job's folder counts as full when its outputs could not be written."""


def output_limit_mb(configured_mb: int, data_bytes: int) -> int:
    """A job's file-size limit: ``[verifier] max_output_mb``, or more where the task's own outputs need it
    (``data_bytes``: what the job must write, ``verifier.harness.verify.job_output_bytes``), with a sixteenth
    and 1 MiB more for the file's own records."""
    return max(configured_mb, -(-(data_bytes + data_bytes // 16) // (1 << 20)) + 1)


def tool_failure(exit_: JobExit) -> dict[str, str]:
    """The details that mark a job's ending as the tool's failure (``verifier.outcome.TOOL``), or none."""
    return {TOOL: exit_.tool} if exit_.tool else {}


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
