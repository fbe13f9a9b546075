"""Walking the records of a commit-log segment (``checkMessageAndReturnSize``, spec 3.9).

``scan_records`` turns a stretch of a segment into ``Records``: what the consume queues and the
index need about each record. It stops at the end-of-file marker, at zeros, or at the first record
that fails a check (length, magic, field sizes, body CRC), and says which.

Only the walk from one record to the next is a Python loop (each record's length says where the
next starts). Everything else is done for the whole stretch at once with numpy: header fields are
gathered, the field lengths checked, the TAGS, KEYS and UNIQ_KEY values located in the property
strings and hashed where they lie, so no Python object is made per record beyond its topic.
"""

from __future__ import annotations

import re
import struct

import numpy as np

from rocketstore.codec import record as rec
from rocketstore.codec.crc import crc32
from rocketstore.codec.ids import _segment_hashes, java_hash, tags_code
from rocketstore.codec.properties import property_value
from rocketstore.codec.records import (  # noqa: F401 - the request layout is part of this module's API
    BATCH_LEN,
    D_KEYS,
    D_OFFSET,
    D_QUEUE_ID,
    D_QUEUE_OFFSET,
    D_SIZE,
    D_SIZES,
    D_STORE_TS,
    D_SYSFLAG,
    D_TAGS_CODE,
    D_TOPIC,
    D_UNIQ,
    REQUEST_LEN,
    Records,
    batch_request,
)
from rocketstore.codec.topic import SCHEDULE_TOPIC, topic_text

# Why a scan stopped.
STOP_END = 0  # zeros or not enough bytes left: the end of written data
STOP_BLANK = 1  # the end-of-file marker: continue in the next file
STOP_BAD = 2  # a record that fails a check (torn, corrupted, CRC)
STOP_LIMIT = 3  # reached ``limit``: more records may follow

_INT2 = struct.Struct(">ii")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_SIGNED_BYTE = struct.Struct(">b")
_V1 = rec.MESSAGE_MAGIC_CODE
_V2 = rec.MESSAGE_MAGIC_CODE_V2
_BLANK = rec.BLANK_MAGIC_CODE
_SPAN = {n: np.arange(n, dtype=np.int64) for n in (2, 4, 8)}
_BE = {2: np.dtype(">i2"), 4: np.dtype(">i4"), 8: np.dtype(">i8")}


_JAVA_INT_TEXT = re.compile(r"[+-]?\d+")  # \d: Unicode decimal digits, as Java's Character.digit


def java_int(text: str | bytes | None, bits: int = 32) -> int | None:
    """``Integer.parseInt(text)`` (``Long.parseLong`` for ``bits=64``): a sign and decimal digits
    within Java's range; None where Java throws (spaces, underscores, other characters, out of
    range, a digit outside the Basic Multilingual Plane: Java reads it as two surrogate chars,
    neither a digit)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if type(text) is not str or not _JAVA_INT_TEXT.fullmatch(text) or (not text.isascii() and max(text) > "\uffff"):
        return None
    value = int(text)
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def delay_of_level(level_text: str | bytes | None, delay_millis: tuple[int, ...]) -> int | None:
    """Milliseconds a DELAY level stands for (capped at the highest level); None for no delay."""
    level = java_int(level_text)
    if level is None:
        return None
    level = min(level, len(delay_millis))
    if level <= 0:
        return None
    return delay_millis[level - 1]


def delay_tags_code(props: bytes, store_ts: int, delay_millis: tuple[int, ...]) -> int | None:
    """The deliver time a SCHEDULE_TOPIC_XXXX consume-queue unit holds, or None without DELAY."""
    delay = delay_of_level(property_value(b"\x02" + props, b"\x02DELAY\x01"), delay_millis)
    return None if delay is None else store_ts + delay


def _walk(buf: bytes | memoryview, pos: int, end: int, limit: int) -> tuple[list[int], int, int]:
    """Record starts from ``pos``: follow each record's length until something else is there."""
    starts: list[int] = []
    add = starts.append
    unpack2 = _INT2.unpack_from
    while True:
        if pos >= limit:
            return starts, pos, STOP_LIMIT if pos < end else STOP_END
        left = end - pos
        if left <= 4:
            return starts, pos, STOP_END
        if left < 8:
            return starts, pos, STOP_END if _INT.unpack_from(buf, pos)[0] == 0 else STOP_BAD
        total, magic = unpack2(buf, pos)
        if magic in (_V1, _V2):
            if total < 91 or total > left:
                return starts, pos, STOP_BAD
            add(pos)
            pos += total
        elif magic == _BLANK:
            return starts, pos, STOP_BLANK
        else:
            return starts, pos, STOP_END if total == 0 and magic == 0 else STOP_BAD


