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


def java_hash(s: str) -> int:
    """``String.hashCode()`` of ``s`` as a signed 32-bit int."""
    h = _hash_on(0, s)
    return h - (1 << 32) if h & 0x80000000 else h


def _hash_on(h: int, s: str) -> int:
    """The unsigned hashCode of a string whose own hash is ``h`` with ``s`` appended (Horner's
    rule goes on where it stopped). The sum is reduced to 32 bits every 64 characters, not at
    each one: that halves the cost of hashing a key."""
    if s.isascii():
        data = s.encode("ascii")
        if len(data) <= 64:
            for c in data:
                h = 31 * h + c
            return h & _MASK32
        for i in range(0, len(data), 64):
            for c in data[i : i + 64]:
                h = 31 * h + c
            h &= _MASK32
        return h
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h


_INV31 = pow(31, -1, 1 << 32)  # 31 is odd, so it has an inverse modulo 2**32
_pow_tables: list[np.ndarray] = [np.ones(1, dtype=np.uint32), np.ones(1, dtype=np.uint32)]


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(31**i, 31**-i) mod 2**32 for i < n, as uint32 arrays (cached, grown on demand)."""
    pow31, inv31 = _pow_tables
    if len(pow31) < n:
        size = max(n, 2 * len(pow31), 1 << 16)
        pow31 = np.empty(size, dtype=np.uint32)
        inv31 = np.empty(size, dtype=np.uint32)
        pow31[0] = inv31[0] = 1
        np.cumprod(np.full(size - 1, 31, dtype=np.uint32), dtype=np.uint32, out=pow31[1:])
        np.cumprod(np.full(size - 1, _INV31, dtype=np.uint32), dtype=np.uint32, out=inv31[1:])
        _pow_tables[:] = [pow31, inv31]
    return pow31, inv31


def _segment_hashes(units: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """hashCode of each ``units[start:end]`` (UTF-16 code units), all at once, as uint32.

    ``sum(c[p] * 31**(e-1-p)) = 31**(e-1) * sum(c[p] * 31**-p)``: one prefix sum of the
    weighted units gives every segment, with no per-segment work.
    """
    pow31, inv31 = _powers(len(units) + 1)
    prefix = np.empty(len(units) + 1, dtype=np.uint32)
    prefix[0] = 0
    np.cumsum(units * inv31[: len(units)], dtype=np.uint32, out=prefix[1:])
    return (prefix[ends] - prefix[starts]) * pow31[np.maximum(ends - 1, 0)]


def java_hashes(strings: list[str]) -> np.ndarray:
    """``String.hashCode()`` of every string, as an int32 array (one numpy pass)."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(strings)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    else:
        units = np.frombuffer(joined.encode("utf-16-be", "surrogatepass"), dtype=">u2")
        lengths = np.fromiter(
            (len(s.encode("utf-16-be", "surrogatepass")) // 2 for s in strings), dtype=np.int64, count=n
        )
    ends = np.cumsum(lengths)
    out = _segment_hashes(units, ends - lengths, ends)
    out[lengths == 0] = 0
    return out.view(np.int32)


def token_hashes(texts: list[str], split: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """hashCode of every space-separated token of every text, in order.

    Returns (hashes as uint32, index of the text each token came from, token lengths in UTF-16
    units). Empty tokens are skipped, as RocketMQ's ``split(" ")`` does for index keys. With
    ``split`` False each non-empty text is one token, spaces and all (UNIQ_KEYs, spec 8.5).
    """
    n = len(texts)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=np.uint32), empty, empty
    joined = "".join(texts)
    if not joined.isascii():
        tokens = [(i, t) for i, text in enumerate(texts) for t in (text.split(" ") if split else (text,)) if t]
        hashes = np.array([java_hash(t) & _MASK32 for _, t in tokens], dtype=np.uint32)
        owners = np.array([i for i, _ in tokens], dtype=np.int64)
        lengths = np.array([len(t.encode("utf-16-be", "surrogatepass")) // 2 for _, t in tokens], dtype=np.int64)
        return hashes, owners, lengths
    if not split or " " not in joined:  # one token per text (UNIQ_KEYs, single keys): no boundary search
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        owners = np.flatnonzero(lengths)
        if len(owners) < n:
            starts, ends, lengths = starts[owners], ends[owners], lengths[owners]
        return _segment_hashes(units, starts, ends), owners, lengths
    spaced = " ".join(texts)
    units = np.frombuffer(spaced.encode("ascii"), dtype=np.uint8)
    word = units != 32
    edge = np.diff(word.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    text_ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=n) + 1) - 1
    owners = np.searchsorted(text_ends, starts, side="left")
    return _segment_hashes(units, starts, ends), owners, ends - starts


def prefixed_hashes(hashes: np.ndarray, lengths: np.ndarray, prefix_hash: np.ndarray | int) -> np.ndarray:
    """hashCode of ``prefix + token`` from the token's hash and length and the prefix's hash."""
    pow31, _ = _powers(int(lengths.max(initial=0)) + 1)
    return (np.asarray(prefix_hash, dtype=np.int64) & _MASK32).astype(np.uint32) * pow31[lengths] + hashes


def index_key_hash(key: str) -> int:
    """IndexFile's key hash: ``abs(hashCode)``, and 0 for Integer.MIN_VALUE."""
    h = java_hash(key)
    return 0 if h == -2147483648 else abs(h)


_topic_prefix_hashes: dict[str, int] = {}


def topic_prefix_hash(topic: str) -> int:
    """The unsigned hashCode of ``topic#`` (cached): where every index key of the topic starts."""
    h = _topic_prefix_hashes.get(topic)
    if h is None:
        h = _topic_prefix_hashes[topic] = _hash_on(0, topic + "#")
    return h


def topic_key_hash(topic: str, key: str) -> int:
    """``index_key_hash(f"{topic}#{key}")``, hashing only the key's characters."""
    h = _hash_on(topic_prefix_hash(topic), key)
    if h & 0x80000000:
        return 0 if h == 0x80000000 else (1 << 32) - h
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
    if len(raw) * 2 != len(msg_id):  # fromhex skips whitespace
        raise ValueError(f"an offset msgId is hex digits only: {msg_id!r}")
    return format_host(raw[:-8]), _OFFSET.unpack(raw[-8:])[0]


# -- client unique id (spec 4.2, MessageClientIDSetter) --------------------------------------


_HEX2 = [f"{i:02X}" for i in range(256)]


class UniqKeyGenerator:
    """UNIQ_KEY values in the Java client's format: IP + pid + class-loader hash, time, counter."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01", pid: int | None = None) -> None:
        pid = os.getpid() if pid is None else pid
        seed = int.from_bytes(os.urandom(4), "big", signed=True)
        self._prefix = (ip + struct.pack(">Hi", pid & 0xFFFF, seed)).hex().upper()  # Java's (short) pid
        self._counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._month_start = 0
        self._next_month = 0
        self._last_ms = -1
        self._head = ""

    def _roll_month(self, now_ms: int) -> None:
        t = time.localtime(now_ms / 1000)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start = int(start * 1000)
        self._next_month = int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def _head_at(self, now_ms: int) -> str:
        """The id's prefix and time part for ``now_ms``."""
        if now_ms != self._last_ms:
            if not self._month_start <= now_ms < self._next_month:
                self._roll_month(now_ms)
            self._last_ms = now_ms
            self._head = f"{self._prefix}{(now_ms - self._month_start) & _MASK32:08X}"
        return self._head

    def next(self, now_ms: int) -> str:
        """A new id for a message created at ``now_ms``."""
        head = self._head if now_ms == self._last_ms else self._head_at(now_ms)
        c = next(self._counter)
        return head + _HEX2[(c >> 8) & 0xFF] + _HEX2[c & 0xFF]

    def next_many(self, now_ms: int, n: int) -> list[str]:
        """``n`` new ids for messages created at ``now_ms`` (a batch): consecutive counter values,
        taken at once (no other thread runs inside ``islice``), formatted a high byte at a time."""
        head = self._head_at(now_ms)
        end = next(itertools.islice(self._counter, n - 1, None)) + 1  # takes n values at once
        c = end - n
        ids: list[str] = []
        while c < end:
            low = c & 0xFF
            stop = min(end, c - low + 256)
            mid = head + _HEX2[(c >> 8) & 0xFF]
            ids += [mid + h for h in _HEX2[low : low + stop - c]]
            c = stop
        return ids
