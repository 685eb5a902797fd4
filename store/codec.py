"""Codec: how values, keys and file contents are encoded in LMDB.

Values are msgpack; counters are 8-byte big-endian so they sort numerically; file contents are
content-addressed by SHA-256 and zlib-compressed when that pays.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import Any

import msgpack

_SEQ = struct.Struct(">Q")
_RAW, _ZLIB = b"\x00", b"\x01"
# Keys longer than this are hashed (LMDB refuses keys over 511 bytes).
MAX_KEY = 400


def pack(value: Any) -> bytes:
    """msgpack bytes of ``value`` (plain data only)."""
    return msgpack.packb(value, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """The value of msgpack ``data`` (str keys, lists for arrays)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def seq_key(seq: int) -> bytes:
    """The sortable key of an insertion sequence number."""
    return _SEQ.pack(seq)


def seq_of(key: bytes) -> int:
    """The sequence number of a ``seq_key``."""
    seq: int = _SEQ.unpack(key)[0]
    return seq


def text_key(text: str) -> bytes:
    """A key for free text (cache keys, task ids): itself, or its SHA-256 when too long."""
    raw = text.encode()
    if len(raw) > MAX_KEY:
        return b"#" + hashlib.sha256(raw).digest()
    return raw


def blob_digest(content: str) -> str:
    """The content address of a file: SHA-256 hex of its UTF-8 bytes."""
    return hashlib.sha256(content.encode()).hexdigest()


def encode_blob(content: str) -> bytes:
    """The stored form of a file's content (compressed when it is worth it)."""
    raw = content.encode()
    if len(raw) > 256:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw) * 0.9:
            return _ZLIB + packed
    return _RAW + raw


def decode_blob(data: bytes) -> str:
    """The content of a stored file."""
    data = bytes(data)
    if data[:1] == _ZLIB:
        return zlib.decompress(data[1:]).decode()
    return data[1:].decode()
