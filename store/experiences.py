"""Experiences in LMDB: how one is written across its tables, read back whole, filtered and sorted.

An experience is split three ways so that the hot paths stay small: its immutable ``exp`` body (files
as content addresses), its ``row`` (what lists, filters and sorts read) and its ``hist`` (what grows
with use). Every function here works inside a transaction the caller holds.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, cast

from store.codec import blob_digest, decode_blob, encode_blob, pack, seq_key, seq_of, text_key, unpack
from store.errors import InvalidRecord
from store.fingerprint import fingerprint
from store.records import KINDS, SOURCES, STAGES, Experience, new_id
from store.schema import Db, Tables, Txn

SORTS = ("recency", "q1", "q2", "reward", "adoptions")
FILTERS = ("task", "kind", "stage", "backend", "source")
_ID = re.compile(r"^[0-9A-Za-z_.:-]{1,96}$")
# Fields kept in the immutable body.
BODY = ("task_id", "kind", "backend", "stage", "title", "text", "outcome", "reward", "parent_id", "source",
        "model", "run_id", "iteration", "signature", "created_at", "extra", "code_id")


def validate(exp: Experience) -> None:
    """Raise InvalidRecord if ``exp`` has a field the store cannot hold."""
    if not exp.task_id or "\x00" in exp.task_id or len(exp.task_id.encode()) > 200:
        raise InvalidRecord(f"experience task id {exp.task_id!r} must be 1-200 bytes without NUL")
    if exp.kind not in KINDS:
        raise InvalidRecord(f"unknown experience kind {exp.kind!r}; valid kinds: {', '.join(KINDS)}")
    if exp.stage not in STAGES:
        raise InvalidRecord(f"unknown stage {exp.stage!r}; valid stages: draft, refine or empty")
    if exp.source not in SOURCES:
        raise InvalidRecord(f"unknown source {exp.source!r}; valid sources: {', '.join(SOURCES)}")
    if exp.id and not _ID.match(exp.id):
        raise InvalidRecord(f"experience id {exp.id!r} must be 1-96 letters, digits or _.:-")
    if exp.parent_id is not None and not _ID.match(exp.parent_id):
        raise InvalidRecord(f"parent id {exp.parent_id!r} must be 1-96 letters, digits or _.:-")
    numbers = (exp.q1, exp.q2, exp.n1, exp.n2, exp.adoptions, exp.created_at, exp.updated_at)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
        raise InvalidRecord(f"values, counts and timestamps of experience {exp.id or exp.title!r} must be numbers")
    if not isinstance(exp.files, dict) or not all(isinstance(v, str) for v in exp.files.values()):
        raise InvalidRecord(f"files of experience {exp.id or exp.title!r} must map names to text")
    name = exp.id or exp.task_id
    if not all(math.isfinite(x) for x in numbers):
        raise InvalidRecord(f"values, counts and timestamps of experience {name!r} must be finite numbers")
    if not all(0 <= t < 1e11 for t in (exp.created_at, exp.updated_at)):
        raise InvalidRecord(f"timestamps of experience {name!r} must be seconds since 1970")
    if exp.reward is not None and not (isinstance(exp.reward, (int, float)) and not isinstance(exp.reward, bool)
                                       and math.isfinite(exp.reward)):
        raise InvalidRecord(f"reward of experience {name!r} must be a finite number or null")
    for field_name, kind in (("title", str), ("text", str), ("backend", str), ("model", str),
                             ("outcome", (dict, type(None))),
                             ("signature", dict), ("extra", dict), ("q_history", list), ("adopted_by", list),
                             ("retrieved_by", dict), ("cited_by", dict), ("run_id", (str, type(None))),
                             ("iteration", (int, type(None)))):
        if not isinstance(getattr(exp, field_name), kind):
            raise InvalidRecord(f"field {field_name} of experience {name!r} has the wrong type "
                                f"({type(getattr(exp, field_name)).__name__})")
    if not all(isinstance(h, dict) for h in exp.q_history):
        raise InvalidRecord(f"q_history of experience {name!r} must be a list of objects")
    if exp.outcome is not None and not isinstance(exp.outcome.get("feasible", False), bool):
        raise InvalidRecord(f"outcome.feasible of experience {name!r} must be true or false")


def fingerprint_of(exp: Experience) -> bytes:
    """The near-duplicate key of ``exp``."""
    return fingerprint(exp.task_id, exp.kind, exp.backend, exp.files, exp.title, exp.text, exp.code_id)


def _row(exp: Experience, seq: int) -> dict[str, Any]:
    return {
        "task": exp.task_id, "kind": exp.kind, "stage": exp.stage, "backend": exp.backend,
        "source": exp.source, "created": exp.created_at, "updated": exp.updated_at, "reward": exp.reward,
        "q1": float(exp.q1), "q2": float(exp.q2), "n1": int(exp.n1), "n2": int(exp.n2),
        "adoptions": int(exp.adoptions), "parent": exp.parent_id, "seq": seq,
    }


def insert(txn: Txn, t: Tables, exp: Experience, dedupe: bool = True) -> tuple[str, bool]:
    """Write ``exp`` unless it (same id) or, with ``dedupe``, a near-duplicate is stored: (id, created).

    An empty id is assigned; zero timestamps become now. Values, counts and history are kept as given. Without
    ``dedupe`` the record is its own (an attempt without code: two answers that gave none are two attempts) and is
    never found as the near-duplicate of another.
    """
    validate(exp)
    if exp.id and txn.get(exp.id.encode(), db=t.exp) is not None:
        return exp.id, False
    fp = fingerprint_of(exp)
    dup = txn.get(fp, db=t.dedup) if dedupe else None
    if dup is not None:
        return bytes(dup).decode(), False
    now = time.time()
    exp_id = exp.id or new_id()
    created = exp.created_at or now
    updated = exp.updated_at or created
    key = exp_id.encode()

    digests = {}
    for name, content in exp.files.items():
        digest = blob_digest(content)
        digests[name] = digest
        raw = bytes.fromhex(digest)
        if txn.get(raw, db=t.blob) is None:
            txn.put(raw, encode_blob(content), db=t.blob)

    last = txn.get(b"seq", db=t.meta)
    seq = (unpack(last) if last is not None else 0) + 1
    txn.put(b"seq", pack(seq), db=t.meta)

    body = {name: getattr(exp, name) for name in BODY}
    body["created_at"] = created
    body["files"] = digests
    txn.put(key, pack(body), db=t.exp)
    exp.id, exp.created_at, exp.updated_at = exp_id, created, updated
    txn.put(key, pack(_row(exp, seq)), db=t.row)
    hist = {"q_history": list(exp.q_history), "adopted_by": list(exp.adopted_by),
            "retrieved_by": dict(exp.retrieved_by), "cited_by": dict(exp.cited_by)}
    txn.put(key, pack(hist), db=t.hist)
    txn.put(text_key(exp.task_id) + b"\x00" + key, pack(exp.parent_id), db=t.bytask)
    if exp.parent_id:
        txn.put(exp.parent_id.encode() + b"\x00" + key, b"", db=t.byparent)
    txn.put(exp.kind.encode() + b"\x00" + key, b"", db=t.bykind)
    if dedupe:
        txn.put(fp, key, db=t.dedup)
    txn.put(seq_key(seq), key, db=t.order)
    return exp_id, True


def same_code(txn: Txn, t: Tables, task_id: str, kinds: Iterable[str], backend: str, code_id: str,
              files: dict[str, str]) -> str | None:
    """The id of a stored experience of ``task_id`` of one of ``kinds`` with this code: by its identity
    (``code_id``), else (records stored without one) by the store's own normalisation of ``files``."""
    for kind in kinds:
        for fp in (fingerprint(task_id, kind, backend, files, "", "", code_id), fingerprint(task_id, kind, backend,
                                                                                              files, "", "")):
            found = txn.get(fp, db=t.dedup)
            if found is not None:
                return bytes(found).decode()
    return None


