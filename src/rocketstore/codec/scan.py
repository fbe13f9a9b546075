"""Walking the records of a commit-log segment (``checkMessageAndReturnSize``, spec 3.9).

``scan`` turns a stretch of a segment into dispatch requests, the facts the consume queues and
the index need about each record, as plain tuples (field positions below). It stops at the
end-of-file marker, at zeros, or at the first record that fails a check, and says which.
"""

from __future__ import annotations

import struct

from rocketstore.codec import record as rec
from rocketstore.codec.crc import crc32
from rocketstore.codec.ids import tags_code
from rocketstore.codec.properties import property_value
from rocketstore.codec.topic import SCHEDULE_TOPIC, topic_text

# Positions in a dispatch request tuple (one record). A batch request, from the put path, has the
# first record's fields with lists for the tags codes, keys and unique keys, plus the sizes.
D_TOPIC, D_QUEUE_ID, D_OFFSET, D_SIZE, D_TAGS_CODE, D_STORE_TS, D_QUEUE_OFFSET, D_KEYS, D_UNIQ, D_SYSFLAG = range(10)

REQUEST_LEN = 10
BATCH_LEN = 11
D_SIZES = 10  # in a batch request: the size of each record (D_SIZE holds their sum)


def batch_request(
    topic: str,
    queue_id: int,
    first_offset: int,
    sizes: list[int],
    tags_codes: list[int],
    store_timestamp: int,
    first_queue_offset: int,
    keys: list[str | None],
    uniq_keys: list[str | None],
) -> tuple:
    """The request of a batch of plain records stored back to back."""
    return (
        topic,
        queue_id,
        first_offset,
        sum(sizes),
        tags_codes,
        store_timestamp,
        first_queue_offset,
        keys,
        uniq_keys,
        0,
        sizes,
    )


# Why a scan stopped.
STOP_END = 0  # zeros or not enough bytes left: the end of written data
STOP_BLANK = 1  # the end-of-file marker: continue in the next file
STOP_BAD = 2  # a record that fails a check (torn, corrupted, CRC)
STOP_LIMIT = 3  # reached ``limit``: more records may follow

_INT2 = struct.Struct(">ii")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_HEADERS = rec.HEADERS
_V1 = rec.MESSAGE_MAGIC_CODE
_V2 = rec.MESSAGE_MAGIC_CODE_V2
_BLANK = rec.BLANK_MAGIC_CODE

_P_TAGS = b"\x02TAGS\x01"
_P_KEYS = b"\x02KEYS\x01"
_P_UNIQ = b"\x02UNIQ_KEY\x01"
_P_DELAY = b"\x02DELAY\x01"


def delay_tags_code(props: bytes, store_ts: int, delay_millis: tuple[int, ...]) -> int | None:
    """The deliver time a SCHEDULE_TOPIC_XXXX consume-queue unit holds, or None without DELAY."""
    raw = property_value(props, _P_DELAY)
    if raw is None:
        return None
    try:
        level = int(raw)
    except ValueError:
        return None
    level = min(level, len(delay_millis))
    if level <= 0:
        return None
    return store_ts + delay_millis[level - 1]


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
    """Dispatch requests for the records in ``buf[pos:end]``.

    ``base_offset`` is the commit-log offset of ``buf[0]``; no record starts at or after
    ``limit`` (default ``end``), though one may run past it up to ``end``. Returns (requests,
    stop position, reason) where the stop position is just after the last good record (or at
    the BLANK marker).
    """
    out: list[tuple] = []
    append = out.append
    unpack2 = _INT2.unpack_from
    unpack_int = _INT.unpack_from
    unpack_short = _SHORT.unpack_from
    if limit is None or limit > end:
        limit = end
    while end - pos > 4:
        if pos >= limit:
            return out, pos, STOP_LIMIT
        total, magic = unpack2(buf, pos) if end - pos >= 8 else (unpack_int(buf, pos)[0], 0)
        if magic != _V1 and magic != _V2:
            if magic == _BLANK:
                return out, pos, STOP_BLANK
            return out, pos, (STOP_END if total == 0 and magic == 0 else STOP_BAD)
        rec_end = pos + total
        if total < 91 or rec_end > end:
            return out, pos, STOP_BAD
        sys_flag = unpack_int(buf, pos + 36)[0]
        header = _HEADERS[(sys_flag >> 4) & 3]
        h = header.unpack_from(buf, pos)
        body_len = h[14]
        p = pos + header.size
        if body_len < 0 or p + body_len > rec_end:
            return out, pos, STOP_BAD
        if check_crc and body_len > 0 and (crc32(buf[p : p + body_len]) & 0x7FFFFFFF) != h[2]:
            return out, pos, STOP_BAD
        p += body_len
        if magic == _V1:
            topic_len = buf[p]
            if topic_len > 127:
                return out, pos, STOP_BAD
            p += 1
        else:
            topic_len = unpack_short(buf, p)[0]
            if topic_len < 0:
                return out, pos, STOP_BAD
            p += 2
        if p + topic_len + 2 > rec_end:
            return out, pos, STOP_BAD
        topic = topic_text(bytes(buf[p : p + topic_len]))
        p += topic_len
        props_len = unpack_short(buf, p)[0]
        p += 2
        if props_len < 0:
            props_len = 0
        if p + props_len != rec_end:
            return out, pos, STOP_BAD
        keys = uniq = None
        tags = 0
        if props_len:
            props = b"\x02" + bytes(buf[p:rec_end])
            raw = property_value(props, _P_TAGS)
            if raw is not None:
                tags = tags_code(raw.decode("utf-8", "replace"))
            raw = property_value(props, _P_KEYS)
            if raw is not None:
                keys = raw.decode("utf-8", "replace")
            raw = property_value(props, _P_UNIQ)
            if raw is not None:
                uniq = raw.decode("utf-8", "replace")
            if topic == SCHEDULE_TOPIC:
                deliver = delay_tags_code(props, h[10], delay_millis)
                if deliver is not None:
                    tags = deliver
        append((topic, h[3], base_offset + pos, total, tags, h[10], h[5], keys, uniq, sys_flag))
        pos = rec_end
    return out, pos, STOP_END
