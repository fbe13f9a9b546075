"""The store's behaviours, after RocketMQ's own store tests (shared/spec/behaviour-checklist.md A-F, H).

Every test builds a real store in ``tmp_path`` with tiny files (4 KiB commit-log segments,
10-unit consume-queue files, 127-entry index files), so rolling, end-of-file BLANKs and several
index files happen with a few dozen messages. What a store wrote is checked with
tests/specreader.py or rmqread.py, never with the production decoder alone.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import specreader
from conftest import put_ok, segments
from rocketstore import GetMessageStatus, GetResult, Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.codec.hosts import format_host
from rocketstore.codec.ids import index_key_hash, java_hash
from rocketstore.config_values import refuse_unsupported
from rocketstore.errors import (
    ConfigError,
    CorruptStoreError,
    InvalidMessageError,
    InvalidTopicError,
    RocketStoreError,
    StoreClosedError,
    StoreLockedError,
    StoreNotFoundError,
    StoreNotReadableError,
)
from rocketstore.export import export_row, iter_log, iter_queued
from rocketstore.files.file_queue import MappedFileQueue
from rocketstore.files.mapped_file import MappedFile
from rocketstore.running_flags import NOT_READABLE, WRITE_LOGICS_QUEUE_ERROR
from rocketstore.verify import verify_store

CL_SIZE = 4096
HEADER_V4 = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4  # up to BODYLEN, both hosts IPv4


def record_size(topic: str, body: bytes, props: bytes, born_v6: bool = False, store_v6: bool = False) -> int:
    """TOTALSIZE by the layout arithmetic of BatchPutMessageTest."""
    return HEADER_V4 + 12 * born_v6 + 12 * store_v6 + len(body) + 1 + len(topic.encode()) + 2 + len(props)


def our_export(root: Path, config: StoreConfig) -> list[dict]:
    with MessageStore.open(root, config, read_only=True) as store:
        return [export_row(m, t, s) for m, _, t, s in iter_queued(store)]


# ================================================================== A. append, encode, limits


# IPv6 hosts read back in Java's text form: eight groups, no "::" compression
JAVA_TEXT = {
    "[::1]:5000": "[0:0:0:0:0:0:0:1]:5000",
    "[2001:db8::98]:5002": "[2001:db8:0:0:0:0:0:98]:5002",
    "[fd00::a]:10911": "[fd00:0:0:0:0:0:0:a]:10911",
}


def test_write_and_read_back_20_messages_with_ipv4_and_ipv6_hosts(make_store):
    store = make_store()
    hosts = [
        ("10.0.0.1:5000", "127.0.0.1:10911"),
        ("[::1]:5000", "127.0.0.1:10911"),
        ("10.0.0.2:5001", "[fd00::a]:10911"),
        ("[2001:db8::98]:5002", "[fd00::a]:10911"),
    ]
    sent = []
    for i in range(20):
        born, stored = hosts[i % 4]
        msg = Message("TopicTest", f"body {i}".encode(), tags="TagA", keys=f"k{i}", born_host=born, store_host=stored)
        sent.append((msg, put_ok(store, msg, i % 2)))
    assert store.wait_for_dispatch()
    for queue_id in (0, 1):
        got = store.get_message("group", "TopicTest", queue_id, 0, 32)
        assert got.status == GetMessageStatus.FOUND
        mine = [(m, r) for i, (m, r) in enumerate(sent) if i % 2 == queue_id]
        assert len(got.messages) == len(mine) == 10
        assert got.next_begin_offset == 10
        for offset, (stored, (msg, result)) in enumerate(zip(got.messages, mine, strict=True)):
            assert stored.queue_offset == offset == result.queue_offset
            assert stored.commit_log_offset == result.commit_log_offset
            assert stored.body == msg.body and stored.topic == "TopicTest" and stored.queue_id == queue_id
            assert stored.tags == "TagA" and stored.keys == msg.keys
            born, host = msg.born_host, msg.store_host
            assert stored.born_host == JAVA_TEXT.get(born, born)
            assert stored.store_host == JAVA_TEXT.get(host, host)
            assert stored.sys_flag == (0x10 if born.startswith("[") else 0) | (0x20 if host.startswith("[") else 0)
            assert len(stored.msg_id) == (56 if host.startswith("[") else 32)
            assert result.msg_id == stored.msg_id


def test_host_ports_outside_0_to_65535_are_refused(make_store):
    """A port is a Java InetSocketAddress port (0..65535); reading keeps whatever a record holds."""
    store = make_store()
    for host in ("1.2.3.4:65536", "1.2.3.4:3000000000", "[::1]:4294967295", "1.2.3.4:-1"):
        for where in ("born_host", "store_host"):
            with pytest.raises(InvalidMessageError):
                store.put(Message("T", b"x", **{where: host}))
    r = put_ok(store, Message("T", b"x", born_host="1.2.3.4:65535", store_host="[::1]:0"))
    stored = store.look_message_by_offset(r.commit_log_offset)
    assert (stored.born_host, stored.store_host) == ("1.2.3.4:65535", "[0:0:0:0:0:0:0:1]:0")
    assert format_host(bytes([1, 2, 3, 4]) + (3000000000).to_bytes(4, "big")) == "1.2.3.4:-1294967296"


@pytest.mark.parametrize(
    "host", ["10.0.0.1: 80", "10.0.0.1:80 ", "10.0.0.1:8_0", "10.0.0.1:+80", "10.0.0.1:\u0668\u0660"]
)
def test_a_host_port_is_ascii_digits_alone(host: str) -> None:
    """A port is written as the export writes it, ASCII digits alone: Python's int() took spaces,
    underscores, a sign and other scripts' digits."""
    with pytest.raises(InvalidMessageError, match="not a host address"):
        Message("T", b"x", born_host=host)


def test_an_ipv4_mapped_ipv6_host_is_stored_as_ipv4_as_java_reads_it(make_store):
    """Java's InetAddress makes ::ffff:a.b.c.d an Inet4Address: RocketMQ stores such a host in 4
    bytes without the IPv6 sysFlag bit, and so does the store."""
    store = make_store()
    r = put_ok(store, Message("T", b"x", born_host="[::ffff:10.0.0.1]:5000", store_host="[::FFFF:a00:2]:6000"))
    stored = store.look_message_by_offset(r.commit_log_offset)
    assert (stored.born_host, stored.store_host) == ("10.0.0.1:5000", "10.0.0.2:6000")
    assert stored.sys_flag & 0x30 == 0 and stored.store_size == r.wrote_bytes == len(stored.raw)


def test_an_ipv4_mapped_address_in_a_v6_record_reads_as_ipv4_as_java_decodes_it() -> None:
    """16 stored bytes ::ffff:a.b.c.d (a record another writer made) are an Inet4Address to Java's
    decoder (InetAddress.getByAddress): the host reads as a.b.c.d:port, as RocketMQ serves it, and
    an import of the export stores that host (in 4 bytes). It read as [0:0:0:0:0:ffff:102:304]."""
    mapped = bytes(10) + b"\xff\xff" + bytes([1, 2, 3, 4]) + (65535).to_bytes(4, "big")
    assert format_host(mapped) == "1.2.3.4:65535"
    assert format_host(bytes(10) + b"\xff\xfe" + bytes(4) + bytes(4)) == "[0:0:0:0:0:fffe:0:0]:0"


