"""The verifier: a candidate in, an ``Outcome`` out, gate by gate.

    format -> anti_hack -> build -> correctness -> performance

The build runs while the reference (cached after the first time) and the sandbox start; the
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
import random
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from verifier.backends import Backend, get_backend
from verifier.build import build_candidate, default_cache_dir
from verifier.compare import Agreement, compare_outputs
from verifier.config import VerifyConfig
from verifier.errors import ToolchainMissing, VerifierError
from verifier.gates.antihack import check_candidate
from verifier.gates.format import check_format
from verifier.inputs import trial_plan
from verifier.machine import fingerprint, last_level_cache_bytes
from verifier.outcome import GateResult, Outcome
from verifier.machine_lock import MachineLock
from verifier.reference import Reference, ReferenceCache
from verifier.roofline import RooflineMeter
from verifier.sandbox import ForkServer, JobExit, JobLimits, scrubbed_env
from verifier.task import TaskSpec, alt_shape_candidates

MAX_READ_BYTES = 1024 * 1024
OUTCOME_FORMAT = 2  # bump when the gates change what they decide


def read_candidate(folder: Path) -> dict[str, str]:
    """The candidate's files (top level of ``folder``; hidden files, caches and ``best/`` skipped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"candidate folder {folder} does not exist")
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.startswith(".") and path.suffix not in (".pyc", ".so", ".o"):
            data = path.read_bytes()[: MAX_READ_BYTES + 1]
            files[path.name] = data.decode("utf-8", errors="replace")
    return files


