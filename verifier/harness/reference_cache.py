"""Computing reference results (``verifier.reference.Reference``: the task's outputs at every trial, with their
rounding noise, the places two runs disagree, the second shapes the reference accepts) and its latency, in a clean
process; the timings cached on disk, the next verification's reference made ahead (``Spares``).

Reference jobs run in a fork server of their own (PyTorch imported once; each job a fresh forked
child with the same rlimits and seccomp filter as candidates), separate from the candidates'
sandbox so no candidate can ever see a reference's outputs.

Outputs are computed for a fresh set of seeds drawn from the operating system (see verifier.inputs),
one set per verification (Verifier._live_reference), so no candidate can know the inputs it is
checked on; the next verification's is made ahead, in the background (``Spares``). The rounding-noise
measurement (float64) is kept per task as a ratio to the output's RMS. Latency is cached by the task's content and the
machine's fingerprint (CPU, threads, torch), so a changed machine or thread count re-measures. The
cached latency is only ever shown (``evokernel tasks --time``): the performance gate times the
reference again beside every candidate, and divides only by that. Candidates never see the
reference's files: they live in the verifier's cache folder, hidden from the sandbox.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from verifier.backends import Backend, runtime_target
from verifier.errors import NondeterministicReference, ReferenceFailed
from verifier.inputs import INPUTS_VERSION, Trial
from verifier.jobs import ReferenceJob, ReferenceResult, ShapeSearch, read_result, write_job
from verifier.machine.facts import fingerprint
from verifier.machine.lock import MachineLock
from verifier.priority import BACKGROUND_NICENESS
from verifier.reference import Reference
from verifier.sandbox.client import ForkServer, JobLimits
from verifier.task import TaskSpec

REFERENCE_FORMAT = 4  # 4: noise ratios kept per case of a multi-case task


class ReferenceCache:
    """Computes references on demand in a subprocess; caches their timings on disk."""

    def __init__(self, cache_dir: Path, backend: Backend, lock: MachineLock, *, threads: int, timing: dict[str, Any],
                 timeout: float, server: ForkServer):
        self.root = Path(cache_dir) / "reference"
        self.root.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.threads = threads
        self.timing = timing
        self.timeout = timeout
        self._lock = lock
        self._server = server
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _machine(self) -> str:
        """What reference timings depend on besides the CPU: on a device backend, the device itself."""
        if self.backend.device == "cpu":
            return self.backend.name
        return f"{self.backend.name}|{self.backend.toolchain().device}"

    def _timing_key(self, task: TaskSpec) -> str:
        text = json.dumps([REFERENCE_FORMAT, INPUTS_VERSION, task.key, fingerprint(self.threads, self._machine()),
                           self.timing], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def get(self, task: TaskSpec, trials: list[Trial], shapes: list[ShapeSearch], *, want_timing: bool = True
            ) -> Reference:
        """The reference at ``trials`` and the second shapes of ``shapes``, with its timing (cached per
        machine). Outputs are not cached here: the seeds are new each time (see Verifier._live_reference)."""
        timing_key = self._timing_key(task)
        bandwidth_key = "bandwidth:" + fingerprint(self.threads, self.backend.name)
        with self._guard:
            lock = self._locks.setdefault(timing_key, threading.Lock())
        with lock:  # one timing of a task at a time; the outputs of concurrent verifications differ anyway
            timing = self._load_timing(timing_key) if want_timing else None
            if not (isinstance(timing, dict) and isinstance(timing.get("median_ms"), (int, float))):
                timing = None       # absent, or written by another version: time again
            bandwidth = self._load_timing(bandwidth_key)
            if not isinstance(bandwidth, (int, float)):
                bandwidth = None
            need_timing = want_timing and timing is None
            ref = self._compute(task, trials, shapes, need_timing,
                                want_bandwidth=bandwidth is None and self.backend.device == "cpu")
            if need_timing:
                timing = ref.timing
                self._store_timing(timing_key, timing)
            if ref.bandwidth_gbps:
                bandwidth = ref.bandwidth_gbps
                self._store_timing(bandwidth_key, bandwidth)
        ref.timing = timing if want_timing else None
        ref.bandwidth_gbps = bandwidth
        return ref

    # -- disk ---------------------------------------------------------------------------------

    def _noise_key(self, task: TaskSpec) -> str:
        import torch

        text = json.dumps([REFERENCE_FORMAT, INPUTS_VERSION, task.key, torch.__version__, self.threads,
                           self._machine()])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def _load_json(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads((self.root / name).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _update_json(self, name: str, key: str, value: dict[str, Any]) -> None:
        """Merge ``value`` into ``name``'s entry ``key`` (under a file lock: other verifiers share it)."""
        path = self.root / name
        with open(self.root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._load_json(name)
            found = data.get(key)
            entry = found if isinstance(found, dict) else {}
            data[key] = {**entry, **value}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)

    def _load_timing(self, key: str) -> Any:
        try:
            return json.loads((self.root / "timing.json").read_text()).get(key)
        except (OSError, ValueError):
            return None

    def _store_timing(self, key: str, value: Any) -> None:
        path = self.root / "timing.json"
        with open(self.root / "timing.json.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = {}
            data[key] = value
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=0))
            os.replace(tmp, path)

    # -- compute ------------------------------------------------------------------------------

    def _compute(self, task: TaskSpec, trials: list[Trial], shapes: list[ShapeSearch], want_timing: bool,
                 want_bandwidth: bool) -> Reference:
        self._server.jobs_root.mkdir(parents=True, exist_ok=True)
        job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=self._server.jobs_root))
        try:
            noise_key = self._noise_key(task)
            job = ReferenceJob(task=task, trials=list(trials), shapes=list(shapes), threads=self.threads,
                               runtime=runtime_target(self.backend), want_outputs=True, want_timing=want_timing,
                               want_bandwidth=want_bandwidth, timing=self.timing, machine_lock=str(self._lock.path),
                               noise_ratios=self._load_json("noise.json").get(noise_key, {}))
            write_job(job_dir, job)
            # A job that times runs at normal priority throughout (it cannot raise its priority back
            # after its outputs); one that only computes outputs runs lower (verifier.priority).
            timed = want_timing or want_bandwidth
            limits = JobLimits(cpu_seconds=int(self.timeout * max(1, self.threads) + 10), address_space_mb=None,
                               file_size_mb=4096, nice=0 if timed else BACKGROUND_NICENESS)
            with self._lock.shared():  # starting the server imports torch: never beside a timing
                self._server.start()   # (the job takes the lock itself, by path)
            exit_ = self._server.run(job_dir, limits, self.timeout)
            status, fields = read_result(job_dir)
            if status is None:
                try:
                    last = (job_dir / "stderr.txt").read_text(errors="replace").strip().splitlines()[-1]
                except (OSError, IndexError):
                    last = ""
                said = exit_.describe()
                hint = ("; a GPU-sized task may need smaller sizes: --size-scale auto (or a factor)"
                        if "SIGKILL" in said or "memory" in said else "")
                raise ReferenceFailed(f"the reference of task {task.id} {said}" + (f": {last}" if last else "")
                                      + hint) from None
            if not status.ok:
                if status.stage == "task":
                    raise NondeterministicReference(status.error)
                raise ReferenceFailed(f"the reference of task {task.id} failed: {status.error}")
            found = ReferenceResult.from_dict(fields)
            if found.noise_ratios:
                self._update_json("noise.json", noise_key, found.noise_ratios)
            import torch

            payload = torch.load(job_dir / "outputs.pt", weights_only=True)
            return Reference(found.trials, payload["trials"], payload["noise"], found.alt_rejected, found.timing,
                             found.bandwidth_gbps, payload.get("ignore") or [[] for _ in found.trials],
                             found.dropped, found.eval_mode, found.nondeterministic)
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)


