"""Reference results: the task's outputs at every trial (with their rounding noise and the second
shape the reference accepts) and its latency, computed in a clean process and cached.

Reference jobs run in a fork server of their own (PyTorch imported once; each job a fresh forked
child with the same rlimits and seccomp filter as candidates), separate from the candidates'
sandbox so no candidate can ever see a reference's outputs.

Outputs are cached by the task's content, the trial plan and the torch version; latency by that and
the machine's fingerprint (CPU, threads, torch), so a changed machine or thread count re-measures.
The cached latency is only ever shown (``evokernel tasks --time``): the performance gate times the
reference again beside every candidate, and divides only by that.
Candidates never see this cache: it lives in the verifier's cache folder, hidden from the sandbox.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.errors import VerifierError
from verifier.inputs import INPUTS_VERSION, Trial
from verifier.machine_lock import MachineLock
from verifier.machine import fingerprint
from verifier.sandbox import ForkServer, JobLimits
from verifier.task import TaskSpec

REFERENCE_FORMAT = 2


class ReferenceFailed(VerifierError):
    """The task's own reference could not run: the task is broken, not the candidate."""


@dataclass
class Reference:
    trials: list[Trial]                       # base trials, then the second-shape trial if any
    outputs: list[dict[str, Any]]             # per trial: {"structure", "leaves"}
    noise: list[list[float]]                  # per trial, per output leaf
    alt_rejected: list[str] = field(default_factory=list)
    timing: dict[str, Any] | None = None
    bandwidth_gbps: float | None = None

    @property
    def nbytes(self) -> int:
        return sum(leaf.numel() * leaf.element_size() for trial in self.outputs for leaf in trial["leaves"])


class ReferenceCache:
    """Computes references on demand in a subprocess and caches them on disk and in memory."""

    def __init__(self, cache_dir: Path, backend, lock: MachineLock, *, threads: int, timing: dict,
                 timeout: float, server: ForkServer, memory_bytes: int = 512 << 20):
        self.root = Path(cache_dir) / "reference"
        self.root.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.threads = threads
        self.timing = timing
        self.timeout = timeout
        self._lock = lock
        self._server = server
        self._memory: OrderedDict[str, Reference] = OrderedDict()
        self._memory_bytes = memory_bytes  # references kept in memory, least recently used dropped first
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _outputs_key(self, task: TaskSpec, trials: list[Trial], alt_candidates: list[dict]) -> str:
        import torch

        text = json.dumps([REFERENCE_FORMAT, INPUTS_VERSION, task.key, [t.to_dict() for t in trials], alt_candidates,
                           torch.__version__, self.backend.name], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def _machine(self) -> str:
        """What reference timings depend on besides the CPU: on a device backend, the device itself."""
        if self.backend.device == "cpu":
            return self.backend.name
        return f"{self.backend.name}|{self.backend.toolchain().device}"

    def _timing_key(self, task: TaskSpec) -> str:
        text = json.dumps([REFERENCE_FORMAT, INPUTS_VERSION, task.key, fingerprint(self.threads, self._machine()), self.timing],
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def get(self, task: TaskSpec, trials: list[Trial], alt_candidates: list[dict], *, want_timing: bool = True) -> Reference:
        key = self._outputs_key(task, trials, alt_candidates)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            ref = self._memory.get(key) or self._load(key)
            timing_key = self._timing_key(task)
            bandwidth_key = "bandwidth:" + fingerprint(self.threads, self.backend.name)
            timing = self._load_timing(timing_key) if want_timing else None
            if not (isinstance(timing, dict) and isinstance(timing.get("median_ms"), (int, float))):
                timing = None       # absent, or written by another version: time again
            bandwidth = self._load_timing(bandwidth_key)
            if not isinstance(bandwidth, (int, float)):
                bandwidth = None
            need_outputs = ref is None
            need_timing = want_timing and timing is None
            need_bandwidth = bandwidth is None and self.backend.device == "cpu"  # for the plausibility flags
            if need_outputs or need_timing or need_bandwidth:
                fresh = self._compute(task, trials, alt_candidates, key, need_outputs, need_timing,
                                      want_bandwidth=need_bandwidth)
                if need_outputs:
                    ref = fresh
                if need_timing:
                    timing = fresh.timing
                    self._store_timing(timing_key, timing)
                if fresh.bandwidth_gbps:
                    bandwidth = fresh.bandwidth_gbps
                    self._store_timing(bandwidth_key, bandwidth)
            assert ref is not None
            if timing:
                ref.timing = timing
            ref.bandwidth_gbps = bandwidth
            self._memory[key] = ref
            self._memory.move_to_end(key)
            while len(self._memory) > 1 and sum(r.nbytes for r in self._memory.values()) > self._memory_bytes:
                self._memory.popitem(last=False)
            return ref

    # -- disk ---------------------------------------------------------------------------------

    def _load(self, key: str) -> Reference | None:
        folder = self.root / key
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except (OSError, ValueError):
            return None
        import torch

        try:
            payload = torch.load(folder / "outputs.pt", weights_only=True)
        except Exception:
            return None
        return Reference([Trial.from_dict(t) for t in meta["trials"]], payload["trials"], payload["noise"],
                         meta.get("alt_rejected", []))

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

    def _compute(self, task: TaskSpec, trials: list[Trial], alt_candidates: list[dict], key: str,
                 want_outputs: bool, want_timing: bool, want_bandwidth: bool) -> Reference:
        self._server.jobs_root.mkdir(parents=True, exist_ok=True)
        job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=self._server.jobs_root))
        try:
            job = {"kind": "reference", "task": task.to_dict(), "trials": [t.to_dict() for t in trials],
                   "alt_candidates": alt_candidates, "threads": self.threads, "device": self.backend.device,
                   "want_outputs": want_outputs, "want_timing": want_timing, "want_bandwidth": want_bandwidth,
                   "timing": self.timing, "machine_lock": str(self._lock.path)}
            (job_dir / "job.json").write_text(json.dumps(job))
            limits = JobLimits(cpu_seconds=int(self.timeout * max(1, self.threads) + 10), address_space_mb=None,
                               file_size_mb=4096)
            exit_ = self._server.run(job_dir, limits, self.timeout)
            try:
                result = json.loads((job_dir / "result.json").read_text())
            except (OSError, ValueError):
                try:
                    last = (job_dir / "stderr.txt").read_text(errors="replace").strip().splitlines()[-1]
                except (OSError, IndexError):
                    last = ""
                raise ReferenceFailed(f"the reference of task {task.id} {exit_.describe()}"
                                      + (f": {last}" if last else "")) from None
            if not result.get("ok"):
                raise ReferenceFailed(f"the reference of task {task.id} failed: {result.get('error')}")
            ref = Reference(list(trials), [], [], result.get("alt_rejected", []), result.get("timing"),
                            result.get("bandwidth_gbps"))
            if want_outputs:
                import torch

                payload = torch.load(job_dir / "outputs.pt", weights_only=True)
                if result.get("alt"):
                    ref.trials.append(Trial.from_dict(result["alt"]))
                ref.outputs, ref.noise = payload["trials"], payload["noise"]
                folder = self.root / key
                staged = Path(tempfile.mkdtemp(prefix="staged-", dir=self.root))
                shutil.move(str(job_dir / "outputs.pt"), staged / "outputs.pt")
                (staged / "meta.json").write_text(json.dumps(
                    {"trials": [t.to_dict() for t in ref.trials], "alt_rejected": ref.alt_rejected, "task": task.id}))
                shutil.rmtree(folder, ignore_errors=True)
                os.replace(staged, folder)
            return ref
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
