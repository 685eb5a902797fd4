"""Schema versions: a memory written by a newer or older store says so; older ones migrate when possible."""

from __future__ import annotations

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
