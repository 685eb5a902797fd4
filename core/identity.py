"""A task's identity in a workspace: its suite and its reference, not its id alone.

KernelBench names (relu, softmax, matmul) recur across suites, at other sizes and with other references:
two suites' ``relu`` are two tasks. Everything the workspace keeps per task (the memory's experiences, task
states and runs, the ``kernels/<task>/`` folder, attempt numbers, the best, the task's own history in its
prompts) is keyed by the task's **key**: its id where no other suite's task holds that id in this
workspace, else the id with its suite's name beside it (``relu@mysuite``). A key, once given, stays: the
memory keeps what each key stands for (``store.schema.TASK_CLAIM``), the first suite to use an id gets the
bare id, later ones the qualified key.

A memory written before tasks had a suite holds bare ids; its migration marks each as a legacy key with
the suite of the earliest run that listed it. The first suite that asks for such an id and is that suite
(or any suite, when no run recorded one: hand edits only) adopts it, records and all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.tasks import Task, suite_label

if TYPE_CHECKING:
    from store.protocol import Memory

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
__all__ = ["keyed", "qualified", "suite_label", "task_keys", "workspace_keys"]


def qualified(name: str, label: str) -> str:
    """The key of task ``name`` of suite ``label`` beside another suite's task of that id: ``relu@mysuite``
    (a folder name: the suite's name with anything but letters, digits and ``_ . -`` as ``-``)."""
    return f"{name}@{_UNSAFE.sub('-', label).strip('-') or 'suite'}"


def _claim(label: str, name: str) -> dict[str, Any]:
    return {"suite": label, "name": name}


def _adoptable(held: dict[str, Any], label: str) -> bool:
    """Whether a legacy key (a bare id of an older memory) is this suite's to adopt."""
    spec = held.get("suite_spec")
    return bool(held.get("legacy")) and (not spec or suite_label(spec) == label)


def task_keys(store: Memory | None, label: str, names: Iterable[str], *, claim: bool = True) -> dict[str, str]:
    """Each task id of suite ``label`` -> its key in the workspace whose memory is ``store``. ``claim``: a new
    key is recorded (the workbench, a run); without it (a read-only look-up, ``verify``) the key is the one a
    claim would give. No memory: every id is its own key."""
    names = list(names)
    if store is None:
        return {n: n for n in names}
    claims = store.task_claims()
    mine = {(c.get("suite"), c.get("name")): k for k, c in claims.items() if not c.get("legacy")}
    keys: dict[str, str] = {}
    for name in names:
        if (label, name) in mine:
            keys[name] = mine[(label, name)]
            continue
        wanted = _claim(label, name)
        for key in _candidates(name, label):
            held = claims.get(key)
            if held is not None and not (held == wanted or _adoptable(held, label)):
                continue
            if claim:
                got = store.claim_task(key, wanted, replacing=held if held is not None and held != wanted else None)
                claims[key] = got
                if got != wanted:
                    continue   # another process took it a moment ago
            keys[name] = key
            break
    return keys


def _candidates(name: str, label: str) -> Iterable[str]:
    """The keys task ``name`` of suite ``label`` may take, in order: its id, then with its suite beside it."""
    yield name
    base = qualified(name, label)
    yield base
    n = 2
    while True:   # two suites whose names differ only in characters a folder name cannot hold
        yield f"{base}-{n}"
        n += 1


def keyed(tasks: Iterable[Task], keys: dict[str, str]) -> list[Task]:
    """The tasks under their workspace keys (``Task.id``), each keeping its id in its suite (``Task.name``)."""
    return [replace(t, id=keys.get(t.name, t.id), name=t.name) for t in tasks]


def workspace_keys(memory_path: Path, label: str, names: Iterable[str]) -> dict[str, str]:
    """``task_keys`` read-only, for a command that only reads the workspace (``verify``): no memory yet (or
    one that cannot be read) gives every id as its own key."""
    from store import Store, StoreError

    names = list(names)
    if not memory_path.exists():
        return {n: n for n in names}
    try:
        with Store.open(memory_path, readonly=True) as store:
            return task_keys(store, label, names, claim=False)
    except StoreError:
        return {n: n for n in names}