def test_look_message_by_offset_first_last_and_end(make_store):
    store = make_store()
    results = [put_ok(store, Message("TopicTest", b"x" * (i * 50), tags="T")) for i in range(30)]
    assert len(set(r.commit_log_offset // CL_SIZE for r in results)) > 1
    first = store.look_message_by_offset(results[0].commit_log_offset)
    last = store.look_message_by_offset(results[-1].commit_log_offset)
    assert first.body == b"" and first.queue_offset == 0
    assert last.body == b"x" * 29 * 50 and last.queue_offset == 29
    sized = store.look_message_by_offset(results[-1].commit_log_offset, results[-1].wrote_bytes)
    assert sized == last and hash(sized) == hash(last)
    assert len({first, last, sized, store.get_message("g", "TopicTest", 0, 0, 1).messages[0]}) == 2  # hashable
    end = store.max_phy_offset
    assert end == results[-1].commit_log_offset + results[-1].wrote_bytes
    assert store.look_message_by_offset(end) is None
    assert store.look_message_by_offset(end + 10_000) is None
    assert store.look_message_by_msg_id(results[5].msg_id).body == b"x" * 250
    for size in (0, -5, -(2**31)):  # no record has that size: a negative one read the map from its end
        assert store.look_message_by_offset(results[0].commit_log_offset, size) is None


def test_body_over_max_message_size_is_illegal_and_moves_nothing(make_store, store_config):
    store = make_store(config=store_config.copy(maxMessageSize=1024))
    too_big = store.put(Message("TopicTest", b"x" * 1025))
    assert too_big.status == PutMessageStatus.MESSAGE_ILLEGAL and not too_big.ok
    assert store.max_phy_offset == 0
    batch = store.put_batch([Message("TopicTest", b"ok"), Message("TopicTest", b"x" * 1025)])
    assert batch.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0
    exact = put_ok(store, Message("TopicTest", b"y" * 1024))
    assert exact.queue_offset == 0
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1


def _sent_size(messages: list[Message]) -> int:
    """The batch a RocketMQ producer sends for ``messages`` (``MessageDecoder.encodeMessages``): per
    message 20 bytes of fields, the body, a 2-byte length and its own properties (UNIQ_KEY included)."""
    return sum(
        22 + len(m.body) + len("\x02".join(f"{k}\x01{v}" for k, v in m.properties.items()).encode()) for m in messages
    )


def test_batch_over_max_message_size_as_sent_is_illegal_and_moves_nothing(make_store, store_config):
    """RocketMQ's ``putMessages`` refuses a batch whose encoded body (what the producer sends) is
    over maxMessageSize ("PutMessages body length too long"), though each message alone is within it."""
    store = make_store(config=store_config.copy(maxMessageSize=1024, mappedFileSizeCommitLog=1 << 20))
    uniq = {"UNIQ_KEY": "0" * 32}  # the key the store would give each message, the same length
    for props in (None, {"a": "b"}):  # the plain path (tags and keys) and the general one
        for size in (1024, 1025):  # at maxMessageSize, and one byte over
            batch = [Message("TopicTest", b"x" * 300, tags="TagA", keys="k", properties=props) for _ in range(3)]
            sent = _sent_size([Message(m.topic, m.body, m.tags, m.keys, {**(props or {}), **uniq}) for m in batch])
            batch[0] = Message("TopicTest", b"x" * (300 + size - sent), tags="TagA", keys="k", properties=props)
            before = store.max_phy_offset
            r = store.put_batch(batch, properties={"CLUSTER": "c" * 200})  # common ones are not sent per message
            if size == 1024:
                assert r.ok, r
                continue
            assert r.status == PutMessageStatus.MESSAGE_ILLEGAL and "1025" in r.detail and "1024" in r.detail, r
            assert store.max_phy_offset == before
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 6
    store.config.maxMessageSize = 4096  # hot: the same batch goes in
    assert store.put_batch([Message("TopicTest", b"x" * 1000) for _ in range(3)]).ok


def test_batch_over_the_record_limit_in_all_is_illegal_and_moves_nothing(make_store, store_config):
    """RocketMQ's batch encoder refuses a batch whose records together pass the record limit
    (maxMessageSize + 64 KiB, as for one record), though what the producer sends is within
    maxMessageSize: the batch's common properties go into every record."""
    store = make_store(config=store_config.copy(maxMessageSize=1024, mappedFileSizeCommitLog=1 << 20))
    common = {"CLUSTER": "c" * 8000}
    for props in (None, {"a": "b"}):
        batch = [Message("TopicTest", b"x", tags="TagA", keys="k", properties=props) for _ in range(9)]
        r = store.put_batch(batch, properties=common)
        assert r.status == PutMessageStatus.MESSAGE_ILLEGAL and "64 KiB" in r.detail, r
        assert store.max_phy_offset == 0
    fits = store.put_batch(batch[:7], properties=common)
    assert fits.ok and 7 * 8000 < store.max_phy_offset <= 1024 + 64 * 1024


def test_max_message_size_is_hot_reconfigurable(make_store, store_config):
    store = make_store(config=store_config.copy(maxMessageSize=1024))
    body = b"z" * 1500
    assert store.put(Message("TopicTest", body)).status == PutMessageStatus.MESSAGE_ILLEGAL
    store.config.maxMessageSize = 2048
    assert store.put(Message("TopicTest", body)).status == PutMessageStatus.PUT_OK
    store.config.max_message_size = 1024
    assert store.put(Message("TopicTest", body)).status == PutMessageStatus.MESSAGE_ILLEGAL
    store.config.set("maxMessageSize", "4096")
    r = store.put(Message("TopicTest", body))
    assert r.ok and r.queue_offset == 1


def test_index_settings_changed_while_running_take_effect(make_store, store_config):
    """messageIndexEnable is read at each dispatch (CommitLogDispatcherBuildIndex) and
    maxMsgsNumBatch at each query (IndexService.queryOffset), as RocketMQ reads them."""
    store = make_store(config=store_config.copy(maxMsgsNumBatch=5))
    for i in range(20):
        put_ok(store, Message("T", b"m%d" % i, keys=["k"]))
    assert store.wait_for_dispatch()
    assert len(store.query_message("T", "k").messages) == 5
    store.config.maxMsgsNumBatch = 64
    assert len(store.query_message("T", "k").messages) == 20
    store.config.messageIndexEnable = False
    put_ok(store, Message("T", b"off", keys=["off"]))
    assert store.wait_for_dispatch() and store.query_message("T", "off").messages == []
    store.config.messageIndexEnable = True
    put_ok(store, Message("T", b"on", keys=["on"]))
    assert store.wait_for_dispatch() and [m.body for m in store.query_message("T", "on").messages] == [b"on"]


def test_properties_size_limit(make_store, store_config):
    store = make_store(config=store_config.copy(mappedFileSizeCommitLog=65536))
    uniq = "7F0000010000000000000000000000AB"

    def with_props(total_len: int) -> Message:
        filler = total_len - len(f"UNIQ_KEY\x01{uniq}\x02big\x01")
        return Message("TopicTest", b"p", properties={"UNIQ_KEY": uniq, "big": "a" * filler})

    before = store.max_phy_offset
    r = store.put(with_props(32768))
    assert r.status == PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.max_phy_offset == before
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0
    assert put_ok(store, Message("TopicTest", b"normal")).queue_offset == 0
    exact = put_ok(store, with_props(32767))
    assert exact.queue_offset == 1
    assert put_ok(store, Message("TopicTest", b"normal")).queue_offset == 2
    # non-ASCII: the limit is on UTF-8 bytes
    filler = 32767 - len(f"UNIQ_KEY\x01{uniq}\x02big\x01")
    r = store.put(Message("TopicTest", b"p", properties={"UNIQ_KEY": uniq, "big": "\u00e9" * (filler // 2 + 1)}))
    assert r.status == PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert put_ok(store, Message("TopicTest", b"normal")).queue_offset == 3
    assert store.wait_for_dispatch()
    stored = store.look_message_by_offset(exact.commit_log_offset)
    assert len(stored.properties_raw) == 32767
    assert stored.properties["big"] == "a" * (32767 - len(f"UNIQ_KEY\x01{uniq}\x02big\x01"))


def test_topic_of_127_characters_is_accepted(make_store):
    store = make_store()
    topic = "t" * 127
    r = put_ok(store, Message(topic, b"long topic"))
    assert store.look_message_by_offset(r.commit_log_offset).topic == topic


@pytest.mark.parametrize("topic", ["", "../x", "a/b", "a b", "t" * 128, ".", "x\x00", "caf\u00e9", None, 5])
def test_invalid_topics_are_refused(topic):
    with pytest.raises(InvalidTopicError):
        Message(topic, b"x")


@pytest.mark.parametrize("topic", ["%RETRY%group", "%DLQ%group", "Topic_Test-1", "a|b", "%RETRY%" + "g" * 200])
def test_valid_topics(topic):
    assert Message(topic, b"x").topic == topic


def test_invalid_topic_is_refused_by_commit_offset(make_store):
    store = make_store()
    with pytest.raises(InvalidTopicError):
        store.commit_offset("group", "../etc", 0, 1)


def test_bad_message_arguments(make_store):
    store = make_store()
    with pytest.raises(InvalidMessageError):
        Message("T", b"x", tags="a\x02b")  # (a \x01 is a value's own: test_bad_input)
    with pytest.raises(InvalidMessageError):
        Message("T", b"x", properties={"a": "b\x02c"})
    with pytest.raises(InvalidMessageError):
        Message("T", 12345)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        store.put(Message("T", b"x"), -1)
    with pytest.raises(InvalidMessageError):
        store.put_batch([Message("T", b"x"), Message("U", b"y")])
    with pytest.raises(InvalidMessageError):
        store.put_batch([])


def test_a_sys_flag_that_is_not_an_int_is_refused() -> None:
    for bad in (1.5, "1", 0x10):  # 0x10: the born host is IPv6, which the store decides
        with pytest.raises(InvalidMessageError):
            Message("T", b"x", sys_flag=bad)


@pytest.mark.parametrize(
    "field",
    [
        {"reconsume_times": 2**31},
        {"reconsume_times": -(2**31) - 1},
        {"reconsume_times": 2**40},
        {"born_timestamp": 2**63},
        {"born_timestamp": 2**70},
        {"prepared_transaction_offset": -(2**63) - 1},
        {"prepared_transaction_offset": -(2**64)},
        {"reconsume_times": "3"},
    ],
    ids=repr,
)
def test_fixed_width_fields_out_of_their_java_range_are_refused(make_store, field):
    """reconsumeTimes is a Java int, bornTimestamp and preparedTransactionOffset longs: anything
    else is an InvalidMessageError when the message is made, and the store is left as it was."""
    store = make_store()
    with pytest.raises(InvalidMessageError):
        store.put(Message("T", b"x", **field))
    edges = {"reconsume_times": 2**31 - 1, "born_timestamp": 2**63 - 1, "prepared_transaction_offset": -(2**63)}
    r = put_ok(store, Message("T", b"x", **edges))
    assert r.commit_log_offset == 0
    stored = store.look_message_by_offset(0)
    assert (stored.reconsume_times, stored.born_timestamp, stored.prepared_transaction_offset) == tuple(edges.values())


def test_open_arguments(tmp_path, store_config):
    with pytest.raises(FileNotFoundError):
        MessageStore.open(tmp_path / "nothing", store_config, read_only=True)
    with pytest.raises(ValueError):
        MessageStore.open(tmp_path / "raw", store_config, recover=False)
    assert not (tmp_path / "nothing").exists()


def test_a_folder_without_a_store_is_refused_unless_created(tmp_path, store_config):
    """Read-only opens and ``create=False`` refuse a folder holding no store (naming a sub-folder
    that is one); nothing is created. A normal open creates the store."""
    home = tmp_path / "broker-home"
    (home / "logs").mkdir(parents=True)
    for keys in ({"read_only": True}, {"create": False}):
        with pytest.raises(StoreNotFoundError, match="no store at") as caught:
            MessageStore.open(home, store_config, **keys)
        assert "did you mean" not in str(caught.value)
    with MessageStore.open(home / "store", store_config) as store:
        store.put(Message("T", b"x"))
    for keys in ({"read_only": True}, {"create": False}):
        with pytest.raises(StoreNotFoundError, match=f"did you mean {home / 'store'}"):
            MessageStore.open(home, store_config, **keys)
        with MessageStore.open(home / "store", store_config, **keys) as store:
            assert store.get_max_offset_in_queue("T", 0) == 1
    assert sorted(p.name for p in home.iterdir()) == ["logs", "store"]
    assert issubclass(StoreNotFoundError, FileNotFoundError)


def test_second_open_in_the_same_process_is_locked(make_store, tmp_path, store_config):
    store = make_store()
    with pytest.raises(StoreLockedError):
        MessageStore.open(tmp_path / "store", store_config)
    # a read-only view (tools) does not take the lock
    with MessageStore.open(tmp_path / "store", store_config, read_only=True) as view:
        assert view.read_only
    store.shutdown()
    again = make_store()
    assert put_ok(again, Message("TopicTest", b"after")).ok


def test_second_open_from_another_process_is_locked(make_store, tmp_path, store_config):
    store = make_store()
    put_ok(store, Message("TopicTest", b"x"))
    script = textwrap.dedent(
        f"""
        import sys
        from rocketstore import MessageStore, StoreConfig
        from rocketstore.errors import StoreLockedError
        try:
            MessageStore.open({str(tmp_path / "store")!r}, StoreConfig({store_config.changed()!r})).shutdown()
        except StoreLockedError as exc:
            print("locked:", exc)
            sys.exit(3)
        sys.exit(0)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "locked" in done.stdout
    store.shutdown()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_batch_of_10_is_stored_as_consecutive_records(make_store, tmp_path):
    store = make_store()
    put_ok(store, Message("BatchTopic", b"before", tags="TagA"), 3)
    messages = [Message("BatchTopic", f"batch-{i}".encode() * (i + 1), tags="TagB", keys=f"bk{i}") for i in range(10)]
    r = store.put_batch(messages, 3, {"CLUSTER": "DefaultCluster"})
    assert r.status == PutMessageStatus.PUT_OK and r.msg_count == 10
    assert r.queue_offset == 1
    offsets = r.commit_log_offsets
    assert offsets[0] == r.commit_log_offset
    uniq = r.uniq_keys
    assert len(set(uniq)) == 10 and all(re.fullmatch(r"[0-9A-F]{32}", u) for u in uniq)
    sizes = []
    for m, u in zip(messages, uniq, strict=True):
        props = f"TAGS\x01TagB\x02KEYS\x01{m.keys}\x02UNIQ_KEY\x01{u}\x02CLUSTER\x01DefaultCluster".encode()
        sizes.append(record_size("BatchTopic", m.body, props))
    for i in range(9):
        assert offsets[i + 1] == offsets[i] + sizes[i]
    assert r.wrote_bytes == sum(sizes)
    ids = r.msg_id.split(",")
    assert len(ids) == 10 and all(len(i) == 32 for i in ids)
    assert ids == [(bytes([127, 0, 0, 1]) + struct.pack(">iq", 10911, o)).hex().upper() for o in offsets]
    assert store.wait_for_dispatch()
    for i, m in enumerate(messages):
        by_phy = store.look_message_by_offset(offsets[i])
        assert by_phy.body == m.body and by_phy.queue_offset == 1 + i
        by_queue = store.get_message("g", "BatchTopic", 3, 1 + i, 1)
        assert by_queue.messages[0].commit_log_offset == offsets[i]
        assert store.query_message("BatchTopic", f"bk{i}").messages == [by_phy]
    store.shutdown()

    records = [x for x in specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE) if x["topic"] == "BatchTopic"]
    batch = records[1:]
    assert [x["offset"] for x in batch] == offsets
    assert [x["total"] for x in batch] == sizes
    assert {x["storeTimestamp"] for x in batch} == {r.store_timestamp}
    assert [x["queueOffset"] for x in batch] == list(range(1, 11))
    for x, u in zip(batch, uniq, strict=True):
        assert x["length_ok"] and x["crc_ok"]
        assert x["propertiesRaw"].endswith("\x02CLUSTER\x01DefaultCluster")
        assert x["properties"]["UNIQ_KEY"] == u and x["properties"]["CLUSTER"] == "DefaultCluster"
    units = specreader.read_consume_queue(str(tmp_path / "store"), "BatchTopic", 3)
    assert [u[0] for u in units[1:]] == offsets and [u[1] for u in units[1:]] == sizes


def test_batch_with_ipv6_hosts_and_properties(make_store, tmp_path):
    store = make_store()
    messages = [
        Message(
            "BatchTopic", b"v6-%d" % i, properties={"seq": str(i)}, born_host="[::1]:5000", store_host="[fd00::a]:1"
        )
        for i in range(4)
    ]
    r = store.put_batch(messages, 0, {"CLUSTER": "DefaultCluster"})
    assert r.ok
    assert all(len(i) == 56 for i in r.msg_id.split(","))
    store.shutdown()
    records = specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE)
    assert [x["offset"] for x in records] == r.commit_log_offsets
    for i, x in enumerate(records):
        props = f"seq\x01{i}\x02UNIQ_KEY\x01{r.uniq_keys[i]}\x02CLUSTER\x01DefaultCluster".encode()
        assert x["total"] == record_size("BatchTopic", messages[i].body, props, born_v6=True, store_v6=True)
        assert x["sysFlag"] == 0x30 and x["queueOffset"] == i


def test_every_put_result_is_hashable_whatever_made_it(make_store):
    """A PutResult is a tuple compared by value: every one hashes, whichever path made it (the
    single put, the general put, both batch paths, a refusal), and equal results hash alike;
    commit_log_offsets and uniq_keys are still lists."""
    store = make_store()
    results = [
        store.put(Message("T", b"plain", tags="a")),
        store.put(Message("T", b"general", properties={"p": "v"})),
        store.put_batch([Message("T", b"b1", keys="k"), Message("T", b"b2")]),
        store.put_batch([Message("T", b"g1", properties={"p": "v"}), Message("T", b"g2")]),
        store.put(Message("T", b"x", properties={"DELAY": "zz"})),  # refused
    ]
    assert [r.ok for r in results] == [True, True, True, True, False]
    assert len({*results, *results}) == len(results)
    for r in results:
        twin = type(r)(tuple(r))
        assert twin == r and hash(twin) == hash(r)
        assert type(r.commit_log_offsets) is list and type(r.uniq_keys) is list and type(r.msg_ids) is list
    first = store.look_message_by_offset(results[2].commit_log_offset)
    assert results[2].commit_log_offsets == [first.commit_log_offset, first.commit_log_offset + first.store_size]


def test_a_put_stored_without_a_uniq_key_reports_none(make_store):
    """put_as_is stores a message without a UNIQ_KEY as it is: its result's uniq_key is None (it
    raised a TypeError joining None) and uniq_keys says [None]."""
    store = make_store()
    result = store.put_as_is(Message("T", b"x"))
    assert result.ok and result.uniq_key is None and result.uniq_keys == [None]
    assert store.look_message_by_offset(result.commit_log_offset).uniq_key is None


def test_a_batchs_msg_ids_are_built_from_each_records_own_store_host(make_store, tmp_path):
    """Each record of a batch holds its message's store host; the msgIds the put reports are its
    records' (every id was built from the first message's host), and look up their records."""
    store = make_store()
    hosts = ["1.1.1.1:1", "[::1]:2", "1.1.1.1:1"]
    mixed = store.put_batch([Message("T", b"%d" % i, store_host=h) for i, h in enumerate(hosts)])
    same = store.put_batch([Message("T", b"s%d" % i, store_host="2.2.2.2:3") for i in range(2)])
    own = store.put_batch([Message("T", b"o%d" % i, keys="k") for i in range(2)])
    assert mixed.ok and same.ok and own.ok and len(mixed.msg_ids[1]) == 56 and len(mixed.msg_ids[0]) == 32
    store.shutdown()
    view = make_store(read_only=True)  # the records as the bytes hold them
    written = ["1.1.1.1:1", "[0:0:0:0:0:0:0:1]:2", "1.1.1.1:1"]  # an IPv6 host as Java writes it out
    for result, expected in ((mixed, written), (same, ["2.2.2.2:3"] * 2), (own, ["127.0.0.1:10911"] * 2)):
        stored = [view.look_message_by_offset(o) for o in result.commit_log_offsets]
        assert [m.store_host for m in stored] == expected
        assert result.msg_ids == [m.msg_id for m in stored] and result.msg_id == ",".join(result.msg_ids)
        assert [view.look_message_by_msg_id(i) for i in result.msg_ids] == stored


def test_batch_takes_messages_whose_delay_is_no_delay(make_store):
    """DELAY "-1", "0" or "00" is no delay (a single put stores such a message in its own topic):
    a batch takes it, as RocketMQ's MessageBatch refuses only a delay level above 0."""
    store = make_store()
    for text in ("-1", "00", "0"):
        r = store.put_batch([Message("T", b"a", properties={"DELAY": text}), Message("T", b"b")])
        assert r.ok, (text, r)
    assert store.put_batch([Message("T", b"a", properties={"DELAY": "x"})]).status == PutMessageStatus.MESSAGE_ILLEGAL


def test_batch_refuses_delayed_and_transaction_messages(make_store):
    store = make_store()
    r = store.put_batch([Message("T", b"a"), Message("T", b"b", properties={"DELAY": "3"})])
    assert r.status == PutMessageStatus.MESSAGE_ILLEGAL
    r = store.put_batch([Message("T", b"a", sys_flag=0x4)])
    assert r.status == PutMessageStatus.MESSAGE_ILLEGAL
    # a prepared offset names a transaction's half message: RocketMQ's batch records carry 0
    r = store.put_batch([Message("T", b"a"), Message("T", b"b", prepared_transaction_offset=77)])
    assert r.status == PutMessageStatus.MESSAGE_ILLEGAL and "prepared_transaction_offset" in r.detail
    assert store.max_phy_offset == 0


def test_batch_hitting_the_end_of_a_file_goes_whole_to_the_next_one(make_store, tmp_path):
    store = make_store()
    body = b"f" * 200
    first = []
    while True:  # fill the first segment until one more 300-byte-ish record would still fit but a batch won't
        r = put_ok(store, Message("FillTopic", body))
        first.append(r)
        if CL_SIZE - (r.commit_log_offset + r.wrote_bytes) < 800:
            break
    end_of_data = first[-1].commit_log_offset + first[-1].wrote_bytes
    assert end_of_data < CL_SIZE
    batch = [Message("FillTopic", body) for _ in range(4)]  # about 1.2 KiB: does not fit
    r = store.put_batch(batch, 0)
    assert r.ok and r.commit_log_offset == CL_SIZE
    assert r.queue_offset == len(first)
    store.shutdown()
    raw = (tmp_path / "store" / "commitlog" / "00000000000000000000").read_bytes()
    total, magic = struct.unpack_from(">iI", raw, end_of_data)
    assert magic == specreader.MAGIC_BLANK
    assert total == CL_SIZE - end_of_data  # the BLANK covers the rest of the file
    assert raw[end_of_data + 8 :] == bytes(CL_SIZE - end_of_data - 8)
    records = specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE)
    in_second = [x for x in records if x["offset"] >= CL_SIZE]
    assert [x["offset"] for x in in_second] == r.commit_log_offsets
    assert [x["queueOffset"] for x in in_second] == list(range(len(first), len(first) + 4))


def test_batch_larger_than_a_segment_is_refused(make_store):
    store = make_store()
    r = store.put_batch([Message("T", b"x" * 1000) for _ in range(5)])
    assert r.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0
    first = store.put(Message("T", b"x" * 4000, tags="TagA"))  # a new topic: the general put path
    assert first.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0


def test_single_message_larger_than_a_segment_is_refused_on_the_fast_path(make_store):
    store = make_store()
    small = put_ok(store, Message("T", b"small"))
    before = store.max_phy_offset
    big = store.put(Message("T", b"x" * 4000))  # the topic is known now: the plain appender
    assert big.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == before
    assert put_ok(store, Message("T", b"next")).commit_log_offset == small.commit_log_offset + small.wrote_bytes


def test_puts_are_refused_as_os_page_cache_busy_while_the_put_lock_is_held_too_long(make_store):
    """RocketMQ's isOSPageCacheBusy: while an append has held the put lock for over
    osPageCacheBusyTimeOutMills (a write stalled on the disk), puts are answered
    OS_PAGE_CACHE_BUSY at once, on every path, rather than queued behind it; none is stored."""
    store = make_store()
    put_ok(store, Message("T", b"known"))  # the topic is known: the next single put takes the fast path
    log, results = store.commit_log, []

    def producer() -> None:
        results.append(store.put(Message("T", b"fast")))
        results.append(store.put(Message("T", b"general", properties={"p": "v"})))
        results.append(store.put_batch([Message("T", b"batch")] * 2))

    worker = threading.Thread(target=producer)
    with log.put_lock:
        log.begin_time_in_lock = int(time.time() * 1000) - 1500  # an append stalled 1.5 s ago
        worker.start()
        worker.join(30)  # answered at once, not queued for the lock
        log.begin_time_in_lock = 0
    worker.join(30)
    assert [r.status for r in results] == [PutMessageStatus.OS_PAGE_CACHE_BUSY] * 3
    assert put_ok(store, Message("T", b"after")).queue_offset == 1


def test_rolling_records_never_straddle_files_and_files_end_with_blank(make_store, tmp_path):
    store = make_store()
    results = []
    for i in range(120):
        body = bytes([65 + i % 26]) * ((i * 37) % 700)
        results.append(put_ok(store, Message("RollTopic", body, tags=f"T{i % 3}", keys=f"r{i}"), i % 4))
    store.shutdown()
    names = segments(tmp_path / "store")
    assert len(names) >= 8
    assert names == [f"{i * CL_SIZE:020d}" for i in range(len(names))]
    records = specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE)  # asserts BLANKs cover their files
    assert [x["offset"] for x in records] == [r.commit_log_offset for r in results]
    for x in records:
        start = x["offset"] % CL_SIZE
        assert start + x["total"] + 8 <= CL_SIZE, "at least 8 bytes stay after a record"
    for name in names[:-1]:
        raw = (tmp_path / "store" / "commitlog" / name).read_bytes()
        mine = [x for x in records if x["offset"] // CL_SIZE == int(name) // CL_SIZE]
        end = mine[-1]["offset"] % CL_SIZE + mine[-1]["total"]
        total, magic = struct.unpack_from(">iI", raw, end)
        assert (magic, total) == (specreader.MAGIC_BLANK, CL_SIZE - end), name


def test_concurrent_puts_get_unique_consecutive_offsets(make_store, tmp_path, store_config, rmqread):
    """Threads putting at once (plain, general and batch puts): every queue offset is given once, the
    log's store times never go back, and the result is a clean store for the independent reader."""
    store = make_store()
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        mine = []
        try:
            for i in range(120):
                if i % 10 == 0:
                    batch = [
                        Message("Conc", b"b%d-%d-%d" % (n, i, j), tags="TagB", keys=f"b{n}-{i}-{j}") for j in range(3)
                    ]
                    r = store.put_batch(batch, i % 2)
                elif i % 7 == 0:
                    msg = Message(
                        "Conc", b"g%d-%d" % (n, i), keys=f"g{n}-{i}", properties={"x": "y"}, born_host="[::1]:1"
                    )
                    r = store.put(msg, i % 2)
                else:
                    r = store.put(Message("Conc", b"p%d-%d" % (n, i), tags="TagA", keys=f"p{n}-{i}"), i % 2)
                assert r.ok, r
                mine.append((i % 2, r))
        except BaseException as exc:
            errors.append(exc)
        results[n] = mine

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert store.wait_for_dispatch()
    for q in (0, 1):
        offsets = sorted(
            o
            for mine in results.values()
            for qid, r in mine
            if qid == q
            for o in range(r.queue_offset, r.queue_offset + r.msg_count)
        )
        assert offsets == list(range(len(offsets)))
        assert store.get_max_offset_in_queue("Conc", q) == len(offsets)
    store.shutdown()
    records = specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE)
    assert len(records) == 4 * (12 * 3 + 108)
    times = [x["storeTimestamp"] for x in records]
    assert times == sorted(times)
    done = rmqread("check", tmp_path / "store", store_config)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_batchs_common_properties_are_checked(make_store):
    """``put_batch(properties=...)`` goes into every record: its names and values are checked as
    a Message's are, and what each message has for itself (tags, keys, UNIQ_KEY) cannot be set
    there (the queue's tags code and the index would disagree with the record). A DELAY there is
    taken as one each message has: a delay is refused as a delayed message is (it said "set it
    per message", which is refused too), and "0" is no delay."""
    store = make_store()
    batch = [Message("T", b"a", tags="x", keys="k1"), Message("T", b"b")]
    common = ({"TAGS": "y"}, {"KEYS": "kb"}, {"UNIQ_KEY": "u"})
    for bad in (*common, {"X": "a\x02TAGS\x01zz"}, {"": "v"}, {"X": ""}):
        with pytest.raises(InvalidMessageError):
            store.put_batch(batch, properties=bad)
    delayed = store.put_batch(batch, properties={"DELAY": "3"})
    assert delayed.status == PutMessageStatus.MESSAGE_ILLEGAL and "delayed" in delayed.detail
    assert store.put_batch(batch, properties={"DELAY": "x"}).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0
    assert store.put_batch(batch, properties={"DELAY": "0"}).ok
    assert store.wait_for_dispatch() and store.get_max_offset_in_queue("T", 0) == 2
    store.delete_topics(["T"])
    assert store.put_batch(batch, properties={"CLUSTER": "c"}).ok
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0).messages
    assert [(m.tags, m.properties["CLUSTER"]) for m in got] == [("x", "c"), (None, "c")]


def test_properties_changed_in_place_are_checked_at_put(make_store):
    """``Message.properties`` may be changed in place, after the constructor's checks: a put
    refuses what would not read back as the same properties."""
    store = make_store()
    for name, value in (("X", "v\x02TAGS\x01evil"), ("", "q"), ("Y", ""), ("Z", 5)):
        message = Message("T", b"x", tags="a")
        message.properties[name] = value
        assert store.put(message).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_batch([message, Message("T", b"y")]).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0


# ================================================================== B. mapped files and their queues


def test_mapped_file_queue_rolls_exactly_when_full_and_finds_by_offset(tmp_path):
    queue = MappedFileQueue(str(tmp_path / "q"), 1024)
    queue.load()
    for i in range(10):  # 10 x 256 bytes: 2.5 files
        mapped = queue.last_mapped_file(0)
        assert mapped.file_from_offset == (i // 4) * 1024
        mapped.append(bytes([i]) * 256)
    assert [f.file_name for f in queue.files] == [
        "00000000000000000000",
        "00000000000000001024",
        "00000000000000002048",
    ]
    assert queue.max_offset() == 2560
    assert queue.mapped_memory_size() == 3 * 1024
    for offset, want in ((0, 0), (1023, 0), (1024, 1024), (2047, 1024), (2048, 2048), (3071, 2048)):
        assert queue.find_by_offset(offset).file_from_offset == want
    assert queue.find_by_offset(3072) is None
    assert queue.find_by_offset(-1) is None
    # flush(0) advances one file at a time
    wheres = []
    while not queue.flush(0):
        wheres.append(queue.flushed_where)
    assert wheres == [1024, 2048, 2560]
    queue.close()
    # a queue whose first file starts past 0 (the older ones expired)
    os.unlink(tmp_path / "q" / "00000000000000000000")
    again = MappedFileQueue(str(tmp_path / "q"), 1024)
    again.load()
    assert again.min_offset() == 1024
    assert again.find_by_offset(100) is None
    assert again.find_by_offset(100, return_first_on_not_found=True).file_from_offset == 1024
    assert again.find_by_offset(2100).file_from_offset == 2048
    again.truncate_dirty_files(1500)
    assert [f.file_name for f in again.files] == ["00000000000000001024"]
    assert not (tmp_path / "q" / "00000000000000002048").exists()
    again.close()


def test_mapped_file_is_not_unmapped_while_held(tmp_path):
    mapped = MappedFile.create(str(tmp_path / "00000000000000000000"), 0, 4096)
    mapped.append(b"abc")
    assert mapped.hold()
    assert not mapped.destroy(60_000)  # still held: unavailable but not cleaned
    assert not mapped.available and not mapped.cleanup_over
    assert not mapped.hold()
    # its name goes at once (a crash cannot bring it back); the holder still reads its bytes
    assert not (tmp_path / "00000000000000000000").exists() and mapped.mm[:3] == b"abc"
    mapped.release()
    assert mapped.cleanup_over
    assert mapped.destroy(0)
    assert not (tmp_path / "00000000000000000000").exists()


def test_delete_expired_by_time_only_deletes_a_leading_run(tmp_path):
    queue = MappedFileQueue(str(tmp_path / "q"), 512)
    queue.load()
    for _ in range(12):
        queue.last_mapped_file(0).append(b"x" * 512)
    old = 10 * 3600
    for i, f in enumerate(queue.files):
        if i < 3 or i in (6, 7):  # 3 old at the head, 2 old behind a young one
            os.utime(f.path, (os.path.getmtime(f.path) - old, os.path.getmtime(f.path) - old))
    deleted = queue.delete_expired_by_time(3600 * 1000, 0, 1000, False, 10)
    assert deleted == 3
    assert queue.files[0].file_from_offset == 3 * 512
    assert len(queue.files) == 9
    queue.close()


# ================================================================== C. dispatch and visibility


def test_dispatch_behind_bytes_is_observable(make_store):
    store = make_store()
    put_ok(store, Message("TopicTest", b"first"))
    assert store.wait_for_dispatch()
    assert store.dispatch_behind_bytes() == 0
    store.reput.stop()
    r = put_ok(store, Message("TopicTest", b"second"))
    assert store.dispatch_behind_bytes() == r.wrote_bytes
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1  # not visible yet
    assert store.get_message("g", "TopicTest", 0, 1).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert store.reput.run_once() == r.wrote_bytes
    assert store.dispatch_behind_bytes() == 0
    got = store.get_message("g", "TopicTest", 0, 1)
    assert got.status == GetMessageStatus.FOUND and got.messages[0].body == b"second"


def test_dispatching_records_again_adds_only_the_new_units(tmp_path):
    """A dispatch whose first records are built already (a re-dispatch after recovery) skips them,
    whether the columns come as lists (a few records) or arrays (a backlog)."""
    from rocketstore.queues.consume_queue import UNIT, ConsumeQueue

    for kind in (list, np.array):
        cq = ConsumeQueue("T", 0, str(tmp_path / kind.__name__), 200)
        cq.put_unit_arrays(kind([0]), kind([100]), kind([0]), UNIT.pack(0, 100, 7))
        cq.put_unit_arrays(
            kind([0, 100, 200]),
            kind([100, 100, 50]),
            kind([0, 1, 2]),
            b"".join(UNIT.pack(p, n, 7) for p, n in ((0, 100), (100, 100), (200, 50))),
        )
        assert cq.max_offset_in_queue() == 3
        assert [cq.get_unit(i)[0] for i in range(3)] == [0, 100, 200]
        cq.close()


def test_units_crossing_a_file_that_cannot_be_made_are_not_written_twice(tmp_path):
    """A batch of units whose next consume-queue file cannot be made (here a folder is in its
    place; ENOSPC in life) fails after filling the first file; the dispatch retried once the file
    can be made writes only the units that were missing, as RocketMQ's unit-by-unit write does."""
    from rocketstore.queues.consume_queue import UNIT, ConsumeQueue

    for kind in (list, np.array):
        root = tmp_path / kind.__name__
        cq = ConsumeQueue("T", 0, str(root), 100)  # 5 units a file
        blocker = root / "T" / "0" / f"{100:020d}"
        blocker.mkdir(parents=True)
        phys, sizes = [i * 100 for i in range(8)], [100] * 8
        units = b"".join(UNIT.pack(p, n, 7) for p, n in zip(phys, sizes, strict=True))
        with pytest.raises(OSError):
            cq.put_unit_arrays(kind(phys), kind(sizes), kind(list(range(8))), units)
        blocker.rmdir()
        cq.put_unit_arrays(kind(phys), kind(sizes), kind(list(range(8))), units)
        assert cq.max_offset_in_queue() == 8
        assert [cq.get_unit(i)[0] for i in range(8)] == phys
        cq.close()


def test_a_backlog_larger_than_a_dispatch_chunk_is_dispatched_whole(make_store, store_config):
    """A reput round that finds more of the log than one dispatch chunk (singles and batches mixed,
    several topics and queues) builds every consume-queue unit and index entry, in order."""
    from rocketstore.queues.dispatch import CHUNK_BYTES

    store = make_store(
        config=store_config.copy(
            mappedFileSizeCommitLog=1 << 24,
            mappedFileSizeConsumeQueue=20 * 4096,
            maxIndexNum=40000,
            maxHashSlotNum=4096,
        )
    )
    store.reput.stop()
    expected: dict[tuple[str, int], list[str]] = {}
    n = 0
    body = b"x" * 1000
    while store.commit_log.max_offset() < 2 * CHUNK_BYTES + 100_000:
        topic, queue_id = f"T{n % 3}", n % 5
        keys = [f"k{n + i}" for i in range(1 + n % 40)]
        if len(keys) == 1:
            assert store.put(Message(topic, body, keys=keys[0]), queue_id).status == "PUT_OK"
        else:
            batch = [Message(topic, body, keys=k) for k in keys]
            assert store.put_batch(batch, queue_id).status == "PUT_OK"
        expected.setdefault((topic, queue_id), []).extend(keys)
        n += len(keys)
    assert store.reput.run_once() > 0
    assert store.dispatch_behind_bytes() == 0
    for (topic, queue_id), keys in expected.items():
        got = []
        offset = 0
        while offset < len(keys):
            result = store.get_message("g", topic, queue_id, offset, 32)
            if not result.messages:
                break
            got += [m.keys for m in result.messages]
            offset = result.next_begin_offset
        assert got == keys
    for topic, queue_id in [next(iter(expected)), list(expected)[-1]]:
        last = expected[(topic, queue_id)][-1]
        assert [m.keys for m in store.query_message(topic, last).messages] == [last]


def test_batch_requests_lay_out_as_their_records():
    """Dispatch requests that are all batches (a stream of put_batch calls, laid out by numpy) give
    the same rows as the same records handed over one by one: offsets summed within each batch,
    queue offsets counted on, the batch's topic, queue, time and flag on each of its records."""
    from rocketstore.codec.records import REQUEST_LEN, Records, batch_request

    batches = []
    singles = []
    offset = 5000
    for b, n in enumerate((1, 3, 32, 2)):
        topic, queue_id, queue_offset, ts = f"T{b % 2}", b % 3 - 1, 10 * b + 7, 1_700_000_000_000 + b
        sizes = [300 + 17 * b + i for i in range(n)]
        codes = [b * 100 + i for i in range(n)]
        keys = [f"k{b}-{i}" if i % 2 else None for i in range(n)]
        uniqs = [f"U{b}{i}" for i in range(n)]
        batches.append(batch_request(topic, queue_id, offset, sizes, codes, ts, queue_offset, keys, uniqs))
        for i in range(n):
            singles.append((topic, queue_id, offset, sizes[i], codes[i], ts, queue_offset + i, keys[i], uniqs[i], 0))
            offset += sizes[i]
        offset += 64  # the next batch starts elsewhere in the log (another producer's record between)
    assert all(len(r) == REQUEST_LEN for r in singles)
    assert Records.of(batches).to_requests() == singles
    assert Records.of(singles).to_requests() == singles
    assert Records.of(batches[1:3]).to_requests() == singles[1:36]


def _stop_flushing(store: MessageStore) -> None:
    """Stop the commit-log flush service thread (SYNC_FLUSH puts with WAIT=false then stay unflushed)."""
    store.services.flush.stop()


NO_WAIT = {"WAIT": "false"}


def test_sync_flush_put_returns_once_flushed(make_store, store_config):
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH"))
    for i in range(5):
        r = put_ok(store, Message("TopicTest", b"m%d" % i, tags="TagA"))
        assert store.commit_log.flushed_where >= r.commit_log_offset + r.wrote_bytes
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 5


def test_sync_flush_dispatches_only_what_is_flushed(make_store, store_config):
    """ReputMessageServiceTest: under SYNC_FLUSH consumers see nothing past the flushed offset."""
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH", flushIntervalCommitLog=600_000))
    _stop_flushing(store)
    flushed = store.commit_log.flushed_where
    for i in range(10):
        put_ok(store, Message("TopicTest", b"m%d" % i, tags="TagA", properties=NO_WAIT))
    assert store.commit_log.flushed_where == flushed
    store.reput.run_once()  # a dispatch round (the service thread runs them too): nothing may go
    assert store.dispatch_behind_bytes() > 0
    assert store.reput.reput_from <= store.commit_log.flushed_where
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0
    assert store.get_message("g", "TopicTest", 0, 0).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    store.flush()
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 10
    # readUnCommitted relaxes it
    store.config.read_un_committed = True
    put_ok(store, Message("TopicTest", b"unflushed", tags="TagA", properties=NO_WAIT))
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 11


def test_async_flush_dispatches_what_is_not_flushed_yet(make_store, store_config):
    """ReputMessageServiceTest, its ASYNC half: with the flush service stopped, consumers still see
    every message put (dispatch follows what the log holds, not what is on disk)."""
    store = make_store(config=store_config.copy(flushDiskType="ASYNC_FLUSH", flushIntervalCommitLog=600_000))
    _stop_flushing(store)
    flushed = store.commit_log.flushed_where
    for i in range(10):
        put_ok(store, Message("TopicTest", b"m%d" % i, tags="TagA"))
    assert store.wait_for_dispatch()
    assert store.commit_log.flushed_where == flushed < store.max_phy_offset
    got = store.get_message("g", "TopicTest", 0, 0, 32)
    assert got.status == GetMessageStatus.FOUND and [m.body for m in got.messages] == [b"m%d" % i for i in range(10)]


@pytest.mark.parametrize("max_nums", [0, -3])
def test_a_pull_of_max_nums_0_or_less_takes_one_message_as_rocketmq(make_store, max_nums):
    """isTheBatchFull is false before the first message whatever maxMsgNums says."""
    store = make_store()
    for i in range(3):
        put_ok(store, Message("T", b"m%d" % i))
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0, max_nums)
    assert (got.status, [m.body for m in got.messages], got.next_begin_offset) == (GetMessageStatus.FOUND, [b"m0"], 1)


@pytest.mark.parametrize("max_nums", [32, 20, 10, 1])
def test_pull_size_honours_max_nums(make_store, store_config, max_nums):
    store = make_store(config=store_config.copy(mappedFileSizeConsumeQueue=2000))
    for i in range(40):
        put_ok(store, Message("PullTopic", b"p%d" % i))
    assert store.wait_for_dispatch()
    got = store.get_message("g", "PullTopic", 0, 0, max_nums)
    assert got.status == GetMessageStatus.FOUND
    assert len(got.messages) == max_nums
    assert got.next_begin_offset == max_nums
    assert [m.queue_offset for m in got.messages] == list(range(max_nums))


@pytest.mark.parametrize("max_nums", [0, -1])
def test_pull_with_max_nums_below_one_returns_one_message(make_store, max_nums):
    store = make_store()
    for i in range(3):
        put_ok(store, Message("PullTopic", b"p%d" % i, tags="TagA"))
    assert store.wait_for_dispatch()
    got = store.get_message("g", "PullTopic", 0, 1, max_nums)
    assert got.status == GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [b"p1"] and got.next_begin_offset == 2


# ================================================================== D. consume queue and get_message statuses


def test_get_message_statuses_and_next_begin_offset(make_store):
    store = make_store()
    none = store.get_message("g", "NoSuchTopic", 0, 5)
    assert none.status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert (none.next_begin_offset, none.min_offset, none.max_offset) == (0, 0, 0)
    for i in range(25):  # three consume-queue files (10 units each)
        put_ok(store, Message("StatusTopic", b"s%d" % i, tags="TagA" if i % 2 else "TagB"))
    assert store.wait_for_dispatch()
    assert store.get_min_offset_in_queue("StatusTopic", 0) == 0
    assert store.get_max_offset_in_queue("StatusTopic", 0) == 25

    found = store.get_message("g", "StatusTopic", 0, 3, 4)
    assert found.status == GetMessageStatus.FOUND
    assert [m.body for m in found.messages] == [b"s3", b"s4", b"s5", b"s6"]
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (7, 0, 25)

    one = store.get_message("g", "StatusTopic", 0, 25)
    assert one.status == GetMessageStatus.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 25
    badly = store.get_message("g", "StatusTopic", 0, 99)
    assert badly.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY and badly.next_begin_offset == 25
    assert not one.messages and not badly.messages

    # a pull stays within one consume-queue file: the next pull goes on from its end
    tail = store.get_message("g", "StatusTopic", 0, 8, 32)
    assert tail.status == GetMessageStatus.FOUND
    assert tail.messages[0].queue_offset == 8
    assert tail.next_begin_offset == 8 + len(tail.messages)
    rest = []
    offset = 0
    while offset < 25:
        r = store.get_message("g", "StatusTopic", 0, offset, 32)
        assert r.status == GetMessageStatus.FOUND
        rest.extend(m.body for m in r.messages)
        offset = r.next_begin_offset
    assert rest == [b"s%d" % i for i in range(25)]

    # nothing matches the filter: the scanned units are consumed
    nomatch = store.get_message("g", "StatusTopic", 0, 0, 32, tags="TagZ")
    assert nomatch.status == GetMessageStatus.NO_MATCHED_MESSAGE and not nomatch.messages
    assert 0 < nomatch.next_begin_offset <= 25
    offset = 0
    while offset < 25:
        r = store.get_message("g", "StatusTopic", 0, offset, 32, tags="TagZ")
        assert r.status == GetMessageStatus.NO_MATCHED_MESSAGE
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset
    assert offset == 25


@pytest.mark.parametrize(("size", "scanned"), [(0, 1), (10, 1), (-5, 1), (30, 2), (50, 3), (40, 2)])
def test_a_pull_scans_max_filter_message_size_in_units_rounded_up(make_store, store_config, size, scanned):
    """The filter window is the units whose place (offset - start) * 20 stays under
    maxFilterMessageSize: at least the first unit. A size under 20 with max_nums <= 0 scanned none
    and answered OFFSET_FOUND_NULL with the next file's start, skipping the queue's messages; a
    size that is no multiple of 20 was rounded down."""
    store = make_store(config=store_config.copy(maxFilterMessageSize=size))
    for _ in range(10):
        put_ok(store, Message("T", b"x", tags="A"))
    assert store.wait_for_dispatch()
    first = store.get_message("g", "T", 0, 0, max_nums=0)
    assert (first.status, len(first.messages), first.next_begin_offset) == (GetMessageStatus.FOUND, 1, 1)
    none = store.get_message("g", "T", 0, 0, max_nums=0, tags="B")
    assert (none.status, none.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, scanned)


def test_a_huge_max_nums_scans_what_javas_int_arithmetic_gives(make_store, store_config):
    """RocketMQ's window is max(maxFilterMessageSize, maxMsgNums * 20) in Java ints: 2**31-1 * 20
    wraps to -20, so the window stays 800 units (16000 bytes); it scanned past them."""
    store = make_store(config=store_config.copy(mappedFileSizeConsumeQueue=40000))
    for _ in range(1000):
        put_ok(store, Message("T", b"x", tags="A"))
    put_ok(store, Message("T", b"y", tags="B"))
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0, max_nums=2**31 - 1, tags="B")
    assert (got.status, got.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 800)


def test_tag_filter(make_store):
    store = make_store()
    tags = ["TagA", "TagB", "TagC", None, "TagA", "TagB", "TagA||TagB"]
    for i, t in enumerate(tags):
        put_ok(store, Message("TagTopic", b"%d" % i, tags=t))
    assert store.wait_for_dispatch()
    got = store.get_message("g", "TagTopic", 0, 0, 32, tags="TagA || TagB")
    assert got.status == GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [b"0", b"1", b"4", b"5"]
    assert got.next_begin_offset == 7
    assert [m.body for m in store.get_message("g", "TagTopic", 0, 0, 32, tags=" TagC ").messages] == [b"2"]
    assert len(store.get_message("g", "TagTopic", 0, 0, 32, tags="*").messages) == 7
    assert len(store.get_message("g", "TagTopic", 0, 0, 32, tags="").messages) == 7
    # as RocketMQ's FilterAPI: blanks accept no tag, and " * " is the tag "*"
    assert store.get_message("g", "TagTopic", 0, 0, 32, tags="   ").status == GetMessageStatus.NO_MATCHED_MESSAGE
    assert store.get_message("g", "TagTopic", 0, 0, 32, tags=" * ").messages == []
    assert len(store.get_message("g", "TagTopic", 0, 0, 32, tags=None).messages) == 7
    got = store.get_message("g", "TagTopic", 0, 0, 2, tags="TagA||TagB")
    assert [m.body for m in got.messages] == [b"0", b"1"] and got.next_begin_offset == 2
    # the consume queue holds the hash of the whole TAGS string
    store.flush()
    units = specreader.read_consume_queue(store.root, "TagTopic", 0)
    assert [u[2] for u in units] == [java_hash(t) if t else 0 for t in tags]


def test_a_tag_whose_hash_collides_with_the_subscriptions_is_filtered(make_store):
    """The consume queue holds a tag's hash ("Aa" and "BB" share 2112): as RocketMQ's consumer
    drops what the broker's hash filter let through but its subscription does not hold, a pull
    serves only the tags asked for, and a colliding unit is consumed as a filtered one."""
    assert java_hash("Aa") == java_hash("BB")
    store = make_store()
    for i, t in enumerate(["BB", "Aa", "BB", "Aa", "BB"]):
        put_ok(store, Message("C", b"%d" % i, tags=t))
    assert store.wait_for_dispatch()

    def pull(offset: int, tags: str, max_nums: int = 32) -> tuple[str, list[bytes], int]:
        got = store.get_message("g", "C", 0, offset, max_nums, tags=tags)
        return got.status, [m.body for m in got.messages], got.next_begin_offset

    assert pull(0, "Aa") == (GetMessageStatus.FOUND, [b"1", b"3"], 5)
    assert pull(0, "BB") == (GetMessageStatus.FOUND, [b"0", b"2", b"4"], 5)
    assert pull(0, "Aa || TagX", 1) == (GetMessageStatus.FOUND, [b"1"], 2)
    assert pull(4, "Aa") == (GetMessageStatus.NO_MATCHED_MESSAGE, [], 5)
    assert len(store.get_message("g", "C", 0, 0, 32, tags="*").messages) == 5


def test_tag_filter_trims_as_java_trims(make_store):
    """FilterAPI trims each tag with String.trim: control characters go, a no-break space or an
    em space stays part of the tag."""
    store = make_store()
    for i, t in enumerate(["TagA", "\u00a0TagA", "TagA\u2003"]):
        put_ok(store, Message("TrimTopic", b"%d" % i, tags=t))
    assert store.wait_for_dispatch()

    def bodies(expression: str) -> list[bytes]:
        return [m.body for m in store.get_message("g", "TrimTopic", 0, 0, 32, tags=expression).messages]

    assert bodies("TagA\x01") == [b"0"]
    assert bodies("\u00a0TagA") == [b"1"]
    assert bodies("TagA\u2003") == [b"2"]
    assert bodies("\tTagA\n || \x1fTagA\u2003") == [b"0", b"2"]


def test_pulls_refused_while_not_readable(make_store):
    """getMessage returns nothing while NOT_READABLE is set; puts and lookups go on."""
    store = make_store()
    first = put_ok(store, Message("FlagTopic", b"x"))
    assert store.wait_for_dispatch()
    store.set_running_flags(set_bits=NOT_READABLE)
    with pytest.raises(StoreNotReadableError, match="NOT_READABLE"):
        store.get_message("g", "FlagTopic", 0, 0)
    put_ok(store, Message("FlagTopic", b"y"))
    assert store.look_message_by_offset(first.commit_log_offset).body == b"x"
    store.set_running_flags(clear_bits=NOT_READABLE)
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "FlagTopic", 0, 0).messages] == [b"x", b"y"]


