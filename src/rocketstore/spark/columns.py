"""Commit-log records -> Arrow columns, a whole window of records at once.

The records of a segment are found by walking it (each record's length says where the next
starts) or given by consume-queue units. Everything else is numpy and Arrow compute: the fixed
headers are gathered as rows of a structured dtype, each record is checked as ``decode_record``
checks it, and the variable-length fields (body, topic, property names and values) become Arrow
*binary views* into the mapped segment, which one Arrow cast turns into ordinary columns. No
Python object is made per record, except where a property string holds a name twice or bytes
that are not UTF-8 (then that window is decoded record by record, exactly as the export does).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import as_strided

from rocketstore.codec import record as rec
from rocketstore.codec.hosts import format_host
from rocketstore.codec.scan import STOP_BAD, STOP_BLANK, STOP_END, STOP_LIMIT

V1 = rec.MESSAGE_MAGIC_CODE
V2 = rec.MESSAGE_MAGIC_CODE_V2
BLANK = rec.BLANK_MAGIC_CODE
_INT2 = struct.Struct(">ii")
_INT = struct.Struct(">i")
_AR = {w: np.arange(w, dtype=np.int64) for w in (1, 2, 4, 8, 12)}
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_TS = pa.timestamp("us", tz="UTC")
# the epoch milliseconds of 0001-01-03 and of the last one of 9999-12-29 (UTC): what a TIMESTAMP
# holds for Python in any time zone (collect() makes local datetimes, within years 1-9999, and
# CPython looks a day around); a time outside (an imported bornTimestamp may be any Java long)
# reads as null rather than wrapping round or failing the collect
_FIRST_MS, _LAST_MS = -62135424000000, 253402127999999


def timestamps(ms: np.ndarray) -> pa.Array:
    """Epoch milliseconds as a TIMESTAMP column (microseconds, UTC); null outside 0001-01-03 to 9999-12-29."""
    ms = np.asarray(ms, dtype=np.int64)
    outside = (ms < _FIRST_MS) | (ms > _LAST_MS)
    us = np.where(outside, 0, ms) * 1000
    return pa.array(us, type=pa.int64(), mask=outside if outside.any() else None).cast(_TS)


_MAP = pa.map_(pa.string(), pa.string())


def _header_dtype(born: int, store: int) -> np.dtype:
    return np.dtype(
        [
            ("total", ">i4"),
            ("magic", ">i4"),
            ("crc", ">i4"),
            ("qid", ">i4"),
            ("flag", ">i4"),
            ("qoff", ">i8"),
            ("phy", ">i8"),
            ("sysflag", ">i4"),
            ("born_ts", ">i8"),
            ("born_host", f"V{born}"),
            ("store_ts", ">i8"),
            ("store_host", f"V{store}"),
            ("reconsume", ">i4"),
            ("prepared", ">i8"),
            ("body_len", ">i4"),
        ]
    )


# header layouts by the IPv6 bits of SYSFLAG (0x10 born host, 0x20 store host)
_LAYOUTS = tuple(((b, s), _header_dtype(b, s)) for b, s in ((8, 8), (20, 8), (8, 20), (20, 20)))
_NUMERIC = ("total", "magic", "crc", "qid", "flag", "qoff", "phy", "sysflag", "born_ts", "store_ts")
_NUMERIC += ("reconsume", "prepared", "body_len")


def walk(buf: bytes | memoryview, pos: int, end: int, stop_at: int | None = None) -> tuple[np.ndarray, int, int]:
    """Record starts from ``pos``: (starts, stop position, reason as in codec.scan).

    Follows each record's TOTALSIZE while a V1/V2 magic code is there and the record fits before
    ``end``; no record starting at or after ``stop_at`` is taken (STOP_LIMIT). Stops at the
    end-of-file marker (STOP_BLANK), at zeros or the end (STOP_END), or at anything else (STOP_BAD).
    """
    limit = end if stop_at is None else min(stop_at, end)
    starts: list[int] = []
    add = starts.append
    unpack2 = _INT2.unpack_from
    reason = STOP_END
    while True:
        if pos >= limit:
            reason = STOP_LIMIT if pos < end else STOP_END
            break
        left = end - pos
        if left <= 4:
            break
        if left < 8:
            reason = STOP_END if _INT.unpack_from(buf, pos)[0] == 0 else STOP_BAD
            break
        total, magic = unpack2(buf, pos)
        if magic in (V1, V2):
            if total < 91 or total > left:
                reason = STOP_BAD
                break
            add(pos)
            pos += total
        elif magic == BLANK:
            reason = STOP_BLANK
            break
        else:
            reason = STOP_END if total == 0 and magic == 0 else STOP_BAD
            break
    return np.array(starts, dtype=np.int64), pos, reason


_MAGIC_HEAD = np.frombuffer(struct.pack(">i", V1)[:3], dtype=np.uint8)
_MAGIC_LAST = (struct.pack(">i", V1)[3], struct.pack(">i", V2)[3])


def find_record(data: np.ndarray, pos: int, stop: int, limit: int, base: int) -> int | None:
    """The first record start in [pos, stop): a V1/V2 magic code whose PHYSICALOFFSET field is the
    record's own offset (``base`` + position) and whose fields add up. None if there is none."""
    step = 1 << 20
    a0, a1, a2 = (int(x) for x in _MAGIC_HEAD)
    while pos < stop:
        hi = min(stop, pos + step)
        window = data[pos + 4 : min(hi + 8, limit)]
        if len(window) < 4:
            return None
        m = (window[:-3] == a0) & (window[1:-2] == a1) & (window[2:-1] == a2)
        m &= (window[3:] == _MAGIC_LAST[0]) | (window[3:] == _MAGIC_LAST[1])
        cand = np.flatnonzero(m) + pos
        cand = cand[(cand < hi) & (cand + 91 <= limit)]
        if len(cand):
            phys = _ints(data, cand + 28, 8)
            cand = cand[phys == cand + base]
            if len(cand):
                ok = read_headers(data, cand, limit).ok
                if ok.any():
                    return int(cand[int(np.argmax(ok))])
        pos = hi
    return None