def candidate_hash(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]


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
        self.jobs_root = Path(tempfile.mkdtemp(prefix="evokernel-jobs-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None))
        self._job_counter = 0
        self._job_lock = threading.Lock()
        cfg = self.config
        # Builds and correctness runs hold it shared, timings exclusive (see verifier.machine_lock).
        self._lock = MachineLock(self.cache_dir / "timing.lock")
        self._timing = {"warmup": cfg.warmup_calls, "max_calls": cfg.timing_calls, "budget_s": cfg.timing_budget_s,
                        "flush_bytes": 2 * last_level_cache_bytes() if cfg.flush_cache else 0}
        # Device backends spawn a fresh interpreter per job (see verifier.forkserver): the server itself
        # then imports nothing heavy and never touches the device.
        spawn = getattr(self.backend, "process_model", "fork") == "spawn"
        device_modules = ["torch_npu"] if self.backend.device == "npu" else []
        preload = [] if spawn else ["torch", "torch._dynamo", "verifier.worker", *device_modules]
        # What candidates never see, in the run sandbox and in the build sandbox alike.
        self.hidden_paths = [str(self.cache_dir), *(hidden_paths or [])]
        self.server = ForkServer(
            self.jobs_root,
            env=scrubbed_env({**self.backend.worker_env(), "OMP_NUM_THREADS": str(cfg.threads)}, home=str(self.jobs_root)),
            preload=preload, use_bwrap=cfg.use_bwrap,
            hidden=list(self.hidden_paths), devices=self.backend.sandbox_devices(),
            spawn=spawn, job_preload=device_modules,
        )
        # References are the user's own trusted code: their fork server runs outside the sandbox, in
        # the cache folder the sandbox hides, so no candidate can see a reference's outputs.
        reference_jobs = self.cache_dir / "reference" / f"jobs-{os.getpid()}-{id(self):x}"
        reference_jobs.mkdir(parents=True, exist_ok=True)
        self.reference_server = ForkServer(
            reference_jobs, env=scrubbed_env({**self.backend.worker_env(), "OMP_NUM_THREADS": str(cfg.threads)},
                                             home=str(reference_jobs)),
            preload=preload, use_bwrap=False, hidden=[], devices=self.backend.sandbox_devices(),
            spawn=spawn, job_preload=device_modules, confine=False,
        )
        self.references = ReferenceCache(self.cache_dir, self.backend, self._lock, threads=cfg.threads,
                                         timing=self._timing, timeout=cfg.reference_timeout_s,
                                         server=self.reference_server)
        self.roofline = RooflineMeter(self.cache_dir, self.backend, cfg.threads, self._lock)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="verifier")
        self._warm: Future | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Start the sandbox in the background (it takes a second or two to import torch)."""
        if self._warm is None:
            self._warm = self._pool.submit(self.server.start)

    def close(self) -> None:
        self.server.close()
        self.reference_server.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.jobs_root, ignore_errors=True)
        shutil.rmtree(self.reference_server.jobs_root, ignore_errors=True)

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """How candidates are isolated here, in words (for ``doctor`` and the README)."""
        return self.server.isolation

    # -- verification ---------------------------------------------------------------------------

    def tolerance_for(self, task: TaskSpec):
        def tolerance(dtype: str) -> tuple[float, float]:
            atol, rtol = self.backend.tolerance(dtype)
            atol = task.atol if task.atol is not None else self.config.atol if self.config.atol is not None else atol
            rtol = task.rtol if task.rtol is not None else self.config.rtol if self.config.rtol is not None else rtol
            return atol, rtol
        return tolerance

    def reference(self, task: TaskSpec, want_timing: bool = True) -> Reference:
        alt = alt_shape_candidates(task.source, task.size_overrides) if self.config.second_shape else []
        return self.references.get(task, trial_plan(self.config.trials), alt, want_timing=want_timing)

    def verify(self, task: TaskSpec, candidate: str | Path | dict[str, str],
               on_gate: Callable[[GateResult], None] | None = None, *, fresh: bool = False) -> Outcome:
        """Run every gate; always returns an Outcome (raises only for a broken task or our own bugs).
        ``on_gate`` is called (from this thread) as each gate gets its verdict. A byte-identical
        candidate verified before on this machine with the same settings returns its recorded Outcome
        (``from_cache``) unless ``fresh``: every gate is deterministic but the timing, which was
        measured here."""
        started = time.perf_counter()
        out = Outcome.start(task.id, self.backend.name)
        out.size_overrides, out.threads, out.created_at = dict(task.size_overrides), self.config.threads, time.time()
        try:
            files = candidate if isinstance(candidate, dict) else read_candidate(Path(candidate))
        except OSError as exc:
            return out.fail("format", f"cannot read the candidate: {exc}").finish()
        out.candidate_hash = candidate_hash(files)
        key = self._outcome_key(task, out.candidate_hash)
        if not fresh:
            cached = self._cached_outcome(key)
            if cached is not None:
                for g in cached.gates:
                    if on_gate is not None and g.status != "skipped":
                        on_gate(g)
                cached.from_cache, cached.seconds = True, time.perf_counter() - started
                return cached
        if on_gate is not None:
            out.listener = on_gate
        try:
            self._run_gates(task, files, out)
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
        if not any(g.details.get("transient") for g in out.gates):
            self._remember_outcome(key, out)
        return out

    # -- the outcome cache ----------------------------------------------------------------------

    def _outcome_key(self, task: TaskSpec, cand_hash: str) -> str:
        text = json.dumps([OUTCOME_FORMAT, cand_hash, task.key, task.atol, task.rtol, self.backend.build_key(),
                           self.config.model_dump(mode="json"), fingerprint(self.config.threads, self.backend.name)],
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

    def _run_gates(self, task: TaskSpec, files: dict[str, str], out: Outcome) -> None:
        backend, cfg = self.backend, self.config
        t = time.perf_counter()
        problem = check_format(files, backend.source_suffixes, backend.header_suffixes)
        if problem:
            out.fail("format", problem, time.perf_counter() - t)
            return
        out.pass_gate("format", seconds=time.perf_counter() - t)

        t = time.perf_counter()
        problem = check_candidate(files, backend.source_suffixes, backend.header_suffixes, backend.name) if cfg.antihack else None
        if problem:
            out.fail("anti_hack", problem, time.perf_counter() - t)
            return
        out.pass_gate("anti_hack", "static rules passed" if cfg.antihack else "static rules off",
                      seconds=time.perf_counter() - t)

        # The reference and the sandbox get ready while the compiler works.
        reference = self._pool.submit(self.reference, task)
        self._pool.submit(self.roofline.profile, task)  # counted once per task, cached (verifier.roofline)
        self.warm_up()
        t = time.perf_counter()
        with self._lock.shared():  # compilers stop while something is being timed
            build = build_candidate(backend, files, self.cache_dir, timeout=cfg.build_timeout_s, sandbox=cfg.use_bwrap,
                                    hidden=self.hidden_paths)
        out.build_cached = build.cached
        if not build.ok:
            out.fail("build", f"the build failed:\n{build.log}", time.perf_counter() - t)
            return
        out.pass_gate("build", "cached" if build.cached else f"built in {build.seconds:.2f} s",
                      seconds=time.perf_counter() - t, warnings=build.log)

        ref = reference.result()
        if self._warm is not None:
            self._warm.result()
        t = time.perf_counter()
        if not self._correctness(task, files, build, ref, out):
            out.gate("correctness").seconds = out.gate("correctness").seconds or time.perf_counter() - t
            return
        out.gate("correctness").seconds = time.perf_counter() - t
        t = time.perf_counter()
        self._performance(task, files, build, ref, out)
        out.gate("performance").seconds = time.perf_counter() - t

    # -- jobs -----------------------------------------------------------------------------------

    def _new_job(self, kind: str, files: dict[str, str], build, job: dict) -> Path:
        with self._job_lock:
            self._job_counter += 1
            counter = self._job_counter
        # A fresh folder with an unpredictable name (mkdtemp never reuses an existing one): a job cannot
        # pre-create, find or tamper with a later job's folder.
        job_dir = Path(tempfile.mkdtemp(prefix=f"{counter:05d}-{kind}-", dir=self.jobs_root))
        (job_dir / "model.py").write_text(files["model.py"])
        shutil.copy2(build.library, job_dir / build.library.name)
        job.update(kind=kind, library=build.library.name, signatures=[s.to_dict() for s in build.signatures],
                   model="model.py", threads=self.config.threads, device=self.backend.device,
                   timer=getattr(self.backend, "timer", "wall"))
        (job_dir / "job.json").write_text(json.dumps(job))
        return job_dir

    def _limits(self) -> JobLimits:
        cfg = self.config
        return JobLimits(
            cpu_seconds=int(cfg.run_timeout_s * max(1, cfg.threads) + 10),
            address_space_mb=cfg.memory_limit_mb if self.backend.memory_limit() else None,
            file_size_mb=cfg.max_output_mb,
        )

    def _run_job(self, job_dir: Path) -> tuple[JobExit, dict | None, dict | None]:
        exit_ = self.server.run(job_dir, self._limits(), self.config.run_timeout_s)
        # The job is over; what it left is the candidate's. Only plain files are read back: a symlink
        # (stderr.txt -> ~/.ssh/id_rsa) would have the harness read a host file into the verdict, a
        # FIFO would block it for ever. The folder itself must still be the one made for the job.
        try:
            fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:  # replaced (by a symlink?): drop the name, read nothing
            fd = None
            try:
                if job_dir.is_symlink():
                    job_dir.unlink()
            except OSError:
                pass
        if fd is not None:
            try:
                for entry in os.scandir(fd):
                    try:
                        if entry.is_symlink() or not (entry.is_file(follow_symlinks=False)
                                                      or entry.is_dir(follow_symlinks=False)):
                            os.unlink(entry.name, dir_fd=fd)
                    except OSError:
                        pass
            except OSError:
                pass
            finally:
                os.close(fd)
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

    def _job_failure(self, job_dir: Path, exit_: JobExit, result: dict | None) -> str:
        """Why a job produced no usable result, in one paragraph (with the device error's meaning)."""
        if result is not None and not result.get("ok"):
            return self._explained(str(result.get("error") or "the job failed"), job_dir)
        where = ""
        try:
            where = f" during {(job_dir / 'progress.txt').read_text().strip()}"
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

    def _correctness(self, task: TaskSpec, files: dict, build, ref: Reference, out: Outcome) -> bool:
        job_dir = self._new_job("candidate", files, build, {"task": task.to_dict(),
                                                           "trials": [tr.to_dict() for tr in ref.trials]})
        try:
            with self._lock.shared():  # trials stop while something is being timed
                exit_, result, outputs = self._run_job(job_dir)
            if not result or not result.get("ok") or outputs is None:
                out.fail("correctness", self._job_failure(job_dir, exit_, result), exit_.seconds,
                         transient=exit_.status in ("timeout", "lost"))
                return False
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        tolerance = self.tolerance_for(task)
        max_abs = max_rel = 0.0
        for i, (trial, report) in enumerate(zip(ref.trials, result["trials"])):
            what = f"trial {i + 1} ({trial.describe()})"
            if report["forbidden_ops"]:
                _fail_pytorch_compute(out, report["forbidden_ops"], "forward ran PyTorch compute ({ops}): the "
                                                                    "kernel must do the work")
                return False
            if not report["calls"]:
                out.fail("anti_hack", "forward never called the kernel library: the result must come from your kernels")
                return False
            if report.get("escaped_stream"):
                out.fail("anti_hack", f"{what}: output {report['escaped_stream'][0]} changed after the current stream "
                                      "had finished: the kernel's work ran outside the stream passed to the launcher "
                                      "(a side stream or the per-thread default stream); launch on that stream")
                return False
            if report["inputs_changed"]:
                out.fail("correctness", f"{what}: forward modified input {report['inputs_changed'][0]} in place; "
                                        "inputs must be left unchanged")
                return False
            verdict = compare_outputs(ref.outputs[i], outputs["trials"][i], ref.noise[i], tolerance, what=what)
            if not isinstance(verdict, Agreement):
                out.max_abs_error, out.max_rel_error = verdict.max_abs_error, verdict.max_rel_error
                out.fail("correctness", verdict.message, trial=i)
                return False
            max_abs, max_rel = max(max_abs, verdict.max_abs_error), max(max_rel, verdict.max_rel_error)
        out.max_abs_error, out.max_rel_error = max_abs, max_rel
        shape_note = "" if any(t.overrides for t in ref.trials) else " (no second shape: the reference accepts none)"
        out.pass_gate("correctness", f"{len(ref.trials)} trials agree; max abs error {max_abs:.2e}{shape_note}",
                      trials=len(ref.trials))
        return True

    def _performance(self, task: TaskSpec, files: dict, build, ref: Reference, out: Outcome) -> None:
        base = [t for t in ref.trials if not t.overrides][:3]  # two timed, a third for the re-check
        checks = sorted(random.SystemRandom().sample(range(5), 2))  # spot-checked timed calls
        job = {"task": task.to_dict(), "trials": [t.to_dict() for t in base], "timing": self._timing, "checks": checks}
        job_dir = self._new_job("perf", files, build, job)
        try:
            with self._lock.exclusive():
                exit_, result, outputs = self._run_job(job_dir)
            if not result or not result.get("ok") or outputs is None:
                out.fail("performance", self._job_failure(job_dir, exit_, result), exit_.seconds,
                         transient=exit_.status in ("timeout", "lost"))
                return
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        recheck = result.get("recheck") or {}
        if recheck.get("forbidden_ops"):
            _fail_pytorch_compute(out, recheck["forbidden_ops"], "after repeated calls, forward ran PyTorch compute "
                                                                 "({ops}): the kernel must do the work on every call")
            out.gate("performance").status = "failed"
            return
        if "calls" in recheck and not recheck["calls"]:
            out.fail("anti_hack", "after repeated calls, forward no longer called the kernel library: every call's "
                                  "result must come from your kernels")
            out.gate("performance").status = "failed"
            return
        tolerance = self.tolerance_for(task)
        for check, got in zip(result["checks"], outputs["checks"]):
            trial = check["trial"]
            n = check["call"] - result["timing"]["calls"]
            what = (f"timed call {check['call'] + 1}" if n < 0 else "a call after timing" if n == 0
                    else "a call after timing on new inputs") + f" ({base[trial].describe()})"
            verdict = compare_outputs(ref.outputs[trial], got, ref.noise[trial], tolerance, what=what)
            if not isinstance(verdict, Agreement):
                out.fail("correctness", f"results changed under repeated calls: {verdict.message}. Every call must "
                                        "compute from its inputs: no results kept from earlier calls")
                out.gate("performance").status = "failed"
                return
        timing = result["timing"]
        out.latency_ms, out.latency_spread_ms = timing["median_ms"], timing["spread_ms"]
        if ref.timing:
            out.reference_ms = ref.timing["median_ms"]
            out.speedup = out.reference_ms / max(out.latency_ms, 1e-9)
        self._flag(ref, outputs, out, timing)
        message = f"{out.latency_ms:.3f} ms (IQR {out.latency_spread_ms:.3f}, {timing['calls']} calls)"
        if out.speedup is not None:
            message += f"; reference {out.reference_ms:.3f} ms; speedup {out.speedup:.2f}x"
        out.roofline = self.roofline.point(task, out.latency_ms)   # #12: the roofline, never a failure
        if out.roofline:
            message += f"; {out.roofline['summary']}"
        out.pass_gate("performance", message, timing=timing, reference_timing=ref.timing)

    def _flag(self, ref: Reference, outputs: dict, out: Outcome, timing: dict | None = None) -> None:
        if timing and timing.get("clock") == "events" and timing.get("wall_median_ms") is not None:
            gap = timing["wall_median_ms"] - timing["median_ms"]
            if gap > max(0.1, timing["median_ms"]):
                out.flags.append(f"device events saw {timing['median_ms']:.3f} ms but each call took "
                                 f"{timing['wall_median_ms']:.3f} ms until the device was idle: work may run outside "
                                 "the current stream; review before trusting")
        if out.speedup is not None and out.speedup > self.config.implausible_speedup:
            out.flags.append(f"speedup {out.speedup:.1f}x exceeds {self.config.implausible_speedup:g}x: review before trusting")
        if ref.bandwidth_gbps and out.latency_ms:
            nbytes = sum(leaf.numel() * leaf.element_size() for leaf in ref.outputs[0]["leaves"])
            nbytes += ref.timing.get("input_bytes", 0) if ref.timing else 0
            floor_ms = nbytes / (ref.bandwidth_gbps * 1e9) * 1e3
            if out.latency_ms < 0.5 * floor_ms:
                out.flags.append(f"{out.latency_ms:.3f} ms is below the memory-bandwidth floor {floor_ms:.3f} ms "
                                 f"for writing the outputs: review before trusting")


def _fail_pytorch_compute(out: Outcome, ops: dict[str, int], message: str) -> None:
    """Fail the anti-hack gate for the aten ops the op trace saw (``{ops}`` in ``message`` lists them)."""
    listed = ", ".join(f"aten.{k} x{v}" for k, v in sorted(ops.items()))
    out.fail("anti_hack", message.format(ops=listed))
    out.gate("anti_hack").details["dynamic"] = ops


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-limit:]