def test_consume_queue_units_on_disk(make_store, tmp_path):
    store = make_store()
    results = [
        put_ok(store, Message("CqTopic", b"c%d" % i, tags=("TagA", None, "\u00e9t\u00e9")[i % 3])) for i in range(23)
    ]
    store.shutdown()
    folder = tmp_path / "store" / "consumequeue" / "CqTopic" / "0"
    assert sorted(os.listdir(folder)) == ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
    assert all(os.path.getsize(folder / n) == 200 for n in os.listdir(folder))
    units = specreader.read_consume_queue(str(tmp_path / "store"), "CqTopic", 0)
    want_tags = [java_hash("TagA"), 0, java_hash("\u00e9t\u00e9")]
    assert units == [(r.commit_log_offset, r.wrote_bytes, want_tags[i % 3]) for i, r in enumerate(results)]


def test_offset_too_small_after_the_first_segment_is_gone(make_store, store_config, tmp_path):
    """Queue min correction (correctMinOffset): units pointing below the log's min are skipped."""
    store = make_store()
    early = [put_ok(store, Message("EarlyTopic", b"e", tags="TagE")) for _ in range(3)]
    results = [put_ok(store, Message("SmallTopic", b"x" * 300, keys=f"s{i}")) for i in range(30)]
    assert all(r.commit_log_offset < CL_SIZE for r in early)
    store.shutdown()
    first_in_second = next(i for i, r in enumerate(results) if r.commit_log_offset >= CL_SIZE)
    os.unlink(tmp_path / "store" / "commitlog" / "00000000000000000000")  # as cleanup deletes expired files

    store = make_store()
    assert store.min_phy_offset == CL_SIZE
    assert store.get_min_offset_in_queue("SmallTopic", 0) == first_in_second
    assert store.get_max_offset_in_queue("SmallTopic", 0) == 30
    small = store.get_message("g", "SmallTopic", 0, 0)
    assert small.status == GetMessageStatus.OFFSET_TOO_SMALL
    assert small.next_begin_offset == first_in_second
    ok = store.get_message("g", "SmallTopic", 0, first_in_second, 1)
    assert ok.messages[0].commit_log_offset == results[first_in_second].commit_log_offset
    # E: a unit pointing below the commit-log min has no store time
    assert store.get_message_store_timestamp("SmallTopic", 0, 0) == -1
    assert store.get_earliest_message_time("SmallTopic", 0) == results[first_in_second].store_timestamp
    assert store.get_earliest_message_time() == results[first_in_second].store_timestamp
    assert store.get_offset_in_queue_by_time("SmallTopic", 0, 0) == first_in_second
    assert put_ok(store, Message("SmallTopic", b"new")).queue_offset == 30
    # a queue whose every unit points below the log's min: min == max, offsets preserved
    assert store.get_min_offset_in_queue("EarlyTopic", 0) == store.get_max_offset_in_queue("EarlyTopic", 0) == 3
    assert store.get_message("g", "EarlyTopic", 0, 0).status == GetMessageStatus.OFFSET_TOO_SMALL
    assert store.get_message("g", "EarlyTopic", 0, 3).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert store.get_earliest_message_time("EarlyTopic", 0) == -1
    assert put_ok(store, Message("EarlyTopic", b"again", tags="TagE")).queue_offset == 3


