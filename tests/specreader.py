"""A small reader written from the format spec, independent of rocketstore's own decoder.

The tests check the bytes rocketstore writes with this, so a mistake in the production codec
cannot hide by being read back by the same code. Only the standard library; big-endian
throughout; field order from format-spec.md section 3.1, units from 7.1, index from 8.1.
"""

from __future__ import annotations

import os
import struct
import zlib

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194


def java_hash(s: str) -> int:
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def read_record(buf: bytes, at: int) -> dict | None:
    """One record at ``at`` as a dict of its fields; None for zeros, 'BLANK' handled by caller."""
    total, magic = struct.unpack_from(">iI", buf, at)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return None
    p = at + 8
    body_crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts = struct.unpack_from(">iiiqqiq", buf, p)
    p += 4 + 4 + 4 + 8 + 8 + 4 + 8
    born_len = 16 if sys_flag & 0x10 else 4
    born_ip = buf[p : p + born_len]
    (born_port,) = struct.unpack_from(">i", buf, p + born_len)
    p += born_len + 4
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    store_len = 16 if sys_flag & 0x20 else 4
    store_ip = buf[p : p + store_len]
    (store_port,) = struct.unpack_from(">i", buf, p + store_len)
    p += store_len + 4
    reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p)
    p += 16
    body = buf[p : p + body_len]
    p += body_len
    if magic == MAGIC_V1:
        topic_len = buf[p]
        p += 1
    else:
        (topic_len,) = struct.unpack_from(">h", buf, p)
        p += 2
    topic = buf[p : p + topic_len].decode()
    p += topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    p += 2
    props_raw = buf[p : p + props_len].decode()
    p += props_len
    props = {}
    for seg in props_raw.split("\x02"):
        if "\x01" in seg:
            k, v = seg.split("\x01", 1)
            if k and v:
                props[k] = v
    return {
        "total": total,
        "length_ok": p - at == total,
        "crc_ok": (zlib.crc32(body) & 0x7FFFFFFF) == body_crc,
        "bodyCRC": body_crc,
        "queueId": queue_id,
        "flag": flag,
        "queueOffset": queue_offset,
        "physicalOffset": phy,
        "sysFlag": sys_flag,
        "bornTimestamp": born_ts,
        "bornIp": born_ip,
        "bornPort": born_port,
        "storeTimestamp": store_ts,
        "storeIp": store_ip,
        "storePort": store_port,
        "reconsumeTimes": reconsume,
        "preparedTransactionOffset": prepared,
        "body": body,
        "topic": topic,
        "propertiesRaw": props_raw,
        "properties": props,
    }


def read_commitlog(store: str, file_size: int) -> list[dict]:
    """Every record of ``store/commitlog`` in order, with its offset (``offset`` key)."""
    folder = os.path.join(store, "commitlog")
    out = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            buf = f.read()
        assert len(buf) == file_size, f"{name} is {len(buf)} bytes"
        base = int(name)
        at = 0
        while at + 8 <= len(buf):
            total, magic = struct.unpack_from(">iI", buf, at)
            if magic == MAGIC_BLANK:
                assert total == len(buf) - at, "a BLANK record covers the rest of its file"
                break
            rec = read_record(buf, at)
            if rec is None:
                break
            rec["offset"] = base + at
            out.append(rec)
            at += total
    return out


def read_consume_queue(store: str, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """(commit-log offset, size, tags code) units of a queue, up to the first empty unit."""
    folder = os.path.join(store, "consumequeue", topic, str(queue_id))
    units = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        for at in range(0, len(data), 20):
            phy, size, tags = struct.unpack_from(">qiq", data, at)
            if size <= 0:
                return units
            units.append((phy, size, tags))
    return units


def index_lookup(store: str, slot_num: int, index_num: int, key: str) -> list[int]:
    """Offsets an index query for ``topic#key`` finds (hash equality only), newest file first."""
    h = java_hash(key)
    h = 0 if h == -(2**31) else abs(h)
    found = []
    folder = os.path.join(store, "index")
    for name in sorted(os.listdir(folder), reverse=True):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        assert len(data) == 40 + 4 * slot_num + 20 * index_num
        index_count = struct.unpack_from(">i", data, 36)[0]
        (entry,) = struct.unpack_from(">i", data, 40 + 4 * (h % slot_num))
        seen = 0
        while 0 < entry < max(index_count, 1) and seen < index_num:
            at = 40 + 4 * slot_num + 20 * entry
            eh, phy, _diff, prev = struct.unpack_from(">iqii", data, at)
            if eh == h:
                found.append(phy)
            entry = prev
            seen += 1
    return found


def read_index_headers(store: str) -> list[tuple[str, dict]]:
    """(file name, header fields) of every index file, oldest first (spec 8.1)."""
    out = []
    folder = os.path.join(store, "index")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            values = struct.unpack(">qqqqii", f.read(40))
        fields = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount")
        out.append((name, dict(zip(fields, values, strict=True))))
    return out


def read_checkpoint(store: str) -> dict:
    """The checkpoint's fields (spec 9): three timestamps, then two 5.x offsets."""
    with open(os.path.join(store, "checkpoint"), "rb") as f:
        data = f.read()
    names = ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "masterFlushedOffset", "confirmPhyOffset")
    return dict(zip(names, struct.unpack_from(">qqqqq", data), strict=True), size=len(data))