def _gather(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each position, shape (n, width); bytes past the buffer's end read as the
    buffer's last byte (callers check lengths against the end themselves)."""
    size = len(data)
    if size < width or size == 0:
        span = np.arange(width, dtype=np.int64)
        return data[np.minimum(at[:, None] + span, size - 1)] if size else np.zeros((len(at), width), np.uint8)
    windows = as_strided(data, shape=(size - width + 1, width), strides=(data.strides[0], data.strides[0]))
    last = size - width
    clipped = np.minimum(at, last)
    out = windows[clipped]
    for row in np.flatnonzero(clipped != at).tolist():  # only near the very end of the buffer
        span = np.minimum(at[row] + np.arange(width), size - 1)
        out[row] = data[span]
    return out


def _ints(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned integers of ``width`` bytes at each position."""
    raw = _gather(data, at, width)
    return raw.view(f">u{width}").reshape(-1).astype(np.int64)


class Headers:
    """The checked fixed headers of records at given positions of a buffer."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.fields: dict[str, np.ndarray] = {}
        self.born_host = np.zeros((n, 20), dtype=np.uint8)
        self.store_host = np.zeros((n, 20), dtype=np.uint8)
        self.born_v6 = np.zeros(n, dtype=bool)
        self.store_v6 = np.zeros(n, dtype=bool)
        self.body_at = self.topic_at = self.topic_len = self.props_at = self.props_len = np.zeros(0, np.int64)
        self.ok = np.zeros(n, dtype=bool)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fields[name]

    def select(self, rows: np.ndarray) -> Headers:
        out = Headers(len(rows))
        out.fields = {k: v[rows] for k, v in self.fields.items()}
        for name in ("born_host", "store_host", "born_v6", "store_v6", "body_at", "topic_at", "topic_len"):
            setattr(out, name, getattr(self, name)[rows])
        out.props_at, out.props_len, out.ok = self.props_at[rows], self.props_len[rows], self.ok[rows]
        return out


def read_headers(data: np.ndarray, pos: np.ndarray, limit: int, sizes: np.ndarray | None = None) -> Headers:
    """Headers of the records starting at ``pos``; ``ok`` marks the records ``decode_record``
    accepts that end by ``limit`` (and, with ``sizes``, are exactly that long)."""
    n = len(pos)
    h = Headers(n)
    fields = {name: np.zeros(n, dtype=np.int64) for name in _NUMERIC}
    ok = (pos >= 0) & (pos + 40 <= limit)
    if not ok.any():
        h.fields, h.ok = fields, ok
        h.body_at = h.topic_at = h.topic_len = h.props_at = h.props_len = np.zeros(n, np.int64)
        return h
    layout = np.zeros(n, dtype=np.int64)
    layout[ok] = (_ints(data, pos[ok] + 36, 4) >> 4) & 3
    header_size = np.zeros(n, dtype=np.int64)
    for code, ((born, store), dtype) in enumerate(_LAYOUTS):
        rows = np.flatnonzero(ok & (layout == code))
        if not len(rows):
            continue
        width = dtype.itemsize
        fits = pos[rows] + width <= limit
        ok[rows[~fits]] = False
        rows = rows[fits]
        if not len(rows):
            continue
        raw = _gather(data, pos[rows], width)
        hdr = raw.view(dtype).reshape(-1)
        whole = len(rows) == n
        for name in _NUMERIC:
            if whole:
                fields[name] = hdr[name].astype(np.int64)
            else:
                fields[name][rows] = hdr[name]
        h.born_host[rows, :born] = raw[:, 48 : 48 + born]
        h.store_host[rows, :store] = raw[:, 56 + born : 56 + born + store]
        h.born_v6[rows] = born == 20
        h.store_v6[rows] = store == 20
        header_size[rows] = width
    body_len = fields["body_len"] = np.maximum(fields["body_len"], 0)  # Java reads no body for BODYLEN <= 0
    total, magic = fields["total"], fields["magic"]
    v2 = magic == V2
    ok &= (magic == V1) | v2
    ok &= (total > 0) & (pos + total <= limit)
    if sizes is not None:
        ok &= total == sizes
    body_at = pos + header_size
    tl_at = body_at + body_len
    ok &= tl_at + 3 <= pos + total
    safe_tl = np.where(ok, tl_at, 0)
    topic_len = np.where(v2, _ints(data, safe_tl, 2), _ints(data, safe_tl, 1))
    ok &= np.where(v2, topic_len <= 32767, topic_len <= 127)
    topic_at = tl_at + np.where(v2, 2, 1)
    pl_at = topic_at + topic_len
    props_len = _ints(data, np.where(ok, pl_at, 0), 2)
    props_len[props_len > 32767] = 0
    props_at = pl_at + 2
    ok &= props_at + props_len == pos + total
    h.fields, h.ok = fields, ok
    h.body_at, h.topic_at, h.topic_len, h.props_at, h.props_len = body_at, topic_at, topic_len, props_at, props_len
    return h


# -- Arrow arrays out of byte ranges -------------------------------------------------------------


def binary_ranges(data: np.ndarray, buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of ``buffer[start:start+length]`` per row (one copy, done by Arrow)."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    # a view: length, then 12 inline bytes (length <= 12) or a 4-byte prefix, buffer 0, offset
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = lengths
    views[:, 2] = 0
    views[:, 3] = starts
    raw = views.view(np.uint8).reshape(n, 16)
    raw[:, 4:8] = _gather(data, starts, 4) if len(data) else 0
    short = np.flatnonzero(lengths <= 12)
    if len(short):
        head = _gather(data, starts[short], 12) if len(data) else np.zeros((len(short), 12), np.uint8)
        raw[short, 4:16] = np.where(_AR[12][None, :] < lengths[short, None], head, 0)
    array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), buffer])
    return array.cast(pa.binary())