def test_queue_rebuilt_from_a_log_starting_late_gets_pre_blank_units(make_store, store_config, tmp_path):
    """A consume queue created for a non-zero first offset is filled with pre-blank units."""
    config = store_config.copy(mappedFileSizeConsumeQueue=2000)
    store = make_store(config=config)
    results = [put_ok(store, Message("LateTopic", b"y" * 300, tags="TagA")) for i in range(30)]
    store.shutdown()
    k = next(i for i, r in enumerate(results) if r.commit_log_offset >= CL_SIZE)
    root = tmp_path / "store"
    os.unlink(root / "commitlog" / "00000000000000000000")
    for folder, _dirs, files in os.walk(root / "consumequeue", topdown=False):
        for name in files:
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)

    store = make_store(config=config)
    assert store.wait_for_dispatch()
    assert store.get_min_offset_in_queue("LateTopic", 0) == k
    assert store.get_max_offset_in_queue("LateTopic", 0) == 30
    assert store.get_message("g", "LateTopic", 0, 0).status == GetMessageStatus.OFFSET_TOO_SMALL
    got = store.get_message("g", "LateTopic", 0, k, 32)
    assert [m.commit_log_offset for m in got.messages] == [r.commit_log_offset for r in results[k:]]
    store.shutdown()
    raw = (root / "consumequeue" / "LateTopic" / "0" / "00000000000000000000").read_bytes()
    pre_blank = bytes.fromhex("00000000000000007FFFFFFF0000000000000000")
    assert raw[: 20 * k] == pre_blank * k
    for i, r in enumerate(results[k:]):
        assert struct.unpack_from(">qiq", raw, 20 * (k + i)) == (r.commit_log_offset, r.wrote_bytes, java_hash("TagA"))


# ================================================================== E. time-based lookups


def test_get_offset_in_queue_by_time(make_store):
    store = make_store()
    results = [put_ok(store, Message("TimeTopic", b"t%d" % i)) for i in range(35)]
    results += [put_ok(store, Message("OtherTopic", b"o"))]
    results += [put_ok(store, Message("TimeTopic", b"t%d" % i)) for i in range(35, 45)]
    assert store.wait_for_dispatch()
    times = [r.store_timestamp for r in results[:35] + results[36:]]
    assert times == sorted(times)

    def first_at_or_after(ts: int) -> int:
        return next((i for i, t in enumerate(times) if t >= ts), len(times))

    for i, t in enumerate(times):
        assert store.get_offset_in_queue_by_time("TimeTopic", 0, t) == first_at_or_after(t) <= i
        assert store.get_offset_in_queue_by_time("TimeTopic", 0, t - 2) == first_at_or_after(t - 2)
        assert store.get_offset_in_queue_by_time("TimeTopic", 0, t + 1) == first_at_or_after(t + 1)
    assert store.get_offset_in_queue_by_time("TimeTopic", 0, times[0] - 20_000) == 0
    assert store.get_offset_in_queue_by_time("TimeTopic", 0, times[-1] + 20_000) == 45
    assert store.get_offset_in_queue_by_time("TimeTopic", 7, times[0]) == 0
    assert store.get_offset_in_queue_by_time("NoSuchTopic", 0, times[0]) == 0


def test_store_timestamps_and_earliest_time(make_store):
    store = make_store()
    assert store.get_earliest_message_time() == -1
    hosts = ("10.0.0.1:1", "[::1]:1", "10.0.0.2:2")  # STORETIMESTAMP moves to 68 after an IPv6 born host
    results = [
        put_ok(store, Message("TsTopic", b"%d" % i, tags="TagA", born_host=hosts[i % 3]), i % 2) for i in range(12)
    ]
    assert store.wait_for_dispatch()
    for r in results:
        qid = results.index(r) % 2
        assert store.get_message_store_timestamp("TsTopic", qid, r.queue_offset) == r.store_timestamp
        assert store.get_commit_log_offset_in_queue("TsTopic", qid, r.queue_offset) == r.commit_log_offset
    assert store.get_message_store_timestamp("TsTopic", 0, -1) == -1
    assert store.get_message_store_timestamp("TsTopic", 0, 6) == -1  # == max offset
    assert store.get_message_store_timestamp("NoSuchTopic", 0, 0) == -1
    assert store.get_earliest_message_time() == results[0].store_timestamp
    assert store.get_earliest_message_time("TsTopic", 1) == results[1].store_timestamp
    assert store.get_earliest_message_time("NoSuchTopic", 0) == -1


# ================================================================== F. index and queries


def test_query_by_key_and_uniq_key_across_several_index_files(make_store, store_config, tmp_path, rmqread):
    store = make_store()
    results = []
    for i in range(150):
        keys = [f"key-{i}"] + (["common"] if i % 10 == 0 else [])
        results.append(put_ok(store, Message("IdxTopic", b"i%d" % i, keys=keys), i % 3))
    assert store.wait_for_dispatch()
    root = tmp_path / "store"
    headers = [h for _, h in specreader.read_index_headers(str(root))]
    assert len(headers) >= 3
    for header in headers[:-1]:  # a full file holds maxIndexNum - 1 entries
        assert header["indexCount"] == store_config.max_index_num
    for i in (0, 1, 64, 99, 149):
        got = store.query_message("IdxTopic", f"key-{i}")
        assert [m.commit_log_offset for m in got.messages] == [results[i].commit_log_offset]
        by_uniq = store.query_message("IdxTopic", results[i].uniq_key)
        assert [m.commit_log_offset for m in by_uniq.messages] == [results[i].commit_log_offset]
    common = [r.commit_log_offset for i, r in enumerate(results) if i % 10 == 0]
    got = store.query_message("IdxTopic", "common", max_num=64)
    assert [m.commit_log_offset for m in got.messages] == common  # found in every index file
    few = store.query_message("IdxTopic", "common", max_num=4)
    assert [m.commit_log_offset for m in few.messages] == common[-4:]  # the newest, oldest first
    assert store.query_message("IdxTopic", "key-1", max_num=0).messages == []
    assert store.query_message("OtherTopic", "key-1").messages == []
    found = store.query_message("IdxTopic", "key-1")
    assert found.index_last_update_timestamp > 0 and found.index_last_update_phyoffset > 0
    missed = store.query_message("IdxTopic", "no-such-key")  # the index's last update told only with hits
    assert (missed.index_last_update_timestamp, missed.index_last_update_phyoffset) == (0, 0)
    assert store.query_message("IdxTopic", "no-such-key").messages == [] and missed.index_hits == 0
    # index_hits counts the index's raw entries: a key twice in one message is two of them
    twice = put_ok(store, Message("IdxTopic", b"twice", keys=["dup", "dup"]))
    assert store.wait_for_dispatch()
    dup = store.query_message("IdxTopic", "dup")
    assert [m.commit_log_offset for m in dup.messages] == [twice.commit_log_offset] and dup.index_hits == 2
    assert (few.index_hits, got.index_hits) == (4, len(common))
    last_ts, last_phy = got.index_last_update_timestamp, got.index_last_update_phyoffset
    assert (last_ts, last_phy) == (results[-1].store_timestamp, results[-1].commit_log_offset)
    # a time window that holds none of the messages
    assert store.query_message("IdxTopic", "key-3", begin=0, end=results[0].store_timestamp - 1).messages == []
    assert len(store.query_message("IdxTopic", "key-3", begin=results[0].store_timestamp).messages) == 1
    store.shutdown()
    done = rmqread("query", root, store_config, "--topic", "IdxTopic", "--key", "common")
    assert [json.loads(line)["commitLogOffset"] for line in done.stdout.splitlines()] == common


