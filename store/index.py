"""The retrieval index: BM25 over experiences, persisted beside the store and kept current.

Two parts:

* the *main* index, a ``bm25s`` index (Lucene BM25) over every experience up to an insertion number
  (its watermark), saved under ``<store>.index/`` and memory-mapped when loaded;
* the *delta*, experiences inserted since, tokenised in memory and scored with the statistics of
  main and delta together, so fresh experiences rank beside old ones at once.

The store feeds the index from its insertion log: on each query the delta catches up with what any
process committed; when the delta passes a tenth of the main index (or 500 items) the main index is
rebuilt from the store and saved. A missing, damaged or foreign index is rebuilt the same way.
Backend and kind filters are applied here (they never change); Q floors are the store's business.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from store.terms import term_counts, terms

if TYPE_CHECKING:
    import bm25s

INDEX_FORMAT = 1
K1, B = 1.5, 0.75
MIN_DELTA = 500

log = logging.getLogger(__name__)


@dataclass
class IndexDoc:
    """One experience as the index sees it."""

    seq: int
    id: str
    backend: str
    kind: str
    text: str


@dataclass
class _Delta:
    """Experiences inserted after the main index was built: per-term postings kept in memory."""

    ids: list[str] = field(default_factory=list)
    backend: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    postings: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # cached postings

    def add(self, doc: IndexDoc, backend: int, kind: int) -> None:
        pos = len(self.ids)
        counts = term_counts(doc.text)
        for tok, tf in counts.items():
            docs, tfs = self.postings.setdefault(tok, ([], []))
            docs.append(pos)
            tfs.append(tf)
            self.arrays.pop(tok, None)
        self.ids.append(doc.id)
        self.backend.append(backend)
        self.kind.append(kind)
        self.lengths.append(sum(counts.values()))

    def term(self, tok: str) -> tuple[np.ndarray, np.ndarray] | None:
        found = self.arrays.get(tok)
        if found is None and tok in self.postings:
            docs, tfs = self.postings[tok]
            found = self.arrays[tok] = (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
        return found


def bm25_from_counts(vocab: dict[str, int], term_ids: np.ndarray, tfs: np.ndarray, sizes: np.ndarray,
                     lengths: np.ndarray) -> bm25s.BM25:
    """A ``bm25s.BM25`` (Lucene variant) built from term counts, vectorised.

    ``term_ids``/``tfs`` hold each document's distinct terms and their counts, one document after
    another (``sizes[d]`` entries for document d, of length ``lengths[d]``). The result is the index
    ``BM25.index`` would build from the token lists — same score matrix, same attributes — without
    its per-document Python loops (a test checks the two agree).
    """
    import bm25s

    n_docs, n_vocab = len(sizes), len(vocab)
    doc_ids = np.repeat(np.arange(n_docs, dtype=np.int32), sizes)
    df = np.bincount(term_ids, minlength=n_vocab)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
    avgdl = float(lengths.mean()) if n_docs else 1.0
    weights = idf[term_ids] * tfs / (tfs + K1 * (1 - B + B * lengths[doc_ids] / avgdl))
    order = np.argsort(term_ids, kind="stable")  # by term, documents ascending within a term
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
    bm25.scores = {"data": weights[order].astype(np.float32), "indices": doc_ids[order], "indptr": indptr,
                   "num_docs": n_docs}
    bm25.vocab_dict = vocab
    bm25.unique_token_ids_set = set(vocab.values())
    bm25.nonoccurrence_array = None
    return bm25


class RetrievalIndex:
    """BM25 ranking of experience ids for a query, filtered by backend and kind."""

    def __init__(self, directory: Path, store_id: str) -> None:
        self.directory = directory
        self.store_id = store_id
        self.watermark = 0  # insertion number the main index covers
        self.seen = 0  # insertion number main + delta cover
        self.bm25 = None  # bm25s.BM25 or None when the main index is empty
        self.vocab: dict[str, int] = {}
        self.main_ids: np.ndarray = np.zeros(0, dtype="S1")
        self.main_backend: np.ndarray = np.zeros(0, dtype=np.int16)
        self.main_kind: np.ndarray = np.zeros(0, dtype=np.int16)
        self.main_df: np.ndarray = np.zeros(0, dtype=np.int64)
        self.main_total = 0.0
        self.codes: dict[str, dict[str, int]] = {"backend": {}, "kind": {}}
        self.delta = _Delta()
        self._masks: dict[tuple[str | None, tuple[str, ...] | None], np.ndarray] = {}

    # -- size and freshness --------------------------------------------------------------------

    @property
    def main_size(self) -> int:
        """Experiences in the main index."""
        return len(self.main_ids)

    @property
    def size(self) -> int:
        """Experiences the index ranks (main and delta)."""
        return self.main_size + len(self.delta.ids)

    def wants_rebuild(self, head: int) -> bool:
        """Whether the main index should be rebuilt for a store whose last insertion is ``head``."""
        if self.seen > head:
            return True  # the store was replaced by an older or other one
        pending = len(self.delta.ids) + (head - self.seen)
        return pending > max(MIN_DELTA, self.main_size // 10)

    def _code(self, field_name: str, value: str) -> int:
        table = self.codes[field_name]
        if value not in table:
            table[value] = len(table)
        return table[value]

    # -- building, extending, persisting -------------------------------------------------------

    @classmethod
    def build(cls, directory: Path, store_id: str, docs: Iterable[IndexDoc], head: int) -> RetrievalIndex:
        """A new index over ``docs`` (the store up to insertion ``head``), saved to ``directory``."""
        index = cls(directory, store_id)
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        tfs: list[int] = []
        sizes: list[int] = []
        lengths: list[int] = []
        ids: list[bytes] = []
        backend: list[int] = []
        kind: list[int] = []
        for doc in docs:
            counts = term_counts(doc.text)
            term_ids.extend([vocab.setdefault(tok, len(vocab)) for tok in counts])
            tfs.extend(counts.values())
            sizes.append(len(counts))
            lengths.append(sum(counts.values()))
            ids.append(doc.id.encode())
            backend.append(index._code("backend", doc.backend))
            kind.append(index._code("kind", doc.kind))
        index.watermark = index.seen = head
        index.main_ids = np.asarray(ids, dtype=f"S{max((len(i) for i in ids), default=1)}")
        index.main_backend = np.asarray(backend, dtype=np.int16)
        index.main_kind = np.asarray(kind, dtype=np.int16)
        index.main_total = float(sum(lengths))
        if vocab:
            index._set_main(bm25_from_counts(
                vocab, np.asarray(term_ids, dtype=np.int32), np.asarray(tfs, dtype=np.float32),
                np.asarray(sizes, dtype=np.int64), np.asarray(lengths, dtype=np.float32)))
        index.save()
        return index

    def _set_main(self, bm25: bm25s.BM25) -> None:
        self.bm25 = bm25
        self.vocab = bm25.vocab_dict
        self.main_df = np.diff(np.asarray(bm25.scores["indptr"], dtype=np.int64))

    def extend(self, docs: Iterable[IndexDoc]) -> None:
        """Add experiences inserted after the last one seen to the delta."""
        for doc in docs:
            if doc.seq <= self.seen:
                continue
            self.delta.add(doc, self._code("backend", doc.backend), self._code("kind", doc.kind))
            self.seen = doc.seq

    def save(self) -> None:
        """Write the main index to a new generation folder and point ``CURRENT`` at it (atomic)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            name = f"gen-{self.watermark}-{secrets.token_hex(4)}"
            tmp = self.directory / f"tmp-{name}"
            tmp.mkdir()
            if self.bm25 is not None:
                self.bm25.save(str(tmp), show_progress=False)
            np.save(tmp / "ids.npy", self.main_ids)
            np.save(tmp / "backend.npy", self.main_backend)
            np.save(tmp / "kind.npy", self.main_kind)
            meta = {
                "format": INDEX_FORMAT, "store_id": self.store_id, "watermark": self.watermark,
                "total_len": self.main_total, "k1": K1, "b": B, "has_bm25": self.bm25 is not None,
                "backends": list(self.codes["backend"]), "kinds": list(self.codes["kind"]),
            }
            (tmp / "meta.json").write_text(json.dumps(meta))
            os.replace(tmp, self.directory / name)
            pointer = self.directory / f"CURRENT.{secrets.token_hex(4)}"
            pointer.write_text(name)
            os.replace(pointer, self.directory / "CURRENT")
            for old in self.directory.iterdir():
                if old.name != name and old.name.startswith(("gen-", "tmp-", "CURRENT.")):
                    shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
        except OSError as exc:  # a read-only workspace still retrieves, from memory
            log.warning("could not save the retrieval index to %s: %s", self.directory, exc)

    @classmethod
    def load(cls, directory: Path, store_id: str) -> RetrievalIndex | None:
        """The saved index of store ``store_id``, or None if missing, damaged or another store's."""
        for _ in range(2):  # CURRENT may move under us once while another process saves
            try:
                return cls._load(directory, store_id)
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - any damage means: rebuild from the store
                log.warning("ignoring unreadable retrieval index at %s: %s", directory, exc)
                return None
        return None

    @classmethod
    def _load(cls, directory: Path, store_id: str) -> RetrievalIndex | None:
        import bm25s

        pointer = directory / "CURRENT"
        if not pointer.exists():
            return None
        gen = directory / pointer.read_text().strip()
        meta = json.loads((gen / "meta.json").read_text())
        if meta.get("format") != INDEX_FORMAT or meta.get("store_id") != store_id:
            return None
        if meta.get("k1") != K1 or meta.get("b") != B:
            return None
        index = cls(directory, store_id)
        index.watermark = index.seen = int(meta["watermark"])
        index.main_total = float(meta["total_len"])
        index.codes = {
            "backend": {v: i for i, v in enumerate(meta["backends"])},
            "kind": {v: i for i, v in enumerate(meta["kinds"])},
        }
        index.main_ids = np.load(gen / "ids.npy", mmap_mode="r")
        index.main_backend = np.load(gen / "backend.npy")
        index.main_kind = np.load(gen / "kind.npy")
        if meta["has_bm25"]:
            index._set_main(bm25s.BM25.load(str(gen), show_progress=False))
        if len(index.main_backend) != len(index.main_ids):
            raise ValueError("index arrays disagree in length")
        return index

    # -- ranking -------------------------------------------------------------------------------

    def _main_mask(self, backend: str | None, kinds: tuple[str, ...] | None) -> np.ndarray | None:
        if backend is None and kinds is None:
            return None
        key = (backend, kinds)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.ones(self.main_size, dtype=bool)
            if backend is not None:
                allowed = [self.codes["backend"][b] for b in {backend, ""} if b in self.codes["backend"]]
                mask &= np.isin(self.main_backend, allowed)
            if kinds is not None:
                allowed = [self.codes["kind"][k] for k in kinds if k in self.codes["kind"]]
                mask &= np.isin(self.main_kind, allowed)
            self._masks[key] = mask
        return mask

    def scores(self, query: str, *, backend: str | None = None,
               kinds: Iterable[str] | None = None) -> np.ndarray:
        """BM25 score of every indexed experience (main then delta order); filtered ones score 0."""
        wanted = tuple(sorted(set(kinds))) if kinds is not None else None
        qterms = list(dict.fromkeys(terms(query)))
        out = np.zeros(self.size, dtype=np.float32)
        if self.bm25 is not None and self.main_size:
            qids = [self.vocab[t] for t in qterms if t in self.vocab and self.vocab[t] < len(self.main_df)]
            main = self.bm25.get_scores_from_ids(qids) if qids else np.zeros(self.main_size, dtype=np.float32)
            mask = self._main_mask(backend, wanted)
            if mask is not None:
                main = np.where(mask, main, 0)
            out[: self.main_size] = main
        if self.delta.ids:
            out[self.main_size:] = self._delta_scores(qterms, backend, wanted)
        return out

    def _delta_scores(self, qterms: list[str], backend: str | None, kinds: tuple[str, ...] | None) -> np.ndarray:
        d = self.delta
        n_delta = len(d.ids)
        n = self.main_size + n_delta
        avgdl = (self.main_total + sum(d.lengths)) / max(n, 1) or 1.0
        norm = K1 * (1 - B + B * np.asarray(d.lengths, dtype=np.float32) / avgdl)
        scores = np.zeros(n_delta, dtype=np.float32)
        for tok in qterms:
            post = d.term(tok)
            if post is None:
                continue
            docs, tfs = post
            df = len(docs)
            main_id = self.vocab.get(tok)
            if main_id is not None and main_id < len(self.main_df):
                df += int(self.main_df[main_id])
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            np.add.at(scores, docs, idf * tfs / (norm[docs] + tfs))
        if backend is not None:
            allowed = [self.codes["backend"][b] for b in {backend, ""} if b in self.codes["backend"]]
            scores[~np.isin(np.asarray(d.backend), allowed)] = 0
        if kinds is not None:
            allowed = [self.codes["kind"][k] for k in kinds if k in self.codes["kind"]]
            scores[~np.isin(np.asarray(d.kind), allowed)] = 0
        return scores

    def id_at(self, pos: int) -> str:
        """The experience id at ranking position ``pos`` (main then delta)."""
        if pos < self.main_size:
            return bytes(self.main_ids[pos]).decode()
        return self.delta.ids[pos - self.main_size]

    def ranked(self, query: str, *, backend: str | None = None, kinds: Iterable[str] | None = None,
               first: int = 64) -> Iterator[tuple[str, float]]:
        """(id, score) of every experience matching ``query`` (score > 0), best first, lazily."""
        scores = self.scores(query, backend=backend, kinds=kinds)
        positive = int(np.count_nonzero(scores > 0))
        done: set[int] = set()
        want = min(positive, max(first, 1))
        neg = -scores
        while len(done) < positive:
            if want < len(scores):
                part = np.argpartition(neg, want - 1)[:want]
            else:
                part = np.arange(len(scores))
            for pos in part[np.argsort(neg[part], kind="stable")].tolist():
                if pos not in done and scores[pos] > 0:  # ties may reorder between rounds: skip, never repeat
                    done.add(pos)
                    yield self.id_at(pos), float(scores[pos])
            want = min(positive, want * 4)