def as_strings(array: pa.Array) -> pa.Array:
    """Binary -> string; bytes that are not UTF-8 are replaced (as ``decode('utf-8', 'replace')``)."""
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in array.to_pylist()], type=pa.string()
        )


def _fixed_strings(chars: np.ndarray, widths: np.ndarray) -> pa.Array:
    """Rows of ASCII ``chars`` (n, w), each cut to its width, as a string array."""
    n = len(widths)
    if n and (widths == chars.shape[1]).all():
        flat = np.ascontiguousarray(chars).reshape(-1)
    else:
        flat = chars[np.arange(chars.shape[1])[None, :] < widths[:, None]]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(widths, out=offsets[1:])
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(flat.tobytes()))


def hosts(raw: np.ndarray, v6: np.ndarray) -> pa.Array:
    """``ip:port`` text of 8/20-byte stored hosts: formatted once per distinct host."""
    n = len(v6)
    if n == 0:
        return pa.array([], pa.string())
    if not v6.any():
        keys = np.ascontiguousarray(raw[:, :8]).view(">u8").reshape(-1)
        uniq, inverse = np.unique(keys, return_inverse=True)
        texts = [format_host(int(k).to_bytes(8, "big")) for k in uniq.tolist()]
    else:
        table = np.zeros((n, 21), dtype=np.uint8)
        table[:, 0] = v6
        table[:, 1:] = raw
        uniq, inverse = np.unique(table.view("V21").reshape(-1), return_inverse=True)
        texts = []
        for u in uniq:
            b = bytes(u)
            texts.append(format_host(b[1:21] if b[0] else b[1:9]))
    return pa.array(texts, type=pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int64)))