def test_query_returns_at_most_max_msgs_num_batch(make_store):
    store = make_store()
    results = [put_ok(store, Message("AllTopic", b"a", keys="all", tags="TagA")) for _ in range(100)]
    assert store.wait_for_dispatch()
    got = store.query_message("AllTopic", "all", max_num=1000)
    assert [m.commit_log_offset for m in got.messages] == [r.commit_log_offset for r in results[-64:]]
    got = store.query_message("AllTopic", "all", max_num=10)
    assert [m.commit_log_offset for m in got.messages] == [r.commit_log_offset for r in results[-10:]]


def test_query_index_hits_are_capped_at_max_msgs_num_batch(make_store, store_config):
    """QueryResult.index_hits counts what the index gave, at most min(max_num, maxMsgsNumBatch):
    with max_num above maxMsgsNumBatch, fewer than max_num does not mean the index holds no more."""
    store = make_store()
    for _ in range(100):
        put_ok(store, Message("HitTopic", b"h", keys="k"))
    assert store.wait_for_dispatch()
    assert store_config.max_msgs_num_batch == 64
    got = store.query_message("HitTopic", "k", max_num=100)
    assert (len(got.messages), got.index_hits) == (64, 64)  # 100 match
    assert store.query_message("HitTopic", "k", max_num=10).index_hits == 10


def test_query_times_are_matched_in_whole_seconds_from_the_index_files_begin(make_store):
    """The index holds a message's time as whole seconds since its file's first message (spec
    8.3), and begin/end are compared with that time (8.6), as in RocketMQ: a message stored a few
    ms after the first is found by begin = end = the first one's time, not by its own."""
    store = make_store()
    first = put_ok(store, Message("T", b"first", keys="k"))
    while time.time_ns() // 1_000_000 <= first.store_timestamp:  # the next store time is later
        pass
    later = put_ok(store, Message("T", b"later", keys="k"))
    assert store.wait_for_dispatch()
    begin = first.store_timestamp  # the index file's begin time: its first message's

    def indexed(ts: int) -> int:
        return begin + (ts - begin) // 1000 * 1000

    for at in (first.store_timestamp, later.store_timestamp):
        expected = [r.commit_log_offset for r in (first, later) if indexed(r.store_timestamp) == at]
        got = store.query_message("T", "k", begin=at, end=at).messages
        assert [m.commit_log_offset for m in got] == expected
    if later.store_timestamp - begin < 1000:  # the usual case: both fall in the first second
        assert not store.query_message("T", "k", begin=later.store_timestamp, end=later.store_timestamp).messages
        assert len(store.query_message("T", "k", begin=begin, end=begin).messages) == 2


def test_query_drops_hash_collisions(make_store, store_config, tmp_path):
    assert java_hash("Aa") == java_hash("BB")
    assert index_key_hash("CollTopic#Aa") == index_key_hash("CollTopic#BB")
    store = make_store()
    aa = [put_ok(store, Message("CollTopic", b"aa%d" % i, keys="Aa")).commit_log_offset for i in range(3)]
    bb = [put_ok(store, Message("CollTopic", b"bb%d" % i, keys="BB")).commit_log_offset for i in range(2)]
    # a key whose hash only shares the slot (modulo the tiny slot count)
    slot = index_key_hash("CollTopic#Aa") % store_config.max_hash_slot_num
    other = next(
        f"x{i}"
        for i in range(10_000)
        if index_key_hash(f"CollTopic#x{i}") % store_config.max_hash_slot_num == slot
        and index_key_hash(f"CollTopic#x{i}") != index_key_hash("CollTopic#Aa")
    )
    xs = [put_ok(store, Message("CollTopic", b"x", keys=other)).commit_log_offset]
    assert store.wait_for_dispatch()
    store.flush()
    # the index itself returns both keys' messages for one hash
    raw_hits = specreader.index_lookup(
        str(tmp_path / "store"), store_config.max_hash_slot_num, store_config.max_index_num, "CollTopic#Aa"
    )
    assert sorted(raw_hits) == sorted(aa + bb)
    assert [m.commit_log_offset for m in store.query_message("CollTopic", "Aa").messages] == aa
    assert [m.commit_log_offset for m in store.query_message("CollTopic", "BB").messages] == bb
    assert [m.commit_log_offset for m in store.query_message("CollTopic", other).messages] == xs


def test_query_with_odd_arguments_does_not_throw(make_store):
    store = make_store()
    put_ok(store, Message("OddTopic", b"x", keys="k"))
    assert store.wait_for_dispatch()
    assert store.query_message("OddTopic", "").messages == []
    assert len(store.query_message("OddTopic", "k", max_num=10**9).messages) == 1
    assert store.query_message("OddTopic", "k", begin=10, end=5).messages == []
    assert store.query_message("OddTopic", "k", begin=-(2**63), end=2**63 - 1).messages[0].body == b"x"


def test_keys_with_several_spaces_are_indexed_token_by_token(make_store):
    store = make_store()
    r = put_ok(store, Message("KeyTopic", b"x", keys="a  b c "))
    assert store.wait_for_dispatch()
    for key in ("a", "b", "c"):
        assert [m.commit_log_offset for m in store.query_message("KeyTopic", key).messages] == [r.commit_log_offset]
    assert store.query_message("KeyTopic", " ").messages == []


def test_a_uniq_key_with_spaces_is_one_index_key(make_store, tmp_path, store_config, rmqread):
    """UNIQ_KEY is indexed whole (``topic#uniq``), only KEYS is split on spaces (spec 8.5): record by
    record, in bulk dispatch (ASCII and not) and when the index is rebuilt from the log."""
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("U", b"one", keys=" k1  k2 ", properties={"UNIQ_KEY": "u 1"}))
    assert store.wait_for_dispatch()  # alone: record by record
    for mark in ("", "é"):  # more than dispatch.SMALL records: the bulk path
        batch = [Message("U", f"b{i}{mark}".encode(), properties={"UNIQ_KEY": f"b {i}{mark}"}) for i in range(20)]
        assert store.put_batch(batch).status == PutMessageStatus.PUT_OK

    def check(store: MessageStore) -> None:
        assert store.wait_for_dispatch()
        hits = {k: [m.body for m in store.query_message("U", k).messages] for k in ("u 1", "k1", "k2", "b 3", "b 3é")}
        assert hits == {"u 1": [b"one"], "k1": [b"one"], "k2": [b"one"], "b 3": [b"b3"], "b 3é": [b"b3\xc3\xa9"]}
        for part in ("u", "1", "b", "3", "3é"):
            assert store.query_message("U", part).messages == [], part

    check(store)
    store.shutdown()
    assert rmqread("check", root, store_config).returncode == 0
    shutil.rmtree(root / "index")
    (root / "abort").touch()
    store = make_store()
    assert not store.last_exit_ok
    check(store)
    store.shutdown()
    done = rmqread("check", root, store_config)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_query_while_index_entries_are_written_finds_the_older_ones(make_store, store_config):
    """Every key shares one hash slot here. A query that runs at any write of a dispatch round
    (looked at through a profile hook in the dispatching thread: one record's two entries, then a
    batch's forty) finds the older entry: no slot points at an entry not yet written or counted."""
    store = make_store(config=store_config.copy(maxHashSlotNum=1, maxIndexNum=1000, mappedFileSizeCommitLog=1 << 16))
    old = put_ok(store, Message("T", b"old", keys="old")).commit_log_offset
    assert store.wait_for_dispatch()
    store.reput.stop()
    found: list[bool] = []

    def hook(frame, event, arg):
        if (event == "c_call" and getattr(arg, "__name__", "") == "pack_into") or (
            event == "call" and frame.f_code.co_name == "write_at"
        ):
            found.append(old in store.index.query_offsets("T", "old", 32, 0, 2**63 - 1))

    for put in (
        lambda: put_ok(store, Message("T", b"one", keys="one")),
        lambda: store.put_batch([Message("T", b"x", keys="many")] * 40).raise_for_status(),
    ):
        put()
        found.clear()
        sys.setprofile(hook)
        try:
            store.reput.run_once()
        finally:
            sys.setprofile(None)
        assert len(found) >= 2 and all(found), found
    assert len(store.query_message("T", "many", 64).messages) == 40


def test_index_disabled(make_store, store_config, tmp_path):
    store = make_store(config=store_config.copy(messageIndexEnable=False))
    put_ok(store, Message("T", b"x", keys="k"))
    assert store.wait_for_dispatch()
    assert store.query_message("T", "k").messages == []
    assert not (tmp_path / "store" / "index").exists() or not os.listdir(tmp_path / "store" / "index")


def test_an_index_built_before_index_was_disabled_is_queried_and_cleaned_up(make_store, store_config, tmp_path):
    """messageIndexEnable=false stops indexing new records only (RocketMQ's dispatcher checks it):
    the index files already there still answer queries and are deleted with the log."""
    config = store_config.copy(mappedFileSizeCommitLog=4096, maxIndexNum=6, maxHashSlotNum=3)
    store = make_store(config=config)
    for _ in range(60):
        put_ok(store, Message("T", b"x" * 100, keys="k"))
    assert store.wait_for_dispatch()
    store.shutdown()
    index_dir = tmp_path / "store" / "index"
    assert len(os.listdir(index_dir)) == 24
    store = make_store(config=config.copy(messageIndexEnable=False))
    assert len(store.query_message("T", "k", 64).messages) == 60
    put_ok(store, Message("T", b"new", keys="k"))
    assert store.wait_for_dispatch()
    assert len(store.query_message("T", "k", 64).messages) == 60  # the new record is not indexed
    assert store.clean_expired_files(now=4102444800).index_files == 20
    assert len(os.listdir(index_dir)) == 4
    store.shutdown()  # verify checks the files there, 5 entries each, though new records are not indexed
    report = verify_store(tmp_path / "store", config.copy(messageIndexEnable=False))
    assert report.ok and report.index_files == 4 and report.index_entries == 20, report.problems
    with open(index_dir / sorted(os.listdir(index_dir))[0], "r+b") as f:  # an entry's commit-log offset
        f.seek(40 + 3 * 4 + 20 + 4)  # header, 3 slots, entry 1's key hash
        f.write(struct.pack(">q", 1 << 40))
    assert not verify_store(tmp_path / "store", config.copy(messageIndexEnable=False)).ok


def test_an_index_file_whose_store_times_go_back_is_matched_as_rocketmq_does(tmp_path):
    """RocketMQ's IndexFile.isTimeMatched, not a plain overlap test: a file whose end time is before
    its begin time (a broker's clock stepped back) is searched when the range spans its begin time,
    and verify takes such a header as written by RocketMQ."""
    from rocketstore.codec.ids import topic_key_hash
    from rocketstore.meta.checkpoint import StoreCheckpoint
    from rocketstore.queues.index_service import IndexService

    index = IndexService(str(tmp_path), 8, 100, "rw", StoreCheckpoint(str(tmp_path / "checkpoint")))
    ta = 1_795_000_000_000
    hashes = np.array([topic_key_hash("T", k) for k in "acb"])
    index.put_entries(hashes, np.array([0, 100, 200]), np.array([ta, ta + 2000, ta - 10000]))
    assert index.query_offsets("T", "c", 32, ta - 1, ta + 3000) == [100]
    assert index.query_offsets("T", "a", 32, ta + 5000, ta + 6000) == []
    index.close()


def test_non_ascii_keys_and_tags(make_store):
    store = make_store()
    results = [
        put_ok(
            store, Message("T", b"x%d" % i, keys=[f"cl\u00e9-{i}", f"\U0001f600{i}", f"plain{i}"], tags="\u00e9t\u00e9")
        )
        for i in range(5)
    ]
    batch = store.put_batch([Message("T", b"b", keys=[f"\u043a\u043b\u044e\u0447-{i}"]) for i in range(3)])
    assert batch.ok
    assert store.wait_for_dispatch()
    for key, offset in (
        ("cl\u00e9-3", results[3].commit_log_offset),
        ("\U0001f6002", results[2].commit_log_offset),
        ("plain4", results[4].commit_log_offset),
        ("\u043a\u043b\u044e\u0447-1", batch.commit_log_offsets[1]),
    ):
        assert [m.commit_log_offset for m in store.query_message("T", key).messages] == [offset], key
    got = store.get_message("g", "T", 0, 0, 32, tags="\u00e9t\u00e9")
    assert [m.body for m in got.messages] == [b"x%d" % i for i in range(5)]


def test_transaction_records_in_queues_and_index(make_store):
    """PREPARED and ROLLBACK records stay out of the consume queue; only ROLLBACK is not indexed."""
    store = make_store()
    half = put_ok(store, Message("TxTopic", b"half", keys="kp", sys_flag=0x4))
    commit = put_ok(
        store,
        Message("TxTopic", b"commit", keys="kc", sys_flag=0x8, prepared_transaction_offset=half.commit_log_offset),
    )
    rollback = put_ok(
        store,
        Message("TxTopic", b"rollback", keys="kr", sys_flag=0xC, prepared_transaction_offset=half.commit_log_offset),
    )
    normal = put_ok(store, Message("TxTopic", b"normal", keys="kn"))
    assert (half.queue_offset, commit.queue_offset, rollback.queue_offset, normal.queue_offset) == (0, 0, 0, 1)
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("TxTopic", 0) == 2
    assert [m.body for m in store.get_message("g", "TxTopic", 0, 0).messages] == [b"commit", b"normal"]
    assert [m.body for m in store.query_message("TxTopic", "kp").messages] == [b"half"]
    assert [m.body for m in store.query_message("TxTopic", "kc").messages] == [b"commit"]
    assert store.query_message("TxTopic", "kr").messages == []
    assert (
        store.look_message_by_offset(rollback.commit_log_offset).prepared_transaction_offset == half.commit_log_offset
    )


# ================================================================== consumer offsets


def test_consumer_offsets_persist_in_fastjson_form(make_store, tmp_path):
    store = make_store()
    assert store.query_offset("g1", "TopicTest", 0) == -1
    store.commit_offset("g1", "TopicTest", 1, 7)
    store.commit_offset("g1", "TopicTest", 0, 5)
    store.commit_offset("g2", "OrderTopic", 3, 12)
    store.commit_offset("g1", "TopicTest", 0, 6)
    assert store.query_offset("g1", "TopicTest", 0) == 6
    store.shutdown()
    text = (tmp_path / "store" / "config" / "consumerOffset.json").read_text(encoding="utf-8")
    assert '"TopicTest@g1":{0:6,1:7' in text  # unquoted integer keys, ascending
    assert '"OrderTopic@g2":{3:12' in text
    assert not re.search(r'"\d+":', text)
    store = make_store()
    assert store.query_offset("g1", "TopicTest", 0) == 6
    assert store.query_offset("g1", "TopicTest", 1) == 7
    assert store.query_offset("g2", "OrderTopic", 3) == 12
    assert store.query_offset("g2", "OrderTopic", 0) == -1


# ================================================================== UNIQ_KEY


def test_uniq_key_generated_in_client_format_when_absent_and_kept_when_given(make_store, tmp_path):
    store = make_store()
    plain = put_ok(store, Message("UniqTopic", b"a"))
    tagged = put_ok(store, Message("UniqTopic", b"b", tags="TagA", keys="k"))
    given = put_ok(store, Message("UniqTopic", b"c", properties={"UNIQ_KEY": "MY-OWN-ID"}))
    general = put_ok(store, Message("UniqTopic", b"d", born_host="[::1]:1"))
    generated = [plain.uniq_key, tagged.uniq_key, general.uniq_key]
    for key in generated:
        assert re.fullmatch(r"[0-9A-F]{32}", key)
        assert key.startswith("7F000001")  # the store host's IPv4 address
    assert len(set(generated)) == 3
    assert given.uniq_key == "MY-OWN-ID"
    store.shutdown()
    records = specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE)
    assert [x["properties"]["UNIQ_KEY"] for x in records] == [generated[0], generated[1], "MY-OWN-ID", generated[2]]


def test_ipv6_broker_ip1_is_the_store_host(make_store, store_config, tmp_path):
    """brokerIP1 may be an IPv6 address, as in a broker.conf (RocketMQ builds the store host with
    InetSocketAddress(brokerIP1, listenPort)); records then carry a 20-byte store host."""
    store = make_store(config=store_config.copy(brokerIP1="fd00::a"))
    r = put_ok(store, Message("V6Topic", b"x", tags="TagA"))
    assert len(r.msg_id) == 56
    # a UNIQ_KEY the store makes has that address, as a client on that host makes it (spec 4.2: 56 chars)
    assert len(r.uniq_key) == 56 and r.uniq_key.startswith("FD00000000000000000000000000000A")
    assert store.look_message_by_offset(r.commit_log_offset).store_host == "[fd00:0:0:0:0:0:0:a]:10911"
    store.shutdown()
    record = specreader.read_commitlog(str(tmp_path / "store"), CL_SIZE)[0]
    assert record["sysFlag"] & 0x20 and record["storeIp"] == bytes.fromhex("fd00000000000000000000000000000a")


# ================================================================== H. shutdown, abort and recovery


def test_clean_shutdown_removes_abort(make_store, tmp_path):
    store = make_store()
    root = tmp_path / "store"
    assert (root / "abort").exists()
    assert (root / "lock").read_bytes() == b"lock"
    put_ok(store, Message("TopicTest", b"x"))
    store.shutdown()
    assert not (root / "abort").exists()
    assert store.closed
    store.shutdown()  # idempotent
    with pytest.raises(StoreClosedError):
        store.put(Message("TopicTest", b"y"))
    with pytest.raises(StoreClosedError):
        store.get_message("g", "TopicTest", 0, 0)
    # the pre-allocated next segment is not left behind
    assert segments(root) == ["00000000000000000000"]