def mismatched_size(buf: bytes | memoryview, pos: int, end: int) -> int:
    """TOTALSIZE of the record at ``pos`` when its fields can all be read before ``end`` but their
    lengths do not add up to it: RocketMQ's reput logs "[BUG]" and skips such a record alone (spec
    12.7). 0 for any other bad record (a bad magic code, a length Java cannot read), after which
    reput dispatches nothing more of the data."""
    if end - pos < 8:
        return 0
    total, magic = _INT2.unpack_from(buf, pos)
    if magic not in (_V1, _V2) or not 91 <= total <= end - pos:
        return 0
    sys_flag = _INT.unpack_from(buf, pos + 36)[0]
    at = pos + rec.header_for(sys_flag).size - 4
    body_len = _INT.unpack_from(buf, at)[0]
    at += 4 + max(body_len, 0)  # Java skips a body only when its length is positive
    v2 = magic == _V2
    if at + 2 + 2 > end:
        return 0
    topic_len = _SHORT.unpack_from(buf, at)[0] if v2 else _SIGNED_BYTE.unpack_from(buf, at)[0]
    at += (2 if v2 else 1) + topic_len
    if topic_len < 0 or at + 2 > end:
        return 0
    props_len = _SHORT.unpack_from(buf, at)[0]
    if at + 2 + max(props_len, 0) > end:
        return 0
    return total if rec.record_length(sys_flag, max(body_len, 0), topic_len, max(props_len, 0), v2) != total else 0


