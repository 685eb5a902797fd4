"""A writer killed with SIGKILL at random moments leaves a memory that opens and holds every commit."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import lmdb

from store import Store
from store.codec import unpack
from store.schema import TABLES

WRITER = Path(__file__).with_name("store_writer.py")
KILLS = 22


def _parse_log(log: Path) -> tuple[dict[str, tuple[int, int]], Counter]:
    added: dict[str, tuple[int, int]] = {}
    updates: Counter = Counter()
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts[0] == "A":
            added[parts[1]] = (int(parts[2]), int(parts[3]))
        elif parts[0] == "Q":
            updates.update(parts[2].split(","))
    return added, updates


def _table_entries(path: Path) -> dict[str, int]:
    env = lmdb.open(str(path), max_dbs=32, readonly=True)
    try:
        out = {}
        with env.begin() as txn:
            for name in TABLES:
                db = env.open_db(name.encode(), txn=txn, create=False)
                out[name] = txn.stat(db)["entries"]
                for _, value in txn.cursor(db=db):  # every value decodes: no torn records
                    if name not in ("blob", "byparent", "bykind", "dedup", "order"):
                        unpack(value)
        return out
    finally:
        env.close()


def test_sigkill_at_random_moments_loses_no_committed_record(tmp_path):
    sys.path.insert(0, str(WRITER.parent))
    from store_writer import content, digest

    path = tmp_path / ".evokernel" / "memory.lmdb"
    log = tmp_path / "committed.log"
    rng = random.Random(1234)
    for run in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(path), str(log), str(run)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(rng.uniform(0.0, 0.35))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        with Store.open(path) as store:  # opens after every kill
            store.count()

    added, updates = _parse_log(log)
    assert len(added) > 3 * KILLS  # the writers really were writing when killed
    assert len(updates) > KILLS

    with Store.open(path) as store:
        stored = {e.id: e for e in store.iter_experiences()}
        # every committed experience is present and whole
        for exp_id, (run, i) in added.items():
            exp = stored.get(exp_id)
            assert exp is not None, f"committed experience {exp_id} (run {run}, item {i}) lost"
            text, files = content(run, i)
            assert exp.text == text and exp.files == files
            assert exp.extra["digest"] == digest(text, files)
        # at most one commit per killed writer was not logged before the kill
        assert len(added) <= len(stored) <= len(added) + KILLS
        for exp in stored.values():
            assert exp.extra["digest"] == digest(exp.text, exp.files)
        # every logged value update is there; unlogged ones are bounded by one step per kill
        excess = 0
        for exp_id, exp in stored.items():
            n = exp.n1 + exp.n2
            assert n >= updates[exp_id], f"value updates of {exp_id} lost"
            excess += n - updates[exp_id]
            assert len(exp.q_history) == min(n, 32)
            if exp.q_history:
                last = exp.q_history[-1]
                assert (exp.q1 if last["stage"] == "draft" else exp.q2) == last["q"]
        assert excess <= 6 * KILLS
        count = store.count()
        stats = store.stats()

    entries = _table_entries(path)
    assert count == len(stored) == stats["experiences"] == stats["last_seq"]
    for name in ("exp", "row", "hist", "order", "dedup", "bytask", "bykind"):
        assert entries[name] == count, (name, entries)