@pytest.mark.parametrize("call", ["pull", "pull_tags", "query", "by_offset"])
def test_a_read_that_a_shutdown_overtakes_raises_store_closed(make_store, monkeypatch, call):
    """A read still running when another thread shuts the store down finds the files closed under
    it: it raises StoreClosedError rather than answer as if retention had removed intact messages
    (a pull's next offset past them, a query short of them)."""
    import rocketstore.codec.record as rec

    store = make_store()
    for i in range(60):
        put_ok(store, Message("T", b"m%d" % i, tags="a", keys="K"))
    assert store.wait_for_dispatch()
    original = rec.decode_record
    overtaken = []

    def decode_after_a_shutdown(raw):
        if not overtaken:  # the first record read: the store is shut down by another thread meanwhile
            closer = threading.Thread(target=store.shutdown)
            closer.start()
            closer.join()
            overtaken.append(store.closed)
        return original(raw)

    monkeypatch.setattr(rec, "decode_record", decode_after_a_shutdown)
    reads = {
        "pull": lambda: store.get_message("g", "T", 0, 0, 32),
        "pull_tags": lambda: store.get_message("g", "T", 0, 0, 32, tags="a"),
        "query": lambda: store.query_message("T", "K", 64),
        "by_offset": lambda: store.look_message_by_offset(store.get_commit_log_offset_in_queue("T", 0, 5)),
    }
    with pytest.raises(StoreClosedError):
        reads[call]()
    assert overtaken == [True]


def test_set_running_flags_on_a_closed_store_raises_store_closed(make_store, tmp_path):
    """Like every call on a closed store, set_running_flags raises StoreClosedError (it changed the
    flags of a store already shut down); flags set while it was open still decide its shutdown."""
    store = make_store()
    put_ok(store, Message("T", b"x"))
    store.shutdown()
    view = make_store(read_only=True)
    view.shutdown()
    for closed in (store, view):
        for bits in ({"set_bits": NOT_READABLE}, {"clear_bits": NOT_READABLE}, {}):
            with pytest.raises(StoreClosedError):
                closed.set_running_flags(**bits)
        assert closed.running_flags == 0
    assert not (tmp_path / "store" / "abort").exists()  # the shutdown was clean
    again = make_store()
    again.set_running_flags(set_bits=WRITE_LOGICS_QUEUE_ERROR)  # a shutdown with the store unwriteable
    again.shutdown()
    assert again.running_flags & WRITE_LOGICS_QUEUE_ERROR and (tmp_path / "store" / "abort").exists()


def test_shutdown_finishes_dispatch_before_deciding_about_abort(make_store, tmp_path):
    """With the reput thread stopped, shutdown still runs a last dispatch round (as RocketMQ's
    ReputMessageService waits for it): nothing is behind, so the exit is clean. It does not
    spend its wait for dispatch (30 s) waiting on a thread that is not there."""
    store = make_store()
    store.reput.stop()
    put_ok(store, Message("TopicTest", b"late", tags="TagA"))
    assert store.dispatch_behind_bytes() > 0
    started = time.monotonic()
    store.shutdown()
    assert time.monotonic() - started < 10
    assert not (tmp_path / "store" / "abort").exists()
    store = make_store()
    assert store.last_exit_ok
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1


def test_shutdown_while_dispatch_is_behind_keeps_abort(make_store, store_config, tmp_path):
    """DefaultMessageStoreShutDownTest: dispatch still behind at shutdown -> abort stays.

    Dispatch cannot build TopicTest's queues (a file stands where their folder goes), so the log
    holds records no queue has at shutdown; the next open recovers them.
    """
    store = make_store()
    (tmp_path / "store" / "consumequeue").mkdir(exist_ok=True)
    (tmp_path / "store" / "consumequeue" / "TopicTest").write_bytes(b"")
    batch = [Message("TopicTest", b"m%d" % i, keys=f"k{i}") for i in range(5)]
    first = store.put_batch(batch).raise_for_status()
    assert store.dispatch_behind_bytes() > 0
    with pytest.raises(RocketStoreError, match="did not shut down cleanly"):  # the last dispatch round fails too
        store.shutdown(wait_for_dispatch=0)
    assert (tmp_path / "store" / "abort").exists()
    (tmp_path / "store" / "consumequeue" / "TopicTest").unlink()
    store = make_store(config=store_config)
    assert not store.last_exit_ok and store.recovery.abnormal
    assert store.get_max_offset_in_queue("TopicTest", 0) == 5
    found = [m.queue_offset for m in store.query_message("TopicTest", "k3").messages]
    assert found == [3] and first.queue_offset == 0


def test_shutdown_with_a_running_flag_error_keeps_abort(make_store, tmp_path):
    store = make_store()
    put_ok(store, Message("TopicTest", b"x"))
    store.set_running_flags(WRITE_LOGICS_QUEUE_ERROR)
    refused = store.put(Message("TopicTest", b"y"))
    assert refused.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert refused.detail == "the store is not writeable: WRITE_LOGICS_QUEUE_ERROR"
    store.shutdown()
    assert (tmp_path / "store" / "abort").exists()


def _put_many(store: MessageStore, n: int, start: int = 0) -> list:
    return [
        put_ok(store, Message("RecTopic", b"r" * (i % 150), tags="TagA", keys=f"rk{start + i}"), (start + i) % 4)
        for i in range(n)
    ]


def _queue_max(store: MessageStore) -> dict[int, int]:
    return {q: store.get_max_offset_in_queue("RecTopic", q) for q in range(4)}


def _damage_topic_length(root: Path, result) -> None:
    """Zero 16 bytes of a record (IPv4 hosts) at its topic-length field, as testRecover does."""
    offset = result.commit_log_offset
    with open(root / "commitlog" / f"{offset - offset % CL_SIZE:020d}", "r+b") as f:
        f.seek(offset % CL_SIZE + 84)
        body_len = struct.unpack(">i", f.read(4))[0]
        pos = offset % CL_SIZE + 88 + body_len
        f.seek(pos)
        assert f.read(1) == bytes([len("RecTopic")])
        f.seek(pos)
        f.write(bytes(16))


@pytest.mark.parametrize("crash", [False, True], ids=["normal", "abnormal"])
def test_recover_truncates_a_damaged_last_message(make_store, tmp_path, store_config, rmqread_export, crash):
    """DefaultMessageStoreTest.testRecover."""
    root = tmp_path / "store"
    store = make_store()
    _put_many(store, 100)
    assert store.wait_for_dispatch()
    max_phy, queue_max = store.max_phy_offset, _queue_max(store)
    store.shutdown()

    store = make_store()  # 1. clean restart: nothing changes
    assert store.last_exit_ok
    assert store.max_phy_offset == max_phy and _queue_max(store) == queue_max

    results = _put_many(store, 101, start=100)  # 2. 100 more + 1, then damage the last one
    assert store.wait_for_dispatch()
    last = results[-1]
    before_last_phy = last.commit_log_offset
    queue_max_before_last = _queue_max(store)
    queue_max_before_last[(100 + 100) % 4] -= 1
    store.shutdown()
    _damage_topic_length(root, last)
    if crash:
        (root / "abort").touch()

    store = make_store()
    assert store.last_exit_ok is not crash
    assert store.recovery.stopped_at_bad_record
    assert store.max_phy_offset == before_last_phy
    assert _queue_max(store) == queue_max_before_last
    assert store.look_message_by_offset(before_last_phy) is None
    damaged_queue = (100 + 100) % 4
    assert (
        store.get_message("g", "RecTopic", damaged_queue, queue_max_before_last[damaged_queue]).status
        == GetMessageStatus.OFFSET_OVERFLOW_ONE
    )
    assert store.query_message("RecTopic", "rk200").messages == []
    assert len(store.query_message("RecTopic", "rk199").messages) == 1

    new = _put_many(store, 100, start=1000)  # 3. the store takes new writes
    assert new[0].commit_log_offset == before_last_phy
    assert new[0].queue_offset == queue_max_before_last[1000 % 4]
    assert store.wait_for_dispatch()
    assert sum(_queue_max(store).values()) == 300
    assert [m.commit_log_offset for m in store.query_message("RecTopic", "rk1099").messages] == [
        new[-1].commit_log_offset
    ]
    store.shutdown()
    # the queues and the log agree, for the independent reader too
    ours = our_export(root, store_config)
    assert len(ours) == 300
    assert ours == rmqread_export(root, store_config)


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("check_crc", [True, False], ids=["crc", "no-crc"])
def test_recovery_checks_the_body_crc_when_asked(make_store, store_config, tmp_path, check_crc, abort):
    """checkCRCOnRecover: a flipped body byte (lengths intact) ends the log only when CRCs are checked."""
    root = tmp_path / "store"
    config = store_config.copy(checkCRCOnRecover=check_crc)
    store = make_store(config=config)
    results = [put_ok(store, Message("T", b"body-%d" % i, keys=f"k{i}", tags="TagA")) for i in range(50)]
    store.shutdown()
    last = results[-1]
    offset = last.commit_log_offset
    with open(root / "commitlog" / f"{offset - offset % CL_SIZE:020d}", "r+b") as f:
        f.seek(offset % CL_SIZE + 88)  # the first body byte
        first = f.read(1)[0]
        f.seek(offset % CL_SIZE + 88)
        f.write(bytes([first ^ 1]))
    if abort:
        (root / "abort").touch()
    store = make_store(config=config)
    if check_crc:
        assert store.max_phy_offset == offset
        assert store.get_max_offset_in_queue("T", 0) == 49
    else:
        assert store.max_phy_offset == offset + last.wrote_bytes
        assert store.get_max_offset_in_queue("T", 0) == 50
        assert not store.look_message_by_offset(offset).body_crc_ok()


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("force", [True, False], ids=["prop-crc", "body-crc"])
def test_force_verify_prop_crc_checks_the_appended_property(make_store, store_config, tmp_path, force, abort):
    """AppendPropCRCTest through a store: with enabledAppendPropCRC and forceVerifyPropCRC, recovery
    checks each record's __CRC32# property, which covers the properties too: a flipped tag byte
    (body CRC intact) ends the log there, and verify names the record. Without forceVerifyPropCRC
    only the body CRC is checked and the record stays."""
    from rocketstore.verify import verify_store

    root = tmp_path / "store"
    config = store_config.copy(enabledAppendPropCRC=True, forceVerifyPropCRC=force, checkCRCOnRecover=True)
    store = make_store(config=config)
    results = [put_ok(store, Message("T", b"body-%d" % i, keys=f"k{i}", tags="TagA")) for i in range(20)]
    assert store.look_message_by_offset(results[-1].commit_log_offset).properties["__CRC32#"]
    store.shutdown()
    assert verify_store(root, config).ok
    last = results[-1]
    path = root / "commitlog" / f"{last.commit_log_offset - last.commit_log_offset % CL_SIZE:020d}"
    with open(path, "r+b") as f:
        f.seek(last.commit_log_offset % CL_SIZE)
        raw = f.read(last.wrote_bytes)
        at = last.commit_log_offset % CL_SIZE + raw.rindex(b"TagA")
        f.seek(at)
        f.write(b"S")  # TagA -> SagA: a different tag, lengths and body CRC intact
    problems = verify_store(root, config).problems  # without force: only the unit's tags code differs
    assert any("__CRC32#" in p for p in map(str, problems)) is force
    if abort:
        (root / "abort").touch()
    store = make_store(config=config)
    if force:
        assert store.max_phy_offset == last.commit_log_offset
        assert store.get_max_offset_in_queue("T", 0) == 19
    else:
        assert store.max_phy_offset == last.commit_log_offset + last.wrote_bytes
        assert store.look_message_by_offset(last.commit_log_offset).tags == "SagA"


@pytest.mark.parametrize("props", [None, {"a": "b"}], ids=["plain", "general"])
def test_a_batch_gets_a_crc_property_per_record(make_store, store_config, tmp_path, props):
    """AppendPropCRCTest for putMessages: each record of a batch ends with its own __CRC32# after the
    batch's common properties, and recovery checking them (forceVerifyPropCRC) keeps every one."""
    from rocketstore.verify import verify_store

    config = store_config.copy(enabledAppendPropCRC=True, forceVerifyPropCRC=True, checkCRCOnRecover=True)
    store = make_store(config=config)
    batch = [Message("T", b"body-%d" % i, tags="TagA", keys=f"k{i}", properties=props) for i in range(5)]
    sent = store.put_batch(batch, properties={"CLUSTER": "c"})
    assert sent.ok
    offsets = list(sent.commit_log_offsets)
    for at in offsets:
        raw = store.look_message_by_offset(at).properties_raw
        assert raw.count(b"__CRC32#") == 1 and raw.index(b"CLUSTER") < raw.index(b"__CRC32#")
    store.shutdown()
    (tmp_path / "store" / "abort").touch()  # recovery walks every record again, CRCs checked
    assert verify_store(tmp_path / "store", config).ok
    store = make_store(config=config)
    assert store.wait_for_dispatch() and store.get_max_offset_in_queue("T", 0) == 5
    assert [m.commit_log_offset for m in store.get_message("g", "T", 0, 0).messages] == offsets


def test_an_incoming_crc_property_is_replaced_by_the_stores_own(make_store, store_config):
    """enabledAppendPropCRC: a __CRC32# property the message brings is dropped first (spec 3.6),
    so the record holds one, the store's, at its end."""
    store = make_store(config=store_config.copy(enabledAppendPropCRC=True))
    sent = put_ok(store, Message("T", b"x", properties={"__CRC32#": "1234567890", "a": "b"}))
    stored = store.look_message_by_offset(sent.commit_log_offset)
    assert stored.properties_raw.count(b"__CRC32#") == 1 and stored.properties_raw.endswith(b"\x02")
    assert stored.properties["__CRC32#"] != "1234567890" and stored.properties["a"] == "b"


def test_a_pull_result_counts_its_messages_and_their_bytes(make_store):
    """GetMessageResultTest: message count and total buffer size of a pull are its records'."""
    store = make_store()
    sent = [put_ok(store, Message("T", b"x" * n)) for n in (1, 50, 300, 7)]
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 1, 2)
    assert got.message_count == 2 and got.buffer_total_size == sent[1].wrote_bytes + sent[2].wrote_bytes
    empty = store.get_message("g", "T", 0, 4)
    assert empty.message_count == 0 and empty.buffer_total_size == 0


def test_read_only_commit_log_paths_are_read_but_get_no_new_segment(tmp_path, store_config):
    """MultiPathMappedFileQueue: a folder moved from storePathCommitLog to
    readOnlyCommitLogStorePaths keeps its segments readable (without it the log has a gap and the
    store does not open); new segments go to the writable folders only."""
    root = tmp_path / "store"
    first, second = str(tmp_path / "cl-a"), str(tmp_path / "cl-b")
    with MessageStore.open(root, store_config, storePathCommitLog=f"{first},{second}") as store:
        sent = [put_ok(store, Message("T", b"x" * 500, keys=f"k{i}")) for i in range(40)]
    assert os.listdir(second)  # the segments were spread over both folders
    with pytest.raises(CorruptStoreError):
        MessageStore.open(root, store_config, storePathCommitLog=first)
    # RocketMQ reads read-only folders only in a multi-path setting: the moved folder stays named
    moved = store_config.copy(storePathCommitLog=f"{first},{second}", readOnlyCommitLogStorePaths=second)
    in_second = sorted(os.listdir(second))
    with MessageStore.open(root, moved) as store:
        more = [put_ok(store, Message("T", b"y" * 500, keys=f"n{i}")) for i in range(40)]
        assert store.wait_for_dispatch()
        got = [m.body[:1] for m, *_ in iter_queued(store)]
        assert got == [b"x"] * 40 + [b"y"] * 40
        assert [m.commit_log_offset for m in store.query_message("T", "k3").messages] == [sent[3].commit_log_offset]
        assert more[-1].commit_log_offset > sent[-1].commit_log_offset
    assert sorted(os.listdir(second)) == in_second  # nothing new in the read-only folder
    again = store_config.copy(storePathCommitLog=f"{first},{second}", readOnlyCommitLogStorePaths=f"{second}/.")
    with MessageStore.open(root, again) as store:  # named in both, spelt otherwise: still read-only
        assert store.commit_log.queue.read_only_paths == [second]
    from rocketstore.verify import verify_store

    assert verify_store(root, moved).ok


def test_a_file_size_setting_that_disagrees_with_the_files_is_named(make_store, tmp_path, store_config):
    """Opening with the wrong size setting names the setting and the size the files have."""
    store = make_store()
    put_ok(store, Message("T", b"x"))
    store.shutdown()
    root = tmp_path / "store"
    with pytest.raises(CorruptStoreError, match="mappedFileSizeCommitLog says 8192: set mappedFileSizeCommitLog=4096"):
        MessageStore.open(root, store_config, mappedFileSizeCommitLog=8192)
    with pytest.raises(
        CorruptStoreError, match="mappedFileSizeConsumeQueue says 400: set mappedFileSizeConsumeQueue=200"
    ):
        MessageStore.open(root, store_config, mappedFileSizeConsumeQueue=400)


def _truncate_after_damage(make_store, root: Path) -> tuple[MessageStore, list]:
    store = make_store()
    results = _put_many(store, 30)
    store.shutdown()
    _damage_topic_length(root, results[-1])
    store = make_store()
    assert store.max_phy_offset == results[-1].commit_log_offset
    return store, results


def test_record_written_at_a_truncated_offset_is_indexed(make_store, tmp_path):
    store, results = _truncate_after_damage(make_store, tmp_path / "store")
    new = put_ok(store, Message("RecTopic", b"new", tags="TagA", keys="fresh"), 2)
    assert new.commit_log_offset == results[-1].commit_log_offset
    assert store.wait_for_dispatch()
    assert store.query_message("RecTopic", "rk29").messages == []
    assert [m.commit_log_offset for m in store.query_message("RecTopic", "fresh").messages] == [new.commit_log_offset]
    assert [m.commit_log_offset for m in store.query_message("RecTopic", new.uniq_key).messages] == [
        new.commit_log_offset
    ]