class _Gather:
    """Big-endian integers at many positions of one buffer. A position outside the buffer (a
    damaged length pointing before or past it) reads the nearest byte in it: the records it
    belongs to fail their checks anyway."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.last = len(data) - 1

    def int(self, at: np.ndarray, width: int) -> np.ndarray:
        index = np.clip(at[:, None] + _SPAN[width], 0, self.last)
        return self.data[index].view(_BE[width]).reshape(-1).astype(np.int64)


def scan_records(
    buf: bytes | memoryview,
    pos: int,
    end: int,
    base_offset: int,
    *,
    check_crc: bool,
    prop_crc: bool = False,
    delay_millis: tuple[int, ...] = (),
    limit: int | None = None,
    strings: bool = False,
    properties: bool = True,
) -> tuple[Records, int, int]:
    """The records of ``buf[pos:end]``; no record starts at or after ``limit`` (default ``end``).

    ``check_crc`` checks every record's body CRC or, with ``prop_crc`` (forceVerifyPropCRC), its
    appended ``__CRC32#`` property instead (spec 3.5, 3.6); a record failing it is a bad record.

    ``base_offset`` is the commit-log offset of ``buf[0]``. Returns (records, stop position,
    reason): the stop position is just after the last good record, or at the end-of-file marker.
    With ``strings`` the records carry their keys and unique keys as text as well. Without
    ``properties`` they carry no tags codes, keys or unique keys (records only checked, not
    dispatched: the checks are the same).
    """
    if limit is None or limit > end:
        limit = end
    starts, stop, reason = _walk(buf, pos, end, limit)
    if not starts:
        return Records(), stop, reason
    data = np.frombuffer(buf, dtype=np.uint8)
    try:
        crc = (_PROPERTY_CRC if prop_crc else _BODY_CRC) if check_crc else None
        return _columns(buf, data, starts, stop, reason, base_offset, crc, delay_millis, strings, properties)
    finally:
        del data  # a view of an mmap must not outlive the call (the mapping could not be closed)


def _columns(
    buf: bytes | memoryview,
    data: np.ndarray,
    starts: list[int],
    stop: int,
    reason: int,
    base_offset: int,
    crc: int | None,
    delay_millis: tuple[int, ...],
    strings: bool,
    properties: bool = True,
) -> tuple[Records, int, int]:
    g = _Gather(data)
    at = np.array(starts, dtype=np.int64)
    total = g.int(at, 4)
    v2 = g.int(at + 4, 4) == _V2
    sys_flag = g.int(at + 36, 4)
    born = 8 + 12 * ((sys_flag >> 4) & 1)
    store = 8 + 12 * ((sys_flag >> 5) & 1)
    body_len = np.maximum(g.int(at + 68 + born + store, 4), 0)  # Java reads a body only when its length is positive
    body_at = at + 72 + born + store
    ends = at + total
    topic_len_at = body_at + body_len
    topic_len = np.where(v2, g.int(topic_len_at, 2) & 0xFFFF, data[np.clip(topic_len_at, 0, g.last)])
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + topic_len
    props_len = np.maximum(g.int(props_len_at, 2), 0)  # a negative short: no properties
    props_at = props_len_at + 2
    ok = (
        (topic_len_at + 3 <= ends) & np.where(v2, topic_len <= 32767, topic_len <= 127) & (props_at + props_len == ends)
    )
    n = len(starts)
    if not ok.all():
        n = int(np.argmin(ok))
        stop, reason = starts[n], STOP_BAD
    if crc is not None:
        failed = _first_crc_failure(buf, crc, at[:n], ends[:n], body_at[:n], topic_len_at[:n], g)
        if failed is not None:
            n, stop, reason = failed, starts[failed], STOP_BAD
    records = Records()
    if n == 0:
        return records, stop, reason
    topics = _topics(data, topic_at[:n], topic_len[:n])
    bad = _first_unreadable_delay(buf, topics, props_at, props_len)
    if bad is not None:
        n, stop, reason = bad, starts[bad], STOP_BAD
        if n == 0:
            return records, stop, reason
        topics = topics[:n]
    if n < len(starts):
        at, total, sys_flag, topic_at, topic_len = at[:n], total[:n], sys_flag[:n], topic_at[:n], topic_len[:n]
        props_at, props_len, born = props_at[:n], props_len[:n], born[:n]
    records.offsets = at + base_offset
    records.sizes = total
    records.sys_flags = sys_flag
    records.queue_ids = g.int(at + 12, 4)
    records.queue_offsets = g.int(at + 20, 8)
    records.store_ts = g.int(at + 48 + born, 8)
    records.topics = topics
    if properties:
        _properties(records, buf, data, props_at, props_len, delay_millis, strings)
    return records, stop, reason


def _first_unreadable_delay(
    buf: bytes | memoryview, topics: list[str], props_at: np.ndarray, props_len: np.ndarray
) -> int | None:
    """The first SCHEDULE_TOPIC_XXXX record whose DELAY Java's Integer.parseInt cannot read:
    RocketMQ's checkMessageAndReturnSize fails on it, so the log ends there (None: no such one)."""
    if SCHEDULE_TOPIC not in topics:
        return None
    for r, topic in enumerate(topics):
        if topic == SCHEDULE_TOPIC:
            start = int(props_at[r])
            text = property_value(b"\x02" + bytes(buf[start : start + int(props_len[r])]), b"\x02DELAY\x01")
            if text is not None and java_int(text) is None:
                return r
    return None


_BODY_CRC, _PROPERTY_CRC = 1, 2


def _first_crc_failure(
    buf: bytes | memoryview,
    crc: int,
    at: np.ndarray,
    ends: np.ndarray,
    body_at: np.ndarray,
    body_end: np.ndarray,
    g: _Gather,
) -> int | None:
    """The index of the first record whose body CRC (or, for ``_PROPERTY_CRC``, appended
    ``__CRC32#`` property) does not match its bytes; None when all do. An empty body's CRC field
    is not checked, as RocketMQ's checkMessageAndReturnSize reads no body then."""
    view = memoryview(buf)
    try:
        if crc == _PROPERTY_CRC:  # a record without the property fails too
            for i, (a, e) in enumerate(zip(at.tolist(), ends.tolist(), strict=True)):
                if not rec.check_crc_property(view[a:e]):
                    return i
            return None
        wanted = g.int(at + 8, 4).tolist()
        for i, (b, e, want) in enumerate(zip(body_at.tolist(), body_end.tolist(), wanted, strict=True)):
            if e > b and crc32(view[b:e]) & 0x7FFFFFFF != want:  # RocketMQ checks no empty body
                return i
        return None
    finally:
        view.release()