def msg_ids(store_host: np.ndarray, v6: np.ndarray, phy: np.ndarray) -> pa.Array:
    """Offset message ids: upper-case hex of store host + port + commit-log offset."""
    n = len(phy)
    width = np.where(v6, 28, 16)
    raw = np.zeros((n, 28), dtype=np.uint8)
    offset_bytes = phy.astype(">i8").view(np.uint8).reshape(n, 8)
    plain = ~v6
    raw[plain, :8] = store_host[plain, :8]
    raw[plain, 8:16] = offset_bytes[plain]
    raw[v6, :20] = store_host[v6]
    raw[v6, 20:28] = offset_bytes[v6]
    chars = np.empty((n, 56), dtype=np.uint8)
    chars[:, 0::2] = _HEX[raw >> 4]
    chars[:, 1::2] = _HEX[raw & 15]
    if not v6.any():
        chars = chars[:, :32]
    return _fixed_strings(chars, width * 2)


# -- properties --------------------------------------------------------------------------------------


class Properties:
    """The name/value pairs of each record's property string.

    Arrow splits the strings at 0x02, and each segment at its first 0x01; segments without a
    name or a value are dropped, as RocketMQ's parser drops them.
    """

    def __init__(self, props: pa.Array) -> None:
        n = len(props)
        self.n = n
        segments = pc.split_pattern(props, pattern=b"\x02")
        counts = segments.value_lengths().to_numpy(zero_copy_only=False)
        flat = segments.flatten()
        one = pc.find_substring(flat, pattern=b"\x01").to_numpy(zero_copy_only=False)
        length = pc.binary_length(flat).to_numpy(zero_copy_only=False)
        keep = np.flatnonzero((one > 0) & (length > one + 1))
        self.owner = np.repeat(np.arange(n, dtype=np.int64), counts)[keep]
        pairs = pc.split_pattern(flat.take(pa.array(keep)), pattern=b"\x01", max_splits=1).flatten()
        m = len(keep)
        self.names = as_strings(pairs.take(pa.array(np.arange(0, 2 * m, 2))))
        self.values = as_strings(pairs.take(pa.array(np.arange(1, 2 * m, 2))))
        encoded = self.names.dictionary_encode()
        self.name_index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        self.dictionary = {name: i for i, name in enumerate(encoded.dictionary.to_pylist())}

    def has_duplicates(self) -> bool:
        """True when some record holds a name twice (the dict keeps the last: decoded in Python)."""
        if len(self.owner) < 2:
            return False
        key = np.sort(self.owner * max(1, len(self.dictionary)) + self.name_index)
        return bool((key[1:] == key[:-1]).any())

    def map_array(self) -> pa.Array:
        offsets = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(np.bincount(self.owner, minlength=self.n), out=offsets[1:])
        return pa.MapArray.from_arrays(pa.array(offsets), self.names, self.values).cast(_MAP)

    def column(self, name: str) -> pa.Array:
        """The value of one property per record (null where absent)."""
        index = np.full(self.n, -1, dtype=np.int64)
        code = self.dictionary.get(name)
        if code is not None:
            hit = np.flatnonzero(self.name_index == code)
            index[self.owner[hit]] = hit
        return self.values.take(pa.array(index, mask=index < 0))


# -- whole batches ------------------------------------------------------------------------------------