def test_index_after_a_truncating_recovery_passes_rmqread_check(make_store, tmp_path, store_config, rmqread):
    root = tmp_path / "store"
    store, _ = _truncate_after_damage(make_store, root)
    _put_many(store, 10, start=500)
    store.shutdown()
    done = rmqread("check", root, store_config)
    assert done.returncode == 0, done.stdout + done.stderr


def test_consume_queue_units_past_a_truncated_log_are_removed(make_store, tmp_path, store_config):
    """After a crash (abort), recovery walks from the checkpoint and cuts the log at a damaged record
    in the middle; every queue loses the units at or after the cut, whole files included."""
    root = tmp_path / "store"
    store = make_store()
    results = _put_many(store, 60)
    store.shutdown()
    cut = results[30]  # damage a record in the middle: the log ends before it
    _damage_topic_length(root, cut)
    (root / "abort").touch()
    units_before = {q: specreader.read_consume_queue(str(root), "RecTopic", q) for q in range(4)}
    assert any(u[0] >= cut.commit_log_offset for units in units_before.values() for u in units)

    store = make_store()
    assert store.max_phy_offset == cut.commit_log_offset
    assert store.recovery.stopped_at_bad_record
    for q in range(4):
        kept = [r for r in results[:30] if (results.index(r)) % 4 == q]
        assert store.get_max_offset_in_queue("RecTopic", q) == len(kept)
    # the segments after the cut are gone, the rest of the log takes new data
    assert segments(root)[-1] == f"{cut.commit_log_offset - cut.commit_log_offset % CL_SIZE:020d}"
    new = put_ok(store, Message("RecTopic", b"new", tags="TagN"), 1)
    assert new.commit_log_offset == cut.commit_log_offset
    assert new.queue_offset == sum(1 for i in range(30) if i % 4 == 1)
    assert store.wait_for_dispatch()
    got = store.get_message("g", "RecTopic", 1, new.queue_offset)
    assert [m.body for m in got.messages] == [b"new"]
    assert store.get_message("g", "RecTopic", 0, 8).status == GetMessageStatus.OFFSET_OVERFLOW_ONE


def test_a_queue_cut_back_to_its_filler_units_is_rebuilt_whole(make_store, tmp_path):
    """A queue rebuilt after retention starts with filler units (phy 0, size 0x7FFFFFFF) up to its
    first message. A crash before any checkpoint reached disk cuts it back to them; the fillers
    have no record, so they must not count as "built up to 2 GiB" (which skipped every unit of
    the queue from then on, rebuilt and new alike)."""
    root = tmp_path / "store"
    store = make_store()
    for i in range(60):
        put_ok(store, Message("T", b"m%03d" % i + b"x" * 300))
    store.shutdown()
    for segment in segments(root)[:2]:  # retention took the first two segments
        (root / "commitlog" / segment).unlink()
    shutil.rmtree(root / "consumequeue")
    store = make_store()
    low = store.get_min_offset_in_queue("T", 0)
    assert 0 < low < 60 and store.get_max_offset_in_queue("T", 0) == 60
    first = specreader.read_consume_queue(str(root), "T", 0)[0]
    assert first[:2] == (0, 0x7FFFFFFF)  # a filler
    store.shutdown()
    (root / "abort").touch()
    (root / "checkpoint").unlink()
    store = make_store()
    assert store.get_max_offset_in_queue("T", 0) == 60
    new = put_ok(store, Message("T", b"new"))
    assert new.queue_offset == 60
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "T", 0, 60).messages] == [b"new"]
    assert store.get_message("g", "T", 0, low, 1).messages[0].body.startswith(b"m%03d" % low)


def _cut_in_the_middle(make_store, root: Path) -> tuple[MessageStore, list, dict[int, int]]:
    """60 records, the 31st damaged, a crash: recovery cuts the log there (the store is returned open)."""
    store = make_store()
    results = _put_many(store, 60)
    store.shutdown()
    _damage_topic_length(root, results[30])
    (root / "abort").touch()
    store = make_store()
    assert store.max_phy_offset == results[30].commit_log_offset
    kept = {q: sum(1 for i in range(30) if i % 4 == q) for q in range(4)}
    assert _queue_max(store) == kept
    return store, results, kept


def test_consume_queue_units_cut_by_recovery_stay_cut_after_a_restart(make_store, tmp_path):
    root = tmp_path / "store"
    store, results, kept = _cut_in_the_middle(make_store, root)
    new = [put_ok(store, Message("RecTopic", b"N" * 400, tags="TagN"), 1) for _ in range(5)]
    store.shutdown()
    store = make_store()  # a clean restart
    assert _queue_max(store) == {**kept, 1: kept[1] + 5}
    for q in range(4):
        units = specreader.read_consume_queue(str(root), "RecTopic", q)
        assert all(u[0] < results[30].commit_log_offset or u[0] in {r.commit_log_offset for r in new} for u in units)


def test_records_cut_by_recovery_stay_cut_after_a_restart(make_store, tmp_path):
    root = tmp_path / "store"
    store, results, kept = _cut_in_the_middle(make_store, root)
    # a record of exactly the cut record's size: the next old record starts right after it
    same = put_ok(store, Message("RecTopic", b"R" * 30, tags="TagA", keys="rkXX"), 2)
    assert same.wrote_bytes == results[30].wrote_bytes
    end = store.max_phy_offset
    store.shutdown()
    store = make_store()  # a clean restart
    assert store.max_phy_offset == end
    assert _queue_max(store) == {**kept, 2: kept[2] + 1}
    assert store.query_message("RecTopic", "rk31").messages == []


def _next_millisecond() -> None:
    """Let the wall clock move on by a couple of milliseconds (store times are in ms)."""
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 < start + 2:
        time.sleep(0.0005)


def _put_one_key_each(store: MessageStore, n: int) -> list:
    """Messages whose only index key is their UNIQ_KEY: an index file boundary never splits one."""
    return [put_ok(store, Message("RecTopic", b"u%d" % i, tags="TagA"), i % 4) for i in range(n)]


def test_index_files_newer_than_the_checkpoint_are_rebuilt_after_a_crash(make_store, tmp_path, store_config, rmqread):
    root = tmp_path / "store"
    store = make_store()
    results = _put_one_key_each(store, 254)  # two full index files (127 entries each)
    _next_millisecond()  # the last file ends later than the checkpoint's index time
    results += _put_one_key_each(store, 46)
    assert store.wait_for_dispatch()
    before = {
        i: [m.commit_log_offset for m in store.query_message("RecTopic", r.uniq_key).messages]
        for i, r in enumerate(results)
    }
    assert all(before[i] == [r.commit_log_offset] for i, r in enumerate(results))
    store.shutdown()
    names_before = sorted(os.listdir(root / "index"))
    assert len(names_before) >= 3
    ckpt_index_ts = specreader.read_checkpoint(str(root))["indexMsgTimestamp"]
    newer = [n for n, h in specreader.read_index_headers(str(root)) if h["endTimestamp"] > ckpt_index_ts]
    assert newer == names_before[2:]  # the last, partial file
    (root / "abort").touch()

    store = make_store()
    assert not store.last_exit_ok
    names_after = sorted(os.listdir(root / "index"))
    assert not set(newer) & set(names_after)  # dropped ...
    assert len(names_after) >= len(names_before) - len(newer) + 1  # ... and rebuilt
    for i, r in enumerate(results):
        assert [m.commit_log_offset for m in store.query_message("RecTopic", r.uniq_key).messages] == before[i]
    store.shutdown()
    headers = [h for _, h in specreader.read_index_headers(str(root))]
    assert sum(h["indexCount"] - 1 for h in headers) == 300  # every key indexed exactly once
    done = rmqread("check", root, store_config)
    assert done.returncode == 0, done.stdout + done.stderr


def test_index_rebuild_keeps_the_keys_of_a_record_split_across_index_files(make_store, tmp_path, store_config):
    root = tmp_path / "store"
    store = make_store()
    # UNIQ_KEY + one KEYS token = 2 entries a record; a file holds 127: record 63 is split
    results = _put_many(store, 64)
    _next_millisecond()  # the second file ends later than the checkpoint's index time: a crash drops it
    results += _put_many(store, 6, start=64)
    store.shutdown()
    headers = [h for _, h in specreader.read_index_headers(str(root))]
    assert headers[0]["endPhyOffset"] == results[63].commit_log_offset  # the full file ends with 63's UNIQ_KEY
    assert headers[1]["endTimestamp"] > specreader.read_checkpoint(str(root))["indexMsgTimestamp"]
    (root / "abort").touch()
    store = make_store()
    for i, r in enumerate(results):
        assert [m.commit_log_offset for m in store.query_message("RecTopic", f"rk{i}").messages] == [
            r.commit_log_offset
        ], i


def test_deleted_consume_queues_and_index_are_rebuilt_from_the_log(make_store, tmp_path, store_config, rmqread):
    root = tmp_path / "store"
    store = make_store()
    results = [put_ok(store, Message("T", b"x" * i, keys=f"k{i}", tags="TagA"), i % 3) for i in range(100)]
    store.shutdown()
    before = our_export(root, store_config)
    for folder in ("index", "consumequeue"):
        for path, _dirs, files in os.walk(root / folder, topdown=False):
            for name in files:
                os.unlink(os.path.join(path, name))
            os.rmdir(path)
    store = make_store()
    assert store.last_exit_ok
    assert store.wait_for_dispatch()
    assert [store.get_max_offset_in_queue("T", q) for q in range(3)] == [34, 33, 33]
    for i, r in enumerate(results):
        assert [m.commit_log_offset for m in store.query_message("T", f"k{i}").messages] == [r.commit_log_offset]
    store.shutdown()
    assert our_export(root, store_config) == before
    done = rmqread("check", root, store_config)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
def test_reopen_a_store_whose_records_hold_a_single_property(make_store, tmp_path, store_config, abort):
    """Records whose properties are just UNIQ_KEY (no 0x02 anywhere in a segment) are scanned by
    recovery like any other (the columnar scanner once failed on a window without separators)."""
    root = tmp_path / "store"
    store = make_store()
    results = [put_ok(store, Message("Bare", b"x" * (i * 40)), i % 2) for i in range(30)]
    store.shutdown()
    if abort:
        (root / "abort").touch()
    store = make_store()
    assert store.max_phy_offset == results[-1].commit_log_offset + results[-1].wrote_bytes
    assert store.wait_for_dispatch()
    assert [store.get_max_offset_in_queue("Bare", q) for q in (0, 1)] == [15, 15]
    assert [m.commit_log_offset for m in store.query_message("Bare", results[7].uniq_key).messages] == [
        results[7].commit_log_offset
    ]


@pytest.mark.parametrize("abort", [False, True])
def test_preallocated_empty_segment_is_removed_by_recovery(make_store, tmp_path, abort):
    root = tmp_path / "store"
    store = make_store()
    results = [put_ok(store, Message("PreTopic", b"x" * 500)) for _ in range(10)]
    store.shutdown()
    last_segment = segments(root)[-1]
    spare = root / "commitlog" / f"{int(last_segment) + CL_SIZE:020d}"
    spare.write_bytes(bytes(CL_SIZE))  # what a crash leaves after the allocator made the next file
    if abort:
        (root / "abort").touch()
    store = make_store()
    assert not spare.exists()
    assert segments(root)[-1] == last_segment
    assert store.max_phy_offset == results[-1].commit_log_offset + results[-1].wrote_bytes
    r = put_ok(store, Message("PreTopic", b"after"))
    assert r.commit_log_offset == store.max_phy_offset - r.wrote_bytes
    assert r.queue_offset == 10


def test_empty_zero_length_last_segment_is_dropped(make_store, tmp_path):
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("T", b"x"))
    store.shutdown()
    (root / "commitlog" / f"{CL_SIZE:020d}").write_bytes(b"")
    store = make_store()
    assert segments(root) == ["00000000000000000000"]
    assert put_ok(store, Message("T", b"y")).queue_offset == 1


def test_stray_file_in_commitlog_is_refused_by_name(make_store, tmp_path, store_config):
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("T", b"x"))
    store.shutdown()
    stray = root / "commitlog" / "notes.txt"
    stray.write_text("hello")
    with pytest.raises(CorruptStoreError) as info:
        MessageStore.open(root, store_config)
    assert str(stray) in str(info.value)
    assert info.value.path == str(stray)
    stray.unlink()
    store = make_store()  # the failed open released the lock
    assert store.max_phy_offset > 0


def test_a_commit_log_that_is_not_a_folder_is_refused(make_store, tmp_path, store_config):
    """A file where the commit log's folder belongs is damage to report, not an empty log (which
    a recovery would answer by dropping every consume queue and index file)."""
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("T", b"x"))
    store.shutdown()
    shutil.rmtree(root / "commitlog")
    (root / "commitlog").write_bytes(b"")
    for read_only in (False, True):
        with pytest.raises(CorruptStoreError) as info:
            MessageStore.open(root, store_config, read_only=read_only)
        assert info.value.path == str(root / "commitlog")
    assert specreader.read_consume_queue(str(root), "T", 0)  # nothing was dropped


