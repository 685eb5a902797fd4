"""A task's identity in a workspace: its suite and its reference, not its id alone, and never the folder a
suite was opened from.

KernelBench names (relu, softmax, matmul) recur across suites, at other sizes and with other references:
two suites' ``relu`` are two tasks. Everything the workspace keeps per task (the memory's experiences, task
states and runs, the ``kernels/<task>/`` folder, attempt numbers, the best, the task's own history in its
prompts) is keyed by the task's **key**: its id where no other suite's task holds that id in this
workspace, else the id with its suite's name beside it (``relu@mysuite``). A key, once given, stays: the
memory keeps what each key stands for (``store.schema.TASK_CLAIM``), the first suite to use an id gets the
bare id, later ones the qualified key.

A key stands for a task file, not for the folder named on the command line: its claim keeps the file's path,
the hash of its reference as written (source and case file) and every suite name it was seen under. One file
opened through two folders (``MultiKernelBench/reference`` and ``.../reference/npukernelbench_level0``: two
suite names) is one task with one history. A task is found, in order: by its file; by its suite's name and
its id; by its reference (the same id and the same content elsewhere: another checkout of the suite); and, for
a key recorded before claims kept files, by the folder its suite's name names holding the file. Two keys an
earlier EvoKernel gave one file (its history split in two) are merged into one (``store.merging``): the
bare id keeps the history, the other key stands for it from then on (``merged_into``).

A memory written before tasks had a suite holds bare ids; its migration marks each as a legacy key with
the suite of the earliest run that listed it. The first suite that asks for such an id and is that suite
(or any suite, when no run recorded one: hand edits only) adopts it, records and all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from core.tasks import BUILTIN_ROOT, Task, suite_label, task_hash

if TYPE_CHECKING:
    from store.protocol import Memory

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_KEPT = 8   # paths and contents a claim keeps (a task seen from a few checkouts)
__all__ = ["keyed", "qualified", "resolve_key", "suite_label", "suite_of_key", "task_keys", "workspace_keys"]

Merged = Callable[[str, str, int], None]
"""``merged(source, into, moved)``: two keys of one task were merged, ``moved`` experiences moved."""


def qualified(name: str, label: str) -> str:
    """The key of task ``name`` of suite ``label`` beside another suite's task of that id: ``relu@mysuite``
    (a folder name: the suite's name with anything but letters, digits and ``_ . -`` as ``-``)."""
    return f"{name}@{_UNSAFE.sub('-', label).strip('-') or 'suite'}"


@dataclass(frozen=True)
class _Facts:
    """What identifies a task apart from its suite's name: its id there, its file and its reference."""

    name: str
    path: str = ""       # the task file, resolved ("" when only the id is known)
    content: str = ""    # core.tasks.task_hash: the reference as written


def _facts(item: Task | str) -> _Facts:
    if isinstance(item, str):
        return _Facts(item)
    return _Facts(item.name, str(Path(item.path).resolve()), task_hash(item))


def _claim(label: str, facts: _Facts, spec: str) -> dict[str, Any]:
    claim: dict[str, Any] = {"suite": label, "name": facts.name}
    if spec:
        claim["suite_spec"] = spec
    if facts.path:
        claim["paths"] = [facts.path]
    if facts.content:
        claim["contents"] = [facts.content]
    return claim


def _adoptable(held: dict[str, Any], label: str) -> bool:
    """Whether a legacy key (a bare id of an older memory) is this suite's to adopt."""
    spec = held.get("suite_spec")
    return bool(held.get("legacy")) and (not spec or suite_label(spec) == label)


def _live(claims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The claims that stand for a task of their own (not a legacy key waiting for its suite, not merged)."""
    return {k: c for k, c in claims.items() if not c.get("legacy") and "merged_into" not in c}


def _names_folder_of(label: Any, path: str) -> bool:
    """Whether suite name ``label`` (a folder's name, or ``parent/levelN``) names a folder that holds ``path``:
    how a key recorded before claims kept files is known to be this file's."""
    if not isinstance(label, str) or not label or not path:
        return False
    if label == "builtin":
        return PurePath(path).is_relative_to(BUILTIN_ROOT.resolve())
    want = tuple(label.split("/"))
    folders = PurePath(path).parent.parts
    return any(folders[i:i + len(want)] == want for i in range(len(folders) - len(want) + 1))


def _same_task(claim: dict[str, Any], label: str, facts: _Facts) -> bool:
    """Whether a live claim certainly stands for this task, so that two keys of it are merged: its file, its
    suite's name for it, or (a claim without files, from before they were kept) its suite's folder holding
    the file. The same reference elsewhere finds a key but never merges two: two suites may hold one file's
    copies on purpose."""
    if facts.path and facts.path in claim.get("paths", ()):
        return True
    if claim.get("name") != facts.name:
        return False
    if claim.get("suite") == label or [label, facts.name] in claim.get("also", []):
        return True
    return not claim.get("paths") and _names_folder_of(claim.get("suite"), facts.path)


def _known(claims: dict[str, dict[str, Any]], label: str, facts: _Facts) -> str | None:
    """The key this task already has, if any, by the most certain sign first."""
    live = _live(claims)
    if facts.path:
        for key, c in live.items():
            if facts.path in c.get("paths", ()):
                return key
    for key, c in live.items():
        if c.get("name") == facts.name and (c.get("suite") == label or [label, facts.name] in c.get("also", [])):
            return key
    for key, c in claims.items():     # a key merged into another: this suite's name for it leads there
        if "merged_into" in c and (c.get("suite"), c.get("name")) == (label, facts.name):
            return resolve_key(claims, key)
    if facts.content:
        for key, c in live.items():
            if c.get("name") == facts.name and facts.content in c.get("contents", ()):
                return key
    for key, c in live.items():
        if not c.get("paths") and c.get("name") == facts.name and _names_folder_of(c.get("suite"), facts.path):
            return key
    return None


def resolve_key(claims: dict[str, dict[str, Any]], key: str) -> str:
    """The key ``key`` stands for now: itself, or the key it was merged into (``store.merging``)."""
    seen = {key}
    while "merged_into" in (claims.get(key) or {}):
        key = str(claims[key]["merged_into"])
        if key in seen:
            break
        seen.add(key)
    return key


def _with(held: dict[str, Any], label: str, facts: _Facts, spec: str) -> dict[str, Any]:
    """``held`` knowing this sighting too: the file, the reference, this suite's name for it, its spec."""
    claim = dict(held)
    for field, value in (("paths", facts.path), ("contents", facts.content)):
        if value and value not in claim.get(field, []):
            claim[field] = [*claim.get(field, []), value][-_KEPT:]
    if (claim.get("suite"), claim.get("name")) != (label, facts.name) and \
            [label, facts.name] not in claim.get("also", []):
        claim["also"] = [*claim.get("also", []), [label, facts.name]]
    if spec:
        claim["suite_spec"] = spec
    return claim


def _bare_first(keys: Iterable[str], name: str) -> str:
    """Of keys that stand for one task, the one that keeps its history: the bare id, else the shortest."""
    return min(keys, key=lambda k: (k != name, len(k), k))


def task_keys(store: Memory | None, label: str, tasks: Iterable[Task | str], *, claim: bool = True,
              spec: str = "", merged: Merged | None = None) -> dict[str, str]:
    """Each task of suite ``label`` (a Task, or its id alone) -> its key in the workspace whose memory is
    ``store``. ``claim``: a new key is recorded, an existing one learns this sighting (the file, the suite's
    name, ``spec``: what loads the suite again), and keys an earlier EvoKernel gave the same file are merged
    (``merged`` is told); without it (a read-only look-up, ``verify``) the key is the one a claim would give.
    No memory: every id is its own key."""
    facts = [_facts(t) for t in tasks]
    if store is None:
        return {f.name: f.name for f in facts}
    claims = store.task_claims()
    keys: dict[str, str] = {}
    for f in facts:
        key = _known(claims, label, f)
        if key is None:
            key = _new_key(store, claims, label, f, spec, claim)
        elif claim:
            key = _settle(store, claims, key, label, f, spec, merged)
        keys[f.name] = key
    return keys


def _new_key(store: Memory, claims: dict[str, dict[str, Any]], label: str, facts: _Facts, spec: str,
             claim: bool) -> str:
    for key in _candidates(facts.name, label):
        held = claims.get(key)
        if held is not None and not _adoptable(held, label):
            continue
        if claim:
            wanted = _claim(label, facts, spec)
            got = store.claim_task(key, wanted, replacing=held)
            claims[key] = got
            if (got.get("suite"), got.get("name")) != (label, facts.name):
                continue   # another process took it a moment ago, for another task
        return key
    raise AssertionError("unreachable: the candidates never end")


def _settle(store: Memory, claims: dict[str, dict[str, Any]], key: str, label: str, facts: _Facts, spec: str,
            merged: Merged | None) -> str:
    """The found key's claim updated with this sighting; other keys of the same task merged into one."""
    same = [k for k, c in _live(claims).items() if k != key and _same_task(c, label, facts)]
    keep = _bare_first([key, *same], facts.name)
    for other in [k for k in [key, *same] if k != keep]:
        gone = claims[other]
        moved = store.merge_task(other, keep, {"merged_into": keep, "suite": gone.get("suite"),
                                               "name": gone.get("name")})
        kept = _with(claims[keep], str(gone.get("suite") or label), replace(facts, name=str(gone.get("name") or
                                                                                             facts.name)), "")
        for field in ("paths", "contents"):
            kept[field] = list(dict.fromkeys([*kept.get(field, []), *gone.get(field, [])]))[-_KEPT:]
        if store.update_claim(keep, kept, held=claims[keep]):
            claims[keep] = kept
        claims[other] = {"merged_into": keep, "suite": gone.get("suite"), "name": gone.get("name")}
        if merged is not None:
            merged(other, keep, moved)
    held = claims[keep]
    updated = _with(held, label, facts, spec)
    if updated != held and store.update_claim(keep, updated, held=held):
        claims[keep] = updated
    return keep


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


def suite_of_key(memory_path: Path, key: str) -> str:
    """What loads the suite of the workspace's task ``key`` (``builtin`` or its folder), read-only; "" when the
    memory has no such key or does not say (a key claimed before suites were kept)."""
    from store import Store, StoreError

    if not memory_path.exists():
        return ""
    try:
        with Store.open(memory_path, readonly=True) as store:
            claims = store.task_claims()
    except StoreError:
        return ""
    claim = claims.get(resolve_key(claims, key)) or {}
    spec = claim.get("suite_spec") or ("builtin" if claim.get("suite") == "builtin" else "")
    return str(spec) if not claim.get("legacy") else ""


def workspace_keys(memory_path: Path, label: str, tasks: Iterable[Task | str]) -> dict[str, str]:
    """``task_keys`` read-only, for a command that only reads the workspace (``verify``): no memory yet (or
    one that cannot be read) gives every id as its own key."""
    from store import Store, StoreError

    tasks = list(tasks)
    names = [t if isinstance(t, str) else t.name for t in tasks]
    if not memory_path.exists():
        return {n: n for n in names}
    try:
        with Store.open(memory_path, readonly=True) as store:
            return task_keys(store, label, tasks, claim=False)
    except StoreError:
        return {n: n for n in names}