def _topics(data: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray) -> list[str]:
    """Every record's topic. A window holds few topics: records are grouped by the hash and
    length of their topic, each group's bytes checked equal, and one string made per group."""
    units, s, e = _compact(data, topic_at, topic_at + topic_len)
    key = (_segment_hashes(units, s, e).astype(np.int64) << 8) | np.minimum(topic_len, 255)
    _, first, which = np.unique(key, return_index=True, return_inverse=True)
    names = []
    for g, row in enumerate(first.tolist()):
        raw = units[s[row] : e[row]]
        members = np.flatnonzero(which == g)
        if len(members) > 1:  # make sure a hash collision cannot merge two topics
            same = (units[s[members, None] + np.arange(len(raw))] == raw).all(axis=1) if len(raw) else True
            if not np.all(same):
                return [topic_text(units[a:b].tobytes()) for a, b in zip(s.tolist(), e.tolist(), strict=True)]
        names.append(topic_text(raw.tobytes()))
    return [names[g] for g in which.tolist()]


_TAGS, _KEYS, _UNIQ = b"TAGS\x01", b"KEYS\x01", b"UNIQ_KEY\x01"


def _properties(
    records: Records,
    buf: bytes | memoryview,
    data: np.ndarray,
    props_at: np.ndarray,
    props_len: np.ndarray,
    delay_millis: tuple[int, ...],
    strings: bool,
) -> None:
    """Tags codes and index keys of every record, found in the property strings all at once.

    The property strings are laid back to back and cut at their separators into name/value
    segments; a segment whose first bytes are ``TAGS\x01`` (and so on) holds that property.
    """
    n = len(props_at)
    lengths = props_len
    flat_starts = np.cumsum(lengths) - lengths
    region_end = flat_starts + lengths
    flat_len = int(lengths.sum())
    index = np.repeat((props_at - flat_starts).astype(np.int32), lengths)
    index += np.arange(flat_len, dtype=np.int32)
    flat = data[index]
    del index
    seps = np.flatnonzero(flat == 2)
    seg_start = np.sort(np.concatenate((flat_starts[lengths > 0], seps + 1)), kind="stable")
    seg_start = seg_start[seg_start < flat_len]
    owner = np.searchsorted(flat_starts, seg_start, side="right") - 1
    if len(seps):
        next_sep = np.searchsorted(seps, seg_start, side="left")
        sep_at = np.where(next_sep < len(seps), seps[np.minimum(next_sep, len(seps) - 1)], flat_len)
    else:
        sep_at = np.full(len(seg_start), flat_len, dtype=np.int64)
    seg_end = np.minimum(sep_at, region_end[owner])
    seg_first = flat[np.minimum(seg_start, max(flat_len - 1, 0))]

    def values(marker: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) in ``flat`` of each record's value for ``marker``; (-1, -1) when absent."""
        start = np.full(n, -1, dtype=np.int64)
        stop = np.full(n, -1, dtype=np.int64)
        width = len(marker)
        # a name, its 0x01 and a non-empty value; the first byte tells most segments apart
        fits = np.flatnonzero((seg_first == marker[0]) & (seg_end - seg_start > width))
        if len(fits):
            head = flat[seg_start[fits, None] + _SPAN_OF(width)]
            match = fits[(head == np.frombuffer(marker, dtype=np.uint8)).all(axis=1)]
            if len(match):
                # segments come in order, so assigning them in order leaves the last one per record
                rows = owner[match]
                start[rows] = seg_start[match] + width
                stop[rows] = seg_end[match]
        return start, stop

    tag_start, tag_stop = values(_TAGS)
    tags = np.zeros(n, dtype=np.int64)
    rows = np.flatnonzero(tag_start >= 0)
    if len(rows):
        units, s, e = _compact(flat, tag_start[rows], tag_stop[rows])
        tags[rows] = _segment_hashes(units, s, e).view(np.int32).astype(np.int64)
        for i in np.flatnonzero(~_all_ascii(units, s, e)).tolist():  # Java hashes UTF-16 units
            r = int(rows[i])
            tags[r] = tags_code(flat[tag_start[r] : tag_stop[r]].tobytes().decode("utf-8", "replace"))
    if SCHEDULE_TOPIC in records.topics:
        store_ts = records.store_ts.tolist()
        for r, topic in enumerate(records.topics):
            if topic == SCHEDULE_TOPIC:
                props = flat[flat_starts[r] : region_end[r]].tobytes()
                deliver = delay_tags_code(props, store_ts[r], delay_millis)
                if deliver is not None:
                    tags[r] = deliver
    records.tags = tags

    uniq = values(_UNIQ)
    keys = values(_KEYS)
    records.index_tokens = (_tokens(flat, *uniq, split=False), _tokens(flat, *keys))
    if strings:
        records.uniqs = _strings(flat, *uniq)
        records.keys = _strings(flat, *keys)
    else:
        records.uniqs = records.keys = None