def test_wrong_size_segment_is_refused_by_name(make_store, tmp_path, store_config):
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("T", b"x"))
    store.shutdown()
    with pytest.raises(CorruptStoreError) as info:
        MessageStore.open(root, store_config.copy(mappedFileSizeCommitLog=8192))
    assert "00000000000000000000" in str(info.value) and "or it was cut short" in str(info.value)
    with pytest.raises(CorruptStoreError) as info:  # a file larger than the setting was not cut short
        MessageStore.open(root, store_config.copy(mappedFileSizeCommitLog=CL_SIZE // 2))
    assert "cut short" not in str(info.value)
    bad = root / "commitlog" / f"{CL_SIZE:020d}"
    bad.write_bytes(bytes(100))
    with pytest.raises(CorruptStoreError) as info:
        MessageStore.open(root, store_config)
    assert str(bad) in str(info.value)
    with pytest.raises(CorruptStoreError):
        MessageStore.open(root, store_config, read_only=True)
    bad.unlink()
    make_store()


def test_consume_queue_and_index_files_of_another_geometry_are_refused_by_name(make_store, tmp_path, store_config):
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("T", b"x", keys="k"))
    store.shutdown()
    with pytest.raises(CorruptStoreError) as info:
        MessageStore.open(root, store_config.copy(mappedFileSizeConsumeQueue=400))
    assert str(root / "consumequeue" / "T" / "0" / "00000000000000000000") in str(info.value)
    with pytest.raises(CorruptStoreError) as info:
        MessageStore.open(root, store_config.copy(maxIndexNum=256))
    assert str(root / "index") in str(info.value)


def test_a_failed_open_leaves_no_file_open(make_store, tmp_path, store_config):
    """An index file that fails to load after good ones: the open fails by name, and the good
    ones it had opened are closed again (a retrying operator does not run out of descriptors)."""
    root = tmp_path / "store"
    store = make_store()
    for i in range(300):
        put_ok(store, Message("T", b"x", keys=f"k{i}"))
    store.shutdown()
    index_files = sorted((root / "index").iterdir())
    assert len(index_files) >= 3
    os.truncate(index_files[-1], 100)
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(CorruptStoreError) as info:
            MessageStore.open(root, store_config)
        assert str(index_files[-1]) in str(info.value)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_folders_and_files_that_are_not_queues_or_index_files_are_skipped(make_store, tmp_path):
    root = tmp_path / "store"
    store = make_store()
    r = put_ok(store, Message("T", b"x", keys="k"))
    store.shutdown()
    (root / "consumequeue" / "T" / "not-a-queue").mkdir()
    (root / "consumequeue" / "T" / "notes.txt").write_text("x")
    (root / "index" / "README").write_text("x")
    store = make_store()
    assert store.queue_ids() == {"T": [0]}
    assert [m.commit_log_offset for m in store.query_message("T", "k").messages] == [r.commit_log_offset]


@pytest.mark.parametrize("gone", ["consumequeue/RecTopic/1", "consumequeue/RecTopic", "consumequeue", "index"])
def test_read_only_open_dispatching_a_missing_queue_makes_no_folder(
    make_store, tmp_path, store_config, hash_tree, gone
):
    """A queue (or all of them) the read-only open builds again in memory from the log gets no
    folder on disk: nothing on disk changes."""
    root = tmp_path / "store"
    store = make_store()
    results = _put_many(store, 40)
    store.shutdown()
    shutil.rmtree(root / gone)
    before = hash_tree(root)
    with MessageStore.open(root, store_config, read_only=True) as view:
        got = view.get_message("g", "RecTopic", 1, 0, 32)
        assert [m.commit_log_offset for m in got.messages] == [r.commit_log_offset for r in results[1::4]]
        assert [m.commit_log_offset for m in view.query_message("RecTopic", "rk5").messages] == [
            results[5].commit_log_offset
        ]
    assert hash_tree(root) == before, "a read-only open changed the store's folders"


def test_read_only_open_of_a_store_needing_recovery_changes_nothing(make_store, tmp_path, store_config, hash_tree):
    root = tmp_path / "store"
    store = make_store()
    results = _put_many(store, 80)
    store.shutdown()
    _damage_topic_length(root, results[-1])
    (root / "abort").touch()
    spare = root / "commitlog" / f"{int(segments(root)[-1]) + CL_SIZE:020d}"
    spare.write_bytes(bytes(CL_SIZE))
    before = hash_tree(root)

    with MessageStore.open(root, store_config, read_only=True) as view:
        assert not view.last_exit_ok
        assert view.max_phy_offset == results[-1].commit_log_offset
        assert view.dispatch_behind_bytes() == 0
        assert sum(view.get_max_offset_in_queue("RecTopic", q) for q in range(4)) == 79
        assert [m.commit_log_offset for m in view.query_message("RecTopic", "rk42").messages] == [
            results[42].commit_log_offset
        ]
        assert view.query_message("RecTopic", "rk79").messages == []
        pulled, offset = [], 0
        while offset < view.get_max_offset_in_queue("RecTopic", 1):
            got = view.get_message("g", "RecTopic", 1, offset, 32)
            assert got.status == GetMessageStatus.FOUND
            pulled += [m.commit_log_offset for m in got.messages]
            offset = got.next_begin_offset
        assert pulled == [r.commit_log_offset for r in results[1::4]]
        view_rows = [export_row(m, t, s) for m, _, t, s in iter_queued(view)]
    assert hash_tree(root) == before, "a read-only open changed files on disk"

    # the writable recovery later serves exactly the same
    store = make_store()
    assert [export_row(m, t, s) for m, _, t, s in iter_queued(store)] == view_rows
    assert not spare.exists()


# ================================================================== stores written by rocketstore vs rmqread


def _rich_store(store: MessageStore) -> None:
    for i in range(60):
        topic = ("TopicTest", "OrderTopic", "PayTopic")[i % 3]
        tags = ("TagA", "TagB", None, "\u00e9t\u00e9")[i % 4]
        keys = None if i % 7 == 0 else [f"key-{i}", f"order-{i % 5}"] + ([f"cl\u00e9-{i}"] if i % 6 == 0 else [])
        kw = {}
        if i % 5 == 0:
            kw["born_host"] = "[2001:db8::98]:6000"
        if i % 11 == 0:
            kw["store_host"] = "[fd00::a]:10911"
        if i % 9 == 0:
            kw["properties"] = {"note": "plain value \u00fc", "seq": str(i)}
        put_ok(store, Message(topic, bytes([i]) * (i * 23 % 900), tags=tags, keys=keys, flag=i % 4, **kw), i % 4)
    for b in range(4):
        r = store.put_batch(
            [Message("PayTopic", b"batch-%d-%d" % (b, j), tags="TagA", keys=f"bk-{b}-{j}") for j in range(3 + b)],
            b % 2,
            {"CLUSTER": "DefaultCluster"},
        )
        assert r.ok
    r = store.put_batch(
        [Message("OrderTopic", b"v6-%d" % j, born_host="[::1]:1", store_host="[fd00::a]:10911") for j in range(3)], 2
    )
    assert r.ok
    put_ok(store, Message("%RETRY%group", b"retry", properties={"RETRY_TOPIC": "TopicTest"}))


def test_store_written_by_rocketstore_passes_rmqread_check_and_export(
    make_store, tmp_path, store_config, rmqread, rmqread_export
):
    root = tmp_path / "store"
    store = make_store()
    _rich_store(store)
    assert store.wait_for_dispatch()
    store.shutdown()
    assert len(segments(root)) >= 5
    assert len(os.listdir(root / "index")) >= 2

    done = rmqread("check", root, store_config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("clean")
    theirs = rmqread_export(root, store_config)
    ours = our_export(root, store_config)
    assert len(ours) == 60 + (3 + 4 + 5 + 6) + 3 + 1
    assert ours == theirs
    # and the commit log read straight
    by_log = rmqread_export(root, store_config, "--via", "commitlog")
    with MessageStore.open(root, store_config, read_only=True) as view:
        log_rows = sorted(
            (m.to_json_dict() for m in iter_log(view)),
            key=lambda r: (r["topic"], r["queueId"], r["queueOffset"], r["commitLogOffset"]),
        )
    assert log_rows == by_log
    # key queries agree with rmqread's
    for topic, key in (
        ("TopicTest", "order-3"),
        ("OrderTopic", "key-10"),
        ("PayTopic", "bk-2-1"),
        ("TopicTest", "cl\u00e9-36"),
    ):
        q = rmqread("query", root, store_config, "--topic", topic, "--key", key)
        want = [json.loads(line)["commitLogOffset"] for line in q.stdout.splitlines()]
        with MessageStore.open(root, store_config, read_only=True) as view:
            got = [m.commit_log_offset for m in view.query_message(topic, key, max_num=64).messages]
        assert got == want, key


def test_store_after_recovery_and_more_writes_passes_rmqread_check(make_store, tmp_path, store_config, rmqread):
    root = tmp_path / "store"
    store = make_store()
    _rich_store(store)
    store.shutdown()
    (root / "abort").touch()
    store = make_store()
    _rich_store(store)
    store.shutdown()
    done = rmqread("check", root, store_config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(our_export(root, store_config)) == 2 * (60 + 18 + 3 + 1)


def test_an_unfiltered_pull_scans_past_records_being_removed(make_store, store_config):
    """Between a cleanup round's two steps (segments gone, queues not corrected yet) a pull from
    a unit whose record is gone scans on as RocketMQ does (up to 16,000 bytes of units, rolling
    to the next segment), with or without a tag filter, instead of stopping at maxMsgNums units."""
    store = make_store(config=store_config.copy(mappedFileSizeConsumeQueue=2000))
    for _ in range(60):
        put_ok(store, Message("T", b"x" * 60, tags="a"))
    assert store.wait_for_dispatch()
    cq = store.queues.find("T", 0)
    first_kept = next(q for q in range(60) if cq.get_unit(q)[0] >= 4096)
    assert store.commit_log.queue.delete_expired_by_time(0, 0, 0, True, 1) == 1  # the log's step only
    for tags in (None, "a"):
        got = store.get_message("g", "T", 0, first_kept - 2, 4, tags=tags)
        assert got.status == GetMessageStatus.FOUND, (tags, got.status)
        assert [m.queue_offset for m in got.messages] == list(range(first_kept, first_kept + 4))


def test_a_pull_names_the_units_it_passed_over_because_their_record_cannot_be_read(make_store, tmp_path, caplog):
    """A unit whose record does not decode (bit rot, a bad copy) is passed over, as before, but not
    silently: GetResult.unreadable holds its queue offset and a WARNING names where it is, so that a
    consumer that commits next_begin_offset knows what it lost. A unit the tag filter leaves out is
    not the consumer's: not named."""
    store = make_store()
    results = [put_ok(store, Message("D", b"%d" % i, tags="TagB" if i == 0 else "TagA")) for i in range(4)]
    assert store.wait_for_dispatch()
    broken = results[1].commit_log_offset
    with open(tmp_path / "store" / "commitlog" / f"{broken - broken % CL_SIZE:020d}", "r+b") as f:
        f.seek(broken % CL_SIZE + 4)  # its magic code
        f.write(b"\0\0\0\0")
    with caplog.at_level(logging.WARNING, logger="rocketstore.reader"):
        got = store.get_message("g", "D", 0, 0, 32)
    assert [m.queue_offset for m in got.messages] == [0, 2, 3] and got.next_begin_offset == 4
    assert got.unreadable == (1,)
    warned = [r.getMessage() for r in caplog.records if r.name == "rocketstore.reader"]
    assert len(warned) == 1 and warned[0].startswith("get_message: D/0: 1 unit(s)"), warned
    assert f"queue offset 1 (commit-log offset {broken}, it does not decode)" in warned[0]
    assert store.get_message("g", "D", 0, 0, 1).unreadable == ()  # a pull that stopped before it
    assert store.get_message("g", "D", 0, 2, 32).unreadable == ()
    assert store.get_message("g", "D", 0, 0, 32, tags="TagA").unreadable == (1,)
    got = store.get_message("g", "D", 0, 0, 32, tags="TagB")
    assert ([m.queue_offset for m in got.messages], got.unreadable) == ([0], ())
    assert GetResult(GetMessageStatus.FOUND, [], 0, 0, 0).unreadable == ()  # others build it as before


def test_a_pull_passes_over_the_units_retention_removed_in_silence(make_store, store_config, caplog):
    """Between a cleanup round's two steps a pull passes over the units whose segment retention
    removed (below the log's first offset), as RocketMQ's getMessage does: they were named in
    GetResult.unreadable with a WARNING on every pull until the consume queue's own cleanup,
    though nothing is damaged (a query_message does not count such hits either)."""
    store = make_store(config=store_config.copy(mappedFileSizeConsumeQueue=2000))
    for i in range(60):
        put_ok(store, Message("T", b"x" * 60, tags="a" if i % 2 else "b"))
    assert store.wait_for_dispatch()
    cq = store.queues.find("T", 0)
    first_kept = next(q for q in range(60) if cq.get_unit(q)[0] >= 4096)
    assert store.commit_log.queue.delete_expired_by_time(0, 0, 0, True, 1) == 1  # the log's step only
    start = first_kept - 4
    with caplog.at_level(logging.WARNING, logger="rocketstore.reader"):
        got = store.get_message("g", "T", 0, start, 2)
        removing = store.get_message("g", "T", 0, start, 1, tags="zz")
    assert [m.queue_offset for m in got.messages] == [first_kept, first_kept + 1]
    assert got.unreadable == () and got.status == GetMessageStatus.FOUND
    assert removing.unreadable == () and not removing.messages
    assert not [r for r in caplog.records if r.name == "rocketstore.reader"]


def test_a_slave_keeps_the_consumers_offset_unless_it_checks_offsets(make_store, store_config, tmp_path):
    """nextOffsetCorrection: on a SLAVE with offsetCheckInSlave false the next offset is the one
    asked for (a slave behind its master must not reset consumers)."""
    store = make_store()
    for _ in range(5):
        put_ok(store, Message("T", b"x"))
    store.shutdown()
    slave = make_store(config=store_config.copy(brokerRole="SLAVE"))
    assert slave.get_message("g", "T", 0, -3).next_begin_offset == -3
    assert slave.get_message("g", "T", 0, 9).next_begin_offset == 9
    assert slave.get_message("g", "T", 1, 7).next_begin_offset == 7  # an empty queue
    slave.shutdown()
    checking = make_store(config=store_config.copy(brokerRole="SLAVE", offsetCheckInSlave=True))
    assert checking.get_message("g", "T", 0, -3).next_begin_offset == 0
    assert checking.get_message("g", "T", 0, 9).next_begin_offset == 5


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_sync_master_answers_slave_not_available(make_store, store_config, flush):
    """A SYNC_MASTER with no slave in sync stores the message but answers SLAVE_NOT_AVAILABLE, as
    RocketMQ's handleHA does (no slave can connect to this store); WAIT=false is not asked."""
    store = make_store(config=store_config.copy(brokerRole="SYNC_MASTER", flushDiskType=flush))
    single = store.put(Message("T", b"one", tags="a", keys="k1"))
    batch = store.put_batch([Message("T", b"two"), Message("T", b"three")])
    general = store.put(Message("T", b"four", properties={"p": "v"}))
    unwaited = store.put(Message("T", b"five", properties=NO_WAIT))
    unwaited_batch = store.put_batch([Message("T", b"six")], properties=NO_WAIT)  # the batch's own WAIT
    unwaited_general = store.put_batch([Message("T", b"seven", properties={"p": "v"})], properties=NO_WAIT)
    assert [r.status for r in (single, batch, general)] == [PutMessageStatus.SLAVE_NOT_AVAILABLE] * 3
    assert [r.status for r in (unwaited, unwaited_batch, unwaited_general)] == [PutMessageStatus.PUT_OK] * 3
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0)
    assert [m.body for m in got.messages] == [b"one", b"two", b"three", b"four", b"five", b"six", b"seven"]


@pytest.mark.parametrize(
    ("wait", "status"),
    [
        ("FALSE", PutMessageStatus.PUT_OK),
        ("no", PutMessageStatus.PUT_OK),
        ("0", PutMessageStatus.PUT_OK),
        ("TRUE", PutMessageStatus.SLAVE_NOT_AVAILABLE),
        ("True", PutMessageStatus.SLAVE_NOT_AVAILABLE),
    ],
)
def test_wait_is_read_as_java_parse_boolean(make_store, store_config, wait, status):
    """isWaitStoreMsgOK is Boolean.parseBoolean of WAIT: only "true" in any case waits; any other
    value does not (it is not just "false"). A SYNC_MASTER without a slave shows which."""
    store = make_store(config=store_config.copy(brokerRole="SYNC_MASTER", flushDiskType="SYNC_FLUSH"))
    single = store.put(Message("T", b"one", properties={"WAIT": wait}))
    batch = store.put_batch([Message("T", b"two"), Message("T", b"three")], properties={"WAIT": wait})
    assert (single.status, batch.status) == (status, status)


def test_features_a_writable_store_would_get_wrong_are_refused_before_recovery(
    make_store, store_config, tmp_path, hash_tree
):
    """enableLmq (multi-dispatch to %LMQ% queues) and BatchCQ topics are not supported: a writable
    open says so before recovery touches anything; a read-only open still reads the store."""
    root = tmp_path / "store"
    store = make_store()
    put_ok(store, Message("Plain", b"x"))
    store.shutdown()
    (root / "abort").touch()  # as after a crash: the next writable open would recover
    before = hash_tree(root)
    for key in (
        "enableLmq",
        "enableMultiDispatch",
        "enableDLegerCommitLog",
        "duplicationEnable",
        "enableConsumeQueueExt",
    ):
        with pytest.raises(ConfigError, match=key):
            MessageStore.open(root, store_config, **{key: True})
    for rocks in ("defaultRocksDB", "DEFAULTROCKSDB"):  # isEnableRocksDBStore: equalsIgnoreCase
        with pytest.raises(ConfigError, match=f"storeType={rocks}"):
            MessageStore.open(root, store_config, storeType=rocks)
    assert hash_tree(root) == before
    topics = json.loads((root / "config" / "topics.json").read_text())
    topics["topicConfigTable"]["Plain"]["attributes"] = {"queue.type": "BatchCQ"}
    (root / "config" / "topics.json").write_text(json.dumps(topics))
    before = hash_tree(root)
    with pytest.raises(ConfigError, match="Plain use BatchCQ"):
        MessageStore.open(root, store_config)
    assert hash_tree(root) == before
    for plain in ("Default", ""):  # any other storeType is a store of files, to RocketMQ too
        refuse_unsupported(store_config.copy(storeType=plain))
    with MessageStore.open(root, store_config, read_only=True, enableLmq=True) as reader:
        assert [m.body for m in reader.get_message("g", "Plain", 0, 0).messages] == [b"x"]


def test_a_unit_whose_tags_code_is_a_consume_queue_ext_address_is_filtered_by_its_tags(
    make_store, store_config, tmp_path
):
    """With enableConsumeQueueExt (in RocketMQ 4.x and 5.x) a unit's tags code below Integer.MIN_VALUE is an
    address in consumequeue_ext, which this store does not read: RocketMQ, when its lookup fails,
    takes the unit as matching (the consumer filters by TAGS). A tag-filtered pull passed such
    units over as filtered out, in silence; it now keeps those whose record's TAGS match."""
    store = make_store()
    for tag in ("A", "B", "A"):
        put_ok(store, Message("T", b"m" + tag.encode(), tags=tag))
    store.shutdown()
    path = tmp_path / "store" / "consumequeue" / "T" / "0" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    for i in range(3):
        struct.pack_into(">q", data, i * 20 + 12, -(2**63) + i * 64)  # ConsumeQueueExt.decorate's addresses
    path.write_bytes(bytes(data))
    with MessageStore.open(tmp_path / "store", store_config, read_only=True) as view:
        got = view.get_message("g", "T", 0, 0, tags="A")
        assert (got.status, [m.body for m in got.messages]) == (GetMessageStatus.FOUND, [b"mA", b"mA"])
        assert [m.body for m in view.get_message("g", "T", 0, 0, tags="B").messages] == [b"mB"]
        assert len(view.get_message("g", "T", 0, 0).messages) == 3
    report = verify_store(tmp_path / "store", store_config)
    assert report.ok and any("consume-queue ext addresses" in note for note in report.notes), report.problems


def test_suggest_pulling_from_slave_looks_at_every_unit_examined(make_store, store_config):
    """suggestPullingFromSlave follows the last unit looked at, even when the filter kept none."""
    store = make_store(config=store_config.copy(accessMessageInMemoryMaxRatio=0))
    for _ in range(3):
        put_ok(store, Message("T", b"x", tags="a"))
    assert store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0, tags="c")
    assert got.status == GetMessageStatus.NO_MATCHED_MESSAGE
    assert got.suggest_pulling_from_slave


def test_pulls_of_any_length_keep_no_compiled_unpacker_per_length(make_store, store_config) -> None:
    """The few units of a pull unpack with a Struct compiled once per length; longer runs (a large
    max_nums, a tag filter's window) go through numpy, so pulls of ever new lengths never grow a
    process-wide cache without bound, and both ways read the same units."""
    from rocketstore.queues import consume_queue as cq

    config = store_config.copy(mappedFileSizeConsumeQueue=20 * 400, maxTransferCountOnMessageInMemory=400)
    store = make_store(config=config)
    for i in range(300):
        put_ok(store, Message("T", b"m%d" % i, tags="A" if i % 2 else "B"))
    assert store.wait_for_dispatch()
    for n in (1, 32, 64, 65, 150, 299):
        got = store.get_message("g", "T", 0, 1, n)
        assert [m.body for m in got.messages] == [b"m%d" % i for i in range(1, 1 + n)]
        got = store.get_message("g", "T", 0, 0, n, tags="A")
        assert [m.body for m in got.messages] == [b"m%d" % i for i in range(1, 300, 2)][:n]
    assert max(cq._UNIT_RUNS, default=0) <= cq._CACHED_RUN and max(cq._PLACE_RUNS, default=0) <= cq._CACHED_RUN
