"""With verification on a Ray cluster, the header names the cluster and its node count, and says
when the run is waiting for workers; the event log says what changed."""

from __future__ import annotations

from waiting import wait_for

SIZE = (170, 44)


async def test_header_shows_the_cluster_its_nodes_and_waiting(workspace):
    from core import events as ev
    from evotui.app import make_app
    from evotui.messages import EngineEvent

    app = make_app(workspace.root, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        header = lambda: str(app.main.query_one("RunHeader").render())  # noqa: E731
        assert "cluster" not in header()          # in-process verification: nothing to show
        app.post_message(EngineEvent(ev.ClusterChanged("auto", 2, False, "cluster auto: 2 node(s) can verify cpu kernels")))
        await wait_for(pilot, lambda: "cluster auto · 2 nodes" in header(), what="the node count")
        assert "waiting" not in header()
        app.post_message(EngineEvent(ev.ClusterChanged("auto", 0, True, "no node of the cluster can verify cpu kernels")))
        await wait_for(pilot, lambda: "cluster auto · 0 nodes · waiting for workers" in header(), what="waiting")
        app.post_message(EngineEvent(ev.ClusterChanged("auto", 1, False, "workers are back: 1 node(s); resuming")))
        await wait_for(pilot, lambda: "cluster auto · 1 node ·" in header() and "waiting" not in header(),
                       what="resuming")
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert "no node of the cluster can verify cpu kernels" in log and "workers are back" in log
        await pilot.press("q")
