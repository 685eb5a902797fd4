"""Transfer: a memory's experiences to and from JSON Lines, so one memory can seed another.

The file starts with a header line ``{"type": "evokernel-memory", "format": 1, ...}``; each further
line is ``{"type": "experience", ...}`` with every field of the experience, files inline, values and
history included. Import checks the whole file before writing anything, then writes in batches of
one transaction each; already-present ids and near-duplicates are skipped, so an interrupted import
is finished by running it again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from store import experiences
from store.errors import ImportFormatError, InvalidRecord, StoreError
from store.records import Experience
from store.schema import SCHEMA_VERSION

FORMAT = 1
HEADER_TYPE = "evokernel-memory"
BATCH = 2000


def write_jsonl(path: Path, exps: Iterable[Experience], *, source: Path, filters: dict[str, str]) -> int:
    """Write ``exps`` to ``path`` (atomically) after a header naming ``source`` and the filters; how many."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    count = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as out:
            header = {"type": HEADER_TYPE, "format": FORMAT, "schema": SCHEMA_VERSION,
                      "exported_at": time.time(), "source_path": str(source), "filters": filters}
            out.write(json.dumps(header) + "\n")
            for exp in exps:
                out.write(json.dumps({"type": "experience", **exp.to_dict()}, ensure_ascii=False) + "\n")
                count += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write export {path}: {exc.strerror or exc}") from exc
    return count


def read_jsonl(path: Path) -> Iterator[Experience]:
    """The experiences of an export file, one at a time; a bad line raises ImportFormatError."""
    try:
        handle = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise StoreError(f"no such file {path}; give the path of a file made by `evokernel memory export`") from None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with handle:
        for lineno, line in _lines(handle, path):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportFormatError(f"{path}:{lineno}: not JSON ({exc.msg}); is this a memory export?") from None
            if not isinstance(data, dict):
                raise ImportFormatError(f"{path}:{lineno}: expected a JSON object; is this a memory export?")
            kind = data.pop("type", "experience")
            if kind == HEADER_TYPE:
                if int(data.get("format", 0)) > FORMAT:
                    raise ImportFormatError(
                        f"{path} is export format {data.get('format')}, newer than this evokernel reads "
                        f"({FORMAT}); upgrade evokernel")
                continue
            if kind != "experience":
                continue  # a record type of a newer version: nothing to import here
            try:
                exp = Experience.from_dict(data)
                experiences.validate(exp)
            except TypeError as exc:
                raise ImportFormatError(f"{path}:{lineno}: not an experience ({exc})") from None
            except InvalidRecord as exc:
                raise ImportFormatError(f"{path}:{lineno}: {exc}") from None
            yield exp


def _lines(handle: Iterable[str], path: Path) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        for lineno, line in enumerate(handle, 1):
            yield lineno, line
    except UnicodeDecodeError:
        raise ImportFormatError(f"{path}:{lineno + 1}: not UTF-8 text; is this a memory export?") from None


def checked_batches(path: Path) -> Iterator[list[Experience]]:
    """The experiences of ``path`` in batches to write, after a first pass has checked every line (so nothing
    is written if one is bad)."""
    for _ in read_jsonl(path):
        pass
    batch: list[Experience] = []
    for exp in read_jsonl(path):
        batch.append(exp)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
