"""store: the one place EvoKernel persists what it learns — LMDB with msgpack values.

Experiences with their stage values Q1/Q2, task states, runs and the LLM response cache, plus the
BM25 retrieval index over experiences. It knows nothing of LLMs, Textual or verifier backends.
"""

from __future__ import annotations

from store.errors import SchemaMismatch, StoreError
from store.records import Experience, RunRecord, TaskProgress, TaskState
from store.store import Store

__all__ = ["Experience", "RunRecord", "SchemaMismatch", "Store", "StoreError", "TaskProgress", "TaskState"]