MAX_SPARES = 4
"""Tasks that may each have a reference made ahead for their next verification (``Spares``)."""
MAX_SPARE_BYTES = 512 << 20
"""The reference outputs those spares may hold in memory, in all."""


class Spares:
    """A reference made ahead for each task's next verification, at most one per task.

    After a verification of a task its next reference is made in the background (reference outputs at
    background priority, under the machine lock's shared side, so never beside a timing), while the
    engine waits on the model: it spares the next verification of the task the reference's run (1.3-1.5 s
    of a fresh L1 verification here). Each is one verification's alone: a spare is handed out once, its
    seeds came from the operating system when it was made, and no candidate's job ever saw them (issue
    #24: nothing one candidate learnt can be replayed by the next). At most ``MAX_SPARES`` tasks have
    one, holding at most ``MAX_SPARE_BYTES`` of outputs in all."""

    def __init__(self, make: Callable[[TaskSpec], Reference], pool: ThreadPoolExecutor):
        self._make, self._pool = make, pool
        self._spares: dict[str, Future[Reference]] = {}
        self._bytes: dict[str, int] = {}    # what each task's last reference held (its outputs)
        self._lock = threading.Lock()

    def take(self, task: TaskSpec) -> Future[Reference]:
        """This verification's reference: the one made ahead for ``task`` when there is one (and it did
        not fail), else one made now."""
        with self._lock:
            spare = self._spares.pop(task.key, None)
            self._bytes.pop(task.key, None)
        if spare is not None and not (spare.done() and spare.exception() is not None):
            return spare
        return self._pool.submit(self._make, task)

    def keep(self, task: TaskSpec, unused: Future[Reference] | None = None, nbytes: int = 0) -> None:
        """After a verification of ``task``: keep its reference when no job used it (``unused``: the build
        failed), else make the next one now, in the background; ``nbytes``: what the reference just used
        held."""
        with self._lock:
            if task.key in self._spares or len(self._spares) >= MAX_SPARES:
                return
            if unused is None and sum(self._bytes.values()) + nbytes > MAX_SPARE_BYTES:
                return
            try:
                self._spares[task.key] = unused or self._pool.submit(self._make, task)
                self._bytes[task.key] = nbytes
            except RuntimeError:   # the verifier is closing
                pass

    def get(self, key: str) -> Future[Reference] | None:
        """The reference made ahead for the task whose key is ``key``, if any (without taking it)."""
        with self._lock:
            return self._spares.get(key)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None
