"""``evokernel cluster``: the nodes of the Ray cluster verification runs on."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cluster", help="list the nodes of the Ray cluster: backends, devices, busy/idle, verifications")
    p.add_argument("address", nargs="?", default=None,
                   help='the cluster: "auto" (the one `ray start` runs here), ray://host:port, host:port or local '
                        "(default: [cluster] address in evokernel.toml, else auto)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.cluster import cluster_nodes
    from core.workspace import Workspace

    ws = Workspace.at(args.workspace)
    config = ws.config()
    address = args.address or config.cluster.address or "auto"
    nodes = cluster_nodes(address, config.backend)
    if args.json:
        print(json.dumps(nodes, indent=2))
        return 0
    from evotui.table_output import Column, print_table

    rows = [(n["node_id"][:12], n["host"], n["address"], "alive" if n["alive"] else "dead",
             ",".join(n["backends"]) or "-", _devices(n),
             ("busy" if n["busy"] else "idle") if n["verifiers"] else "-", n["done"]) for n in nodes]
    print_table([Column("node"), Column("host"), Column("address"), Column("state"), Column("backends"),
                 Column("devices"), Column("verifier"), Column("verified", "right")], rows,
                title=f"cluster {address}: {len(nodes)} node(s)")
    return 0


def _devices(node: dict[str, Any]) -> str:
    parts = [f"{node['cpus']} CPU"]
    if node["gpus"]:
        parts.append(f"{node['gpus']} GPU")
    if node["npus"]:
        parts.append(f"{node['npus']} NPU")
    return ", ".join(parts)
