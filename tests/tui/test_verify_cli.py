"""Issue 27, item 9: `evokernel verify kernels/<task>` takes the task from the folder's name, and a
verdict the workbench already recorded for the same files (a refinement, timed beside the best it was
made against) is given at once by the CLI, not measured again."""

from __future__ import annotations

import json

import pytest
from test_cli_daily import evokernel

import candidates as C

pytestmark = pytest.mark.slow


def relu(tag: int) -> dict[str, str]:
    files = C.elementwise(C.RELU)
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const int kVersion{tag} = {tag};\n"}


def record_two_edits(workspace) -> tuple:
    """A draft and a refinement of it, through the workbench's own path (Engine.record_human)."""
    import asyncio

    from core.session import Session

    session = Session(workspace)
    task = session.tasks(["relu"])[0]

    async def go():
        try:
            draft, _ = await session.engine.record_human(task, relu(1), None)
            refine, out = await session.engine.record_human(task, relu(2), draft.id)
            return draft, refine, out
        finally:
            await session.close_async()

    with session:
        return asyncio.run(go())


def test_the_task_comes_from_the_folder_and_a_recorded_refinement_is_reused(workspace):
    draft, refine, out = record_two_edits(workspace)
    assert refine.stage == "refine" and out.vs_best, "the refinement was timed beside the best"
    folder = workspace.kernels_dir / "relu"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in relu(2).items():
        (folder / name).write_text(text)

    done = evokernel("verify", "kernels/relu", "--json", cwd=workspace.root)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["task"] == "relu" and data["from_cache"], data.get("from_cache")
    assert data["candidate_hash"] == out.candidate_hash and data["vs_best"] == out.vs_best

    # a folder whose name is no task: one line that says to give --task
    other = workspace.root / "scratch"
    other.mkdir()
    for name, text in relu(3).items():
        (other / name).write_text(text)
    refused = evokernel("verify", "scratch", cwd=workspace.root)
    assert refused.returncode == 2 and "--task" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_verify_fresh_then_verify_show_the_same_verdict(workspace):
    """The finding (#51, 4): `verify --fresh`'s new verdict was not the one a later `verify` showed: the fresh one
    was timed without the best the workbench timed those files beside (recorded apart), and the next plain
    `verify` found the workbench's older window. Now both time it beside that best: the fresh verdict replaces
    the recorded one."""
    draft, refine, out = record_two_edits(workspace)
    folder = workspace.kernels_dir / "relu"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in relu(2).items():
        (folder / name).write_text(text)
    fresh = evokernel("verify", "kernels/relu", "--fresh", "--json", cwd=workspace.root)
    assert fresh.returncode == 0, fresh.stderr
    measured = json.loads(fresh.stdout)
    assert not measured["from_cache"] and measured["vs_best"], "timed beside the best, as the workbench did"
    assert measured["created_at"] > out.created_at
    later = json.loads(evokernel("verify", "kernels/relu", "--json", cwd=workspace.root).stdout)
    assert later["from_cache"] and later["created_at"] == measured["created_at"]
    assert (later["latency_ms"], later["vs_best"]) == (measured["latency_ms"], measured["vs_best"])
