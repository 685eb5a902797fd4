"""Waiting on the app in pilot tests: poll a condition with a generous timeout, never a tuned sleep."""

from __future__ import annotations

import time


async def wait_for(pilot, condition, timeout: float = 120.0, what: str = "") -> None:
    """Let the app run until ``condition()`` holds (polling; generous timeout, never a tuned sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            said = ""
            try:
                said = "\n".join(list(pilot.app.main.query_one("#log").lines_written)[-8:])
            except Exception:  # noqa: BLE001 - only for the message
                pass
            raise AssertionError(f"timed out waiting for {what or condition}; the log ends:\n{said}")
        await pilot.pause(0.05)
    await pilot.pause()


def posted(messages, *types) -> list:
    """The workbench messages among ``messages`` (of ``types`` when given), in order."""
    from evotui.messages import WorkbenchMessage

    return [m for m in messages if isinstance(m, WorkbenchMessage) and (not types or isinstance(m, types))]


def save(folder, files: dict[str, str]) -> None:
    """Write a candidate's files into ``folder`` as a person's editor would."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def human_attempts(messages) -> list:
    """The ``AttemptRecorded`` events of a person's edits among the app's posted messages."""
    from evotui.messages import EngineEvent

    return [m.event for m in posted(messages, EngineEvent)
            if type(m.event).__name__ == "AttemptRecorded" and m.event.source == "human"]


def descendants(pid: int) -> list[tuple[int, str]]:
    """The processes below ``pid`` (children, grandchildren...), as (pid, command line), read from /proc."""
    import os

    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        here = frontier.pop()
        for child, parent in parents.items():
            if parent == here:
                frontier.append(child)
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        found.append((child, f.read().replace(b"\0", b" ").decode(errors="replace").strip()))
                except OSError:
                    found.append((child, "?"))
    return found
