"""Delayed messages (behaviour checklist K, spec 17.1-17.2): the schedule topic, delivery on time,
delayOffset.json, and a restart or a crash that loses no delayed message.

Delivery is driven with ``run_once(now=...)`` and a clock in the future instead of waiting; one
test lets the service's own thread deliver a 1-second delay, awaited through its progress event.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.codec import sysflag as sf
from rocketstore.codec.ids import tags_code
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.meta.fastjson import loads as fastjson_loads
from rocketstore.results import GetMessageStatus, PutMessageStatus
from rocketstore.services.schedule import UNITS_PER_ROUND, deliver_timestamp
from rocketstore.verify import verify_store
from test_crash import GEOMETRY, SRC, Producer

# a store for a backlog of thousands of delayed messages: 1 MiB commit-log files, 6000-unit queue files
BACKLOG = {
    "mappedFileSizeCommitLog": 1 << 20,
    "mappedFileSizeConsumeQueue": 120_000,
    "maxHashSlotNum": 64,
    "maxIndexNum": 128,
    "brokerIP1": "127.0.0.1",
    "messageDelayLevel": "1s 2s",
}


def _delayed(topic: str = "Orders", level: str = "3", **kw: object) -> Message:
    return Message(topic, b"later", tags="TagD", keys="dk", properties={"DELAY": level}, **kw)


def _stopped(store: MessageStore):
    """The store's schedule service with its thread stopped: the test drives it with run_once."""
    service = store.services.schedule
    service.stop()
    return service


def _real(store: MessageStore, topic: str = "Orders", queue_id: int = 1):
    store.wait_for_dispatch()
    return store.get_message("g", topic, queue_id, 0, 32)


def _all(store: MessageStore, topic: str, queue_id: int) -> list:
    """Every message of a queue (a pull stops at a consume-queue file's end)."""
    out, offset = [], 0
    while True:
        got = store.get_message("g", topic, queue_id, offset, 32)
        if not got.messages:
            return out
        out += got.messages
        offset = got.next_begin_offset


