"""CommitLog records: encode and decode (spec section 3).

A record is a fixed header (its width depends on the IPv6 host bits of SYSFLAG), the body, the
topic (1-byte length in V1, 2 bytes in V2) and the properties (2-byte length). Encoding is split
in two: ``prepare`` does everything that does not depend on where the record lands, ``render``
adds the queue offset, commit-log offset and store time under the put lock.
"""

from __future__ import annotations

import struct

from rocketstore.codec import sysflag as sf
from rocketstore.codec.crc import crc32
from rocketstore.codec.message import StoredMessage
from rocketstore.errors import RecordError

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, V1
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB, V2 (2-byte topic length)
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end of file
END_FILE_MIN_BLANK_LENGTH = 8
CRC32_RESERVED_LEN = len("__CRC32#") + 1 + 10 + 1

MAGIC_POSITION = 4
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
BORN_TIMESTAMP_POSITION = 40
PROPERTIES_MAX_LENGTH = 32767
TOPIC_MAX_BYTES_V1 = 127

# The header up to and including BODYLEN, one struct per (born v6, store v6) combination.
# Fields: total, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag,
# bornTimestamp, bornHost, storeTimestamp, storeHost, reconsumeTimes, preparedTxOffset, bodyLen.
HEADERS = tuple(struct.Struct(f">iiiiiqqiq{born}sq{store}siqi") for born, store in ((8, 8), (20, 8), (8, 20), (20, 20)))
_INT = struct.Struct(">i")
_INT2 = struct.Struct(">ii")
_SHORT = struct.Struct(">h")
_LONG = struct.Struct(">q")
_BYTE = [bytes((i,)) for i in range(256)]


def header_for(sys_flag: int) -> struct.Struct:
    return HEADERS[(sys_flag >> 4) & 3]


def store_timestamp_position(sys_flag: int) -> int:
    return 68 if sys_flag & sf.BORNHOST_V6_FLAG else 56


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, v2: bool = False) -> int:
    """TOTALSIZE of a record (``calMsgLength``)."""
    return header_for(sys_flag).size + body_len + (2 if v2 else 1) + topic_len + 2 + props_len


# A prepared record is a plain tuple (cheap to build on the put path); its fields:
P_HEADER, P_TOTAL, P_MAGIC, P_CRC, P_QUEUE_ID, P_FLAG, P_SYSFLAG, P_BORN_TS = range(8)
P_BORN_HOST, P_STORE_HOST, P_RECONSUME, P_PREPARED_OFFSET, P_BODY, P_TAIL, P_APPEND_CRC = range(8, 15)
# ... followed by what dispatch needs: tags code, KEYS, UNIQ_KEY
P_TAGS_CODE, P_KEYS, P_UNIQ = range(15, 18)

Prepared = tuple


def prepare(
    topic: bytes,
    body: bytes,
    props: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_host: bytes,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    tags_code: int = 0,
    keys: str | None = None,
    uniq_key: str | None = None,
    *,
    v2: bool = False,
    append_crc: bool = False,
) -> Prepared:
    """Check lengths and build what does not depend on the record's place in the log.

    ``sys_flag`` gets its IPv6 bits from the host widths. Raises RecordError for a property
    string over 32767 bytes or a topic too long for its version.
    """
    sys_flag &= ~(sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG)
    if len(born_host) == 20:
        sys_flag |= sf.BORNHOST_V6_FLAG
    if len(store_host) == 20:
        sys_flag |= sf.STOREHOSTADDRESS_V6_FLAG
    props_len = len(props)
    if append_crc:
        if props and not props.endswith(b"\x02"):
            props += b"\x02"
        props_len = len(props) + CRC32_RESERVED_LEN
    if props_len > PROPERTIES_MAX_LENGTH:
        raise RecordError(f"the properties are {props_len} bytes; at most {PROPERTIES_MAX_LENGTH} fit")
    if v2:
        tail = _SHORT.pack(len(topic)) + topic + _SHORT.pack(props_len) + props
    else:
        if len(topic) > TOPIC_MAX_BYTES_V1:
            raise RecordError(f"the topic is {len(topic)} bytes; a V1 record holds at most {TOPIC_MAX_BYTES_V1}")
        tail = b"".join((_BYTE[len(topic)], topic, _SHORT.pack(props_len), props))
    header = HEADERS[(sys_flag >> 4) & 3]
    return (
        header,
        header.size + len(body) + len(tail) + (CRC32_RESERVED_LEN if append_crc else 0),
        MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE,
        crc32(body) & 0x7FFFFFFF,
        queue_id,
        flag,
        sys_flag,
        born_timestamp,
        born_host,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        tail,
        append_crc,
        tags_code,
        keys,
        uniq_key,
    )


