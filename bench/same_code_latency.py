"""How fast the workbench answers a save of files already judged ("the same code as #N", no verification), against
the full verification of the first save of the same kernel in the same run (#37: under 0.5 s). Since #48 only the
same bytes get a recorded verdict (a comment can change what the compiler reads: ``__LINE__``), so each save here
writes the first version's files again, after a comment-only version (verified, a repeat of it). Times from the
write to the save heard, to the answer (the engine's event) and to the log line drawn.

    .venv/bin/python bench/same_code_latency.py [--saves N]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from pilot_workspace import fresh_workspace


async def measure(saves: int) -> None:
    from evotui.app import make_app
    from evotui.messages import EngineEvent

    import candidates as C
    from waiting import posted, save, wait_for

    root = fresh_workspace("evokernel-same-code-", timing_calls=5, timing_budget_s=0.2)
    app = make_app(root)
    messages: list = []
    folder = root / "kernels" / "relu"

    def recorded() -> list:
        return [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "AttemptRecorded"]

    async with app.run_test(size=(150, 44), message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        files = C.elementwise(C.RELU)
        started = time.time()
        save(folder, files)
        await wait_for(pilot, recorded, timeout=300, what="the first verdict")
        full = recorded()[-1].at - started
        log = app.main.query_one("#log")
        for k in range(saves):
            await pilot.pause(1.0)
            count = len(recorded())
            started = time.time()
            save(folder, {**files, "kernel.cpp": f"// a comment, take {k}\n" + files["kernel.cpp"]})
            await wait_for(pilot, lambda n=count: len(recorded()) > n, timeout=300, what="the comment's verdict")
            await pilot.pause(1.0)
            count = len(recorded())
            started = time.time()
            save(folder, files)
            await wait_for(pilot, lambda n=count: len(recorded()) > n, timeout=60, what="the answer")
            await wait_for(pilot, lambda: log.drawn, what="the log line")
            drawn = time.time() - started
            heard = [m.event for m in posted(messages, EngineEvent) if type(m.event).__name__ == "EditDetected"][-1]
            answer = recorded()[-1]
            print(f"the first version saved again ({k + 1}): heard {heard.at - started:.2f} s, answered {answer.at - started:.2f} s "
                  f"({'the same code' if answer.duplicate else 'verified'}), drawn by {drawn:.2f} s; the first "
                  f"save's full verification {full:.2f} s: {full / max(answer.at - started, 1e-3):.0f}x", flush=True)
        await pilot.press("q")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=3)
    asyncio.run(measure(parser.parse_args().saves))


if __name__ == "__main__":
    main()