def test_a_delayed_message_waits_in_the_schedule_queue_then_comes_back(make_store, store_config) -> None:
    """Levels "5s 8s", level 3 asked for: capped to level 2 (queue 1), invisible for 8 s, then
    delivered with its body, tags, keys and real topic/queue; counted once."""
    store = make_store(config=store_config.copy(messageDelayLevel="5s 8s"))
    service = _stopped(store)
    result = store.put(_delayed(), queue_id=1)
    assert result.status == PutMessageStatus.PUT_OK
    store.wait_for_dispatch()
    assert store.queue_ids() == {SCHEDULE_TOPIC: [1]}
    record = store.look_message_by_offset(result.commit_log_offset)
    assert record.topic == SCHEDULE_TOPIC and record.queue_id == 1
    props = record.properties
    assert (props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == ("2", "Orders", "1")
    unit = store.queues.find(SCHEDULE_TOPIC, 1).get_unit(0)
    assert unit[2] == record.store_timestamp + 8000  # the unit's tags code is the delivery time

    stamp = record.store_timestamp
    assert service.run_once(now=stamp + 7999) == 0
    assert _real(store).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert service.run_once(now=stamp + 8000) == 1
    got = _real(store)
    assert got.status == GetMessageStatus.FOUND and len(got.messages) == 1
    copy = got.messages[0]
    assert (copy.topic, copy.queue_id, copy.body, copy.tags, copy.keys) == ("Orders", 1, b"later", "TagD", "dk")
    assert copy.uniq_key == record.uniq_key and copy.born_timestamp == record.born_timestamp
    # RocketMQ's quirk: the copy's stored properties are the schedule record's, DELAY included
    assert copy.properties_raw == record.properties_raw
    assert store.queues.find("Orders", 1).get_unit(0)[2] == tags_code("TagD")
    # later rounds deliver nothing more: the redelivery is counted once
    assert service.run_once(now=stamp + 60_000) == 0
    assert service.levels[2].delivered == 1 and service.delivered == 1
    assert store.delay_offsets.get(2) == 1


def test_an_unknown_level_falls_back_to_one_second() -> None:
    millis = (5000, 8000)
    assert deliver_timestamp(2, 1000, millis) == 9000
    assert deliver_timestamp(3, 1000, millis) == 2000
    assert deliver_timestamp(0, 1000, millis) == 2000


def test_delay_rules_on_put(make_store) -> None:
    """DELAY 0 or absent stores at once; a bad level is refused without taking an offset; a
    prepared transaction is never delayed, a committed one is; a batch cannot be delayed."""
    store = make_store()
    _stopped(store)
    assert store.put(_delayed(level="0"), 1).queue_offset == 0
    kept = store.put(_delayed(level="03"), 1)  # a level in range keeps the producer's text, as RocketMQ
    assert store.look_message_by_offset(kept.commit_log_offset).properties["DELAY"] == "03"
    capped = store.put(_delayed(level="40"), 1)  # over the highest level: set to it
    record = store.look_message_by_offset(capped.commit_log_offset)
    assert (record.properties["DELAY"], record.queue_id) == ("18", 17)
    bad = store.put(_delayed(level="soon"), 1)
    assert bad.status == PutMessageStatus.MESSAGE_ILLEGAL and "DELAY" in bad.detail
    assert store.put(Message("Orders", b"x"), 1).queue_offset == 1
    prepared = store.put(_delayed(sys_flag=sf.TRANSACTION_PREPARED_TYPE), 1)
    assert store.look_message_by_offset(prepared.commit_log_offset).topic == "Orders"
    committed = store.put(_delayed(sys_flag=sf.TRANSACTION_COMMIT_TYPE), 1)
    assert store.look_message_by_offset(committed.commit_log_offset).topic == SCHEDULE_TOPIC
    batch = store.put_batch([_delayed(), _delayed()], 1)
    assert batch.status == PutMessageStatus.MESSAGE_ILLEGAL
    store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("Orders", 1) == 2
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 2


def test_a_delayed_message_whose_delivery_could_never_be_stored_is_refused(make_store, store_config) -> None:
    """With V1 records only (autoMessageVersionOnTopicLen=false) a real topic over 127 bytes could
    never be delivered: refused at the put, as RocketMQ's checkMessage refuses it before the delay
    rewrite, and so is such a schedule unit stored as it is (import, an asIs write). Stored, it
    held up its whole level."""
    long_retry = "%RETRY%" + "g" * 121  # 128 bytes
    store = make_store(config=store_config.copy(autoMessageVersionOnTopicLen=False))
    service = _stopped(store)
    refused = store.put(_delayed(topic=long_retry, level="1"), 0)
    assert refused.status == PutMessageStatus.MESSAGE_ILLEGAL and "real topic is 128 bytes" in refused.detail
    unit = Message(SCHEDULE_TOPIC, b"x", properties={"DELAY": "1", "REAL_TOPIC": long_retry, "REAL_QID": "0"})
    assert store.put_as_is(unit, 0).status == PutMessageStatus.MESSAGE_ILLEGAL
    after = store.put(_delayed(level="1"), 1)
    assert after.ok and store.wait_for_dispatch()
    assert service.run_once(now=after.store_timestamp + 1000) == 1  # the level is not held up
    assert [m.body for m in _real(store).messages] == [b"later"]
    # where V2 records are written, the same message is delayed and delivered
    other = make_store("v2")
    assert other.put(_delayed(topic=long_retry, level="1"), 0).ok


@pytest.mark.parametrize("topic", ["L" * 120, "%RETRY%" + "g" * 193])  # delivered as a V1 and a V2 record
def test_a_delayed_message_whose_delivered_record_would_not_fit_a_segment_is_refused(make_store, topic) -> None:
    """The delivered record holds the real topic where the schedule record holds
    SCHEDULE_TOPIC_XXXX (a V2 one a 2-byte topic length too): a delayed message whose delivery
    would not fit a 4 KiB segment is refused at the put (MESSAGE_ILLEGAL, as any record too big
    for a segment). Stored, its delivery was refused at every attempt and held up its level. The
    largest one taken is delivered, filling a segment but for the end-of-file marker."""
    store = make_store()
    service = _stopped(store)

    def delayed(size: int) -> Message:
        return Message(topic, b"x" * size, properties={"DELAY": "1"})

    largest = max(n for n in range(3000, 4096) if store.writer.check(delayed(n), 0) is None)
    refused = store.put(delayed(largest + 1), 0)
    assert refused.status == PutMessageStatus.MESSAGE_ILLEGAL and "4096-byte commit-log segment" in refused.detail
    assert store.put(delayed(largest), 0).ok
    after = store.put(_delayed(level="1"), 1)
    assert store.wait_for_dispatch()
    assert service.run_once(now=after.store_timestamp + 1000) == 2
    (copy,) = _real(store, topic, 0).messages
    assert len(copy.body) == largest and copy.store_size == 4096 - 8
    assert [m.body for m in _real(store).messages] == [b"later"]


@pytest.mark.parametrize("change", ["maxMessageSize", "enabledAppendPropCRC"])
def test_a_delivery_refused_for_good_is_dropped_and_the_level_goes_on(make_store, store_config, caplog, change) -> None:
    """A schedule record whose delivered copy the store now refuses for good (its body over a
    lowered maxMessageSize: MESSAGE_ILLEGAL; its properties over 32767 bytes once the CRC property
    is appended: PROPERTIES_SIZE_EXCEEDED) is dropped with an ERROR naming it, counted as skipped,
    and its level goes on; it was retried every 100 ms for ever, holding up every later message."""
    store = make_store(config=store_config.copy(mappedFileSizeCommitLog=1 << 16))
    service = _stopped(store)
    if change == "maxMessageSize":
        doomed = Message("Orders", b"x" * 1000, properties={"DELAY": "1"})
    else:
        big = max(n for n in range(32_000, 32_767) if store.writer.check(_big_properties(n), 0) is None)
        doomed = _big_properties(big)
    bad = store.put(doomed, 1)
    assert bad.ok
    after = store.put(_delayed(level="1"), 1)
    assert store.wait_for_dispatch()
    store.config.set(change, 100 if change == "maxMessageSize" else True)
    with caplog.at_level("ERROR", logger="rocketstore.services.schedule"):
        assert service.run_once(now=after.store_timestamp + 1000) == 1
    assert [m.body for m in _real(store).messages] == [b"later"]
    stats = service.levels[1]
    assert (stats.delivered, stats.skipped, stats.failed_puts) == (1, 1, 0) and store.delay_offsets.get(1) == 2
    status = "MESSAGE_ILLEGAL" if change == "maxMessageSize" else "PROPERTIES_SIZE_EXCEEDED"
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"at {bad.commit_log_offset}" in error and status in error and "dropped" in error


def _big_properties(size: int) -> Message:
    return Message("Orders", b"big", properties={"DELAY": "1", "P": "v" * size})


def test_levels_deliver_in_their_own_time(make_store, store_config) -> None:
    """Messages of several levels and queues interleaved: each level's queue is walked in order,
    and a message is delivered exactly when its level's delay has passed."""
    store = make_store(config=store_config.copy(messageDelayLevel="1s 5s 10s"))
    service = _stopped(store)
    rng = random.Random(5)
    sent = []
    for i in range(60):
        level = rng.randint(1, 3)
        r = store.put(Message("Orders", b"m%d" % i, keys=f"k{i}", properties={"DELAY": str(level)}), i % 3)
        assert r.ok
        sent.append((i, level, r.store_timestamp))
    store.wait_for_dispatch()
    start = max(t for _, _, t in sent)  # the clock never runs behind a store time
    for step in range(0, 12_001, 250):
        service.run_once(now=start + step)
        due = {i for i, level, t in sent if t + (1000, 5000, 10000)[level - 1] <= start + step}
        store.wait_for_dispatch()
        delivered = set()
        for q in range(3):
            delivered |= {int(m.body[1:]) for m in _all(store, "Orders", q)}
        assert delivered == due, step
    assert len(delivered) == 60
    assert verify_store(store.root, store.config).ok


def test_delay_offsets_persist_reload_and_are_corrected(tmp_path: Path, store_config: StoreConfig) -> None:
    """delayOffset.json holds each level's next offset at shutdown; a reopened store goes on from
    there (nothing delivered twice); offsets outside the queue are corrected to its bounds."""
    path = tmp_path / "store"
    config = store_config.copy(messageDelayLevel="1s 2s")
    with MessageStore.open(path, config) as store:
        service = _stopped(store)
        stamps = [store.put(_delayed(level="1"), 1).store_timestamp for _ in range(3)]
        store.put(_delayed(level="2"), 1)
        store.wait_for_dispatch()
        service.run_once(now=stamps[1] + 1000)  # the first two level-1 messages are due
        delivered = service.delivered
        assert delivered >= 2
    table = fastjson_loads((path / "config" / "delayOffset.json").read_text())["offsetTable"]
    # level 2 delivered nothing: no entry (RocketMQ 4.9.8 writes none: its sample-clean store's file
    # names levels 1 and 2 only, while levels 4, 6 and 18 held messages not yet due)
    assert {int(k): v for k, v in table.items()} == {1: delivered}

    with MessageStore.open(path, config) as store:
        service = _stopped(store)
        assert store.delay_offsets.get(1) == delivered
        service.run_once(now=stamps[2] + 60_000)
        assert service.delivered == 4 - delivered  # the rest, and only the rest
        assert _real(store).messages and store.get_max_offset_in_queue("Orders", 1) == 4

    (path / "config" / "delayOffset.json").write_text(json.dumps({"offsetTable": {"1": 99, "2": -4}}))
    with MessageStore.open(path, config) as store:
        assert store.delay_offsets.get(1) == 3  # past the end: the queue's max offset
        assert store.delay_offsets.get(2) == 0  # below the start: its min offset


def test_an_offset_for_a_level_without_a_queue_is_corrected_to_zero(tmp_path: Path, store_config: StoreConfig) -> None:
    """A level with an offset but no queue has an empty one (findOrCreateConsumeQueue): its offset
    goes back to 0, or the first messages of that level would never be delivered."""
    path = tmp_path / "store"
    config = store_config.copy(messageDelayLevel="1s 2s")
    MessageStore.open(path, config).shutdown()
    (path / "config" / "delayOffset.json").write_text('{"offsetTable":{1:3}}')
    with MessageStore.open(path, config) as store:
        assert store.delay_offsets.get(1) == 0
        service = _stopped(store)
        for i in range(5):
            store.put(Message("Orders", b"m%d" % i, properties={"DELAY": "1"}), 1)
        store.wait_for_dispatch()
        service.run_once(now=2**62)
        store.wait_for_dispatch()
        assert store.get_max_offset_in_queue("Orders", 1) == 5


def test_the_service_thread_delivers_on_time(make_store, store_config) -> None:
    """No clock tricks: the running service delivers a 1 s delay after about a second."""
    store = make_store(config=store_config.copy(messageDelayLevel="1s"))
    put = store.put(_delayed(level="1"), 1)
    assert store.services.schedule.wait_delivered(1, timeout=30)
    got = _real(store)
    assert got.status == GetMessageStatus.FOUND
    assert got.messages[0].store_timestamp >= put.store_timestamp + 1000
    service = store.services.schedule
    assert service.running
    store.shutdown()  # stops the thread and saves the level's offset
    assert not service.running and not store.services.clean.running
    table = fastjson_loads((Path(store.root) / "config" / "delayOffset.json").read_text())["offsetTable"]
    assert {int(k): v for k, v in table.items()} == {1: 1}


def test_half_messages_and_refused_puts(make_store) -> None:
    """A delayed half message is dropped, not delivered; a redelivery the store refuses is tried
    again (the offset stays) and succeeds once puts are accepted again."""
    store = make_store()
    service = _stopped(store)
    half = store.put(_delayed(topic="RMQ_SYS_TRANS_HALF_TOPIC", level="1"), 0)
    stamp = half.store_timestamp
    store.wait_for_dispatch()
    assert service.run_once(now=stamp + 2000) == 0
    assert service.levels[1].skipped == 1 and store.delay_offsets.get(1) == 1

    store.put(_delayed(level="1"), 1)
    store.wait_for_dispatch()
    store.set_running_flags(set_bits=0x2)  # NOT_WRITEABLE
    assert service.run_once(now=stamp + 60_000) == 0
    assert service.levels[1].failed_puts == 1 and store.delay_offsets.get(1) == 1
    # as RocketMQ's DELAY_FOR_A_PERIOD: tried again in 10 s, not every 100 ms (a full disk for
    # hours logged a warning per due level ten times a second), nor taken for a clock step-back
    assert service.levels[1].due_at == stamp + 70_000
    service.clock = lambda: (stamp + 65_000) / 1000  # 5 s ahead: no clock step-back (the usual limit is 1 s)
    assert service.run_once() == 0 and service.levels[1].failed_puts == 1  # not looked at yet
    store.set_running_flags(clear_bits=0x2)
    assert service.run_once(now=stamp + 60_000) == 1
    assert store.delay_offsets.get(1) == 2


@pytest.mark.parametrize(
    "props",
    [
        {"REAL_TOPIC": "a b", "REAL_QID": "0"},  # not a topic RocketMQ takes: dropped at delivery
        {"REAL_TOPIC": "x" * 200, "REAL_QID": "0"},
        {"REAL_TOPIC": SCHEDULE_TOPIC, "REAL_QID": "0"},  # delivered into the schedule queue again, for ever
        {"REAL_TOPIC": "Orders", "REAL_QID": "1_0"},  # Java's Integer.parseInt does not read it (int() did)
        {"REAL_TOPIC": "Orders", "REAL_QID": " 2"},
        {"REAL_TOPIC": "Orders", "REAL_QID": "-1"},
        {"REAL_TOPIC": "Orders", "REAL_QID": "2147483648"},
        {"REAL_TOPIC": "Orders"},
    ],
)
def test_a_schedule_record_delivery_could_never_store_is_refused(make_store, props) -> None:
    """A schedule record stored as it is (import, an asIs write) or put straight into
    SCHEDULE_TOPIC_XXXX is held to the test delivery applies: a record delivery would drop, or
    deliver back into the schedule topic, is refused (MESSAGE_ILLEGAL) and nothing is stored."""
    store = make_store()
    _stopped(store)
    message = Message(SCHEDULE_TOPIC, b"q", properties={"DELAY": "1", **props})
    for result in (store.put_as_is(message, 0), store.put(message, 0)):
        assert result.status == PutMessageStatus.MESSAGE_ILLEGAL and "never be delivered" in result.detail
    assert store.wait_for_dispatch() and store.queue_ids() == {}


def test_a_record_delivery_could_never_store_found_in_the_log_is_skipped(make_store, tmp_path: Path) -> None:
    """A schedule record the writer refuses may still be in the log (another writer's: stored
    records patched here): one whose REAL_QID Java's Integer.parseInt does not read (" 1", which
    Python's int() took for 1) is skipped, not delivered; one whose REAL_TOPIC is the schedule
    topic is skipped, not delivered back into the schedule queue for ever."""
    store = make_store()
    for real in (("Orders", "10"), ("SCHEDULE_TOPIC_XXXY", "0"), ("Orders", "4")):
        props = {"DELAY": "1", "REAL_TOPIC": real[0], "REAL_QID": real[1]}
        assert store.put_as_is(Message(SCHEDULE_TOPIC, b"q", properties=props), 0).ok
    store.shutdown()
    segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
    data = bytes(segment.read_bytes())  # properties are outside the body CRC: only delivery reads them
    data = data.replace(b"REAL_QID\x0110", b"REAL_QID\x01 1").replace(b"TOPIC_XXXY", b"TOPIC_XXXX")
    segment.write_bytes(data)
    store = make_store()
    service = _stopped(store)
    store.wait_for_dispatch()
    assert service.run_once(now=2**62) == 1
    assert service.levels[1].skipped == 2
    store.wait_for_dispatch()
    assert store.queue_ids() == {"Orders": [4], SCHEDULE_TOPIC: [0]}
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 3


def test_import_keeps_schedule_records_and_delivered_copies(make_store, tmp_path: Path) -> None:
    """An exported store imported again: schedule records stay in the schedule topic and
    delivered copies (which still say DELAY) are not delayed a second time."""
    import io

    from rocketstore.export import export_jsonl, import_jsonl

    def exported(store: MessageStore) -> list[str]:
        out = io.StringIO()
        export_jsonl(store, out)
        return out.getvalue().splitlines()

    source = make_store("a")
    service = _stopped(source)
    stamp = source.put(_delayed(level="1"), 1).store_timestamp
    source.put(_delayed(level="2"), 2)
    source.wait_for_dispatch()
    service.run_once(now=stamp + 1000)
    source.wait_for_dispatch()
    lines = exported(source)
    target = make_store("b")
    _stopped(target)
    assert import_jsonl(target, lines) == 3
    target.wait_for_dispatch()
    assert target.queue_ids() == source.queue_ids()
    assert [json.loads(x)["topic"] for x in exported(target)] == [json.loads(x)["topic"] for x in lines]


def test_inspect_shows_schedule_lag(make_store, store_config) -> None:
    from rocketstore.cli.inspect_cmd import inspect_store

    store = make_store(config=store_config.copy(messageDelayLevel="1s 5s"))
    service = _stopped(store)
    stamp = store.put(_delayed(level="1"), 0).store_timestamp
    for _ in range(3):
        store.put(_delayed(level="2"), 0)
    store.wait_for_dispatch()
    service.run_once(now=stamp + 1000)
    rows = {row["level"]: row for row in inspect_store(store)["schedule"]}
    assert (rows[1]["delay"], rows[1]["offset"], rows[1]["lag"]) == ("1s", 1, 0)
    assert (rows[2]["delay"], rows[2]["maxOffset"], rows[2]["lag"]) == ("5s", 3, 3)
    assert rows[2]["nextDeliverTimestamp"] >= stamp + 5000


def test_a_crash_loses_no_delayed_message(tmp_path: Path) -> None:
    """A SYNC_FLUSH producer of delayed and plain messages is SIGKILLed while the service
    delivers; after the last reopen every acknowledged delayed message reaches its real queue
    (at least once: a crash may deliver one again) with its body."""
    rng = random.Random("delay-crash")
    path = tmp_path / "store"
    acked = []
    for cycle in range(4):
        producer = Producer(path, "SYNC_FLUSH", threads=4, start=cycle * 100_000, env={"CRASH_DELAY_EVERY": "3"})
        producer.kill_after(rng.randint(300, 6000))
        acked += producer.acks
    delayed = [a for a in acked if "-" not in a[0] and int(a[0]) % 3 == 0]
    assert delayed
    config = StoreConfig(GEOMETRY)
    with MessageStore.open(path, config) as store:
        service = _stopped(store)
        service.run_once(now=2**62)
        store.wait_for_dispatch()
        for key, offset, *_ in delayed:
            record = store.look_message_by_offset(offset)
            assert record is not None and record.topic == SCHEDULE_TOPIC, key
            copies = store.query_message("CrashTopic", f"ck-{key}").messages
            assert copies and all(c.body == record.body for c in copies), key
        assert all(row["lag"] == 0 for row in store.schedule_report())
    assert verify_store(str(path), config).ok


def _power_loss(live: Path, into: Path, flushed: int) -> None:
    """The files of the open store at ``live`` as a power loss leaves them, in ``into``: the
    commit log's bytes past ``flushed`` (what the store knows to be on disk) are zeros."""
    shutil.copytree(live, into, ignore=shutil.ignore_patterns("lock"))
    for segment in sorted((into / "commitlog").iterdir()):
        start = int(segment.name)
        with open(segment, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            keep = min(max(flushed - start, 0), size)
            f.seek(keep)
            f.write(bytes(size - keep))


def test_a_power_loss_after_a_persist_loses_no_delivered_message(tmp_path: Path, store_config: StoreConfig) -> None:
    """Under ASYNC_FLUSH the delivered copies are put without waiting for a flush: delayOffset.json
    is written only once the commit log is flushed up to the last of them. It was written first,
    and a power loss kept the level's offset past a copy the commit log lost: the message was
    gone, neither in its real queue nor to be delivered again."""
    config = store_config.copy(flushDiskType="ASYNC_FLUSH", flushIntervalCommitLog=600_000, flushDelayOffsetInterval=1)
    live = tmp_path / "live"
    store = MessageStore.open(live, config)
    try:
        service = _stopped(store)
        assert store.put(_delayed(level="1"), 1).ok
        store.flush()  # the schedule record is on disk
        assert store.wait_for_dispatch()
        assert service.run_once(now=2**62) == 1
        assert _delay_offsets(live) == {1: 1}
        _power_loss(live, tmp_path / "after", store.commit_log.flushed_where)
    finally:
        store.shutdown()
    with MessageStore.open(tmp_path / "after", config) as store:
        _stopped(store).run_once(now=2**62)
        assert [m.body for m in _real(store).messages] == [b"later"]


def test_a_failed_persist_is_tried_again_at_the_next_interval(make_store, store_config) -> None:
    """delayOffset.json could not be written (a folder in its place here): the offsets are still
    to be written, and the next interval writes them, though nothing was delivered since."""
    store = make_store(config=store_config.copy(flushDelayOffsetInterval=1))
    service = _stopped(store)
    path = Path(store.root) / "config" / "delayOffset.json"
    path.unlink(missing_ok=True)
    path.mkdir()
    put = store.put(_delayed(level="1"), 1)
    assert put.ok and store.wait_for_dispatch()
    with pytest.raises(OSError):
        service.run_once(now=put.store_timestamp + 1000)
    path.rmdir()
    assert service.run_once(now=put.store_timestamp + 2000) == 0
    assert _delay_offsets(Path(store.root)) == {1: 1}


@pytest.mark.parametrize("levels", ["1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", "2d 500s"])
def test_level_table(levels: str) -> None:
    from rocketstore.config import delay_level_millis

    millis = delay_level_millis(levels)
    assert len(millis) == len(levels.split())
    assert millis[-1] in (7_200_000, 500_000)


@pytest.mark.parametrize(
    "levels", ["1_0s 5s", "1s  5s", "1s\t5s", "-1s", "5", "s", "99999999999999999999s", "9223372036854775807s"]
)
def test_a_level_table_java_refuses_is_refused(levels: str) -> None:
    """parseDelayLevel splits at single spaces and reads each number with Long.parseLong: what it
    fails on fails here too (and a negative delay, which it would take)."""
    from rocketstore.config import delay_level_millis
    from rocketstore.errors import ConfigError

    with pytest.raises(ConfigError, match="messageDelayLevel"):
        delay_level_millis(levels)
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        StoreConfig(messageDelayLevel=levels)


def test_a_level_table_as_java_reads_it() -> None:
    from rocketstore.config import delay_level_millis
    from rocketstore.errors import ConfigError

    assert delay_level_millis("1s 2m ") == (1000, 120_000)  # a trailing space: split drops it
    assert delay_level_millis("+3s 0s") == (3000, 0)
    with pytest.raises(ConfigError, match="level ''"):  # a leading space is an empty level (a setting is trimmed first)
        delay_level_millis(" 1s")


def test_an_offset_past_the_queue_end_goes_back_to_it(make_store, store_config) -> None:
    """A level's offset past its queue's end (the queue made again: rebuilt, say) is reset to the
    end, as RocketMQ's executeOnTimeup does, and the messages put after it are delivered."""
    store = make_store(config=store_config.copy(messageDelayLevel="1s 2s"))
    service = _stopped(store)
    store.put(_delayed(level="1"), 1)
    store.delay_offsets.set(1, 7)
    store.wait_for_dispatch()
    service.run_once(now=2**62)
    assert store.delay_offsets.get(1) == 1
    for _ in range(2):
        store.put(_delayed(level="1"), 1)
    store.wait_for_dispatch()
    assert service.run_once(now=2**62) == 2
    assert store.delay_offsets.get(1) == 3


def test_a_negative_tags_code_is_a_past_delivery_time(make_store, store_config) -> None:
    """Only tags codes at or below Integer.MIN_VALUE - 1 are ext-file addresses (isExtAddr); a
    schedule unit holding a negative tag hash (no DELAY in its record) is due at once."""
    store = make_store(config=store_config.copy(messageDelayLevel="1s 30s"))
    service = _stopped(store)
    tag = next(t for t in (f"Tag{i}" for i in range(1000)) if tags_code(t) < 0)
    properties = {"REAL_TOPIC": "Orders", "REAL_QID": "1"}
    put = store.put_as_is(Message(SCHEDULE_TOPIC, b"now", tags=tag, properties=properties), 1)
    store.wait_for_dispatch()
    assert service.run_once(now=put.store_timestamp + 100) == 1
    assert [m.body for m in _real(store).messages] == [b"now"]


def test_verify_accepts_delivery_times_of_an_earlier_level_table(tmp_path: Path, store_config: StoreConfig) -> None:
    """A schedule unit keeps the delivery time its level had when it was written; after the
    operator changes messageDelayLevel, verify notes those units instead of calling them damage."""
    path = tmp_path / "store"
    with MessageStore.open(path, store_config.copy(messageDelayLevel="1s 60s")) as store:
        _stopped(store)
        store.put(_delayed(level="2"), 1)
    changed = store_config.copy(messageDelayLevel="1s 90s")
    report = verify_store(path, changed)
    assert report.ok, report.problems
    assert any("messageDelayLevel" in note for note in report.notes)
    unit = path / "consumequeue" / SCHEDULE_TOPIC / "1" / f"{0:020d}"
    with open(unit, "r+b") as f:
        f.seek(12)
        delivery = int.from_bytes(f.read(8), "big")
    # still wrong: before the record's store time, or not a whole number of seconds after it
    for tags in (1, delivery + 1, delivery - 1):
        with open(unit, "r+b") as f:
            f.seek(12)
            f.write(tags.to_bytes(8, "big"))
        assert not verify_store(path, changed).ok, tags


def _backlog(path: Path, config: StoreConfig, count: int) -> None:
    """``count`` level-1 messages ``m0``, ``m1``, ... for Orders/0, put with delivery stopped:
    all of them are due at the first round of the next open (1 s after it)."""
    with MessageStore.open(path, config) as store:
        _stopped(store)
        for i in range(count):
            assert store.put(Message("Orders", b"m%d" % i, properties={"DELAY": "1"}), 0).ok


def _delay_offsets(path: Path) -> dict[int, int]:
    table = fastjson_loads((path / "config" / "delayOffset.json").read_text())["offsetTable"]
    return {int(k): v for k, v in table.items()}


def _copies(path: Path, config: StoreConfig) -> Counter[bytes]:
    """Deliver what is left, then count the copies of each body in Orders/0."""
    with MessageStore.open(path, config) as store:
        _stopped(store).run_once(now=2**62)
        store.wait_for_dispatch()
        return Counter(m.body for m in _all(store, "Orders", 0))


def test_shutdown_does_not_wait_for_a_due_backlog(tmp_path: Path) -> None:
    """A due backlog of 8 turns' worth: shutdown, asked once the first turn is delivered, stops
    the delivery at the next unit instead of waiting for the rest; delayOffset.json holds the
    first undelivered unit, and the next open delivers the rest: every message exactly once."""
    path, config, count = tmp_path / "store", StoreConfig(BACKLOG), 8 * UNITS_PER_ROUND
    _backlog(path, config, count)
    store = MessageStore.open(path, config)
    service = store.services.schedule
    assert service.wait_delivered(1, timeout=30)
    store.shutdown()
    delivered = service.delivered
    assert 0 < delivered < count  # the old loop delivered all of it before shutdown could return
    assert _delay_offsets(path) == {1: delivered}
    assert _copies(path, config) == Counter({b"m%d" % i: 1 for i in range(count)})


def test_a_due_level_is_not_held_behind_the_backlog_of_another(make_store) -> None:
    """Three turns' worth of due level-1 messages, then a level-2 message due as well: levels take
    turns, so the level-2 message is delivered after one turn of level 1, not after all of it."""
    store = make_store(config=StoreConfig(BACKLOG))
    service = _stopped(store)
    count = 3 * UNITS_PER_ROUND
    for i in range(count):
        store.put(Message("Orders", b"m%d" % i, properties={"DELAY": "1"}), 0)
    last = store.put(Message("Other", b"level 2", properties={"DELAY": "2"}), 0)
    store.wait_for_dispatch()
    assert service.run_once(now=last.store_timestamp + 2000) == count + 1
    store.wait_for_dispatch()
    (other,) = _all(store, "Other", 0)
    orders = _all(store, "Orders", 0)
    assert len(orders) == count
    assert sum(m.commit_log_offset < other.commit_log_offset for m in orders) == UNITS_PER_ROUND


CRASH_CHILD = """
import os, signal, sys
from rocketstore import MessageStore, StoreConfig
store = MessageStore.open(sys.argv[1], StoreConfig({settings!r}))
service = store.services.schedule
service.wait_delivered({wait}, timeout=60)
print(service.delivered, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_crash_in_a_long_backlog_redelivers_only_what_came_after_the_last_persist(tmp_path: Path) -> None:
    """With flushDelayOffsetInterval 1 ms, a process SIGKILLed while it delivers a backlog of 10
    turns has written delayOffset.json during the delivery (the old service wrote it only after
    the whole backlog); after the restart nothing is lost, and only the messages after the
    persisted offset, at most two turns' worth, come twice."""
    path, count = tmp_path / "store", 10 * UNITS_PER_ROUND
    settings = {**BACKLOG, "flushDelayOffsetInterval": 1}
    config = StoreConfig(settings)
    _backlog(path, config, count)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    code = CRASH_CHILD.format(settings=settings, wait=3 * UNITS_PER_ROUND)
    child = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr
    persisted = _delay_offsets(path).get(1, 0)
    assert 0 < persisted < count, (persisted, child.stdout)
    copies = _copies(path, config)
    assert set(copies) == {b"m%d" % i for i in range(count)}  # none lost
    twice = sorted(int(body[1:]) for body, n in copies.items() if n > 1)
    assert all(n <= 2 for n in copies.values())
    assert twice == list(range(persisted, persisted + len(twice)))  # exactly those after the persisted offset
    assert len(twice) <= 2 * UNITS_PER_ROUND


def test_the_offsets_are_persisted_on_their_interval_within_a_turn(make_store, store_config) -> None:
    """flushDelayOffsetInterval holds inside a level's turn too: the offsets were written only
    after a whole turn (up to UNITS_PER_ROUND units), so a process killed during turns of a
    backlog saved nothing of them, and delivered the same units again at every restart. With a
    clock 10 ms on at each reading and an interval of 1 ms, each delivery finds the offset of the
    one before it on disk."""
    store = make_store(config=store_config.copy(flushDelayOffsetInterval=1))
    service = _stopped(store)
    root = Path(store.root)
    for _ in range(5):
        assert store.put(_delayed(level="1"), 1).ok
    assert store.wait_for_dispatch()
    ticks = itertools.count(int(time.time() * 1000) + 5000, 10)
    service.clock = lambda: next(ticks) / 1000
    seen, put = [], service.put

    def recording_put(message: Message, queue_id: int):
        seen.append(_delay_offsets(root).get(1, 0) if (root / "config" / "delayOffset.json").exists() else 0)
        return put(message, queue_id)

    service.put = recording_put
    assert service.run_once() == 5
    assert seen == [0, 1, 2, 3, 4]
    assert _delay_offsets(root) == {1: 5}


def test_a_clock_stepping_back_does_not_hold_a_level(make_store, store_config) -> None:
    """The wall clock steps back an hour: a level is still looked at within its usual 100 ms (its
    next look was set by the old clock), and a message whose delivery time is now more than its
    delay ahead is due at once, as RocketMQ's correctDeliverTimestamp has it."""
    store = make_store(config=store_config.copy(messageDelayLevel="1s 10s"))
    service = _stopped(store)
    put = store.put(_delayed(level="2"), 1)
    assert put.ok and store.wait_for_dispatch()
    back = put.store_timestamp / 1000 - 3600
    service.clock = lambda: back
    assert service.run_once() == 1
    assert [m.body for m in _real(store).messages] == [b"later"]
    assert _delay_offsets(Path(store.root)) == {2: 1}  # persisted: the interval is not an hour longer either
    # a level waiting on a message looks at it again within 100 ms, whatever the clock does
    second = store.put(_delayed(level="2"), 1)
    assert second.ok and store.wait_for_dispatch()
    service.clock = lambda: second.store_timestamp / 1000
    assert service.run_once() == 0
    assert service.levels[2].due_at <= second.store_timestamp + 100


class _PutDuringTurn:
    """The store's consume queues, putting ``message`` just before level ``level``'s turn finds its
    queue: a producer storing a delayed message while the round goes on."""

    def __init__(self, store: MessageStore, level: int, message: Message) -> None:
        self._store, self._level, self._message = store, level, message
        self.stored_at = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._store.queues, name)

    def find(self, topic: str, queue_id: int):
        if topic == SCHEDULE_TOPIC and queue_id == self._level - 1 and not self.stored_at:
            started = int(time.time() * 1000)
            while int(time.time() * 1000) == started:  # the message is stored after the round began
                pass
            result = self._store.put(self._message, 1)
            assert result.ok and self._store.wait_for_dispatch()
            self.stored_at = result.store_timestamp
        return self._store.queues.find(topic, queue_id)


def test_a_message_stored_during_a_round_waits_its_whole_delay(make_store, store_config) -> None:
    """Each unit is judged by the clock read for it: a level-2 message stored while an earlier
    level took its turn is not taken for a delivery time 'too far ahead' and delivered at once."""
    store = make_store(config=store_config.copy(messageDelayLevel="1s 10s"))
    service = _stopped(store)
    hook = _PutDuringTurn(store, 2, _delayed(level="2"))
    service.queues = hook
    for stats in service.levels.values():
        stats.due_at = 0
    assert service.run_once() == 0 and hook.stored_at
    assert _real(store).messages == []
    assert service.run_once(now=hook.stored_at + 9_999) == 0
    assert service.run_once(now=hook.stored_at + 10_000) == 1


def test_a_delayed_message_makes_its_real_topic_and_queue_at_once(make_store, store_config, tmp_path) -> None:
    """RocketMQ's broker creates (or widens) the topic a message is sent to before the store turns a
    delayed one into a SCHEDULE_TOPIC_XXXX record: the topic exists, with the queue asked for, while
    the message waits, so a consumer polling it finds no messages rather than no topic."""
    store = make_store(config=store_config.copy(messageDelayLevel="1h"))
    _stopped(store)
    assert store.put(_delayed("Later", "1"), queue_id=6).ok
    store.shutdown()
    topics = json.loads((tmp_path / "store" / "config" / "topics.json").read_text())["topicConfigTable"]
    assert topics["Later"]["writeQueueNums"] == 7 and topics["Later"]["readQueueNums"] == 7, topics.get("Later")


def test_a_message_delayed_while_the_clock_is_behind_the_log_waits_its_delay(make_store, store_config) -> None:
    """A log whose newest record is ahead of the clock (a clock stepped back) stamps new records
    with that time, so their due time (store time + delay) is more than the delay ahead of the
    clock: RocketMQ's correctDeliverTimestamp took that for a time too far ahead and delivered
    them at once, their delay ignored. They are due by the clock at their put, as RocketMQ's
    records (stamped by the clock) are; a unit due too far ahead otherwise is still delivered at once
    (test_a_clock_stepping_back_does_not_hold_a_level)."""
    store = make_store(config=store_config.copy(messageDelayLevel="10s"))
    service = _stopped(store)
    clock = int(time.time() * 1000)
    store.commit_log.store_times_from(clock + 120_000)  # the log's newest record: 2 minutes ahead
    put = store.put(_delayed("Later", "1"))
    after = int(time.time() * 1000)
    assert put.ok and put.store_timestamp == clock + 120_000
    store.wait_for_dispatch()
    assert service.run_once(now=clock + 1_000) == 0  # not delivered at once
    assert service.run_once(now=clock + 9_999) == 0
    assert service.run_once(now=after + 10_000) == 1
    store.wait_for_dispatch()
    assert [m.body for m in _all(store, "Later", 0)] == [b"later"]
    assert store.commit_log.due_by_clock == {}  # taken out once delivered


def test_a_clock_note_of_another_record_at_the_same_offset_is_not_used(make_store, store_config) -> None:
    """A note of a due time by the clock applies to the unit it was made for (same tags code) only:
    one left behind for a record since gone (cleaned, a queue made again) must not make another
    record put at that offset due early."""
    store = make_store(config=store_config.copy(messageDelayLevel="10s"))
    service = _stopped(store)
    put = store.put(_delayed("Later", "1"))
    assert put.ok and store.wait_for_dispatch()
    due = put.store_timestamp + 10_000
    store.commit_log.due_by_clock[put.commit_log_offset] = (due + 1, 0)  # another record's note
    assert service.run_once(now=due - 1) == 0
    store.commit_log.due_by_clock[put.commit_log_offset] = (due, due - 5_000)  # its own: due by the clock
    assert service.run_once(now=due - 5_000) == 1
