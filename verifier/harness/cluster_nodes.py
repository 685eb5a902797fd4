"""What ``evokernel cluster`` lists: every node of a Ray cluster with the EvoKernel backends it
advertises, its devices, and, from the verifier actors runs keep on it, busy/idle and verifications
done (see verifier.harness.cluster)."""

from __future__ import annotations

from typing import Any

from verifier.harness.cluster import NAMESPACE, RESOURCE_PREFIX, connect, require_ray


def describe_cluster(address: str, backend: str = "cpu", timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every node of the cluster at ``address``: host, backends it advertises, devices, and, from the
    verifier actors runs keep on it, busy/idle and verifications done (for ``evokernel cluster``)."""
    ray = require_ray()
    started = connect(address, (backend,))
    try:
        actors: dict[str, list[dict]] = {}
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
