"""The LMDB environment of one memory, shared by every Store of this process that opens it.

LMDB allows one open environment per file per process, needs no transaction of the process alive
while the map is resized, and hands one writer at a time the write lock. This module keeps those
rules in one place:

* ``read(fn)`` runs ``fn(txn)`` in a short read-only transaction (readers never block the writer,
  and see only committed transactions);
* ``write(fn)`` runs ``fn(txn)`` in a write transaction that commits whole or not at all; when the
  map is full the transaction is aborted, the map grown and ``fn`` run again;
* ``transaction()`` groups several writes of this thread into one transaction;
* a map grown by another process is adopted when LMDB reports it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from store.errors import ReadOnlyStore, StoreError, StoreNotFound, StoreUnreadable, TransactionTooLarge
from store.schema import TABLES, Tables, Txn

R = TypeVar("R")

# Grow before a write when the used part of the map passes this fraction of it.
GROW_AT = 0.75


class _Gate:
    """Shared/exclusive gate: transactions enter shared, a map resize enters alone.

    Shared entry is re-entrant per thread; exclusive entry must not be requested while holding it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0
        self._local = threading.local()

    @contextmanager
    def shared(self) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._cond:
                while self._exclusive or self._waiting:
                    self._cond.wait()
                self._shared += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                with self._cond:
                    self._shared -= 1
                    if self._shared == 0:
                        self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if getattr(self._local, "depth", 0):
            raise RuntimeError("map resize requested inside a transaction of the same thread")
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._shared:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Environment:
    """One open LMDB environment with its named tables, map growth and transaction rules."""

    _registry: dict[str, Environment] = {}
    _registry_lock = threading.Lock()

    def __init__(self, path: Path, env: lmdb.Environment, readonly: bool) -> None:
        self.path = path
        self.env = env
        self.readonly = readonly
        self.refs = 0  # Stores of this process using it
        self.page_size = env.stat()["psize"]
        self._gate = _Gate()
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self.tables: Tables | None = None
        self.shared: dict[str, Any] = {}  # per-environment state owned by the Store (the index)

    # -- opening and closing -------------------------------------------------------------------

    @classmethod
    def acquire(cls, path: str | os.PathLike[str], *, readonly: bool, map_size: int) -> Environment:
        """The environment at ``path``, opened (and created, unless ``readonly``) if this process has none.

        The LMDB environment is opened writable whenever the files allow it, even for a read-only
        Store, so that a reader and a writer in one process (the TUI and the engine) share it.
        """
        path = Path(path).expanduser().absolute()
        key = os.path.realpath(path)
        with cls._registry_lock:
            found = cls._registry.get(key)
            if found is None:
                env, env_readonly = cls._open_lmdb(path, readonly=readonly, map_size=map_size)
                found = cls(path, env, env_readonly)
                try:
                    found._open_tables(create=not readonly)
                except BaseException:
                    env.close()
                    raise
                cls._registry[key] = found
            elif found.readonly and not readonly:
                raise StoreUnreadable(f"memory at {path} can only be read here (read-only files or medium)")
            found.refs += 1
            return found

    @staticmethod
    def _open_lmdb(path: Path, *, readonly: bool, map_size: int) -> tuple[lmdb.Environment, bool]:
        if path.exists() and not path.is_dir():
            raise StoreUnreadable(f"{path} is a file, not a memory directory; move it away or choose another path")
        if readonly and not (path / "data.mdb").exists():
            raise StoreNotFound(f"no memory at {path} yet; a run or `evokernel memory import` creates it")
        if not readonly:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnreadable(f"cannot create memory directory {path}: {exc.strerror}") from exc
        env_readonly = readonly and not (os.access(path, os.W_OK) and os.access(path / "data.mdb", os.W_OK))
        opts: dict[str, Any] = dict(
            subdir=True, map_size=map_size, max_dbs=len(TABLES) + 4, max_readers=512,
            readonly=env_readonly, meminit=False, lock=True,
        )
        data_file = path / "data.mdb"
        if data_file.is_file() and data_file.stat().st_size == 0:
            raise StoreUnreadable(f"memory at {path} is damaged: its data file is empty; move the folder away "
                                  "(a backup or `evokernel memory import` can restore it)")
        try:
            env = lmdb.open(str(path), **opts)
        except lmdb.InvalidError as exc:
            raise StoreUnreadable(f"{path} is not an LMDB memory (or is damaged): {exc}") from exc
        except lmdb.Error as exc:
            if not env_readonly:
                raise StoreUnreadable(f"cannot open memory at {path}: {exc}") from exc
            try:  # a read-only copy or medium, where no lock file can be written
                env = lmdb.open(str(path), **{**opts, "lock": False})
            except lmdb.Error:
                raise StoreUnreadable(f"cannot open memory at {path}: {exc}") from exc
        try:  # a data file shorter than its own last page would fault (SIGBUS) on the first read there
            needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
            if data_file.stat().st_size < needed:
                env.close()
                raise StoreUnreadable(f"memory at {path} is damaged: its data file is cut short "
                                      f"({data_file.stat().st_size} of {needed} bytes); restore it from a backup or "
                                      "move the folder away")
        except (lmdb.Error, OSError):
            pass
        try:
            env.reader_check()  # clear reader slots left by killed processes
        except lmdb.Error:
            pass
        return env, env_readonly

    def _open_tables(self, *, create: bool) -> None:
        handles = {}
        if not create:
            with self.env.begin() as txn:
                names = {bytes(k) for k, _ in txn.cursor()}
            missing = [n for n in TABLES if n.encode() not in names]
            if missing:
                raise StoreNotFound(f"no memory at {self.path} yet (tables {', '.join(missing)} missing)")
        if self.readonly:
            for name in TABLES:
                handles[name] = self.env.open_db(name.encode(), create=False)
        else:
            # LMDB keeps handles opened in a write transaction (one that creates nothing, for a reader)
            with self.env.begin(write=True) as txn:
                for name in TABLES:
                    handles[name] = self.env.open_db(name.encode(), txn=txn, create=create)
        self.tables = Tables(**handles)

    def release(self) -> None:
        """Drop one user of the environment; the last one closes it."""
        with self._registry_lock:
            self.refs -= 1
            if self.refs > 0:
                return
            self._registry.pop(os.path.realpath(self.path), None)
            self.shared.clear()
            self.env.close()

    # -- transactions --------------------------------------------------------------------------

    def read(self, fn: Callable[[Txn], R]) -> R:
        """``fn(txn)`` in a read-only snapshot (or in this thread's open grouped transaction)."""
        current = getattr(self._local, "txn", None)
        if current is not None:
            return fn(current)
        while True:
            try:
                with self._gate.shared():
                    txn = self.env.begin(buffers=False)
                    try:
                        return fn(txn)
                    finally:
                        txn.abort()
            except lmdb.MapResizedError:
                self._adopt_map_size()
            except lmdb.Error as exc:
                raise StoreError(f"reading memory at {self.path} failed: {exc}") from exc

    def write(self, fn: Callable[[Txn], R]) -> R:
        """``fn(txn)`` in a write transaction that lands whole or not at all.

        ``fn`` may run more than once (after the map grows), so it must only write through ``txn``.
        """
        current = getattr(self._local, "txn", None)
        if current is not None:
            return fn(current)
        if self.readonly:
            raise ReadOnlyStore(f"memory at {self.path} can only be read here (read-only files or medium)")
        while True:
            with self._write_lock:
                self._grow_if_needed()
                try:
                    with self._gate.shared():
                        txn = self.env.begin(write=True)
                        try:
                            result = fn(txn)
                        except BaseException:
                            txn.abort()
                            raise
                        txn.commit()
                        return result
                except lmdb.MapFullError:
                    self.grow()
                except lmdb.MapResizedError:
                    self._adopt_map_size()
                except lmdb.Error as exc:
                    raise StoreError(f"writing memory at {self.path} failed: {exc}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Txn]:
        """Group the writes of this thread inside the block into one transaction.

        Nested use joins the outer transaction. A block that outgrows the map is rolled back and
        raises TransactionTooLarge after the map is grown; running it again then succeeds.
        """
        if getattr(self._local, "txn", None) is not None:
            yield self._local.txn
            return
        if self.readonly:
            raise ReadOnlyStore(f"memory at {self.path} can only be read here (read-only files or medium)")
        with self._write_lock:
            self._grow_if_needed(fraction=0.5)
            full = False
            try:
                with self._gate.shared():
                    txn = self.env.begin(write=True)
                    self._local.txn = txn
                    try:
                        yield txn
                    except BaseException:
                        txn.abort()
                        raise
                    finally:
                        self._local.txn = None
                    txn.commit()
            except lmdb.MapFullError:
                full = True
            if full:
                self.grow()
                raise TransactionTooLarge(
                    f"a grouped write outgrew the memory map of {self.path}; it was rolled back, "
                    f"the map is now {self.map_size() >> 20} MiB: run it again"
                )

    # -- the map -------------------------------------------------------------------------------

    def map_size(self) -> int:
        """The current size of the memory map in bytes."""
        return self.env.info()["map_size"]

    def used_bytes(self) -> int:
        """Bytes of the map in use (pages up to the last one written)."""
        return (self.env.info()["last_pgno"] + 1) * self.page_size

    def _grow_if_needed(self, fraction: float = GROW_AT) -> None:
        info = self.env.info()
        if (info["last_pgno"] + 1) * self.page_size > fraction * info["map_size"]:
            self.grow()

    def grow(self) -> None:
        """Double the memory map (at least past twice what is used), with no transaction alive."""
        with self._gate.exclusive():
            info = self.env.info()
            used = (info["last_pgno"] + 1) * self.page_size
            size = max(info["map_size"] * 2, used * 2)
            try:
                self.env.set_mapsize(size)
            except lmdb.Error as exc:
                raise StoreError(f"cannot grow the memory map of {self.path} to {size >> 20} MiB: {exc}") from exc

    def _adopt_map_size(self) -> None:
        with self._gate.exclusive():
            self.env.set_mapsize(0)  # 0: take the size another process grew the map to
