"""Stores damaged the ways disks and operators damage them (found by a review acting as a hostile
file system): each opens as RocketMQ 4.9 would open it, or is refused with a typed error that
names the file, and ``verify`` says what is wrong."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.codec import record as rec
from rocketstore.codec.crc import body_crc
from rocketstore.errors import CorruptStoreError, StoreFileError
from rocketstore.export import iter_queued
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.verify import verify_store
from rocketstore.verify.recovery_plan import plan_recovery
from test_cli import SRC
from test_verify_live import HOLD_LOCK


def _put(store: MessageStore, count: int, start: int = 0) -> list[int]:
    offsets = [store.put(Message("T", b"m%d" % i, keys=f"k{i}"), i % 2).commit_log_offset for i in range(start, count)]
    assert store.wait_for_dispatch()
    return offsets


def _written(make_store, count: int) -> list[int]:
    """A store with ``count`` messages, shut down; their commit-log offsets."""
    store = make_store()
    offsets = _put(store, count)
    store.shutdown()
    return offsets


def _index_files(root: Path) -> list[Path]:
    return sorted((root / "index").iterdir())


def _set_header_int(path: Path, at: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(">i", value))


def _found(store: MessageStore, key: str) -> list[int]:
    return [m.commit_log_offset for m in store.query_message("T", key).messages]


def test_an_index_header_counting_past_the_file_is_read_as_full(make_store, tmp_path, store_config) -> None:
    """indexCount over maxIndexNum (the open crashed reading past the file): RocketMQ finds such
    a file full and goes on in a new one; the keys before stay found."""
    root = tmp_path / "store"
    offsets = _written(make_store, 20)
    _set_header_int(_index_files(root)[-1], 36, store_config.max_index_num + 1)
    store = make_store()
    assert _found(store, "k3") == [offsets[3]]
    late = _put(store, 21, 20)
    assert _found(store, "k20") == late
    assert len(_index_files(root)) == 2


def test_a_crash_rebuilds_the_index_from_the_first_file_not_known_whole(make_store, tmp_path, store_config) -> None:
    """After a crash an index file that fails its checks (a damaged header) is dropped with every
    later one and rebuilt: dropping a middle file alone lost its keys for good."""
    root = tmp_path / "store"
    offsets = _written(make_store, 220)
    files = _index_files(root)
    assert len(files) >= 4  # the damaged one has full, trusted files after it
    _set_header_int(files[1], 32, store_config.max_hash_slot_num + 1)  # hashSlotCount out of range
    (root / "abort").write_bytes(b"")  # as a crash leaves it
    store = make_store()
    assert [i for i in range(220) if _found(store, f"k{i}") != [offsets[i]]] == []
    store.shutdown()
    assert verify_store(root, store_config).ok


def test_reopening_adds_no_index_entry_for_a_record_split_over_two_files(make_store, tmp_path, store_config) -> None:
    """Every normal open dispatches the last record again; when its keys were split over the last
    two index files (the first filled up), none of them is added a second time."""
    root = tmp_path / "store"
    per_file = store_config.max_index_num - 1
    _written(make_store, per_file // 2 + 1)  # two keys each: the last record's second key opens a new file
    counts = [(path.read_bytes()[36:40]) for path in _index_files(root)]
    assert len(counts) == 2 and struct.unpack(">i", counts[1])[0] == 2
    for _ in range(2):
        MessageStore.open(root, store_config).shutdown()
        assert [(path.read_bytes()[36:40]) for path in _index_files(root)] == counts


def test_a_short_checkpoint_reads_as_zeros(make_store, tmp_path, store_config: StoreConfig) -> None:
    """RocketMQ maps the checkpoint at full size, so a short one reads as zero timestamps: the
    store opens (a recovery after a crash then walks the whole log) and it is written whole again."""
    root = tmp_path / "store"
    offsets = _written(make_store, 30)
    for content in (b"", b"short"):
        (root / "checkpoint").write_bytes(content)
        (root / "abort").write_bytes(b"")
        with MessageStore.open(root, store_config) as store:
            assert _found(store, "k29") == [offsets[29]]
            assert store.get_max_offset_in_queue("T", 1) == 15
        assert (root / "checkpoint").stat().st_size == 4096


def test_a_short_checkpoint_is_read_as_far_as_it_goes(tmp_path, caplog) -> None:
    """Only the missing bytes read as zeros: the fields (and the part of one) the file holds are
    read, and the warning says so (it said the file read as zeros)."""
    physic, logics = 1_700_000_000_123, 1_700_000_000_456
    path = tmp_path / "checkpoint"
    path.write_bytes(struct.pack(">qq", physic, logics)[:12])
    checkpoint = StoreCheckpoint(str(path))
    assert checkpoint.physic_msg_timestamp == physic
    assert checkpoint.logics_msg_timestamp == logics & ~0xFFFFFFFF  # its low half is missing
    assert checkpoint.index_msg_timestamp == 0
    [warning] = [r.getMessage() for r in caplog.records]
    assert "holds 12 bytes of its 40: those are read, the missing 28 as zeros" in warning


@pytest.mark.parametrize(
    ("entry", "made"),
    [
        ("lock", "folder"),
        ("abort", "folder"),
        ("checkpoint", "folder"),
        ("consumequeue", "file"),
        ("index", "file"),
        ("config/topics.json", "folder"),
        ("config/consumerOffset.json.bak", "folder"),
    ],
)
def test_a_store_entry_of_the_wrong_kind_is_named(make_store, tmp_path, store_config, entry, made) -> None:
    """A folder where ``lock``, ``abort``, ``checkpoint`` or a config file belongs, or a file where
    ``consumequeue`` or ``index`` does: the open is refused naming it (not a raw OSError), and
    verify reports it. A config file that is a folder opened as an empty config, and the shutdown
    then failed (leaving ``abort``)."""
    root = tmp_path / "store"
    _written(make_store, 3)
    path = root / entry
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.mkdir() if made == "folder" else path.write_bytes(b"x")
    with pytest.raises(CorruptStoreError, match="should be") as info:
        MessageStore.open(root, store_config)
    assert info.value.path == str(path)
    report = verify_store(root, store_config)
    assert not report.ok and any(p.startswith(f"{entry}: should be") for p in report.problems)


def test_an_open_cut_short_by_recovery_leaves_abort(make_store, tmp_path, store_config) -> None:
    """``abort`` is written before recovery changes files: an open that fails (or a power cut)
    while it rebuilds the queues leaves it, and the next open recovers as after a crash."""
    root = tmp_path / "store"
    store = make_store()
    for topic in ("A", "T"):
        store.put(Message(topic, b"x"))
    store.shutdown()
    shutil.rmtree(root / "consumequeue")  # every queue is rebuilt from the log by the open
    (root / "consumequeue").mkdir()
    (root / "consumequeue" / "T").write_bytes(b"")  # where T's queues go: rebuilding fails there
    with pytest.raises(StoreFileError, match="consumequeue/T"):
        MessageStore.open(root, store_config)
    assert (root / "abort").exists()
    (root / "consumequeue" / "T").unlink()
    with MessageStore.open(root, store_config) as store:
        assert store.recovery.abnormal
        assert store.get_max_offset_in_queue("T", 0) == 1


def test_a_log_cut_drops_an_empty_index_file_that_carries_the_cut_records(make_store, tmp_path, store_config) -> None:
    """RocketMQ leaves an empty index file after a full one (made for a record with no keys); its
    header carries the full file's end. A recovery that cuts the log inside the full file drops
    both and indexes the kept records again (the empty file hid them, and the records after)."""
    root = tmp_path / "store"
    config = store_config.copy(maxIndexNum=31, maxHashSlotNum=8, mappedFileSizeCommitLog=65536)
    store = make_store(config=config)
    offsets = _put(store, 15)  # 30 entries: the first file is full
    store.shutdown()
    (full,) = _index_files(root)
    header = full.read_bytes()[:40]
    empty = bytearray(len(full.read_bytes()))
    empty[:32] = header[8:16] * 2 + header[24:32] * 2  # begin/end time and offset: the full file's ends
    (root / "index" / str(int(full.name) + 1)).write_bytes(empty)
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:  # record 10's body fails its CRC
        f.seek(offsets[10] + 88)
        byte = f.read(1)[0]
        f.seek(offsets[10] + 88)
        f.write(bytes([byte ^ 0xFF]))
    store = make_store(config=config)
    assert store.max_phy_offset == offsets[10]
    assert [i for i in range(10) if _found(store, f"k{i}") != [offsets[i]]] == []
    again = _put(store, 14, 10)
    assert [i for i in range(10, 14) if _found(store, f"k{i}") != [again[i - 10]]] == []


@pytest.mark.parametrize("crash", [False, True])
def test_store_times_never_go_back_across_a_reopen(make_store, tmp_path, store_config, crash) -> None:
    """Within a run a store time is never below the one before (a clock stepped back stamps the
    last one again); after a reopen it started from the clock, so a clock found behind the log
    stamped new records earlier than the kept ones, and the next abnormal recovery, which picks its
    first segment by store time, could start past unflushed data. It goes on from the newest kept.
    (The clock behind the log is made by moving the last record's time ahead, a field no CRC covers.)"""
    store = make_store()
    last = [store.put(Message("T", b"m%d" % i), 0) for i in range(5)][-1]
    store.shutdown()
    ahead = int(time.time() * 1000) + 3_600_000
    segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(last.commit_log_offset + rec.store_timestamp_position(0))
        f.write(struct.pack(">q", ahead))
    if crash:
        (tmp_path / "store" / "abort").touch()
    store = make_store()
    put = store.put(Message("T", b"after"), 0)
    assert store.look_message_by_offset(put.commit_log_offset).store_timestamp >= ahead


def test_a_full_last_index_file_ending_in_the_checkpoints_millisecond_is_rebuilt_after_a_crash(
    make_store, tmp_path, store_config
) -> None:
    """One batch (one store time) fills two index files: both end in the millisecond the checkpoint
    names, which the first set when the second was made, so the second passed for flushed whole.
    A full file is flushed only when the next is made: after a crash the last one is rebuilt."""
    config = store_config.copy(mappedFileSizeCommitLog=65536)
    store = make_store(config=config)
    per_file = store_config.max_index_num - 1  # entries a file holds (counted from 1)
    batch = [Message("T", b"m%d" % i, keys=f"k{i}") for i in range(per_file)]  # 2 entries each
    put = store.put_batch(batch, 0)
    assert put.ok and store.wait_for_dispatch()
    first, second = store.index.files
    assert first.is_write_full() and second.is_write_full() and first.end_timestamp == second.end_timestamp
    store.shutdown()
    # the crash: the second file's pages of entries were never written (a power cut took them)
    entries_at = 40 + store_config.max_hash_slot_num * 4
    with open(second.path, "r+b") as f:
        f.seek(entries_at + 20 * 20)
        f.write(bytes(20 * 80))
    (tmp_path / "store" / "abort").touch()
    store = make_store(config=config)
    missing = [i for i in range(per_file) if not _found(store, f"k{i}")]
    assert missing == []


def test_a_power_cut_taking_every_record_leaves_no_checkpoint_time_ahead(make_store, tmp_path, store_config) -> None:
    """ASYNC_FLUSH: the consume queues were flushed (the checkpoint names their store time) but the
    log was not, and the power cut takes every record. Recovery brings the checkpoint's times back
    to the data kept, none (it did so only when some record was kept)."""
    root = tmp_path / "store"
    _written(make_store, 4)
    (root / "abort").write_bytes(b"")  # the crash
    for segment in (root / "commitlog").iterdir():  # nothing of the log was on disk
        segment.write_bytes(bytes(segment.stat().st_size))
    assert verify_store(root, store_config).notes  # abort: the checkpoint ahead is only noted
    with MessageStore.open(root, store_config) as store:
        assert store.recovery.abnormal and store.max_phy_offset == 0
        assert (store.checkpoint.physic_msg_timestamp, store.checkpoint.logics_msg_timestamp) == (0, 0)
    report = verify_store(root, store_config)
    assert report.ok, report.problems


def test_a_record_with_a_negative_queue_id_is_queued_in_its_own_topic(make_store, tmp_path, store_config) -> None:
    """A damaged QUEUEID read as a negative int: the record is dispatched to its own topic under
    that queue id, as Java names the folder by its int; it went to another topic's queue (the sign
    spilt over the topic bits) under the unsigned number, where consumers of that topic got it."""
    store = make_store()
    phys = [store.put(Message("AB"[i % 2], b"m%d" % i), 0).commit_log_offset for i in range(20)]
    store.shutdown()
    damaged = phys[4]  # a record of topic A
    with open(tmp_path / "store" / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(damaged + 12)  # QUEUEID
        f.write(struct.pack(">i", -16777216))
    shutil.rmtree(tmp_path / "store" / "consumequeue")  # rebuilt from the log by the next open
    store = make_store()
    assert store.queue_ids() == {"A": [-16777216, 0], "B": [0]}
    queue = store.queues.find("A", -16777216)
    assert queue is not None and queue.max_physic_offset > damaged  # its unit is there, the only one
    assert damaged not in [m.commit_log_offset for m in store.get_message("g", "B", 0, 0).messages]
    store.shutdown()
    reopened = make_store()  # the folder Java would name, "-16777216", loads again
    assert reopened.queue_ids() == {"A": [-16777216, 0], "B": [0]}


@pytest.mark.parametrize("first", [b"/", b"\0"])
def test_a_damaged_topic_that_is_no_folder_name_is_not_queued(make_store, tmp_path, store_config, first) -> None:
    """A topic byte damaged into "/" made the name an absolute path: recovery's check of the queues
    made its folder at the file system's root (os.path.join starts over at "/"); a NUL made the open
    and the export fail with a bare ValueError. Such a record is not queued (verify names it), every
    other message is read as before, and nothing is made outside the store."""
    topic = "Z" + os.urandom(4).hex()  # its damaged name, "/" + the rest, is no folder anyone has
    escaped = Path("/" + topic[1:])
    store = make_store()
    phys = [store.put(Message(topic if i == 15 else "T", b"m%d" % i), 0).commit_log_offset for i in range(20)]
    store.shutdown()
    segment = max((tmp_path / "store" / "commitlog").iterdir())  # the last one, which recovery walks
    base = int(segment.name)
    assert base <= phys[15]
    raw = segment.read_bytes()
    at = raw.index(bytes([len(topic)]) + topic.encode(), phys[15] - base) + 1
    try:
        with open(segment, "r+b") as f:
            f.seek(at)
            f.write(first)
        store = make_store()
        assert not escaped.exists()
        got = [m.body for m, *_ in iter_queued(store, ["T"]) if m is not None]
        assert got == [b"m%d" % i for i in range(20) if i != 15]
        assert sorted(store.queue_ids()) == sorted(["T", topic])  # no queue of the damaged name
        store.shutdown()
        assert not escaped.exists() and not verify_store(tmp_path / "store", store_config).ok
        shutil.rmtree(tmp_path / "store" / "consumequeue")  # a rebuild dispatches the whole log
        store = make_store()
        assert [m.body for m, *_ in iter_queued(store)] == [b"m%d" % i for i in range(20) if i != 15]
        assert not escaped.exists() and sorted(store.queue_ids()) == ["T"]
    finally:
        if escaped.is_dir():
            shutil.rmtree(escaped)


def test_dispatch_of_a_few_records_queues_none_of_a_topic_that_names_no_folder(make_store, tmp_path) -> None:
    """The record-by-record dispatch (a handful of requests, as a quiet store's reput gives) skips
    them too, and the others of the round are queued."""
    store = make_store()
    # (topic, queueId, offset, size, tagsCode, storeTimestamp, queueOffset, KEYS, UNIQ_KEY, sysFlag)
    later = 2 * 10**12  # the unqueued record's time: the checkpoint's queue time is not moved to it
    requests = [("T", 0, 0, 60, 0, 10**12, 0, None, None, 0), ("/Tx", 0, 60, 60, 0, later, 0, None, None, 0)]
    store.dispatcher.dispatch(requests)
    assert store.queue_ids() == {"T": [0]} and not Path("/Tx").exists()
    assert store.checkpoint.logics_dispatched_timestamp == 10**12


def test_only_names_that_are_one_folder_can_be_a_queues_folder() -> None:
    from rocketstore.codec.topic import queue_folder_ok

    assert all(map(queue_folder_ok, ["T", "%RETRY%g", "SCHEDULE_TOPIC_XXXX", "a.b", "x" * 255, "\ufffdopic"]))
    assert not any(map(queue_folder_ok, ["", ".", "..", "/T", "T/x", "a\0b", "x" * 256, "\u00e9" * 128]))


def _field_at(path: Path, record: int, field: str) -> tuple[int, str]:
    """Where a record's BODYLEN, topic length or properties length lies (IPv4 hosts, V1), with its
    struct format."""
    raw = path.read_bytes()
    body_len = struct.unpack_from(">i", raw, record + 84)[0]
    topic_len_at = record + 88 + body_len
    if field == "body":
        return record + 84, ">i"
    if field == "topic":
        return topic_len_at, ">B"
    return topic_len_at + 1 + raw[topic_len_at], ">h"


@pytest.mark.parametrize(("field", "value"), [("body", -(2**31) + 7), ("body", -1), ("topic", 200), ("properties", -3)])
def test_a_negative_field_length_makes_a_bad_record(make_store, tmp_path, store_config, field, value) -> None:
    """A negative BODYLEN (a flipped sign bit) or properties length, or a topic length over 127,
    in an otherwise intact record: the record fails its checks as in RocketMQ's
    checkMessageAndReturnSize, so verify reports it and every open cuts the log there. A negative
    BODYLEN made the scan read before the buffer: an IndexError from every open and from verify."""
    root = tmp_path / "store"
    offsets = _written(make_store, 20)
    segment = root / "commitlog" / f"{0:020d}"
    at, fmt = _field_at(segment, offsets[15], field)
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(fmt, value))
    report = verify_store(root, store_config)
    assert not report.ok and any(f"(offset {offsets[15]})" in p for p in report.problems), report.problems
    shutil.copytree(root, tmp_path / "crashed")
    (tmp_path / "crashed" / "abort").write_bytes(b"")
    with MessageStore.open(root, store_config, read_only=True) as view:
        assert view.max_phy_offset == offsets[15]
    for name in ("store", "crashed"):
        store = make_store(name)
        assert store.max_phy_offset == offsets[15]
        assert store.get_max_offset_in_queue("T", 1) == 7  # records 1, 3, ..., 13 are kept
        assert _found(store, "k14") == [offsets[14]] and _found(store, "k15") == []


@pytest.mark.parametrize("size", [0, 1000])
def test_a_crash_rebuilds_an_index_file_of_the_wrong_size(make_store, tmp_path, store_config, size) -> None:
    """After a crash an index file cut short (zero-length, a torn extension) is not known whole:
    it is dropped with every later one and rebuilt, as a stale one is (RocketMQ maps it at full
    size). The open was refused. After a clean exit the wrong size is still refused, naming it."""
    root = tmp_path / "store"
    offsets = _written(make_store, 220)
    files = _index_files(root)
    assert len(files) >= 4
    with open(files[1], "r+b") as f:
        f.truncate(size)
    with pytest.raises(CorruptStoreError, match="index file is") as info:
        MessageStore.open(root, store_config)
    assert info.value.path == str(files[1])
    (root / "abort").write_bytes(b"")  # as a crash leaves it
    with MessageStore.open(root, store_config, read_only=True) as view:
        assert [i for i in range(220) if _found(view, f"k{i}") != [offsets[i]]] == []
    assert files[1].stat().st_size == size  # a read-only open changes nothing
    store = make_store()
    assert [i for i in range(220) if _found(store, f"k{i}") != [offsets[i]]] == []
    store.shutdown()
    assert verify_store(root, store_config).ok


def _set_header_long(path: Path, at: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(">q", value))


_HEADER_DAMAGE = {
    "random": lambda path, config: path.write_bytes(random.Random(7).randbytes(40) + path.read_bytes()[40:]),
    "beginTimestamp": lambda path, config: _set_header_long(path, 0, 1_000_000),
    "endPhyOffset": lambda path, config: _set_header_long(path, 24, 2**40),
    "beginPhyOffset": lambda path, config: _set_header_long(path, 16, 7),
    "hashSlotCount": lambda path, config: _set_header_int(path, 32, config.max_hash_slot_num + 1),
}


@pytest.mark.parametrize("which", [1, -1])
@pytest.mark.parametrize("damage", sorted(_HEADER_DAMAGE))
def test_a_damaged_index_header_is_rebuilt_after_a_clean_exit(
    make_store, tmp_path, store_config, damage, which
) -> None:
    """An index header that contradicts itself or its entries (garbage, or a field changed) after
    a clean exit: the file is dropped with every later one and recovery indexes their records
    again, as after a crash. It was trusted, and queries missed keys (or every later key). Verify,
    before the open, names the file."""
    root = tmp_path / "store"
    offsets = _written(make_store, 220)
    files = _index_files(root)
    assert len(files) >= 4
    _HEADER_DAMAGE[damage](files[which], store_config)
    assert any(files[which].name in p for p in verify_store(root, store_config).problems)
    store = make_store()
    assert [i for i in range(220) if _found(store, f"k{i}") != [offsets[i]]] == []
    late = _put(store, 230, 220)
    assert [i for i in range(220, 230) if _found(store, f"k{i}") != [late[i - 220]]] == []
    store.shutdown()
    assert verify_store(root, store_config).ok


def test_reput_skips_only_a_record_whose_lengths_do_not_add_up(make_store, store_config) -> None:
    """A record damaged while the store runs whose TOTALSIZE holds but whose body length does not
    agree with it: RocketMQ's reput logs "[BUG]" and skips that record alone (spec 12.7); the
    records after it are dispatched."""
    store = make_store(config=store_config.copy(mappedFileSizeCommitLog=1 << 20))
    _put(store, 1)
    with store.reput.lock:  # dispatch waits while the records are put and one is damaged
        results = [store.put(Message("T", b"a" * 50)) for _ in range(4)]
        store.commit_log.take_handoff()  # dispatch reads them back from the log
        segment = store.commit_log.queue.files[0]
        at = results[1].commit_log_offset + 84  # BODYLEN (IPv4 hosts)
        segment.mm[at : at + 4] = struct.pack(">i", struct.unpack_from(">i", segment.mm, at)[0] - 1)
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("T", 0) == 4
    got = store.get_message("g", "T", 0, 1, 8).messages
    assert [m.commit_log_offset for m in got] == [
        results[0].commit_log_offset,
        *[r.commit_log_offset for r in results[2:]],
    ]
    assert store.reput.skipped_bad_bytes == results[2].commit_log_offset - results[1].commit_log_offset


@pytest.mark.parametrize("read_only", [False, True], ids=["open", "read-only"])
def test_records_dropped_past_a_zeroed_one_are_warned_about(
    make_store, tmp_path, store_config, caplog, read_only
) -> None:
    """Zeros where a record was end the log, as in RocketMQ, and the later segments go with it:
    recovery says so, naming them, rather than dropping written records in silence (a read-only
    open, ``inspect``'s, warns too). Segments made ahead and never written are dropped quietly."""
    offsets = _written(make_store, 120)
    size = store_config.mapped_file_size_commit_log
    cut = next(o for o in offsets if o >= 2 * size)  # in the first of the 3 segments recovery checks
    segments = sorted((tmp_path / "store" / "commitlog").iterdir())
    later = [p.name for p in segments if int(p.name) > cut]
    assert later
    with open(segments[cut // size], "r+b") as f:
        f.seek(cut % size)
        f.write(bytes(8))
    with caplog.at_level("WARNING", logger="rocketstore.log.recovery"):
        store = make_store(read_only=read_only)
    assert store.max_phy_offset == cut
    warned = [r.getMessage() for r in caplog.records if "later segment(s) holding records" in r.getMessage()]
    assert len(warned) == 1 and all(name in warned[0] for name in later), warned


def test_a_read_only_view_of_a_store_in_use_does_not_warn_of_dropped_records(
    make_store, tmp_path, store_config, caplog
) -> None:
    """The same layout seen by a read-only open while a process holds the store is what a writer
    rolling to its next segment between two mappings leaves (a Spark trigger beside a producer):
    said at INFO, as what this view sees, not warned about as records dropped."""
    offsets = _written(make_store, 120)
    size = store_config.mapped_file_size_commit_log
    cut = next(o for o in offsets if o >= 2 * size)
    segments = sorted((tmp_path / "store" / "commitlog").iterdir())
    with open(segments[cut // size], "r+b") as f:
        f.seek(cut % size)
        f.write(bytes(8))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / "store" / "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with caplog.at_level("INFO", logger="rocketstore.log.recovery"):
            store = make_store(read_only=True)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    assert store.max_phy_offset == cut
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "has written past it" in r.getMessage()]
    assert len(said) == 1 and said[0][0] == "INFO", said
    assert not [r for r in caplog.records if r.levelname == "WARNING" and "dropped" in r.getMessage()]


def test_segments_made_ahead_are_dropped_without_a_warning(make_store, tmp_path, store_config, caplog) -> None:
    store = make_store()
    _put(store, 3)
    store.shutdown()
    ahead = tmp_path / "store" / "commitlog" / f"{store_config.mapped_file_size_commit_log:020d}"
    ahead.write_bytes(bytes(store_config.mapped_file_size_commit_log))
    (tmp_path / "store" / "abort").touch()
    with caplog.at_level("WARNING", logger="rocketstore.log.recovery"):
        store = make_store()
    assert store.recovery.dropped_files == [ahead.name]
    assert not [r for r in caplog.records if "later segment" in r.getMessage()]


@pytest.mark.parametrize("value", [-1, -(2**31)])
def test_an_empty_body_with_a_negative_length_is_an_empty_body(make_store, tmp_path, store_config, value) -> None:
    """Java reads a body only when BODYLEN is positive and counts max(BODYLEN, 0) in the record's
    length: an empty body whose BODYLEN reads negative is a valid record to RocketMQ, whose
    recovery goes on past it. Every open here did the same, rather than cut the log (and the
    records after it) there; the record reads as an empty body."""
    root = tmp_path / "store"
    store = make_store()
    offsets = [
        store.put(Message("T", b"" if i == 15 else b"m%d" % i, keys=f"k{i}")).commit_log_offset for i in range(20)
    ]
    store.shutdown()
    segment = root / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(offsets[15] + 84)
        assert f.read(4) == bytes(4)
        f.seek(offsets[15] + 84)
        f.write(struct.pack(">i", value))
    shutil.copytree(root, tmp_path / "crashed")
    (tmp_path / "crashed" / "abort").write_bytes(b"")
    with MessageStore.open(root, store_config, read_only=True) as view:
        assert view.max_phy_offset == offsets[-1] + view.look_message_by_offset(offsets[-1]).store_size
    for name in ("store", "crashed"):
        store = make_store(name)
        assert store.get_max_offset_in_queue("T", 0) == 20
        got = store.get_message("g", "T", 0, 15, 1).messages
        assert [(m.commit_log_offset, m.body, m.body_len) for m in got] == [(offsets[15], b"", 0)]
        assert _found(store, "k19") == [offsets[19]]
        store.shutdown()
        assert verify_store(tmp_path / name, store_config).ok


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_an_end_of_file_marker_in_the_last_segment_ends_the_log_there(
    make_store, tmp_path, store_config, crashed
) -> None:
    """RocketMQ's recovery, meeting the BLANK marker with no segment after it, ends the log at the
    marker (its queues cut there, the next record written there). The end used to be the
    segment's end: after a clean exit the records past the marker were still served (and verify
    found their units pointing at no record); after a crash their units were cut but the log
    still ended at the segment's end, the next put going to a new segment."""
    root = tmp_path / "store"
    offsets = _written(make_store, 70)
    size = store_config.mapped_file_size_commit_log
    last = max(offsets) - max(offsets) % size
    inside = [o for o in offsets if o >= last]
    assert len(inside) >= 4
    marker = inside[2]
    with open(root / "commitlog" / f"{last:020d}", "r+b") as f:
        f.seek(marker % size)
        f.write(struct.pack(">ii", size - marker % size, -875286124))  # BLANK_MAGIC_CODE 0xCBD43194
    if crashed:
        (root / "abort").write_bytes(b"")
    kept = offsets.index(marker)
    with MessageStore.open(root, store_config, read_only=True) as view:
        assert view.max_phy_offset == marker
        assert view.look_message_by_offset(inside[3]) is None
    store = make_store()
    assert store.max_phy_offset == marker
    assert store.get_max_offset_in_queue("T", 0) + store.get_max_offset_in_queue("T", 1) == kept
    assert _found(store, f"k{kept + 1}") == []
    assert store.put(Message("T", b"next")).commit_log_offset == marker
    store.shutdown()
    assert verify_store(root, store_config).ok


def test_one_consume_queue_file_of_another_size_is_damage_not_a_size_setting(make_store, tmp_path) -> None:
    """A consume-queue file cut short beside files of the configured size: the open called the
    setting wrong ("set mappedFileSizeConsumeQueue=100"), which would make every other file wrong."""
    store = make_store()
    _put(store, 50)  # 200-byte consume-queue files hold 10 units: three files for queue 0
    store.shutdown()
    last = sorted((tmp_path / "store" / "consumequeue" / "T" / "0").iterdir())[-1]
    os.truncate(last, 100)
    with pytest.raises(CorruptStoreError) as caught:
        make_store()
    text = str(caught.value)
    assert "the other segments beside it 200" in text and "cut short" in text, text
    assert "mappedFileSizeConsumeQueue=100" not in text, text


def test_a_last_unit_pointing_back_is_not_answered_with_the_queue_again(make_store, tmp_path) -> None:
    """After a clean exit the log is dispatched again from the queues' furthest end: a queue whose
    records all come after it and whose last unit points back (at a record of another queue) got
    the units of queue offsets 0.. it holds appended again past its end (one bad unit became a
    run of duplicates; new messages' queue offsets skipped ahead). RocketMQ, checking unit by
    unit, would add one."""
    store = make_store()
    first = [store.put(Message("T", b"a%d" % i), 0).commit_log_offset for i in range(25)]
    for i in range(25):  # queue 1: 25 units, the last in its third 200-byte file
        store.put(Message("T", b"b%d" % i), 1).raise_for_status()
    store.shutdown()
    last = sorted((tmp_path / "store" / "consumequeue" / "T" / "1").iterdir())[-1]
    with open(last, "r+b") as f:
        f.seek(4 * 20)
        f.write(struct.pack(">qiq", first[0], first[1] - first[0], 0))  # queue 0's first record
    store = make_store()
    assert store.get_max_offset_in_queue("T", 1) == 25
    assert store.put(Message("T", b"new"), 1).queue_offset == 25
    assert store.wait_for_dispatch()
    got, offset = [], 0
    while offset < 26:
        result = store.get_message("g", "T", 1, offset, 32)
        got += [m.body for m in result.messages]
        offset = result.next_begin_offset
    assert got == [b"b%d" % i for i in range(24)] + [b"a0", b"new"]  # unit 24 as it was: verify names it


def _fill_segment_to_its_end(root: Path, offsets: list[int], size: int, cq_size: int, short: int = 0) -> int:
    """Lengthen the body of segment 0's last record so that it ends exactly at the segment's end,
    where the BLANK marker was (a writer always leaves room for one; a hand-made or damaged store
    may not). Its consume-queue unit follows (topic T, queue ``index % 2`` as ``_put`` spreads
    them). Returns that record's index in ``offsets``."""
    last = max(i for i, o in enumerate(offsets) if o < size)
    segment = root / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    at = offsets[last]
    (total,) = struct.unpack_from(">i", data, at)
    (body_len,) = struct.unpack_from(">i", data, at + 84)
    record = data[at : at + total]
    body = bytes(record[88 : 88 + body_len]) + b"y" * (size - at - total - short)
    longer = record[:88] + body + record[88 + body_len :]
    struct.pack_into(">i", longer, 0, len(longer))
    struct.pack_into(">i", longer, 84, len(body))
    struct.pack_into(">i", longer, 8, body_crc(body))
    data[at:size] = longer + b"\x01" * short  # ``short`` bytes left: too few for a BLANK marker
    segment.write_bytes(bytes(data))
    unit_at = last // 2 * 20  # the unit's place in its queue
    file_at = unit_at - unit_at % cq_size
    with open(root / "consumequeue" / "T" / str(last % 2) / f"{file_at:020d}", "r+b") as f:
        f.seek(unit_at - file_at + 8)
        f.write(struct.pack(">i", len(longer)))
    return last


def test_a_record_ending_at_its_segments_end_drops_the_next_segment_with_a_warning(
    make_store, tmp_path, store_config, caplog
) -> None:
    """A record filling its segment to the last byte (no room for the BLANK marker) ends RocketMQ's
    recovery there: the next segment's records go with the end. Recovery said nothing of them
    (the segment starts at the end, so it was not counted among those dropped)."""
    root = tmp_path / "store"
    size = store_config.mapped_file_size_commit_log
    offsets = _written(make_store, 60)
    assert max(offsets) >= size
    _fill_segment_to_its_end(root, offsets, size, store_config.mapped_file_size_consume_queue)
    plan = plan_recovery(str(root), store_config)
    assert plan.end == size and plan.loses_data
    assert plan.bad is not None and (plan.bad.file, plan.bad.position) == (f"commitlog/{0:020d}", size)
    assert "no room for the BLANK marker" in plan.bad.problem
    with caplog.at_level("WARNING", logger="rocketstore.log.recovery"):
        store = make_store(read_only=True)
    assert store.max_phy_offset == size
    warned = [r.getMessage() for r in caplog.records if "later segment(s) holding records" in r.getMessage()]
    assert len(warned) == 1 and f"{size:020d}" in warned[0], warned


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_a_log_ending_at_a_segment_without_room_for_the_blank_marker_is_not_written_to(
    make_store, tmp_path, store_config, hash_tree, crashed
) -> None:
    """Past a segment filled to its last bytes (no room for the BLANK marker, which every writer
    leaves) RocketMQ's recovery reads nothing, at every open: a message stored after it was
    acknowledged, then lost at the next open (also after `recover --force`). An open for writing
    is refused, naming the segment and the way on (a copy into a new store), with nothing
    changed (after a crash, the queues and index recovery trims first); a read-only open
    (export) serves what RocketMQ serves."""
    root = tmp_path / "store"
    size = store_config.mapped_file_size_commit_log
    offsets = _written(make_store, 60)
    last = _fill_segment_to_its_end(root, offsets, size, store_config.mapped_file_size_consume_queue)
    if crashed:
        (root / "abort").touch()
    before = hash_tree(root)
    for asked in (None, [].append):
        with pytest.raises(CorruptStoreError, match="no room for the BLANK marker") as refused:
            make_store(confirm_cut=asked)
        assert f"{0:020d}" in str(refused.value) and "rocketstore export" in str(refused.value)
        after = hash_tree(root)
        if crashed:  # recovery after a crash writes the queues and index before it knows the log's end
            before = {k: v for k, v in before.items() if k.startswith("commitlog/")}
            after = {k: v for k, v in after.items() if k.startswith("commitlog/")}
        assert after == before
    with MessageStore.open(root, store_config, read_only=True) as view:
        assert view.max_phy_offset == size
        assert view.look_message_by_offset(offsets[last]) is not None
    report = verify_store(root, store_config)  # the cause, and the copy as the way on, not a recover refused
    assert any("leaving no room for the BLANK marker" in p for p in report.problems), report.problems
    assert not any("zeros in" in p for p in report.problems), report.problems
    assert report.next_steps and all("rocketstore recover" not in step for step in report.next_steps)
    assert any("rocketstore export" in step for step in report.next_steps), report.next_steps


@pytest.mark.parametrize("shape", ["bytes-left", "nothing-after"])
def test_verify_names_a_log_without_room_for_its_blank_marker_and_gives_no_recover_step(
    make_store, tmp_path, store_config, shape
) -> None:
    """Also when 1 to 7 bytes that are not zeros are left after the records (a bad record to the
    scanner), and when nothing follows the full segment: verify names the cause and gives the copy,
    not a recover (or a queue rebuild by recover) that no open for writing takes."""
    root = tmp_path / "store"
    size = store_config.mapped_file_size_commit_log
    offsets = _written(make_store, 60 if shape == "bytes-left" else 5)
    short = 6 if shape == "bytes-left" else 0
    _fill_segment_to_its_end(root, offsets, size, store_config.mapped_file_size_consume_queue, short)
    with pytest.raises(CorruptStoreError, match="no room for the BLANK marker"):
        make_store()
    report = verify_store(root, store_config)
    assert any("leaving no room for the BLANK marker" in p for p in report.problems), report.problems
    assert report.next_steps and not any("rocketstore recover" in step for step in report.next_steps), report
    assert any("rocketstore export" in step for step in report.next_steps), report.next_steps


@pytest.mark.parametrize("damage", ["zeros", "blank"])
def test_records_dropped_inside_the_last_segment_are_warned_about(
    make_store, tmp_path, store_config, caplog, damage
) -> None:
    """Zeros where a record starts, or a BLANK marker, in the middle of the last segment end the
    log there, as in RocketMQ; the records after it that the consume queues held are dropped
    with a warning, not in silence."""
    root = tmp_path / "store"
    offsets = _written(make_store, 12)
    marker = offsets[3]
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(marker)
        size = store_config.mapped_file_size_commit_log
        f.write(bytes(8) if damage == "zeros" else struct.pack(">ii", size - marker, rec.BLANK_MAGIC_CODE))
    with caplog.at_level("WARNING", logger="rocketstore.log.recovery"):
        store = make_store()
    assert store.max_phy_offset == marker
    warned = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warned) == 1 and str(marker) in warned[0] and str(store.recovery.consume_queue_end) in warned[0], warned
