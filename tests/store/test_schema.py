"""Schema versions: a memory written by a newer or older store says so; older ones migrate when possible."""

from __future__ import annotations

import shutil
from pathlib import Path

import lmdb
import pytest

from store import SchemaMismatch, Store, StoreError, schema
from store.codec import pack, unpack
from store.errors import StoreNotFound, StoreUnreadable


def _set_schema(path, version: int) -> None:
    env = lmdb.open(str(path), max_dbs=32)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"schema", pack(version), db=meta)
    env.close()


def _schema_of(path) -> int:
    env = lmdb.open(str(path), max_dbs=32, readonly=True)
    meta = env.open_db(b"meta", create=False)
    with env.begin() as txn:
        version = unpack(txn.get(b"schema", db=meta))
    env.close()
    return version


def test_new_store_records_the_schema_version(store_path):
    Store.open(store_path).close()
    assert _schema_of(store_path) == schema.SCHEMA_VERSION


def test_newer_schema_is_refused_with_a_clear_message(store_path, make_exp):
    with Store.open(store_path) as s:
        s.add_experience(make_exp(1))
    _set_schema(store_path, schema.SCHEMA_VERSION + 1)
    for readonly in (False, True):
        with pytest.raises(SchemaMismatch) as info:
            Store.open(store_path, readonly=readonly)
        message = str(info.value)
        assert f"v{schema.SCHEMA_VERSION + 1}" in message and "newer" in message and "upgrade evokernel" in message
        assert "\n" not in message
    assert _schema_of(store_path) == schema.SCHEMA_VERSION + 1  # left as found


def test_older_schema_without_migration_is_refused(store_path, monkeypatch):
    Store.open(store_path).close()
    _set_schema(store_path, 0)
    monkeypatch.setattr(schema, "MIGRATIONS", {})
    with pytest.raises(SchemaMismatch, match=r"schema v0, older .* cannot be migrated; export it") as info:
        Store.open(store_path)
    assert isinstance(info.value, StoreError)


@pytest.mark.parametrize("readonly", [False, True])
def test_older_schema_is_migrated_when_a_migration_exists(store_path, make_exp, monkeypatch, readonly):
    with Store.open(store_path) as s:
        exp_id, _ = s.add_experience(make_exp(1))
    _set_schema(store_path, schema.SCHEMA_VERSION - 1)
    ran = []

    def migrate(txn, tables):  # e.g. a v0 memory had no adoption counts in its rows
        ran.append(True)
        for key, raw in txn.cursor(db=tables.row):
            row = unpack(raw)
            row["adoptions"] = 7
            txn.put(key, pack(row), db=tables.row)

    monkeypatch.setitem(schema.MIGRATIONS, schema.SCHEMA_VERSION - 1, migrate)
    with Store.open(store_path, readonly=readonly) as s:
        assert s.get(exp_id).adoptions == 7
    assert ran == [True]
    assert _schema_of(store_path) == schema.SCHEMA_VERSION
    with Store.open(store_path) as s:  # a second open has nothing left to migrate
        assert s.count() == 1
    assert ran == [True]


def test_missing_memory_opened_readonly_says_how_to_create_it(tmp_path):
    with pytest.raises(StoreNotFound, match="no memory at .* yet; a run or `evokernel memory import` creates it"):
        Store.open(tmp_path / "nowhere" / "memory.lmdb", readonly=True)
    assert not (tmp_path / "nowhere").exists()


def test_a_folder_that_is_not_lmdb_is_refused(tmp_path):
    bad = tmp_path / "memory.lmdb"
    bad.mkdir()
    (bad / "data.mdb").write_bytes(b"not an lmdb file at all" * 500)
    with pytest.raises(StoreUnreadable, match="not an LMDB memory"):
        Store.open(bad)
    (tmp_path / "file.lmdb").write_text("x")
    with pytest.raises(StoreUnreadable, match="is a file"):
        Store.open(tmp_path / "file.lmdb")


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_cut_short_data_file_is_reported_as_damaged_not_a_crash(store_path, make_exp, keep):
    """Half a data file would fault (SIGBUS) on the first read past its end; an empty one would be
    taken for a new memory. Both are refused with a message, read-only or not."""
    with Store.open(store_path) as s:
        s.add_experiences([make_exp(i) for i in range(300)])
    data = store_path / "data.mdb"
    with open(data, "r+b") as f:
        f.truncate(int(data.stat().st_size * keep))
    for readonly in (True, False):
        with pytest.raises(StoreUnreadable, match="damaged"):
            Store.open(store_path, readonly=readonly)


V1_MEMORY = Path(__file__).parents[1] / "fixtures" / "memory_v1" / "memory.lmdb"


def test_a_memory_of_schema_1_is_carried_over_whole_with_its_task_ids_claimed(tmp_path):
    """A memory the schema-1 code wrote (tests/fixtures/memory_v1/make.py: runs on the built-in suite and on
    a folder suite with another relu, a person's edit): every record is kept as it was, and each task id it
    holds becomes a legacy claim naming the suite of the earliest run that listed it."""
    path = tmp_path / "memory.lmdb"
    shutil.copytree(V1_MEMORY, path)
    assert _schema_of(path) == 1
    env = lmdb.open(str(path), max_dbs=32, readonly=True)
    with env.begin() as txn:
        before = {bytes(k): bytes(v) for name in (b"exp", b"row", b"hist", b"tasks", b"runs", b"bytask")
                  for k, v in txn.cursor(db=env.open_db(name, txn=txn, create=False))}
    env.close()
    with Store.open(path) as s:
        claims = s.task_claims()
        runs = s.list_runs()
        relu = s.get_task("relu")
        count = s.count()
    assert _schema_of(path) == schema.SCHEMA_VERSION
    assert claims == {"relu": {"legacy": True, "suite_spec": "builtin"},
                      "softmax": {"legacy": True, "suite_spec": "builtin"}}
    assert [r.config["suite"] for r in runs] == ["builtin", "/home/someone/suites/mysuite"]
    assert relu is not None and relu.best_id and count > 10
    env = lmdb.open(str(path), max_dbs=32, readonly=True)
    with env.begin() as txn:
        after = {bytes(k): bytes(v) for name in (b"exp", b"row", b"hist", b"tasks", b"runs", b"bytask")
                 for k, v in txn.cursor(db=env.open_db(name, txn=txn, create=False))}
    env.close()
    assert after == before   # nothing moved, nothing lost


def test_a_task_key_is_claimed_once_even_by_two_callers(store):
    mine, theirs = {"suite": "builtin", "name": "relu"}, {"suite": "mysuite", "name": "relu"}
    assert store.claim_task("relu", mine) == mine
    assert store.claim_task("relu", theirs) == mine          # held: the second caller is told by whom
    legacy = {"legacy": True, "suite_spec": None}
    assert store.claim_task("softmax", legacy) == legacy
    assert store.claim_task("softmax", theirs, replacing=legacy) == theirs   # a legacy claim adopted
    assert store.task_claims() == {"relu": mine, "softmax": theirs}