def build_batch(
    data: np.ndarray, buffer: pa.Buffer, h: Headers, pos: np.ndarray, columns: list[str], schema: pa.Schema
) -> pa.RecordBatch:
    """A RecordBatch of ``columns`` for records whose headers ``h`` were read (all rows ``ok``)."""
    if h.n == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    f = h.fields
    out: dict[str, pa.Array] = {}
    want = set(columns)
    prop_cols = want & {"tags", "keys", "uniqKey", "properties"}
    if prop_cols:
        props = Properties(binary_ranges(data, buffer, h.props_at, h.props_len))
        if props.has_duplicates():
            return _python_batch(data, pos, f["total"], columns, schema)
        if "properties" in want:
            out["properties"] = props.map_array()
        for column, name in (("tags", "TAGS"), ("keys", "KEYS"), ("uniqKey", "UNIQ_KEY")):
            if column in want:
                out[column] = props.column(name)
    for name in columns:
        if name in out:
            continue
        if name == "topic":
            out[name] = as_strings(binary_ranges(data, buffer, h.topic_at, h.topic_len))
        elif name == "body":
            out[name] = binary_ranges(data, buffer, h.body_at, f["body_len"])
        elif name in ("bornTimestamp", "storeTimestamp"):
            ms = f["born_ts" if name == "bornTimestamp" else "store_ts"]
            out[name] = timestamps(ms)
        elif name == "bornHost":
            out[name] = hosts(h.born_host, h.born_v6)
        elif name == "storeHost":
            out[name] = hosts(h.store_host, h.store_v6)
        elif name == "msgId":
            out[name] = msg_ids(h.store_host, h.store_v6, f["phy"])
        else:
            source, kind = _PLAIN[name]
            out[name] = pa.array(f[source].astype(kind))
    return pa.RecordBatch.from_arrays([out[c] for c in columns], schema=schema)


_PLAIN = {
    "queueId": ("qid", np.int32),
    "queueOffset": ("qoff", np.int64),
    "commitLogOffset": ("phy", np.int64),
    "storeSize": ("total", np.int32),
    "sysFlag": ("sysflag", np.int32),
    "flag": ("flag", np.int32),
    "bodyCRC": ("crc", np.int32),
    "reconsumeTimes": ("reconsume", np.int32),
    "preparedTransactionOffset": ("prepared", np.int64),
}


def _python_batch(
    data: np.ndarray, pos: np.ndarray, totals: np.ndarray, columns: list[str], schema: pa.Schema
) -> pa.RecordBatch:
    """The same batch decoded record by record (``StoredMessage.to_json_dict``'s values)."""
    rows: dict[str, list] = {c: [] for c in columns}
    for p, t in zip(pos.tolist(), totals.tolist(), strict=True):
        msg = rec.decode_record(data[p : p + t].tobytes())
        assert msg is not None
        props = msg.properties
        values = {
            "topic": msg.topic,
            "queueId": msg.queue_id,
            "queueOffset": msg.queue_offset,
            "commitLogOffset": msg.commit_log_offset,
            "storeSize": msg.store_size,
            "sysFlag": msg.sys_flag,
            "flag": msg.flag,
            "tags": props.get("TAGS"),
            "keys": props.get("KEYS"),
            "properties": list(props.items()),
            "body": msg.body,
            "bodyCRC": msg.body_crc,
            "bornTimestamp": msg.born_timestamp,
            "storeTimestamp": msg.store_timestamp,
            "bornHost": msg.born_host,
            "storeHost": msg.store_host,
            "reconsumeTimes": msg.reconsume_times,
            "preparedTransactionOffset": msg.prepared_transaction_offset,
            "msgId": msg.msg_id,
            "uniqKey": props.get("UNIQ_KEY"),
        }
        for c in columns:
            rows[c].append(values[c])
    arrays = [
        timestamps(np.array(rows[c], dtype=np.int64))
        if c in ("bornTimestamp", "storeTimestamp")
        else pa.array(rows[c], type=schema.field(c).type)
        for c in columns
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def decode_window(
    data: np.ndarray,
    buffer: pa.Buffer,
    pos: np.ndarray,
    limit: int,
    columns: list[str],
    schema: pa.Schema,
    sizes: np.ndarray | None = None,
) -> tuple[pa.RecordBatch, np.ndarray]:
    """(batch of the valid records among ``pos``, the ok mask over ``pos``)."""
    h = read_headers(data, pos, limit, sizes)
    ok = h.ok
    if not ok.all():
        rows = np.flatnonzero(ok)
        h = h.select(rows)
        pos = pos[rows]
    return build_batch(data, buffer, h, pos, columns, schema), ok


__all__ = ["STOP_BAD", "STOP_BLANK", "STOP_END", "STOP_LIMIT", "decode_window", "read_headers", "walk"]
