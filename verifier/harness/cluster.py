"""Verification on a Ray cluster: one verifier actor per node, the same ``Outcome`` back.

Each node that advertises the Ray resource ``evokernel-<backend>`` (``ray start ... --resources
'{"evokernel-cuda": 1}'``) gets one ``NodeVerifier`` actor, pinned to it. The actor holds that node's
``Verifier``: its warm fork server, its build cache and its machine timing lock, so builds and
correctness trials run concurrently on a node while timings stay exclusive per node, exactly as on
one machine. A speedup is therefore always a ratio measured within one node; each Outcome says which
node (``Outcome.node``: id, host, CPU, devices, fingerprint).

What goes over the network: the task spec (the reference's source and sizes), the candidate's files
and the verify keywords out; the Outcome as a dict back. No memory, no API keys.

Faults: a node or actor lost mid-verification is forgotten and the verification is sent to another
node (never the candidate's failure; after ``MAX_LOSSES`` losses the attempt comes back verdict-less,
as an internal, transient failure). With no node able to run the backend the call waits, says so
through ``on_status``, and resumes when one joins. ``cancel()`` abandons every verification in flight.

``describe_cluster`` is what ``evokernel cluster`` lists: every node with the EvoKernel backends it
advertises, its devices, and, from the verifier actors runs keep on it, busy/idle and verifications done.

Ray is optional (``pip install 'evokernel[cluster]'``) and imported only here, on first use.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from verifier.backends.base import Backend
from verifier.config import VerifyConfig
from verifier.errors import ToolchainMissing, VerifierError
from verifier.harness.protocol import VerificationCancelled
from verifier.machine.facts import fingerprint, machine_facts
from verifier.outcome import GateResult, Outcome
from verifier.task import TaskSpec
from verifier.tolerance import Tolerance, tolerance_for

RESOURCE_PREFIX = "evokernel-"
NAMESPACE = "evokernel"
ACTOR_CONCURRENCY = 4     # verifications at once on a node (builds and trials overlap; timing is exclusive)
MAX_LOSSES = 3            # nodes one verification may lose before it comes back verdict-less
LOST_GRACE_S = 60.0       # how long a node that lost an actor is not given a new one
START_TIMEOUT_S = 300.0   # an actor's start: importing torch, warming the fork server


class ClusterUnavailable(VerifierError):
    """Ray is not installed, or the cluster cannot be reached."""


def backend_resource(backend: str) -> str:
    """The Ray resource a node advertises to say it can run ``backend``."""
    return f"{RESOURCE_PREFIX}{backend}"


def require_ray() -> ModuleType:
    """The ``ray`` module (an optional dependency, reached through this module object everywhere here)."""
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable("cluster verification needs Ray: pip install 'evokernel[cluster]'") from None
    return ray


def connect(address: str, backends: tuple[str, ...] = ("cpu",), *, num_cpus: int | None = None,
            object_store_mb: int = 256) -> bool:
    """Join (or, for ``local``, start) a Ray cluster; True when this call started Ray in this process.

    ``local`` starts a one-node Ray here that advertises ``backends``; ``auto`` joins the cluster
    started on this machine by ``ray start``; ``ray://host:port`` joins a remote head through Ray Client;
    ``host:port`` joins a head's GCS directly."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    address = (address or "").strip()
    if not address:
        raise ClusterUnavailable("no cluster address: use local, auto, ray://host:port or host:port")
    try:
        if address == "local":
            # address="local": a new instance even where `ray start` (or a test cluster) runs here
            ray.init(address="local", num_cpus=num_cpus, resources={backend_resource(b): 1 for b in backends},
                     object_store_memory=object_store_mb << 20, include_dashboard=False,
                     log_to_driver=False, configure_logging=False, namespace=NAMESPACE)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False, namespace=NAMESPACE)
    except ClusterUnavailable:
        raise
    except Exception as exc:  # ConnectionError, ValueError, RuntimeError: all say "cannot reach it"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterUnavailable(f"cannot join the Ray cluster at {address}: {first}") from None
    return True


