"""How long quitting the workbench takes, from `q` to the app's exit: idle (the baseline), and with a save
being verified, in its build or in its timing window (a long window: 120 s of timing budget), each in a fresh
workspace (nothing cached: the first verification also counts the reference and measures the ceilings).
Prints each time and its ratio to the idle quit of the same run (#37: quitting takes at most 2 s).

    .venv/bin/python bench/quit_latency.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from pilot_workspace import fresh_workspace


async def quit_time(phase: str) -> float:
    from evotui.app import make_app
    from evotui.messages import EngineEvent

    import candidates as C
    from waiting import posted, save, wait_for

    root = fresh_workspace("evokernel-quit-", timing_calls=1000000, timing_budget_s=120)
    app = make_app(root)
    messages: list = []
    async with app.run_test(size=(150, 44), message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        if phase != "idle":
            save(root / "kernels" / "relu", C.elementwise(C.RELU + f"\nstatic const int kQuit{time.time_ns()} = 1;\n"))

            def reached() -> bool:
                events = [m.event for m in posted(messages, EngineEvent)]
                if phase == "window":
                    return any(type(e).__name__ == "GateChecked" and e.gate == "correctness" and e.status == "passed"
                               for e in events)
                return any(type(e).__name__ == "EditDetected" for e in events)

            await wait_for(pilot, reached, timeout=300, what=phase)
        await pilot.pause(0.5 if phase == "window" else 0.05)
        started = time.perf_counter()
        await pilot.press("q")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    for run in range(args.runs):
        idle = asyncio.run(quit_time("idle"))
        for phase in ("build", "window"):
            took = asyncio.run(quit_time(phase))
            print(f"run {run + 1}: quit during the save's {phase}: {took:.2f} s; idle {idle:.2f} s; "
                  f"ratio {took / idle:.1f}x", flush=True)


if __name__ == "__main__":
    main()
