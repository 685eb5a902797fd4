"""Verification on a simulated multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``):
real nodes (raylets), real verifier actors with their own sandboxes, real builds, a real loopback LLM.

One cluster serves the module: a head that verifies nothing (the user's machine), a CPU node, and a
node that advertises only the CUDA backend. Tests add and kill CPU nodes as they need them."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

ray = pytest.importorskip("ray")

import candidates as C  # noqa: E402
from openai_server import Reply, answer_with, task_of  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

NODE = {"num_cpus": 1, "object_store_memory": 80 << 20}
TASKS = ["relu", "sum_dim", "softmax", "scale_bias"]
GOOD = {
    "relu": C.elementwise(C.RELU),
    "sum_dim": {"model.py": C.ROWSUM_MODEL, "kernel.cpp": C.ROWSUM_REASSOCIATED},
    "softmax": {"model.py": C.SOFTMAX_SCRATCH_MODEL, "kernel.cpp": C.SOFTMAX_SCRATCH},
    "scale_bias": {"model.py": C.SCALE_BIAS_MODEL, "kernel.cpp": C.SCALE_BIAS},
}
# One verdict of each kind: wrong results, feasible, feasible, a build error.
MIXED = {
    "relu": C.elementwise(C.IDENTITY),
    "sum_dim": GOOD["sum_dim"],
    "softmax": GOOD["softmax"],
    "scale_bias": {"model.py": C.SCALE_BIAS_MODEL, "kernel.cpp": 'extern "C" void scale_bias( this is not C++'},
}

WORKSPACE_TOML = '''
suite = "{suite}"

[llm]
model = "scripted-coder"
timeout_s = 5.0
retries = 2
backoff_s = 0.05
concurrency = 4

[engine]
epsilon = 0.0
parallel_builds = 2

[verifier]
trials = 5
timing_calls = 5
timing_budget_s = 0.2
warmup_calls = 1
run_timeout_s = 20
threads = 1

[cluster]
address = "{address}"
node_cache_dir = "{cache}"
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    cpu = c.add_node(**NODE, resources={"evokernel-cpu": 1})
    cuda_only = c.add_node(**NODE, resources={"evokernel-cuda": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, namespace="evokernel")
    c.cpu, c.cuda_only = cpu, cuda_only
    c.cache = tmp_path_factory.mktemp("node-cache")
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def workspace(tmp_path, cluster, suite):
    from core.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    (root / "evokernel.toml").write_text(WORKSPACE_TOML.format(suite=_suite_dir(), address=cluster.address,
                                                               cache=cluster.cache))
    return Workspace(root)


def _suite_dir():
    from pathlib import Path

    return Path(__file__).parent.parent / "fixtures" / "suite"


def _variant(files: dict[str, str], tag: str) -> dict[str, str]:
    out = dict(files)
    out["kernel.cpp"] = files["kernel.cpp"] + f"\nstatic const char* kVariant = \"{tag}\";\n"
    return out


def _run(session, ids, iterations):
    async def go():
        try:
            return await session.run(session.tasks(ids), method="evokernel", iterations=iterations, suite=None,
                                     scale=None)
        finally:
            await session.close_async()

    return asyncio.run(go())


def _session(workspace, events):
    from core.events import EventBus
    from core.session import Session

    bus = EventBus()
    bus.subscribe(events.append)
    return Session(workspace, bus=bus)


def test_four_task_run_has_the_verdicts_of_local_verification(cluster, workspace, llm_env, verifier, suite):
    llm_env(lambda req, n: Reply(answer_with(MIXED[task_of(req)])))
    events: list = []
    with _session(workspace, events) as session:
        record = _run(session, TASKS, iterations=1)
        assert record.status == "finished"
        attempts = {t: session.store.get_many(record.progress[t].attempts) for t in TASKS}
        nodes = {n["node_id"]: n for n in session.verifier.nodes()}
    local = {t: verifier.verify(suite.get(t).spec(), MIXED[t]) for t in TASKS}
    for t in TASKS:
        (exp,) = attempts[t]
        assert (exp.outcome["feasible"], exp.outcome["failed_gate"]) == (local[t].feasible, local[t].failed_gate), t
        # the node that measured it is recorded with its machine facts, and it is a CPU node
        node = exp.outcome["node"]
        assert node["node_id"] == cluster.cpu.node_id and node["backend"] == "cpu" and node["cpu"] and node["cores"]
    assert [local[t].failed_gate for t in TASKS] == ["correctness", None, None, "build"]
    # the node without the cpu backend got no verifier and no job
    assert nodes[cluster.cuda_only.node_id]["backends"] == ["cuda"]
    assert nodes[cluster.cuda_only.node_id]["done"] == 0
    # the four attempts, and the run's final window for each of the two correct tasks (it measures afresh, #36)
    assert nodes[cluster.cpu.node_id]["done"] == 4 + 2
    said = [e for e in events if type(e).__name__ == "ClusterChanged"]
    assert said and said[0].nodes == 1 and not any(e.waiting for e in said)


def test_lost_nodes_are_retried_elsewhere_and_the_run_waits_for_workers(cluster, workspace, llm_env, unique_tags):
    """A second CPU node joins; mid-run the node verifying is killed (its job goes to the other), then
    the last CPU node is killed too: the run waits and says so, a new node joins, the run completes
    with every attempt recorded once."""
    llm_env(lambda req, n: Reply(answer_with(_variant(GOOD[task_of(req)], next(unique_tags)))))
    second = cluster.add_node(**NODE, resources={"evokernel-cpu": 1})
    cluster.wait_for_nodes()
    events: list = []
    killed: list[str] = []
    added = []
    problems: list[BaseException] = []

    with _session(workspace, events) as session:
        verifier = session.verifier
        outcome: dict = {}

        def run():
            try:
                outcome["record"] = _run(session, TASKS, iterations=2)
            except BaseException as exc:  # pragma: no cover - reported by the assertion below
                problems.append(exc)

        # The run goes on in a thread; nodes are killed and added from this one (Ray starts a node's
        # processes from the main thread only).
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        by_id = {cluster.cpu.node_id: cluster.cpu, second.node_id: second}
        while len(killed) < 2 and thread.is_alive():              # kill whichever node is verifying, twice
            busy = [n for n in verifier.in_flight_nodes() if n in by_id and n not in killed]
            if busy:
                cluster.remove_node(by_id[busy[0]], allow_graceful=False)
                killed.append(busy[0])
            time.sleep(0.02)
        while thread.is_alive():                                 # then, once the run waits, a node joins
            if any(type(e).__name__ == "ClusterChanged" and e.waiting for e in list(events)):
                added.append(cluster.add_node(**NODE, resources={"evokernel-cpu": 1}))
                break
            time.sleep(0.05)
        thread.join(timeout=400)
        record = outcome.get("record")
        assert not problems
        assert record.status == "finished"
        assert len(killed) == 2 and len(added) == 1
        assert verifier.retries >= 2
        store = session.store
        ids = [i for t in TASKS for i in record.progress[t].attempts]
        assert len(ids) == len(set(ids)) == 8                      # none lost, none counted twice
        for t in TASKS:
            assert record.progress[t].iterations_used == 2
            outcomes = [e.outcome for e in store.get_many(record.progress[t].attempts)]
            assert all(o["feasible"] for o in outcomes), [o["message"] for o in outcomes]
            assert store.get_task(t).iterations_used == 2
        in_run = [e for e in store.query(kind="draft_trace", limit=None) + store.query(kind="refine_trace", limit=None)
                  if e.run_id == record.id]
        assert len(in_run) == 8
        # the attempts finished after the last kill were measured on the node that joined
        assert any(e.outcome["node"]["node_id"] == added[0].node_id for e in in_run)
    said = [e for e in events if type(e).__name__ == "ClusterChanged"]
    assert sum("lost node" in e.message for e in said) >= 2   # one per verification in flight on a killed node
    waiting = [i for i, e in enumerate(said) if e.waiting]
    assert waiting and any(not e.waiting and "back" in e.message for e in said[waiting[0]:])


def test_cluster_command_lists_nodes_backends_and_work(cluster, workspace, capsys):
    from evotui.cli import main

    code = main(["--workspace", str(workspace.root), "cluster", "--json"])
    assert code == 0
    import json

    nodes = {n["node_id"]: n for n in json.loads(capsys.readouterr().out)}
    assert nodes[cluster.cuda_only.node_id]["backends"] == ["cuda"]
    head = cluster.head_node.node_id
    assert nodes[head]["backends"] == [] and nodes[head]["alive"]
    assert any(n["alive"] and n["backends"] == ["cpu"] for n in nodes.values())


@pytest.fixture
def unique_tags():
    import itertools

    return (str(i) for i in itertools.count())


def test_stop_cancels_the_verifications_in_flight(cluster, workspace, suite):
    """``cancel`` abandons a verification in flight: its caller hears ``VerificationCancelled``
    (the engine turns it into a stopped, resumable run) and later verifications still run."""
    from verifier import VerifyConfig
    from verifier.harness.cluster import ClusterVerifier
    from verifier.harness.protocol import VerificationCancelled

    cfg = VerifyConfig(trials=5, timing_calls=5, timing_budget_s=0.2, warmup_calls=1, run_timeout_s=20, threads=1)
    with ClusterVerifier(cluster.address, "cpu", cfg, node_cache_dir=str(cluster.cache)) as v:
        v.refresh()
        result: dict = {}

        def go():
            try:
                result["out"] = v.verify(suite.get("softmax").spec(), _variant(GOOD["softmax"], "cancel-me"),
                                         fresh=True)
            except BaseException as exc:
                result["error"] = exc

        thread = threading.Thread(target=go)
        thread.start()
        deadline = time.monotonic() + 120
        while not v.in_flight_nodes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert v.in_flight_nodes()
        v.cancel()
        thread.join(timeout=60)
        assert isinstance(result.get("error"), VerificationCancelled)
        assert not v.in_flight_nodes()
        again = v.verify(suite.get("relu").spec(), GOOD["relu"])
        assert again.feasible and again.node["backend"] == "cpu"


def test_the_prompt_states_the_tolerance_the_nodes_apply(cluster, suite):
    """Issue #38: under ``[verifier] atol/rtol`` a node's correctness gate names the tolerance it applied,
    and it is the one a prompt made beside the cluster verifier states (it used to state the backend's
    defaults: the cluster verifier had no ``tolerance_for``)."""
    import re

    from core.prompts import PromptFacts
    from verifier import VerifyConfig
    from verifier.harness.cluster import ClusterVerifier

    cfg = VerifyConfig(trials=5, timing_calls=5, timing_budget_s=0.2, warmup_calls=1, run_timeout_s=20, threads=1,
                       atol=2e-3, rtol=3e-3)
    task = suite.get("relu")
    with ClusterVerifier(cluster.address, "cpu", cfg, node_cache_dir=str(cluster.cache)) as v:
        v.refresh()
        out = v.verify(task.spec(), C.elementwise(C.IDENTITY), fresh=True)
        section = PromptFacts.from_verifier(v, "cpu").section(task)
    assert out.failed_gate == "correctness" and out.node
    applied = re.search(r"atol ([0-9.e+-]+), rtol ([0-9.e+-]+)", out.message)
    said = re.search(r"within atol=([0-9.e+-]+) and rtol=([0-9.e+-]+)", section)
    assert applied and said, (out.message, section)
    assert (float(applied[1]), float(applied[2])) == (float(said[1]), float(said[2])) == (2e-3, 3e-3)


def test_a_node_without_the_toolchain_is_refused_with_its_reason(cluster):
    """The CUDA-only node advertises the backend but has no CUDA toolchain: its actor is refused with
    the reason, no job goes anywhere, and a verification waits for workers, saying why, until stopped."""
    from verifier import TaskSpec
    from verifier.harness.cluster import ClusterVerifier
    from verifier.harness.protocol import VerificationCancelled

    said: list[tuple[str, int, bool]] = []
    with ClusterVerifier(cluster.address, "cuda", node_cache_dir=str(cluster.cache), poll_s=0.1,
                         on_status=lambda *a: said.append(a)) as v:
        assert v.count_nodes() == 1 and v.refresh() == 0
        (node,) = [n for n in v.nodes() if n["node_id"] == cluster.cuda_only.node_id]
        assert "cuda backend cannot run here" in node["verifier"]
        result: dict = {}

        def go():
            try:
                v.verify(TaskSpec("relu", "x = 1"), GOOD["relu"])
            except BaseException as exc:
                result["error"] = exc

        thread = threading.Thread(target=go)
        thread.start()
        deadline = time.monotonic() + 60
        while not any(waiting for _, _, waiting in said) and time.monotonic() < deadline:
            time.sleep(0.05)
        v.cancel()
        thread.join(timeout=30)
        assert isinstance(result.get("error"), VerificationCancelled)
    message, nodes, waiting = next(s for s in said if s[2])
    assert nodes == 0 and "waiting for workers" in message and "cuda backend cannot run here" in message
