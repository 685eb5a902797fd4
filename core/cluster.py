"""The engine's side of cluster verification: a ``ClusterVerifier`` configured from the workspace,
whose news (nodes joining or lost, waiting for workers) becomes ``ClusterChanged`` events on the bus."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from core import events as ev
from core.config import Config
from core.workspace import Workspace

if TYPE_CHECKING:
    from verifier import ClusterVerifier


class StatusRelay:
    """Turns a verifier's ``on_status`` calls (from verifying threads) into events emitted in the
    engine's loop thread, as every subscriber expects; before a loop is known, emitted directly."""

    def __init__(self, bus: ev.EventBus, address: str):
        self.bus = bus
        self.address = address
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, message: str, nodes: int, waiting: bool) -> None:
        event = ev.ClusterChanged(self.address, nodes, waiting, message)
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self.bus.emit, event)
                return
        self.bus.emit(event)


def open_cluster_verifier(workspace: Workspace, config: Config, relay: StatusRelay) -> ClusterVerifier:
    """A ``ClusterVerifier`` for the configured backend and cluster; says how many nodes can verify."""
    from verifier import ClusterVerifier

    address = config.cluster.address or "local"
    cache = config.cluster.node_cache_dir
    if cache is None and address == "local" and workspace.exists():
        cache = str(workspace.cache_dir)   # the nodes are this machine: keep the workspace's cache
    verifier = ClusterVerifier(address, config.backend, config.verifier, node_cache_dir=cache, on_status=relay)
    count = verifier.count_nodes()
    relay(f"cluster {address}: {count} node(s) can verify {config.backend} kernels", count, False)
    return verifier


def cluster_nodes(address: str, backend: str = "cpu") -> list[dict[str, Any]]:
    """The nodes of the cluster at ``address`` (for ``evokernel cluster``); see ``describe_cluster``."""
    from verifier import describe_cluster

    return describe_cluster(address, backend)