def render(p: Prepared, queue_offset: int, physical_offset: int, store_timestamp: int) -> bytes:
    """The record's bytes, now that its queue offset, place and store time are known."""
    record = b"".join(
        (
            p[0].pack(
                p[1],
                p[2],
                p[3],
                p[4],
                p[5],
                queue_offset,
                physical_offset,
                p[6],
                p[7],
                p[8],
                store_timestamp,
                p[9],
                p[10],
                p[11],
                len(p[12]),
            ),
            p[12],
            p[13],
        )
    )
    if p[14]:
        record += crc_property(crc32(record) & 0x7FFFFFFF)
    return record


def crc_property(crc: int) -> bytes:
    """The 20 bytes ``__CRC32#`` 0x01 ten digits (least significant first) 0x02."""
    digits = "".join(str((crc // 10**i) % 10) for i in range(10))
    return b"__CRC32#\x01" + digits.encode("ascii") + b"\x02"


def check_crc_property(record: bytes | memoryview) -> bool:
    """True when a record's appended ``__CRC32#`` property matches its bytes (forceVerifyPropCRC)."""
    tail = bytes(record[-CRC32_RESERVED_LEN:])
    if len(record) <= CRC32_RESERVED_LEN or not tail.startswith(b"__CRC32#\x01") or tail[-1:] != b"\x02":
        return False
    digits = tail[9:19]
    if not digits.isdigit():
        return False
    value = sum(int(chr(d)) * 10**i for i, d in enumerate(digits))
    return value == crc32(record[:-CRC32_RESERVED_LEN]) & 0x7FFFFFFF


def blank_record(size: int) -> bytes:
    """The 8-byte end-of-file marker for ``size`` bytes left in a file."""
    return _INT2.pack(size, BLANK_MAGIC_CODE)


def decode(buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = False) -> StoredMessage:
    """Decode the record at ``pos`` of ``buf``; RecordError if it is not a whole, valid record.

    Only the header is unpacked here; the body, topic and properties are taken from the record's
    bytes when a caller asks for them.
    """
    if len(buf) - pos < 8:
        raise RecordError(f"no record{_at(pos)}: {len(buf) - pos} bytes left")
    total = _INT.unpack_from(buf, pos)[0]
    if total < 91 or pos + total > len(buf):
        raise RecordError(f"the record{_at(pos)} claims {total} bytes; {len(buf) - pos} are there")
    if pos or total != len(buf) or type(buf) is not bytes:  # the record alone, as bytes
        buf = bytes(buf[pos : pos + total])
    message = decode_record(buf)
    if message is None:
        raise RecordError(_what_is_wrong(buf, pos))
    if check_crc and message.body_len and not message.body_crc_ok():  # RocketMQ checks no empty body
        raise RecordError(f"body CRC mismatch in the record{_at(pos)}")
    return message


_UNPACK = tuple(h.unpack_from for h in HEADERS)
_BODY_AT = tuple(h.size for h in HEADERS)
_UNPACK_V4 = _UNPACK[0]
_V6_BITS = sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG


# Shapes of usual records seen, by TOTALSIZE: (body length, sysFlag, the slice from the topic
# length to the properties length, those bytes, layout). A usual record of that size, body length
# and sysFlag whose bytes there are the same has the same layout, so it needs no more checks.
_SHAPES: dict[int, tuple[int, int, slice, bytes, tuple[int, int, int, int, int]]] = {}
_SHAPES_MAX = 4096  # sizes remembered at most; records of other sizes take the longer way


def decode_record(raw: bytes) -> StoredMessage | None:
    """``raw`` holding exactly one record -> its StoredMessage, or None if it is not a valid one.

    A usual record (IPv4 hosts, V1) of a shape seen before is checked against that shape in a
    few steps, one of a new shape is read field by field (and its shape kept); any other record
    goes through ``_decode_any``.
    """
    try:
        h = _UNPACK_V4(raw)
    except struct.error:
        return _decode_any(raw)
    shape = _SHAPES.get(h[0])
    if shape is not None:
        body_len, sys_flag, tail, tail_bytes, layout = shape
        if (
            h[14] == body_len
            and h[7] == sys_flag
            and h[1] == MESSAGE_MAGIC_CODE
            and len(raw) == h[0]
            and raw[tail] == tail_bytes
        ):
            return StoredMessage(h, raw, layout)
    try:
        body_len = h[14]
        topic_len = raw[88 + body_len]
        props_at = body_len + topic_len + 91  # header 88, topic length 1, properties length 2
        props_len = (raw[props_at - 2] << 8) | raw[props_at - 1]
    except IndexError:
        return _decode_any(raw)
    if (
        props_at + props_len == len(raw) == h[0]
        and h[1] == MESSAGE_MAGIC_CODE
        and not h[7] & _V6_BITS
        and body_len >= 0
        and topic_len < 128
        and props_len < 32768
    ):
        layout = (88, body_len + 89, topic_len, props_at, props_len)
        if len(_SHAPES) < _SHAPES_MAX:
            tail = slice(body_len + 88, props_at)
            _SHAPES[h[0]] = (body_len, h[7], tail, raw[tail], layout)
        return StoredMessage(h, raw, layout)
    return _decode_any(raw)


def _decode_any(raw: bytes) -> StoredMessage | None:
    """``decode_record`` for any record: IPv6 hosts, V2, or not a valid record at all."""
    try:
        hosts = (raw[39] >> 4) & 3  # the IPv6 host bits live in SYSFLAG's last byte
        h = _UNPACK[hosts](raw)
        if h[14] < 0:  # Java reads a body only when BODYLEN is positive: a negative one is an empty body
            h = (*h[:14], 0, *h[15:])
        body_at = _BODY_AT[hosts]
        topic_at = body_at + h[14]
        magic = h[1]
        if magic == MESSAGE_MAGIC_CODE:
            topic_len = raw[topic_at]
            if topic_len > 127:  # a negative signed byte
                return None
            topic_at += 1
        elif magic == MESSAGE_MAGIC_CODE_V2:
            topic_len = (raw[topic_at] << 8) | raw[topic_at + 1]
            if topic_len > 32767:
                return None
            topic_at += 2
        else:
            return None
        props_at = topic_at + topic_len + 2
        props_len = (raw[props_at - 2] << 8) | raw[props_at - 1]
    except (IndexError, struct.error):
        return None
    if props_len > 32767:  # a negative short: no properties
        props_len = 0
    n = len(raw)
    if props_at + props_len != n or h[0] != n:
        return None
    return StoredMessage(h, raw, (body_at, topic_at, topic_len, props_at, props_len))


def _at(pos: int) -> str:
    """Where a record is, for a message: its position in a buffer of records, none for a record
    decoded alone (at 0), whose caller knows where it is in the log."""
    return f" at {pos}" if pos else ""


def _what_is_wrong(raw: bytes, pos: int) -> str:
    if len(raw) < 8:
        return f"no record{_at(pos)}"
    total, magic = _INT2.unpack_from(raw)
    if magic == BLANK_MAGIC_CODE:
        return f"the record{_at(pos)} is the end-of-file marker"
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return f"bad magic code {magic & 0xFFFFFFFF:#010x}{_at(pos)}"
    return f"the record{_at(pos)} has TOTALSIZE {total} but its fields do not add up to it"
