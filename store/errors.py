"""Errors of the store. Each message is one line a user can act on."""

from __future__ import annotations


class StoreError(Exception):
    """Base class for store errors."""


class SchemaMismatch(StoreError):
    """The workspace was written by another schema version that cannot be migrated here."""


class StoreNotFound(StoreError):
    """There is no memory at the path yet (opened read-only, so none was created)."""


class StoreUnreadable(StoreError):
    """The path exists but is not a memory this program can open (not LMDB, no permission, locked)."""


class ReadOnlyStore(StoreError):
    """A write was attempted through a store opened read-only."""


class UnknownExperience(StoreError):
    """No experience has this id (or id prefix), or the prefix matches several."""


class InvalidRecord(StoreError):
    """A record has a field the store cannot accept (an unknown kind, stage or source, a bad id)."""


class ImportFormatError(StoreError):
    """A JSON Lines file is not a memory export this version can read."""


class TransactionTooLarge(StoreError):
    """A grouped transaction outgrew the memory map; it was rolled back and the map grown."""