def load(txn: Txn, t: Tables, exp_id: str, *, with_files: bool = True) -> Experience | None:
    """The whole experience ``exp_id`` (files read back from their blobs), or None."""
    key = exp_id.encode()
    raw = txn.get(key, db=t.exp)
    if raw is None:
        return None
    body = unpack(raw)
    row = unpack(cast(bytes, txn.get(key, db=t.row)))   # a stored body always has its row
    hist_raw = txn.get(key, db=t.hist)
    hist = unpack(hist_raw) if hist_raw is not None else {}
    digests = body.pop("files", {}) or {}
    files = {}
    if with_files:
        for name, digest in digests.items():
            blob = txn.get(bytes.fromhex(digest), db=t.blob)
            files[name] = decode_blob(blob) if blob is not None else ""
    return Experience(
        id=exp_id, files=files, updated_at=row["updated"], q1=row["q1"], q2=row["q2"], n1=row["n1"],
        n2=row["n2"], adoptions=row["adoptions"], q_history=hist.get("q_history", []),
        adopted_by=hist.get("adopted_by", []), retrieved_by=hist.get("retrieved_by", {}),
        cited_by=hist.get("cited_by", {}),
        **{k: v for k, v in body.items() if k in BODY},
    )


def load_body(txn: Txn, t: Tables, exp_id: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The immutable body of ``exp_id`` and its files' contents (what the index reads)."""
    raw = txn.get(exp_id.encode(), db=t.exp)
    if raw is None:
        return None
    body = unpack(raw)
    files = {}
    for name, digest in (body.get("files") or {}).items():
        blob = txn.get(bytes.fromhex(digest), db=t.blob)
        files[name] = decode_blob(blob) if blob is not None else ""
    return body, files


def row(txn: Txn, t: Tables, exp_id: str) -> dict[str, Any] | None:
    """The row (filter and value fields) of ``exp_id``, or None."""
    raw = txn.get(exp_id.encode(), db=t.row)
    return unpack(raw) if raw is not None else None


def _rows_by_prefix(txn: Txn, t: Tables, db: Db, prefix: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    cur = txn.cursor(db=db)
    if not cur.set_range(prefix):
        return
    for key in cur.iternext(values=False):
        key = bytes(key)
        if not key.startswith(prefix):
            break
        exp_id = key[len(prefix):].decode()
        r = row(txn, t, exp_id)
        if r is not None:
            yield exp_id, r


def _all_rows(txn: Txn, t: Tables) -> Iterator[tuple[str, dict[str, Any]]]:
    for key, raw in txn.cursor(db=t.row):
        yield bytes(key).decode(), unpack(raw)


def active_filters(filters: dict[str, str | None]) -> dict[str, str]:
    """The filters that are set; raises InvalidRecord for a filter name that does not exist."""
    unknown = set(filters) - set(FILTERS)
    if unknown:
        raise InvalidRecord(f"unknown filter {', '.join(sorted(unknown))}; valid filters: {', '.join(FILTERS)}")
    return {k: v for k, v in filters.items() if v is not None}


def row_matches(row: dict[str, Any], wanted: dict[str, str]) -> bool:
    """Whether a row passes every active filter."""
    return all(row[k] == v for k, v in wanted.items())


def matching_rows(txn: Txn, t: Tables, filters: dict[str, str | None]) -> list[tuple[str, dict[str, Any]]]:
    """(id, row) of every experience that passes the filters (task, kind, stage, backend, source)."""
    wanted = active_filters(filters)
    if "task" in wanted:  # walk the most selective index at hand
        source = _rows_by_prefix(txn, t, t.bytask, text_key(wanted.pop("task")) + b"\x00")
    elif "kind" in wanted:
        source = _rows_by_prefix(txn, t, t.bykind, wanted.pop("kind").encode() + b"\x00")
    else:
        source = _all_rows(txn, t)
    return [(i, r) for i, r in source if row_matches(r, wanted)]


def sort_rows(rows: list[tuple[str, dict[str, Any]]], sort: str, descending: bool) -> list[tuple[str, dict[str, Any]]]:
    """``rows`` ordered by ``sort``; rows with no reward, or with a value never updated (a typo's Q2, an
    attempt that was never a start point: its 0 is the prior, not a value earned), go last whichever the
    direction."""
    if sort not in SORTS:
        raise InvalidRecord(f"unknown sort {sort!r}; valid sorts: {', '.join(SORTS)}")
    if sort == "recency":
        return sorted(rows, key=lambda ir: (ir[1]["created"], ir[0]), reverse=descending)
    if sort == "reward":
        def earned(row: dict[str, Any]) -> bool:
            return row["reward"] is not None
    elif sort in ("q1", "q2"):
        def earned(row: dict[str, Any]) -> bool:
            return bool(row["n1" if sort == "q1" else "n2"])
    else:
        def earned(row: dict[str, Any]) -> bool:
            return True
    have = [ir for ir in rows if earned(ir[1])]
    none = [ir for ir in rows if not earned(ir[1])]
    have.sort(key=lambda ir: (ir[1][sort], ir[0]), reverse=descending)
    none.sort(key=lambda ir: (ir[1][sort] if sort != "reward" else 0, ir[0]), reverse=descending)
    return have + none


def ids_by_seq(txn: Txn, t: Tables, after: int, until: int | None = None,
               limit: int | None = None) -> list[tuple[int, str]]:
    """(insertion number, id) of experiences inserted after ``after`` (up to ``until``), in order."""
    cur = txn.cursor(db=t.order)
    out: list[tuple[int, str]] = []
    if not cur.set_range(seq_key(after + 1)):
        return out
    for key, value in cur:
        seq = seq_of(bytes(key))
        if until is not None and seq > until:
            break
        out.append((seq, bytes(value).decode()))
        if limit is not None and len(out) >= limit:
            break
    return out


def many(txn: Txn, t: Tables, ids: Iterable[str], *, with_files: bool = True) -> list[Experience]:
    """The experiences of ``ids`` that exist, in the order given."""
    out = []
    for exp_id in ids:
        exp = load(txn, t, exp_id, with_files=with_files)
        if exp is not None:
            out.append(exp)
    return out
