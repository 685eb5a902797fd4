"""Regenerate the README's screenshots (docs/workbench.svg, docs/memory.svg) from a real run.

A workspace on the small test suite, a scripted loopback OpenAI-compatible server that first
answers with a kernel that does not compile, then a wrong one, then correct ones; real builds in
the sandbox. The app runs headless at 150x44, starts the run with `r` (and `y` to its question),
and saves the screens. ``DOCS_DEBUG=1`` prints what it waits for.

    .venv/bin/python docs/screenshots.py
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fixtures"), str(ROOT / "bench")]

from tui_latency import TOML, correct_kernels  # noqa: E402


def script():
    import candidates as C
    from openai_server import Reply, answer_with, task_of

    good = correct_kernels()
    asked = collections.Counter()

    def answer(request, n):
        task = task_of(request)
        asked[task] += 1
        files = dict(good[task])
        if asked[task] == 1 and task in ("relu", "softmax"):
            files["kernel.cpp"] = files["kernel.cpp"].replace(";", "", 1)          # does not compile
        elif asked[task] == 2 and task == "relu":
            files = C.elementwise(C.IDENTITY)                                       # wrong
        files["kernel.cpp"] += f"\nstatic const int kVariant{n} = {n};\n"
        return Reply(answer_with(files, note="Here is the kernel."))

    return answer


async def main() -> None:
    from core.workspace import Workspace
    from evotui.app import FINISHED_STATE, make_app

    from openai_server import ScriptedLLM

    root = Path(tempfile.mkdtemp(prefix="evokernel-docs-")) / "kernels-lab"
    root.mkdir(parents=True)
    (root / "evokernel.toml").write_text(TOML.format(suite=ROOT / "tests" / "fixtures" / "suite", iterations=4))
    Workspace(root).init()
    with ScriptedLLM(script(), model="qwen3-coder") as llm:
        os.environ.update(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="sk-docs", EVOKERNEL_MODEL="qwen3-coder")
        app = make_app(root)
        async with app.run_test(size=(150, 44)) as pilot:
            while not app.main.tasks:
                await pilot.pause(0.1)
                if os.environ.get("DOCS_DEBUG"):
                    print("waiting for tasks", flush=True)
            await pilot.press("r")       # with no task marked, a question: every task of the suite?
            await pilot.pause(1.0)
            await pilot.press("y")
            while app.run_status.state not in FINISHED_STATE.values():
                await pilot.pause(0.2)
                if os.environ.get("DOCS_DEBUG"):
                    print("state", app.run_status.state, flush=True)
            table = app.main.query_one("#tasks")
            table.move_cursor(row=table.get_row_index("relu"))
            while not (app.main.task_id == "relu" and app.main.shown_exp is not None and app.main.drawn):
                await pilot.pause(0.1)
            await pilot.press("d")
            await pilot.pause(0.5)
            app.save_screenshot(str(ROOT / "docs" / "workbench.svg"))
            await pilot.press("m")
            await pilot.pause(1.0)
            app.screen.query_one("#sort").value = "q1"
            await pilot.pause(1.0)
            app.save_screenshot(str(ROOT / "docs" / "memory.svg"))
            await pilot.press("q")
    print("wrote docs/workbench.svg and docs/memory.svg")


if __name__ == "__main__":
    asyncio.run(main())
