"""Java's String.hashCode, tag codes, index key hashes, offset message ids and client unique ids.

RocketMQ hashes Java strings, i.e. UTF-16 code units: ``h = 31*h + c`` wrapped to a signed
32-bit int (spec section 6). ``java_hashes`` does the same for many strings at once with numpy,
which is how dispatch and rebuilds hash index keys in bulk.
"""

from __future__ import annotations

import itertools
import os
import struct
import time

import numpy as np

_MASK32 = 0xFFFFFFFF
_MAX_KEY = 1 << 16


def java_hash(s: str) -> int:
    """``String.hashCode()`` of ``s`` as a signed 32-bit int."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _MASK32
    else:
        data = s.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


_POW31 = np.ones(_MAX_KEY + 1, dtype=np.uint32)
np.cumprod(np.full(_MAX_KEY, 31, dtype=np.uint32), dtype=np.uint32, out=_POW31[1:])


def java_hashes(strings: list[str]) -> np.ndarray:
    """``String.hashCode()`` of every string, as an int32 array (one numpy pass for ASCII text)."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(strings)
    if not joined.isascii():
        return np.array([java_hash(s) for s in strings], dtype=np.int64).astype(np.int32)
    units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.uint32)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    if lengths.max(initial=0) > _MAX_KEY:
        return np.array([java_hash(s) for s in strings], dtype=np.int64).astype(np.int32)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # the character at position p of a key ending at e weighs 31**(e-1-p)
    exponents = np.repeat(ends - 1, lengths) - np.arange(len(units), dtype=np.int64)
    weighted = units * _POW31[exponents]
    out = np.zeros(n, dtype=np.uint32)
    nonempty = lengths > 0
    if nonempty.any():
        out[nonempty] = np.add.reduceat(weighted, starts[nonempty], dtype=np.uint32)
    return out.view(np.int32)


def index_key_hash(key: str) -> int:
    """IndexFile's key hash: ``abs(hashCode)``, and 0 for Integer.MIN_VALUE."""
    h = java_hash(key)
    return 0 if h == -2147483648 else abs(h)


def index_key_hashes(keys: list[str]) -> np.ndarray:
    """``index_key_hash`` of every key, as an int64 array."""
    h = java_hashes(keys).astype(np.int64)
    np.abs(h, out=h)
    h[h == 2147483648] = 0
    return h


_tags_cache: dict[str, int] = {}


def tags_code(tags: str | None) -> int:
    """The consume-queue tags code: the hash of the whole TAGS string, 0 when absent or empty."""
    if not tags:
        return 0
    code = _tags_cache.get(tags)
    if code is None:
        code = java_hash(tags)
        if len(_tags_cache) < 65536:
            _tags_cache[tags] = code
    return code


# -- offset message id (spec 4.1) ----------------------------------------------------------

_OFFSET = struct.Struct(">q")


def offset_msg_id(store_host_bytes: bytes, commit_log_offset: int) -> str:
    """Upper-case hex of store IP + port + commit-log offset: 32 chars (IPv4) or 56 (IPv6)."""
    return (store_host_bytes + _OFFSET.pack(commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """An offset msgId -> (``ip:port`` store host, commit-log offset)."""
    from rocketstore.codec.hosts import format_host

    if len(msg_id) not in (32, 56):
        raise ValueError(f"an offset msgId has 32 or 56 hex characters, not {len(msg_id)}: {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    return format_host(raw[:-8]), _OFFSET.unpack(raw[-8:])[0]


# -- client unique id (spec 4.2, MessageClientIDSetter) --------------------------------------


class UniqKeyGenerator:
    """UNIQ_KEY values in the Java client's format: IP + pid + class-loader hash, time, counter."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01", pid: int | None = None) -> None:
        pid = os.getpid() if pid is None else pid
        seed = int.from_bytes(os.urandom(4), "big", signed=True)
        self._prefix = (ip + struct.pack(">hi", pid & 0x7FFF, seed)).hex().upper()
        self._counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._month_start = 0
        self._next_month = 0

    def _roll_month(self, now_ms: int) -> None:
        t = time.localtime(now_ms / 1000)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start = int(start * 1000)
        self._next_month = int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next(self, now_ms: int) -> str:
        """A new id for a message created at ``now_ms``."""
        if not self._month_start <= now_ms < self._next_month:
            self._roll_month(now_ms)
        diff = now_ms - self._month_start
        return f"{self._prefix}{diff & _MASK32:08X}{next(self._counter) & 0xFFFF:04X}"