def node_facts(backend: Backend, threads: int) -> dict[str, Any]:
    """What an Outcome records about the node that measured it: the node, and this machine's facts
    as prompts and ``doctor`` see them (less the long ISA and cache lists)."""
    ray = require_ray()

    node_id = ray.get_runtime_context().get_node_id()
    resources: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            resources = node.get("Resources", {})
    facts = {k: v for k, v in machine_facts(backend, threads).items() if k not in ("isa", "caches")}
    return {**facts, "node_id": node_id, "host": socket.gethostname(), "ip": ray.util.get_node_ip_address(),
            "cores": os.cpu_count(), "gpus": int(resources.get("GPU", 0)), "npus": int(resources.get("NPU", 0)),
            "fingerprint": fingerprint(threads, backend.name)}


class NodeVerifier:
    """The verifier on one node (a Ray actor): a ``Verifier`` plus counters for ``evokernel cluster``."""

    def __init__(self, backend: str, config: dict[str, Any], cache_dir: str | None = None):
        from verifier.harness.verify import Verifier

        cfg = VerifyConfig.model_validate(config)
        self.verifier = Verifier(backend, cfg, cache_dir=cache_dir)  # ToolchainMissing: the node can't
        self.verifier.warm_up()
        self.facts = node_facts(self.verifier.backend, cfg.threads)
        self._lock = threading.Lock()
        self.busy = 0
        self.done = 0

    def verify(self, task: dict[str, Any], files: dict[str, str], fresh: bool, extra: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.busy += 1
        try:
            out = self.verifier.verify(TaskSpec.from_dict(task), files, None, fresh=fresh, **extra)
        finally:
            with self._lock:
                self.busy -= 1
                self.done += 1
        out.node = dict(self.facts)
        return out.to_dict()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {**self.facts, "busy": self.busy, "done": self.done, "isolation": self.verifier.isolation}

    def close(self) -> None:
        self.verifier.close()


@dataclass
class _Worker:
    node_id: str
    host: str
    actor: Any
    alive: bool = True
    busy: int = 0
    done: int = 0
    facts: dict[str, Any] | None = None


class ClusterVerifier:
    """Sends verifications to verifier actors on the cluster's nodes (see the module's docstring).

    ``on_status(message, nodes, waiting)`` is called (from a verifying thread) when the set of usable
    nodes changes or when verification has to wait for one."""

    def __init__(self, address: str, backend: str = "cpu", config: VerifyConfig | None = None, *,
                 node_cache_dir: str | None = None, on_status: Callable[[str, int, bool], None] | None = None,
                 poll_s: float = 1.0, refresh_s: float = 10.0, local_cpus: int | None = None):
        from verifier.backends import get_backend

        self.address = address
        self.backend = get_backend(backend)   # names only: nothing runs on this machine
        self.config = config or VerifyConfig()
        self.node_cache_dir = node_cache_dir
        self.on_status = on_status
        self.poll_s, self.refresh_s = poll_s, refresh_s
        self._ray = require_ray()
        self._started_ray = connect(address, (self.backend.name,), num_cpus=local_cpus)
        self._lock = threading.Lock()             # the workers' state and counters (held briefly)
        self._refresh_lock = threading.Lock()     # one thread starts actors; the others find its result
        self._workers: dict[str, _Worker] = {}
        self._refused: dict[str, str] = {}       # node id -> why its actor could not start
        self._lost: dict[str, float] = {}         # node id -> when it lost an actor (the GCS may not know yet)
        self._in_flight: dict[Any, _Worker] = {}
        self._generation = 0
        self._closed = False
        self._waiting = False
        self._refreshed_at = 0.0
        self._started = 0                         # actors started (their names are unique)
        self.retries = 0                          # verifications re-sent after a lost node
        key = json.dumps([self.backend.name, self.config.model_dump(mode="json"), node_cache_dir], sort_keys=True)
        # one set of actors per verifier: a name never refers to another run's (or a dying) actor
        self._tag = hashlib.sha256(key.encode()).hexdigest()[:8] + secrets.token_hex(3)

    # -- the nodes --------------------------------------------------------------------------------

    def refresh(self) -> int:
        """Start an actor on every live node that advertises the backend and has none; forget actors
        on nodes that left. Returns the number of usable nodes."""
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        resource = backend_resource(self.backend.name)
        nodes = ray.nodes()
        alive = {n["NodeID"] for n in nodes if n.get("Alive")}
        live = {n["NodeID"]: n for n in nodes if n["NodeID"] in alive and n.get("Resources", {}).get(resource, 0) > 0}
        starting: dict[Any, _Worker] = {}
        with self._lock:
            for node_id, worker in self._workers.items():
                if node_id not in alive:     # the node left (a node's resources may show late: not that)
                    worker.alive = False
            for node_id, node in live.items():
                known = self._workers.get(node_id)
                if (known is not None and known.alive) or node_id in self._refused or self._recently_lost(node_id):
                    continue
                self._started += 1
                try:
                    actor = _remote_class().options(
                        name=f"verifier-{self.backend.name}-{self._tag}-{node_id[:16]}-{self._started}",
                        namespace=NAMESPACE, max_concurrency=ACTOR_CONCURRENCY, num_cpus=0, max_restarts=0,
                        resources={resource: 0.001},
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                    ).remote(self.backend.name, self.config.model_dump(mode="json"), self.node_cache_dir)
                except Exception:   # the node went while we asked: the next refresh looks again
                    continue
                w = _Worker(node_id, node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?"), actor)
                starting[actor.status.remote()] = w
        if starting:
            ready, _ = ray.wait(list(starting), num_returns=len(starting), timeout=START_TIMEOUT_S)
            for ref, worker in starting.items():
                if ref not in ready:           # still starting after START_TIMEOUT_S: give up on it for now
                    try:
                        ray.kill(worker.actor)
                    except Exception:
                        pass
                    continue
                try:
                    worker.facts = ray.get(ref, timeout=0)
                except Exception as exc:   # the node cannot run the backend, or died while starting
                    cause = _cause(exc)
                    if isinstance(cause, ToolchainMissing):
                        self._refused[worker.node_id] = str(cause)
                    continue
                if worker.facts is not None:
                    with self._lock:
                        self._workers[worker.node_id] = worker
        self._refreshed_at = time.monotonic()
        return len(self.nodes_usable())

    def in_flight_nodes(self) -> list[str]:
        """The node ids of the verifications in flight (one entry each)."""
        with self._lock:
            return [w.node_id for w in self._in_flight.values()]

    def count_nodes(self) -> int:
        """Live nodes that advertise the backend (their actors may not have started yet)."""
        resource = backend_resource(self.backend.name)
        return sum(1 for n in self._ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(resource, 0) > 0
                   and not self._recently_lost(n["NodeID"]))

    def _recently_lost(self, node_id: str) -> bool:
        """A node whose actor was lost is left alone for ``LOST_GRACE_S``: by then the cluster knows
        whether the node died (and drops it) or only the actor crashed (and a new one may start)."""
        at = self._lost.get(node_id)
        return at is not None and time.monotonic() - at < LOST_GRACE_S

    def nodes_usable(self) -> list[_Worker]:
        with self._lock:
            return [w for w in self._workers.values() if w.alive]

    def nodes(self) -> list[dict[str, Any]]:
        """Every node of the cluster: its backends, devices, and (where this verifier has an actor)
        busy/idle and verifications done by this verifier."""
        ray = self._ray
        out = []
        with self._lock:
            workers = dict(self._workers)
        for n in ray.nodes():
            res = n.get("Resources", {})
            w = workers.get(n["NodeID"])
            out.append({
                "node_id": n["NodeID"], "host": n.get("NodeManagerHostname") or n.get("NodeManagerAddress", "?"),
                "alive": bool(n.get("Alive")),
                "backends": sorted(k[len(RESOURCE_PREFIX):] for k in res if k.startswith(RESOURCE_PREFIX)),
                "gpus": int(res.get("GPU", 0)), "npus": int(res.get("NPU", 0)), "cpus": int(res.get("CPU", 0)),
                "busy": w.busy if w and w.alive else 0, "done": w.done if w else 0,
                "verifier": "running" if w and w.alive else self._refused.get(n["NodeID"], ""),
            })
        return out

    # -- verification -----------------------------------------------------------------------------

    def tolerance_for(self, task: TaskSpec) -> Tolerance:
        """The tolerance every node's gates hold ``task``'s outputs to: each node's verifier has this
        verifier's settings and backend (``NodeVerifier``), and ``verifier.tolerance`` depends on nothing
        else, so the prompts made here state what the nodes apply."""
        return tolerance_for(task, self.config, self.backend)

    def warm_up(self) -> None:
        """Start the actors now (otherwise the first verification does)."""
        self.refresh()

    def verify(self, task: TaskSpec, candidate: str | Path | dict[str, str],
               on_gate: Callable[[GateResult], None] | None = None, *, fresh: bool = False,
               best: dict[str, str] | None = None) -> Outcome:
        from verifier.candidate_files import candidate_hash, read_candidate

        extra = {"best": best} if best is not None else {}

        generation = self._generation
        try:
            files = candidate if isinstance(candidate, dict) else read_candidate(Path(candidate))
        except OSError as exc:
            out = Outcome.start(task.id, self.backend.name)
            return out.fail("format", f"cannot read the candidate: {exc}").finish()
        losses: list[str] = []
        while True:
            worker = self._pick(generation)
            ref = worker.actor.verify.remote(task.to_dict(), files, fresh, extra)
            with self._lock:
                self._in_flight[ref] = worker
                worker.busy += 1
            try:
                result = self._wait(ref, generation)
            except VerificationCancelled:
                raise
            except Exception as exc:
                cause = _cause(exc)
                if cause is not None:          # the verifier on the node raised: a broken task, our bug
                    raise cause from None
                with self._lock:
                    worker.alive = False
                    self._lost[worker.node_id] = time.monotonic()
                    self.retries += 1
                losses.append(worker.host)
                left = len(self.nodes_usable())
                self._say(f"lost node {worker.host} ({worker.node_id[:8]}) while verifying {task.id}; "
                          + (f"sending it to another node ({left} left)" if left else "waiting for workers"),
                          left, left == 0)
                if len(losses) >= MAX_LOSSES:
                    out = Outcome.start(task.id, self.backend.name)
                    out.candidate_hash = candidate_hash(files)
                    return out.fail("build", f"the verification was lost with {len(losses)} cluster nodes "
                                             f"({', '.join(losses)}); verify it again", transient=True,
                                    internal=True).finish()
                continue
            finally:
                with self._lock:
                    self._in_flight.pop(ref, None)
                    worker.busy -= 1
            with self._lock:
                worker.done += 1
            out = Outcome.from_dict(result)
            if on_gate is not None:
                for g in out.gates:
                    if g.status != "skipped":
                        on_gate(g)
            return out

    def _pick(self, generation: int) -> _Worker:
        """The least busy usable node's worker; waits (and says so) while there is none."""
        while True:
            self._check(generation)
            usable = self.nodes_usable()
            if not usable or time.monotonic() - self._refreshed_at > self.refresh_s:
                with self._refresh_lock:
                    usable = self.nodes_usable()
                    if not usable or time.monotonic() - self._refreshed_at > self.refresh_s:
                        before = len(usable)
                        count = self.refresh()
                        if count != before and not self._waiting and before:
                            self._say(f"{count} node(s) verify {self.backend.name} kernels", count, False)
                        usable = self.nodes_usable()
            if usable:
                if self._waiting:
                    self._waiting = False
                    self._say(f"workers are back: {len(usable)} node(s); resuming", len(usable), False)
                return min(usable, key=lambda w: (w.busy, w.done))
            if not self._waiting:
                self._waiting = True
                refused = f" ({'; '.join(sorted(set(self._refused.values())))})" if self._refused else ""
                resource = backend_resource(self.backend.name)
                self._say(f"no node of the cluster can verify {self.backend.name} kernels{refused}: waiting for "
                          f"workers (ray start --address=HEAD --resources='{{\"{resource}\": 1}}')", 0, True)
            deadline = time.monotonic() + self.poll_s
            while time.monotonic() < deadline:
                self._check(generation)
                time.sleep(0.05)
            self._refreshed_at = 0.0

    def _wait(self, ref: Any, generation: int) -> dict[str, Any]:
        ray = self._ray
        while True:
            ready, _ = ray.wait([ref], timeout=0.2)
            if ready:
                result: dict[str, Any] = ray.get(ref)   # NodeVerifier.verify's Outcome dict
                return result
            if self._closed or generation != self._generation:
                try:
                    ray.cancel(ref)
                except Exception:
                    pass
                raise VerificationCancelled("the verification was cancelled")

    def _check(self, generation: int) -> None:
        if self._closed or generation != self._generation:
            raise VerificationCancelled("the verification was cancelled")

    def _say(self, message: str, nodes: int, waiting: bool) -> None:
        if self.on_status is not None:
            try:
                self.on_status(message, nodes, waiting)
            except Exception:
                pass

    # -- stopping ----------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Abandon every verification in flight (their calls raise ``VerificationCancelled``) and cancel
        their Ray tasks; later calls run as usual."""
        self._generation += 1      # without the lock: a refresh in progress must not delay a stop
        with self._lock:
            refs = list(self._in_flight)
        for ref in refs:
            try:
                self._ray.cancel(ref)
            except Exception:
                pass

    @property
    def isolation(self) -> str:
        return f"on the nodes of the Ray cluster at {self.address}"

    def close(self) -> None:
        if self._closed:
            return
        self.cancel()
        self._closed = True
        ray = self._ray
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            if w.alive:
                try:
                    ray.get(w.actor.close.remote(), timeout=30)
                except Exception:
                    pass
            try:
                ray.kill(w.actor)
            except Exception:
                pass
        if self._started_ray:
            ray.shutdown()

    def __enter__(self) -> ClusterVerifier:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def describe_cluster(address: str, backend: str = "cpu", timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every node of the cluster at ``address``: host, backends it advertises, devices, and, from the
    verifier actors runs keep on it, busy/idle and verifications done (for ``evokernel cluster``)."""
    ray = require_ray()
    started = connect(address, (backend,))
    try:
        actors: dict[str, list[dict[str, Any]]] = {}
        refs = []
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name, namespace = (entry.get("name"), entry.get("namespace")) if isinstance(entry, dict) else (entry, None)
            if namespace == NAMESPACE and str(name).startswith("verifier-"):
                try:
                    refs.append(ray.get_actor(name, namespace=NAMESPACE).status.remote())
                except Exception:   # gone since it was listed
                    continue
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout) if refs else ([], [])
        for ref in ready:
            try:
                status = ray.get(ref, timeout=0)
            except Exception:
                continue
            actors.setdefault(status["node_id"], []).append(status)
        out = []
        for n in ray.nodes():
            res = n.get("Resources", {})
            mine = actors.get(n["NodeID"], [])
            out.append({
                "node_id": n["NodeID"], "host": n.get("NodeManagerHostname") or n.get("NodeManagerAddress", "?"),
                "address": n.get("NodeManagerAddress", ""), "alive": bool(n.get("Alive")),
                "backends": sorted(k[len(RESOURCE_PREFIX):] for k in res if k.startswith(RESOURCE_PREFIX)),
                "cpus": int(res.get("CPU", 0)), "gpus": int(res.get("GPU", 0)), "npus": int(res.get("NPU", 0)),
                "busy": sum(a["busy"] for a in mine), "done": sum(a["done"] for a in mine),
                "verifiers": len(mine), "cpu": mine[0]["cpu"] if mine else "",
            })
        return out
    finally:
        if started:
            ray.shutdown()


_REMOTE: Any = None   # ray.remote(NodeVerifier), made on first use


def _remote_class() -> Any:
    global _REMOTE
    if _REMOTE is None:
        _REMOTE = require_ray().remote(NodeVerifier)
    return _REMOTE


def _cause(exc: BaseException) -> BaseException | None:
    """The exception a remote method raised (``RayTaskError``), or None for a lost node or actor."""
    try:
        from ray.exceptions import RayActorError, RayTaskError
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, RayActorError):
        cause = getattr(exc, "error_msg", "") or ""
        creation = getattr(exc, "_actor_init_failed", False) or "ToolchainMissing" in cause
        if creation and "ToolchainMissing" in cause:
            return ToolchainMissing(cause.strip().splitlines()[-1].split(": ", 1)[-1])
        return None
    if isinstance(exc, RayTaskError):
        cause = getattr(exc, "cause", None)
        return cause if isinstance(cause, Exception) else VerifierError(str(exc).splitlines()[0])
    return None