def _SPAN_OF(width: int) -> np.ndarray:
    span = _SPAN.get(width)
    if span is None:
        span = _SPAN[width] = np.arange(width, dtype=np.int64)
    return span


def _compact(flat: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bytes of the ranges back to back, with the ranges' new bounds."""
    lengths = stop - start
    new_stop = np.cumsum(lengths)
    new_start = new_stop - lengths
    index = np.repeat(start - new_start, lengths)
    index += np.arange(len(index), dtype=index.dtype)
    return flat[index], new_start, new_stop


def _all_ascii(units: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Per range, whether every byte is ASCII."""
    high = np.concatenate(([0], np.cumsum(units >= 128)))
    return high[stop] - high[start] == 0


def _tokens(flat: np.ndarray, start: np.ndarray, stop: np.ndarray, split: bool = True) -> tuple:
    """Index tokens (space-separated words; with ``split`` False the whole value, as for UNIQ_KEY)
    of each record's value: (hashes, lengths, owners)."""
    rows = np.flatnonzero(start >= 0)
    if not len(rows):
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=np.uint32), empty, empty
    units, s, e = _compact(flat, start[rows], stop[rows])
    if not split or not (units == 32).any():  # one token per value: the common case
        t_start, t_stop, owner = s, e, rows
    else:
        word = units != 32
        breaks = np.zeros(len(units) + 1, dtype=bool)
        breaks[s] = True  # the ranges lie back to back: each range start begins a new word
        edge_in = word & (breaks[:-1] | ~np.concatenate(([False], word[:-1])))
        edge_out = word & (breaks[1:] | ~np.concatenate((word[1:], [False])))
        t_start = np.flatnonzero(edge_in)
        t_stop = np.flatnonzero(edge_out) + 1
        owner = rows[np.searchsorted(s, t_start, side="right") - 1]
    lengths = t_stop - t_start
    hashes = _segment_hashes(units, t_start, t_stop)
    ascii_ok = _all_ascii(units, t_start, t_stop)
    if not ascii_ok.all():  # Java hashes UTF-16 units: redo the tokens holding other characters
        for i in np.flatnonzero(~ascii_ok).tolist():
            token = units[t_start[i] : t_stop[i]].tobytes().decode("utf-8", "replace")
            hashes[i] = java_hash(token) & 0xFFFFFFFF
            lengths[i] = len(token.encode("utf-16-be", "surrogatepass")) // 2
    return hashes, lengths, owner


def _strings(flat: np.ndarray, start: np.ndarray, stop: np.ndarray) -> list[str | None]:
    text = flat.tobytes()
    pairs = zip(start.tolist(), stop.tolist(), strict=True)
    return [None if s < 0 else text[s:e].decode("utf-8", "replace") for s, e in pairs]


def scan(
    buf: bytes | memoryview,
    pos: int,
    end: int,
    base_offset: int,
    *,
    check_crc: bool,
    delay_millis: tuple[int, ...] = (),
    limit: int | None = None,
) -> tuple[list[tuple], int, int]:
    """``scan_records`` as dispatch request tuples (one per record, keys as strings)."""
    records, stop, reason = scan_records(
        buf, pos, end, base_offset, check_crc=check_crc, delay_millis=delay_millis, limit=limit, strings=True
    )
    return records.to_requests(), stop, reason
