"""Byte-level format checks against shared/spec/format-vectors.md (Java-produced vectors).

The expected bytes below are copied from the vectors file, not computed with production code;
records written by a real store are read back with tests/specreader.py, which is independent of
rocketstore's decoder.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import struct
import time
import zlib

import numpy as np
import pytest

import specreader
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.ids import (
    UniqKeyGenerator,
    decode_offset_msg_id,
    index_key_hash,
    java_hash,
    java_hashes,
    offset_msg_id,
    tags_code,
)
from rocketstore.codec.properties import decode_properties, encode_properties, property_value, split_keys
from rocketstore.errors import RecordError
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queue import PRE_BLANK

# ------------------------------------------------------------------ inputs of format-vectors.md §1

TOPIC = b"TopicTest"
BODY = b"Hello"
BORN_TS = 1700000000000
STORE_TS = 1700000000123
BORN_HOST = bytes.fromhex("7F0000010000C350")  # 127.0.0.1:50000
STORE_HOST = bytes.fromhex("7F00000100002A9F")  # 127.0.0.1:10911
BORN_HOST_V6 = bytes.fromhex("000000000000000000000000000000010000C350")  # [::1]:50000
TAGS_CODE_TAGA = 2598919


def _hex(dump: str) -> bytes:
    """A hex dump of the vectors file (offset column first) -> bytes."""
    out = []
    for line in dump.strip().splitlines():
        out.append("".join(line.split()[1:]))
    return bytes.fromhex("".join(out))


# §3: 5.3.3, trailing separator, 126 bytes
RECORD_533 = _hex("""
0000  0000007E DAA320A7 77D18982 00000000
0016  00000000 00000000 00000000 00000000
0032  00000000 00000000 0000018B CFE56800
0048  7F000001 0000C350 0000018B CFE5687B
0064  7F000001 00002A9F 00000000 00000000
0080  00000000 00000005 48656C6C 6F09546F
0096  70696354 65737400 15544147 53015461
0112  6741024B 45595301 6B31206B 3202
""")

# §4.1: 4.9.8, no trailing separator, KEYS before TAGS, 125 bytes
RECORD_498 = _hex("""
0000  0000007D DAA320A7 77D18982 00000000
0016  00000000 00000000 00000000 00000000
0032  00000000 00000000 0000018B CFE56800
0048  7F000001 0000C350 0000018B CFE5687B
0064  7F000001 00002A9F 00000000 00000000
0080  00000000 00000005 48656C6C 6F09546F
0096  70696354 65737400 144B4559 53016B31
0112  206B3202 54414753 01546167 41
""")

# §4.2: 5.3.3 with enabledAppendPropCRC, 146 bytes
RECORD_CRC = _hex("""
0000  00000092 DAA320A7 77D18982 00000000
0016  00000000 00000000 00000000 00000000
0032  00000000 00000000 0000018B CFE56800
0048  7F000001 0000C350 0000018B CFE5687B
0064  7F000001 00002A9F 00000000 00000000
0080  00000000 00000005 48656C6C 6F09546F
0096  70696354 65737400 29544147 53015461
0112  6741024B 45595301 6B31206B 32025F5F
0128  43524333 32230136 33383039 38323933
0144  3002
""")

# §4.3: realistic 5.3.3 record, 201 bytes
RECORD_REALISTIC = _hex("""
0000  000000C9 DAA320A7 77D18982 00000000
0016  00000000 00000000 00000000 00000000
0032  00000000 00000000 0000018B CFE56800
0048  7F000001 0000C350 0000018B CFE5687B
0064  7F000001 00002A9F 00000000 00000000
0080  00000000 00000005 48656C6C 6F09546F
0096  70696354 65737400 60554E49 515F4B45
0112  59013746 30303030 30313030 30303030
0128  30303030 30303030 30303030 30303030
0144  41420243 4C555354 45520144 65666175
0160  6C74436C 75737465 72025441 47530154
0176  61674102 4B455953 016B3120 6B320257
0192  41495401 74727565 02
""")

PROPS_498 = b"KEYS\x01k1 k2\x02TAGS\x01TagA"
PROPS_533 = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
UNIQ_AB = "7F0000010000000000000000000000AB"


def _prepare(props: bytes, born_host: bytes = BORN_HOST, **kw) -> tuple:
    return rec.prepare(
        TOPIC, BODY, props, 0, 0, 0, BORN_TS, born_host, STORE_HOST, 0, 0, TAGS_CODE_TAGA, "k1 k2", None, **kw
    )


# ================================================================== records (§3, §4)


def test_dump_sanity():
    assert (len(RECORD_533), len(RECORD_498), len(RECORD_CRC), len(RECORD_REALISTIC)) == (126, 125, 146, 201)


def test_minimal_record_498_bytes():
    prepared = _prepare(PROPS_498)
    assert prepared[rec.P_TOTAL] == 125
    assert rec.render(prepared, 0, 0, STORE_TS) == RECORD_498


def test_minimal_record_533_bytes():
    assert rec.render(_prepare(PROPS_533), 0, 0, STORE_TS) == RECORD_533


def test_append_prop_crc_record_bytes():
    prepared = _prepare(PROPS_533, append_crc=True)
    assert prepared[rec.P_TOTAL] == 146
    raw = rec.render(prepared, 0, 0, STORE_TS)
    assert raw == RECORD_CRC
    assert raw[-20:] == b"__CRC32#\x016380982930\x02"
    assert rec.crc_property(392890836) == b"__CRC32#\x016380982930\x02"
    assert rec.check_crc_property(raw)


def test_append_prop_crc_adds_the_separator_to_a_498_properties_string():
    """Properties without a trailing 0x02 get one before the 20 reserved bytes."""
    raw = rec.render(_prepare(PROPS_498, append_crc=True), 0, 0, STORE_TS)
    assert len(raw) == 125 + 1 + 20
    parsed = specreader.read_record(raw, 0)
    assert parsed["length_ok"]
    assert parsed["propertiesRaw"].startswith(PROPS_498.decode() + "\x02__CRC32#\x01")
    assert rec.check_crc_property(raw)


def test_append_prop_crc_detects_a_flipped_property_byte():
    """AppendPropCRCTest: flipping one byte of the properties makes the check fail."""
    raw = bytearray(rec.render(_prepare(PROPS_533, append_crc=True), 0, 0, STORE_TS))
    raw[110] ^= 0x01  # inside "TagA"
    assert not rec.check_crc_property(bytes(raw))


def test_realistic_533_record_bytes():
    props = (
        f"UNIQ_KEY\x01{UNIQ_AB}\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02"
    ).encode()
    assert len(props) == 96
    assert rec.render(_prepare(props), 0, 0, STORE_TS) == RECORD_REALISTIC


def test_realistic_498_record_size():
    props = f"KEYS\x01k1 k2\x02UNIQ_KEY\x01{UNIQ_AB}\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA".encode()
    assert len(props) == 85
    raw = rec.render(_prepare(props), 0, 0, STORE_TS)
    assert len(raw) == 190 and raw[:4] == bytes.fromhex("000000BE")


def test_ipv6_born_host_record_layout():
    raw = rec.render(_prepare(PROPS_533, born_host=BORN_HOST_V6), 0, 0, STORE_TS)
    assert len(raw) == 138 and raw[:4] == bytes.fromhex("0000008A")
    assert raw[36:40] == bytes.fromhex("00000010")  # BORNHOST_V6_FLAG set from the host width
    assert raw[48:68] == BORN_HOST_V6
    assert raw[68:76] == bytes.fromhex("0000018BCFE5687B")  # STORETIMESTAMP moved to 68
    assert raw[76:84] == STORE_HOST
    assert rec.store_timestamp_position(0x10) == 68
    assert rec.store_timestamp_position(0) == 56
    parsed = specreader.read_record(raw, 0)
    assert parsed["length_ok"] and parsed["bornIp"] == BORN_HOST_V6[:16] and parsed["bornPort"] == 50000


def test_ipv6_store_host_record_layout():
    store_v6 = bytes.fromhex("fd00000000000000000000000000000a00002A9F")
    p = rec.prepare(TOPIC, BODY, PROPS_498, 0, 0, 0, BORN_TS, BORN_HOST_V6, store_v6)
    raw = rec.render(p, 0, 0, STORE_TS)
    assert len(raw) == 125 + 24
    assert struct.unpack_from(">i", raw, 36)[0] == 0x30
    parsed = specreader.read_record(raw, 0)
    assert parsed["length_ok"] and parsed["storeIp"] == store_v6[:16] and parsed["storePort"] == 10911
    assert parsed["storeTimestamp"] == STORE_TS


def test_record_length_formula():
    assert rec.record_length(0, 5, 9, 20) == 125 == 91 + 5 + 9 + 20
    assert rec.record_length(0x10, 5, 9, 20) == 137
    assert rec.record_length(0x30, 5, 9, 20) == 149
    assert rec.record_length(0, 5, 9, 20, v2=True) == 126


def test_properties_over_32767_bytes_are_refused_by_prepare():
    rec.prepare(TOPIC, BODY, b"a\x01" + b"b" * 32765, 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST)
    with pytest.raises(RecordError):
        rec.prepare(TOPIC, BODY, b"a\x01" + b"b" * 32766, 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST)


def test_v1_topic_over_127_bytes_is_refused_by_prepare():
    rec.prepare(b"t" * 127, BODY, b"", 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST)
    with pytest.raises(RecordError):
        rec.prepare(b"t" * 128, BODY, b"", 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST)
    p = rec.prepare(b"t" * 300, BODY, b"", 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST, v2=True)
    assert p[rec.P_TOTAL] == 91 + 1 + 5 + 300


def test_blank_record_bytes():
    assert rec.blank_record(100) == bytes.fromhex("00000064CBD43194")
    assert rec.BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194
    assert rec.MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert rec.MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF == 0xDAA320AB


def test_consume_queue_pre_blank_unit_bytes():
    assert bytes.fromhex("00000000000000007FFFFFFF0000000000000000") == PRE_BLANK


# ================================================================== hashes (§2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("TagB", 2598920),
        ("TopicTest#k1", 2746024),
        ("TopicTest#k2", 2746025),
        ("TopicTest#7F0000010000000000000000000000AB", 141389267),
        ("TopicTest#UNIQ0001", -1617631996),
        ("polygenelubricants", -2147483648),
        ("", 0),
        ("\u00e9t\u00e9", 227742),
        ("\U0001f600", 1772899),
    ],
)
def test_java_hash_table(text, expected):
    assert java_hash(text) == expected
    assert specreader.java_hash(text) == expected
    assert int(java_hashes([text])[0]) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("TopicTest#k1", 2746024),
        ("TopicTest#k2", 2746025),
        ("TopicTest#7F0000010000000000000000000000AB", 141389267),
        ("TopicTest#UNIQ0001", 1617631996),
        ("polygenelubricants", 0),  # Math.abs(Integer.MIN_VALUE) is still negative -> 0
        ("", 0),
    ],
)
def test_index_key_hash_table(key, expected):
    assert index_key_hash(key) == expected


def test_index_slots_at_default_geometry():
    assert index_key_hash("TopicTest#k1") % 5_000_000 == 2746024
    assert 40 + 4 * (index_key_hash("TopicTest#k1") % 5_000_000) == 10_984_136
    assert index_key_hash("TopicTest#7F0000010000000000000000000000AB") % 5_000_000 == 1389267
    assert index_key_hash("TopicTest#UNIQ0001") % 5_000_000 == 2631996


def test_tags_code():
    assert tags_code("TagA") == 2598919
    assert tags_code(None) == 0
    assert tags_code("") == 0
    # as a consume-queue unit the code is a signed 64-bit value
    assert struct.pack(">q", tags_code("TagA")).hex().upper() == "000000000027A807"
    assert struct.pack(">q", java_hash("TopicTest#UNIQ0001")).hex().upper() == "FFFFFFFF9F94E504"


def _random_strings(rng: random.Random, n: int) -> list[str]:
    alphabets = [
        "abcdefghijklmnopqrstuvwxyz0123456789#-_ ",
        "\u00e9\u00e8\u00fc\u4e2d\u6587\u0416\u03a9",
        "\U0001f600\U0001f680\U00010348",  # astral: surrogate pairs in UTF-16
    ]
    out = []
    for _ in range(n):
        k = rng.randrange(3)
        chars = "".join(alphabets[: k + 1])
        out.append("".join(rng.choice(chars) for _ in range(rng.randrange(0, 40))))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_java_hashes_bulk_equals_scalar(seed):
    rng = random.Random(seed)
    ascii_only = ["".join(rng.choice("abcXYZ019#") for _ in range(rng.randrange(0, 60))) for _ in range(300)]
    mixed = _random_strings(rng, 300)
    for strings in (ascii_only, mixed, ["", "", "a"], ["\U0001f600" * 50, "x"], [str(i) * 200 for i in range(20)]):
        bulk = java_hashes(strings)
        assert bulk.dtype == np.int32
        assert bulk.tolist() == [java_hash(s) for s in strings] == [specreader.java_hash(s) for s in strings]


def test_java_hashes_of_nothing():
    assert java_hashes([]).tolist() == []


def test_java_hash_of_a_lone_surrogate():
    assert java_hash("\ud83d") == 55357
    assert java_hashes(["\ud83d", "a\udc00"]).tolist() == [55357, 97 * 31 + 0xDC00]


# ================================================================== message ids (§3 derived values, §4)


def test_offset_msg_id():
    assert offset_msg_id(STORE_HOST, 0) == "7F00000100002A9F0000000000000000"
    assert offset_msg_id(STORE_HOST, 126) == "7F00000100002A9F000000000000007E"
    assert decode_offset_msg_id("7F00000100002A9F0000000000000000") == ("127.0.0.1:10911", 0)
    assert decode_offset_msg_id("7F00000100002A9F000000000000007E") == ("127.0.0.1:10911", 126)
    v6 = bytes.fromhex("fd00000000000000000000000000000a00002A9F")
    msg_id = offset_msg_id(v6, 2**40 + 5)
    assert len(msg_id) == 56 and msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == ("[fd00:0:0:0:0:0:0:a]:10911", 2**40 + 5)
    with pytest.raises(ValueError):
        decode_offset_msg_id("7F00000100002A9F00")


def test_uniq_key_generator_format():
    gen = UniqKeyGenerator(bytes.fromhex("7F000001"), pid=0x1B6E)
    now = int(time.time() * 1000)
    keys = [gen.next(now) for _ in range(3)]
    for key in keys:
        assert re.fullmatch(r"[0-9A-F]{32}", key)
        assert key.startswith("7F0000011B6E")
    assert len(set(keys)) == 3
    counters = [int(k[-4:], 16) for k in keys]
    assert counters[1] == (counters[0] + 1) & 0xFFFF
    # the pid as Java's (short) cast writes it: its low 16 bits (the high one was dropped)
    assert UniqKeyGenerator(bytes.fromhex("7F000001"), pid=0x1F123).next(now).startswith("7F000001F123")
    # the time part: milliseconds since the start of the month (local time)
    t = time.localtime(now / 1000)
    month_start = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
    assert int(keys[0][20:28], 16) == now - month_start


def test_uniq_keys_for_a_batch_continue_the_counter():
    gen = UniqKeyGenerator(bytes.fromhex("7F000001"), pid=0x1B6E)
    now = int(time.time() * 1000)
    single = gen.next(now)
    batch = gen.next_many(now, 40)
    after = gen.next(now)
    keys = [single, *batch, after]
    assert len(batch) == 40 and len(set(keys)) == 42
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) and k[:28] == single[:28] for k in keys)
    counters = [int(k[-4:], 16) for k in keys]
    assert all(b == (a + 1) & 0xFFFF for a, b in itertools.pairwise(counters))
    assert gen.next_many(now, 1) == [single[:28] + f"{(counters[-1] + 1) & 0xFFFF:04X}"]


def test_uniq_keys_for_a_batch_cross_the_counters_byte_and_wrap():
    """A batch whose counter passes 0x..FF and 0xFFFF gets the ids one by one would."""
    gen = UniqKeyGenerator(bytes.fromhex("7F000001"), pid=0x1B6E)
    now = int(time.time() * 1000)
    while int(gen.next(now)[-4:], 16) != 0xFFF0:
        pass
    batch = gen.next_many(now, 300)
    counters = [int(k[-4:], 16) for k in batch]
    assert counters == [(0xFFF1 + i) & 0xFFFF for i in range(300)]
    assert {k[:28] for k in batch} == {gen.next(now)[:28]}


# ================================================================== checkpoint (§6)


def test_checkpoint_bytes(tmp_path):
    path = tmp_path / "checkpoint"
    ckpt = StoreCheckpoint(str(path))
    assert path.read_bytes() == bytes(4096)
    ckpt.physic_msg_timestamp = STORE_TS
    ckpt.logics_msg_timestamp = STORE_TS
    ckpt.flush()
    data = path.read_bytes()
    assert len(data) == 4096
    assert data[:40] == bytes.fromhex(
        "0000018BCFE5687B0000018BCFE5687B000000000000000000000000000000000000000000000000"
    )
    assert data[40:] == bytes(4056)
    again = StoreCheckpoint(str(path))
    assert again.physic_msg_timestamp == again.logics_msg_timestamp == STORE_TS
    assert again.min_timestamp() == STORE_TS - 3000
    assert again.min_timestamp_index() == 0
    # StoreCheckpointTest: the smaller of the two, minus 3 s, whichever it is; never below 0
    for physic, logics in ((STORE_TS, STORE_TS - 500), (STORE_TS - 700, STORE_TS)):
        again.physic_msg_timestamp, again.logics_msg_timestamp = physic, logics
        assert again.min_timestamp() == min(physic, logics) - 3000
    again.physic_msg_timestamp = 1000
    assert again.min_timestamp() == 0


def test_checkpoint_written_by_a_store(make_store, tmp_path):
    store = make_store()
    for i in range(5):
        store.put(Message("TopicTest", b"m%d" % i))
    last = store.put(Message("TopicTest", b"last"))
    store.shutdown()
    ckpt = specreader.read_checkpoint(str(tmp_path / "store"))
    assert ckpt["size"] == 4096
    assert ckpt["physicMsgTimestamp"] == ckpt["logicsMsgTimestamp"] == last.store_timestamp
    assert ckpt["indexMsgTimestamp"] == 0  # no index file became full


# ================================================================== index file (§5), scaled to a tiny geometry


def test_index_file_bytes_for_the_minimal_message(make_store, store_config, tmp_path):
    slots, num = store_config.max_hash_slot_num, store_config.max_index_num
    store = make_store()
    before = int(time.time() * 1000)
    r = store.put(
        Message(
            "TopicTest",
            BODY,
            tags="TagA",
            keys="k1 k2",
            properties={"UNIQ_KEY": UNIQ_AB},
            born_timestamp=BORN_TS,
            born_host="127.0.0.1:50000",
        )
    )
    assert r.ok and r.commit_log_offset == 0
    store.shutdown()
    names = os.listdir(tmp_path / "store" / "index")
    assert len(names) == 1 and re.fullmatch(r"\d{17}", names[0])
    created = time.mktime(time.strptime(names[0][:14], "%Y%m%d%H%M%S")) * 1000 + int(names[0][14:])
    assert before - 1000 <= created <= int(time.time() * 1000) + 1000  # yyyyMMddHHmmssSSS, local time
    data = (tmp_path / "store" / "index" / names[0]).read_bytes()
    assert len(data) == 40 + 4 * slots + 20 * num

    # keys in RocketMQ's order: the UNIQ_KEY, then each KEYS token
    hashes = [141389267, 2746024, 2746025]
    ts = r.store_timestamp
    assert data[:40] == struct.pack(">qqqqii", ts, ts, 0, 0, len({h % slots for h in hashes}), 4)
    expected_slots = bytearray(4 * slots)
    expected_entries = bytearray(20 * num)
    newest: dict[int, int] = {}
    for i, h in enumerate(hashes, 1):
        struct.pack_into(">iqii", expected_entries, 20 * i, h, 0, 0, newest.get(h % slots, 0))
        newest[h % slots] = i
    for slot, entry in newest.items():
        struct.pack_into(">i", expected_slots, 4 * slot, entry)
    assert data[40 : 40 + 4 * slots] == expected_slots
    assert data[40 + 4 * slots :] == expected_entries  # entry 0 and the unused tail stay zero
    # what a query walks (specreader follows the slot chain)
    assert specreader.index_lookup(str(tmp_path / "store"), slots, num, "TopicTest#k1") == [0]
    assert specreader.index_lookup(str(tmp_path / "store"), slots, num, f"TopicTest#{UNIQ_AB}") == [0]


def test_minimal_message_through_a_store_matches_the_498_vector(make_store, tmp_path):
    """Hosts, times, body and properties in 4.9.8 form: the stored record equals §4.1 except for
    the store time, the store host and the order of the properties given to the store."""
    store = make_store()
    r = store.put(
        Message(
            "TopicTest",
            BODY,
            properties={"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": UNIQ_AB},
            born_timestamp=BORN_TS,
            born_host="127.0.0.1:50000",
            store_host="127.0.0.1:10911",
        )
    )
    assert r.ok
    store.shutdown()
    raw = (tmp_path / "store" / "commitlog" / "00000000000000000000").read_bytes()
    props = PROPS_498 + f"\x02UNIQ_KEY\x01{UNIQ_AB}".encode()
    record = raw[: 91 + 5 + 9 + len(props)]
    expected = bytearray(RECORD_498[:103]) + struct.pack(">h", len(props)) + props
    struct.pack_into(">i", expected, 0, len(expected))
    struct.pack_into(">q", expected, 56, r.store_timestamp)
    assert record == bytes(expected)
    assert raw[len(record) : len(record) + 8] == bytes(8)


# ================================================================== decode round trip


@pytest.mark.parametrize(
    ("born", "store", "v2", "sys_flag"),
    [
        (BORN_HOST, STORE_HOST, False, 0),
        (BORN_HOST_V6, STORE_HOST, False, sf.COMPRESSED_FLAG | sf.COMPRESSION_ZLIB_TYPE),
        (BORN_HOST, BORN_HOST_V6, True, sf.TRANSACTION_COMMIT_TYPE),
        (BORN_HOST_V6, BORN_HOST_V6, True, sf.TRANSACTION_PREPARED_TYPE | sf.MULTI_TAGS_FLAG),
        (BORN_HOST, STORE_HOST, False, sf.TRANSACTION_ROLLBACK_TYPE | sf.COMPRESSED_FLAG | sf.COMPRESSION_LZ4_TYPE),
    ],
)
def test_decode_round_trip_every_field(born, store, v2, sys_flag):
    topic = ("%RETRY%" + "g" * 200) if v2 else "TopicTest"
    body = zlib.compress(b"payload " * 100, 5) if sys_flag & sf.COMPRESSED_FLAG else b"\x00\x01binary\xff"
    props_text = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02note\x01\u00e9t\u00e9"
    p = rec.prepare(
        topic.encode(),
        body,
        props_text.encode(),
        7,
        -5,
        sys_flag,
        BORN_TS,
        born,
        store,
        3,
        123456789,
        java_hash("TagA"),
        "k1 k2",
        "ABC",
        v2=v2,
    )
    raw = rec.render(p, 42, 987654321, STORE_TS)
    # alone, inside a buffer, first of a buffer of two (bytes and memoryview)
    for buf, pos in ((raw, 0), (b"\x00" * 13 + raw + b"\x00" * 5, 13), (memoryview(raw), 0), (raw + raw, 0)):
        m = rec.decode(buf, pos, check_crc=True)
        assert m.store_size == len(raw)
        assert m.version == (2 if v2 else 1)
        assert m.topic == topic
        assert m.queue_id == 7
        assert m.flag == -5
        assert m.queue_offset == 42
        assert m.commit_log_offset == 987654321
        want_flag = sys_flag | (0x10 if len(born) == 20 else 0) | (0x20 if len(store) == 20 else 0)
        assert m.sys_flag == want_flag
        assert m.transaction_type == sys_flag & 0xC
        assert m.born_timestamp == BORN_TS
        assert m.store_timestamp == STORE_TS
        assert m.born_host_raw == born and m.store_host_raw == store
        assert m.reconsume_times == 3
        assert m.prepared_transaction_offset == 123456789
        assert m.body == body and m.body_len == len(body)
        assert m.body_crc == zlib.crc32(body) & 0x7FFFFFFF and m.body_crc_ok()
        assert m.tags == "TagA" and m.keys == "k1 k2" and m.uniq_key == "ABC"
        assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "note": "\u00e9t\u00e9"}
        assert m.properties_raw == props_text.encode()
        assert m.raw == raw
        assert m.msg_id == (store + struct.pack(">q", 987654321)).hex().upper()
    # the independent reader agrees
    parsed = specreader.read_record(raw, 0)
    assert parsed["length_ok"] and parsed["crc_ok"] and parsed["topic"] == topic
    assert parsed["sysFlag"] == m.sys_flag and parsed["queueOffset"] == 42 and parsed["physicalOffset"] == 987654321


def test_decompressed_body_of_a_zlib_body():
    original = b"some text that compresses " * 300
    body = zlib.compress(original, 5)
    p = rec.prepare(
        TOPIC, body, b"", 0, 0, sf.COMPRESSED_FLAG | sf.COMPRESSION_ZLIB_TYPE, BORN_TS, BORN_HOST, STORE_HOST
    )
    m = rec.decode(rec.render(p, 0, 0, STORE_TS))
    assert m.body == body
    assert m.decompressed_body() == original
    # compression type 0 counts as zlib (old messages)
    p = rec.prepare(TOPIC, body, b"", 0, 0, sf.COMPRESSED_FLAG, BORN_TS, BORN_HOST, STORE_HOST)
    assert rec.decode(rec.render(p, 0, 0, STORE_TS)).decompressed_body() == original
    # an uncompressed body is returned as is
    p = rec.prepare(TOPIC, original, b"", 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST)
    assert rec.decode(rec.render(p, 0, 0, STORE_TS)).decompressed_body() == original


def test_decode_refuses_what_is_not_a_record():
    raw = RECORD_498
    with pytest.raises(RecordError):
        rec.decode(rec.blank_record(100) + bytes(92))
    with pytest.raises(RecordError):
        rec.decode(bytes(200))
    with pytest.raises(RecordError):
        rec.decode(raw[:-1])  # torn
    damaged = bytearray(raw)
    damaged[4] ^= 0xFF  # magic
    with pytest.raises(RecordError):
        rec.decode(bytes(damaged))
    damaged = bytearray(raw)
    damaged[93] = 10  # topic length no longer adds up
    with pytest.raises(RecordError):
        rec.decode(bytes(damaged))
    damaged = bytearray(raw)
    damaged[90] ^= 0x20  # a body byte: only the CRC check notices
    assert rec.decode(bytes(damaged)).body == b"HeLlo"
    with pytest.raises(RecordError):
        rec.decode(bytes(damaged), check_crc=True)
    # an empty body's CRC field is not checked, as RocketMQ (and the store's scans) read no body then
    prepared = rec.prepare(TOPIC, b"", b"", 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST, 0, 0, 0, None, None)
    empty = rec.render(prepared, 0, 0, STORE_TS)
    empty = empty[:8] + (12345).to_bytes(4, "big") + empty[12:]  # BODYCRC
    assert rec.decode(empty, check_crc=True).body == b""


def test_v2_magic_is_used_for_long_retry_topics_in_a_store(make_store, tmp_path):
    store = make_store()
    topic = "%RETRY%" + "g" * 150
    r = store.put(Message(topic, b"retry me", tags="TagA"))
    assert r.ok
    short = store.put(Message("%RETRY%group", b"short"))
    assert store.wait_for_dispatch()
    m = store.look_message_by_offset(r.commit_log_offset)
    assert m.version == 2 and m.topic == topic
    assert store.look_message_by_offset(short.commit_log_offset).version == 1
    got = store.get_message("g", topic, 0, 0)
    assert got.status == "FOUND" and got.messages[0].body == b"retry me"
    store.shutdown()
    records = specreader.read_commitlog(str(tmp_path / "store"), 4096)
    assert records[0]["topic"] == topic and records[0]["length_ok"]
    raw = (tmp_path / "store" / "commitlog" / "00000000000000000000").read_bytes()
    assert raw[4:8] == bytes.fromhex("DAA320AB")
    assert raw[records[1]["offset"] + 4 : records[1]["offset"] + 8] == bytes.fromhex("DAA320A7")


# ================================================================== properties (§3.4)


def test_properties_parse_both_forms():
    assert decode_properties("KEYS\x01k1 k2\x02TAGS\x01TagA") == {"KEYS": "k1 k2", "TAGS": "TagA"}
    assert decode_properties("TAGS\x01TagA\x02KEYS\x01k1 k2\x02") == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert decode_properties("") == {}


def test_properties_parse_drops_empty_names_and_values():
    text = "\x01orphan\x02empty\x01\x02ok\x01yes\x02noseparator\x02\x02a\x01b\x01c\x02dup\x011\x02dup\x012"
    assert decode_properties(text) == {"ok": "yes", "a": "b\x01c", "dup": "2"}
    # the independent parsers agree
    assert specreader.read_record(
        rec.render(rec.prepare(TOPIC, BODY, text.encode(), 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST), 0, 0, 1), 0
    )["properties"] == {"ok": "yes", "a": "b\x01c", "dup": "2"}


def test_properties_encode_is_the_498_form():
    assert encode_properties({"KEYS": "k1 k2", "TAGS": "TagA"}).encode() == PROPS_498
    assert encode_properties({}) == ""
    assert split_keys("a  b c ") == ["a", "b", "c"]
    assert split_keys(None) == []


def test_stored_message_reads_a_533_properties_string():
    m = rec.decode(RECORD_533)
    assert m.tags == "TagA" and m.keys == "k1 k2" and m.uniq_key is None
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
    m = rec.decode(RECORD_REALISTIC)
    assert m.uniq_key == UNIQ_AB and m.tags == "TagA" and m.keys == "k1 k2"
    assert m.properties["WAIT"] == "true" and m.properties["CLUSTER"] == "DefaultCluster"


@pytest.mark.parametrize(
    "text",
    [
        "TAGS\x01a\x02XTAGS\x01b",  # a longer name ending in TAGS after the real one
        "XTAGS\x01b\x02TAGS\x01a",
        "XTAGS\x01b",  # only the longer name
        "TAGS\x01a\x02KEYS\x01k\x02TAGS\x01c\x02MYTAGS\x01d",  # the last TAGS wins
        "KEYS\x01k1 k2\x02TAGS\x01a\x02",  # the 5.x form: a trailing separator
        "TAGS\x01\x02KEYS\x01k",  # an empty value
        "UNIQ_KEY\x01u\x02KEYS\x01k\x02TAGS\x01",
        "TAGS\x01a\x02KEYS\x01k\x02TAGS\x01\x02KEYS\x01",  # a later empty value keeps the earlier one
        "UNIQ_KEY\x01u\x02UNIQ_KEY\x01\x02TAGS\x01\x02",
        "DELAY\x013\x02DELAY\x01",
        "",
    ],
)
def test_stored_property_getters_agree_with_the_full_parse(text):
    raw = rec.render(rec.prepare(TOPIC, BODY, text.encode(), 0, 0, 0, BORN_TS, BORN_HOST, STORE_HOST), 0, 0, 1)
    lazy = rec.decode(raw)
    full = decode_properties(text)
    assert (lazy.tags, lazy.keys, lazy.uniq_key) == (full.get("TAGS"), full.get("KEYS"), full.get("UNIQ_KEY"))
    for name in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY"):  # DELAY: found in bytes by log scans
        value = property_value(b"\x02" + text.encode(), f"\x02{name}\x01".encode())
        assert value == (full[name].encode() if name in full else None), name


# ================================================================== a real store, read back independently


def test_records_written_by_a_store_read_back_by_specreader(make_store, tmp_path):
    store = make_store()
    compressed = zlib.compress(b"z" * 5000, 5)
    inputs = [
        (Message("TopicTest", b"plain", tags="TagA", keys="k1"), 0),
        (Message("TopicTest", b"", keys=["a", "b"]), 1),
        (
            Message(
                "OrderTopic",
                compressed,
                tags="TagB",
                properties={"note": "\u00e9t\u00e9 \U0001f600", "UNIQ_KEY": "MYKEY"},
                flag=77,
                born_timestamp=BORN_TS,
                born_host="[2001:db8::98]:6000",
                store_host="[fd00::a]:10911",
                sys_flag=sf.COMPRESSED_FLAG | sf.COMPRESSION_ZLIB_TYPE,
                reconsume_times=2,
            ),
            3,
        ),
        (Message("TopicTest", b"commit", sys_flag=sf.TRANSACTION_COMMIT_TYPE, prepared_transaction_offset=99), 0),
        (Message("TopicTest", b"half", sys_flag=sf.TRANSACTION_PREPARED_TYPE), 0),
        (Message("TopicTest", b"x" * 1500, born_host="10.0.0.1:1234"), 2),
    ]
    results = [store.put(m, q) for m, q in inputs]
    assert all(r.ok for r in results)
    store.shutdown()

    records = specreader.read_commitlog(str(tmp_path / "store"), 4096)
    assert len(records) == len(inputs)
    queue_next: dict[tuple[str, int], int] = {}
    for (msg, qid), r, got in zip(inputs, results, records, strict=True):
        assert got["length_ok"] and got["crc_ok"]
        assert got["offset"] == got["physicalOffset"] == r.commit_log_offset
        assert got["total"] == r.wrote_bytes
        assert got["topic"] == msg.topic and got["queueId"] == qid
        assert got["body"] == msg.body and got["flag"] == msg.flag
        assert got["storeTimestamp"] == r.store_timestamp
        assert got["reconsumeTimes"] == msg.reconsume_times
        assert got["preparedTransactionOffset"] == msg.prepared_transaction_offset
        born = msg.born_host or "127.0.0.1:10911"
        assert (got["sysFlag"] & 0x10 != 0) == born.startswith("[")
        assert got["sysFlag"] & ~0x30 == msg.sys_flag
        if msg.born_timestamp is not None:
            assert got["bornTimestamp"] == msg.born_timestamp
        else:
            assert got["bornTimestamp"] <= got["storeTimestamp"]
        for name, value in msg.properties.items():
            assert got["properties"][name] == value
        assert got["properties"]["UNIQ_KEY"] == r.uniq_key
        assert not got["propertiesRaw"].endswith("\x02")  # the 4.9.8 form
        # queue offsets: PREPARED records get 0 and do not advance the queue
        key = (msg.topic, qid)
        if msg.sys_flag & 0xC == sf.TRANSACTION_PREPARED_TYPE:
            assert got["queueOffset"] == 0 == r.queue_offset
        else:
            assert got["queueOffset"] == queue_next.get(key, 0) == r.queue_offset
            queue_next[key] = got["queueOffset"] + 1
    v6 = records[2]
    assert v6["bornIp"] == bytes.fromhex("20010db8000000000000000000000098") and v6["bornPort"] == 6000
    assert v6["storeIp"] == bytes.fromhex("fd00000000000000000000000000000a") and v6["storePort"] == 10911
    assert records[0]["storeIp"] == bytes([127, 0, 0, 1]) and records[0]["storePort"] == 10911
    # the PREPARED record is not in its consume queue
    units = specreader.read_consume_queue(str(tmp_path / "store"), "TopicTest", 0)
    assert [u[0] for u in units] == [records[0]["offset"], records[3]["offset"]]
    assert units[0] == (records[0]["offset"], records[0]["total"], 2598919)


def test_queue_and_index_files_take_the_disk_their_entries_take(tmp_path):
    """A consume-queue file (300,000 units, 6 MB) and an index file (5 million slots, 20 million
    entries, 420 MB) of RocketMQ's default sizes are made sparse and given disk as they are
    written, as RocketMQ's are: a store holding a few messages takes a few MB, not hundreds."""
    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(brokerIP1="127.0.0.1", mappedFileSizeCommitLog=1 << 20)) as store:
        for queue_id in range(8):
            store.put(Message("Sparse", b"x" * 100, keys=f"k{queue_id}"), queue_id).raise_for_status()
        assert store.wait_for_dispatch()
        assert store.query_message("Sparse", "k7").messages

    def disk(path):
        return os.stat(path).st_blocks * 512

    cq_files = list((root / "consumequeue" / "Sparse").glob("*/*"))
    assert len(cq_files) == 8 and all(os.path.getsize(f) == 6_000_000 for f in cq_files)
    assert all(disk(f) <= 64 << 10 for f in cq_files)
    (index,) = list((root / "index").iterdir())
    assert os.path.getsize(index) == 40 + 4 * 5_000_000 + 20 * 20_000_000
    # the header and slot table with 256 KiB for entries, in whole pages; st_blocks also counts the
    # file system's own extent blocks (one more 4 KiB block when free space is fragmented)
    reserved = -(-(40 + 4 * 5_000_000 + (256 << 10)) // 4096) * 4096
    assert disk(index) <= reserved + 4 * 4096
    assert disk(root / "commitlog" / f"{0:020d}") == 1 << 20  # the commit log's segments, in full


def test_commit_log_segments_keep_their_disk_across_reopens(loop_fs):
    """A reopened store's current segment stays fully allocated (only files given disk as
    written are made sparse again when recovery truncates them), on ext4."""
    root = loop_fs(32).mount / "store"
    config = StoreConfig(brokerIP1="127.0.0.1", mappedFileSizeCommitLog=1 << 20)
    with MessageStore.open(root, config) as store:
        store.put(Message("T", b"x" * 100)).raise_for_status()
    segment = root / "commitlog" / f"{0:020d}"
    with MessageStore.open(root, config):  # recovery truncates the segment at the end of its data
        assert os.stat(segment).st_blocks * 512 == 1 << 20


def test_a_scan_without_properties_checks_records_as_the_full_scan_does(tmp_path):
    """Recovery checks records it does not dispatch without parsing their properties: the same
    records, offsets, sizes and store times, and the same stop at a record whose CRC fails."""
    from rocketstore.codec.scan import scan_records

    with MessageStore.open(tmp_path / "s", brokerIP1="127.0.0.1", mappedFileSizeCommitLog=1 << 16) as store:
        results = [
            store.put(
                Message("ScanTopic", b"body %d" % i, tags="T", keys=f"k{i}", properties={"p": "v" * (i + 1)}), i % 3
            )
            for i in range(40)
        ]
        results.append(store.put(Message("ScanTopic", b"later", properties={"DELAY": "2"})))
    segment = (tmp_path / "s" / "commitlog" / "00000000000000000000").read_bytes()
    damaged = bytearray(segment)
    damaged[results[25].commit_log_offset + 90] ^= 0xFF  # inside the 26th record's body (at 88)
    for buf in (segment, bytes(damaged)):
        end = results[-1].commit_log_offset + results[-1].wrote_bytes
        full, stop, reason = scan_records(buf, 0, end, 0, check_crc=True)
        light, light_stop, light_reason = scan_records(buf, 0, end, 0, check_crc=True, properties=False)
        assert (light_stop, light_reason) == (stop, reason)
        assert light.topics == full.topics
        for column in ("offsets", "sizes", "store_ts", "queue_ids", "queue_offsets", "sys_flags"):
            assert getattr(light, column).tolist() == getattr(full, column).tolist(), column
        assert len(full) == (len(results) if buf is segment else 25)
