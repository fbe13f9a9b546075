"""Index files over their lifetime: the order they are loaded in (names are local wall-clock
times), when the next one is made, and which records they hold."""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import TINY_GEOMETRY, put_ok
from rocketstore import Message, MessageStore, StoreConfig, writer
from rocketstore.log import commitlog
from rocketstore.queues import index_service
from rocketstore.queues.index_file import HEADER, INDEX_HEADER_SIZE
from rocketstore.verify import verify_store

PER_FILE = 8  # index entries a file holds: 4 messages (UNIQ_KEY and one key each)


@pytest.fixture
def config() -> StoreConfig:
    return StoreConfig(**{**TINY_GEOMETRY, "maxHashSlotNum": 8, "maxIndexNum": PER_FILE + 1})


@pytest.fixture
def set_tz() -> Iterator[Callable[[str], None]]:
    """``set_tz("UTC0")``: the process's local time zone from now on (restored at teardown)."""
    before = os.environ.get("TZ")

    def set_to(tz: str) -> None:
        os.environ["TZ"] = tz
        time.tzset()

    yield set_to
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def _put(store: MessageStore, keys: range) -> dict[str, int]:
    """One message per key; key -> its commit-log offset (dispatched)."""
    offsets = {f"k{i}": put_ok(store, Message("T", b"m%d" % i, keys=f"k{i}")).commit_log_offset for i in keys}
    assert store.wait_for_dispatch()
    return offsets


def _found(store: MessageStore, key: str, topic: str = "T") -> list[int]:
    return [m.commit_log_offset for m in store.query_message(topic, key).messages]


def _missing(store: MessageStore, offsets: dict[str, int]) -> list[str]:
    """The keys a query does not find (at their offset alone)."""
    return [k for k, at in offsets.items() if _found(store, k) != [at]]


def _names(root: Path) -> list[str]:
    return sorted(os.listdir(root / "index"))


# -- I1: files whose names sort out of creation order -------------------------------------------------


def _written_across_a_time_zone_change(root: Path, config: StoreConfig, set_tz) -> dict[str, int]:
    """Index files named in UTC+8, then (the store reopened in UTC, as after a clock stepped back)
    a newer one whose name, 8 hours earlier, sorts before them; every shutdown clean."""
    set_tz("EAST-8")
    with MessageStore.open(root, config) as store:
        offsets = _put(store, range(6))  # a full file and half of the next
    before = _names(root)
    set_tz("UTC0")
    with MessageStore.open(root, config) as store:
        offsets |= _put(store, range(6, 11))  # fills the second file and starts a third
    after = _names(root)
    assert len(before) == 2 and len(after) == 3 and after[0] not in before  # the newest sorts first
    return offsets


def test_a_clean_reopen_keeps_index_files_named_out_of_creation_order(tmp_path, config, set_tz) -> None:
    """Files are taken in the order their headers say they were made: a reopen keeps all three
    and finds every key (it dropped the two older ones as "damaged" and never indexed them
    again); files made after it, named later again or earlier (a clock stepped back while the
    store runs), do not upset the next open."""
    root = tmp_path / "store"
    offsets = _written_across_a_time_zone_change(root, config, set_tz)
    names = _names(root)
    with MessageStore.open(root, config) as store:
        assert _names(root) == names
        assert _missing(store, offsets) == []
        offsets |= _put(store, range(11, 20))  # two more files, named in UTC
    set_tz("EAST-8")
    with MessageStore.open(root, config) as store:
        assert _missing(store, offsets) == []
        offsets |= _put(store, range(20, 26))
        set_tz("UTC0")  # the clock steps back while the store runs
        offsets |= _put(store, range(26, 34))
        assert _missing(store, offsets) == []
    with MessageStore.open(root, config) as store:
        assert _missing(store, offsets) == []
    assert verify_store(root, config).ok


def test_a_crash_rebuilds_only_what_is_not_known_whole_when_names_are_out_of_order(tmp_path, config, set_tz) -> None:
    """After a crash the newest file (named first, not full) is dropped and its records indexed
    again, the older full ones kept: the first file not known whole is the first by header."""
    root = tmp_path / "store"
    offsets = _written_across_a_time_zone_change(root, config, set_tz)
    newest = _names(root)[0]
    (root / "abort").write_bytes(b"")  # as a crash leaves it
    with MessageStore.open(root, config) as store:
        assert _missing(store, offsets) == []
        assert newest not in _names(root) and len(_names(root)) == 3  # rebuilt in a new file
    assert verify_store(root, config).ok


def test_a_query_takes_the_newest_records_first_whatever_the_file_names(tmp_path, config, set_tz) -> None:
    """query_message walks the files from the newest, as RocketMQ's queryOffset, and stops at
    maxNum: the newest by the log, not by name."""
    root = tmp_path / "store"
    _written_across_a_time_zone_change(root, config, set_tz)
    with MessageStore.open(root, config) as store:
        old = put_ok(store, Message("T", b"a", keys="dup")).commit_log_offset
        assert store.wait_for_dispatch()
    with MessageStore.open(root, config) as store:  # the key again, in the file named first
        new = put_ok(store, Message("T", b"b", keys="dup")).commit_log_offset
        assert store.wait_for_dispatch()
        assert [m.commit_log_offset for m in store.query_message("T", "dup", max_num=1).messages] == [new]
    with MessageStore.open(root, config) as store:
        assert [m.commit_log_offset for m in store.query_message("T", "dup").messages] == [old, new]


@pytest.mark.parametrize("entries", ["readable", "zeroed", "over-the-first-file"])
@pytest.mark.parametrize("one_record_fills_a_file", [True, False], ids=["tiny-files", "large-files"])
@pytest.mark.parametrize("newer", [1, 2])
def test_a_damaged_index_file_named_after_newer_ones_drops_them_too(
    tmp_path, config, set_tz, monkeypatch, newer, one_record_fills_a_file, entries
) -> None:
    """Files made in UTC, then UTC+8 (the one damaged), then UTC+4 (``newer`` of them, named
    before it): a clean reopen drops the newer ones with the damaged file, and recovery indexes
    its records and theirs again. The damaged file was placed after the file named before it, so
    that one (and with two, the one before it too) was kept and its keys were never indexed again.
    Its entries, when they show the log range it covers, place it (after the first file, kept);
    else (none, or a range across a trusted file's) it goes at the earliest place it may belong:
    the first file, beginning at offset 0, is kept only when no record has keys enough to fill a
    file (as at RocketMQ's sizes; here one record could, so a file may lie before it)."""
    if not one_record_fills_a_file:
        monkeypatch.setattr(index_service, "_MOST_ENTRIES_OF_A_RECORD", PER_FILE - 1, raising=False)
    root = tmp_path / "store"
    set_tz("UTC0")
    with MessageStore.open(root, config) as store:
        offsets = _put(store, range(4))  # fills the first file
    (first,) = _names(root)
    set_tz("EAST-8")
    with MessageStore.open(root, config) as store:
        offsets |= _put(store, range(4, 8))  # the second, full
    (damaged,) = set(_names(root)) - {first}
    set_tz("EAST-4")
    with MessageStore.open(root, config) as store:
        offsets |= _put(store, range(8, 8 + 4 * newer - 2))  # the last one half full
    made_after = sorted(set(_names(root)) - {first, damaged})
    assert len(made_after) == newer and _names(root) == [first, *made_after, damaged]
    with open(root / "index" / damaged, "r+b") as f:
        f.seek(32)
        f.write(struct.pack(">i", config.max_hash_slot_num + 1))  # hashSlotCount out of range
        f.seek(INDEX_HEADER_SIZE + config.max_hash_slot_num * 4 + 20)  # entry 1
        if entries == "zeroed":
            f.write(bytes(20 * (config.max_index_num - 1)))
        elif entries == "over-the-first-file":
            f.write(struct.pack(">iq", 1, offsets["k1"]))  # its range would begin inside the first file's
    set_tz("UTC0")
    with MessageStore.open(root, config) as store:
        assert not {damaged, *made_after} & set(_names(root))
        first_kept = entries == "readable" or not one_record_fills_a_file
        assert store.recovery.index_end == (offsets["k3"] if first_kept else -1)
        assert (first in _names(root)) is first_kept
        assert _missing(store, offsets) == []
    assert verify_store(root, config).ok


def test_verify_checks_a_damaged_index_file_where_its_name_puts_it(tmp_path, config, monkeypatch) -> None:
    """Verify keeps a damaged file (the store drops it, from the earliest place it may belong) and
    checks each file's first entry against the end time of the file before: it takes the damaged
    file where its name puts it, so it reports the header alone, not time diffs of files moved."""
    ahead = [0]
    for clock in (writer, commitlog):  # where puts take their store time
        monkeypatch.setattr(clock, "_time_ns", lambda real=clock._time_ns: real() + ahead[0])
    root = tmp_path / "store"
    with MessageStore.open(root, config) as store:
        offsets: dict[str, int] = {}
        for n in range(3):
            ahead[0] = n * 10**10  # each file's records 10 s after the last's
            offsets |= _put(store, range(4 * n, 4 * n + 4))
    damaged = root / "index" / _names(root)[1]
    with open(damaged, "r+b") as f:
        f.seek(32)
        f.write(struct.pack(">i", config.max_hash_slot_num + 1))  # hashSlotCount out of range
    problems = verify_store(root, config).problems
    header = f"index/{damaged.name}: hashSlotCount {config.max_hash_slot_num + 1}, the entries use"
    assert len(problems) == 1 and problems[0].startswith(header), problems
    with MessageStore.open(root, config) as store:
        assert _missing(store, offsets) == []
    assert verify_store(root, config).ok


# -- I2: the next file is made by the next record, keys or not ---------------------------------------


def _headers(root: Path) -> list[tuple[int, ...]]:
    """(beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount) per file."""
    return [HEADER.unpack((root / "index" / name).read_bytes()[:40]) for name in _names(root)]


@pytest.mark.parametrize("sys_flag", [0, 12])  # no keys at all; a ROLLBACK record (its keys not indexed)
def test_a_record_after_a_full_file_makes_the_next_one(tmp_path, config, sys_flag) -> None:
    """RocketMQ's buildIndex gets the last file, or makes the next, for every record dispatched:
    a record without index keys after a full file makes the next one, whose header carries the
    full one's end with indexCount 0 (written by its first put), and moves the checkpoint's
    indexMsgTimestamp to the full file's end. The file was made only when a key came."""
    root = tmp_path / "store"
    with MessageStore.open(root, config) as store:
        offsets = _put(store, range(PER_FILE // 2))  # fills the first file exactly
        assert len(_names(root)) == 1
        assert store.put_as_is(Message("T", b"none", keys="k" if sys_flag else None, sys_flag=sys_flag)).ok
        assert store.wait_for_dispatch()
        full, new = _headers(root)
        assert full[5] == PER_FILE + 1
        assert new == (full[1], full[1], full[3], full[3], 0, 0)
        assert store.checkpoint.index_msg_timestamp == full[1]
    headers = _headers(root)
    shutil.rmtree(root / "index")
    with MessageStore.open(root, config):  # recovery indexes the log again, in batches: the same files
        assert _headers(root) == headers
    with MessageStore.open(root, config) as store:  # indexCount 0 loads as RocketMQ loads it: 1
        assert _missing(store, offsets) == []
        offsets |= _put(store, range(10, 11))
        assert _missing(store, offsets) == []
        assert _headers(root)[1][5] == 3
    assert verify_store(root, config).ok


def test_an_index_file_written_with_index_count_1_loads_as_one_with_0(tmp_path, config) -> None:
    """An empty file's header holds indexCount 0 (RocketMQ's) or 1 (rocketstore wrote it so
    before): either loads as no entries, and the next key is entry 1."""
    root = tmp_path / "store"
    with MessageStore.open(root, config) as store:
        assert store.put_as_is(Message("T", b"first")).ok  # no keys: the first record dispatched makes the file
        assert store.wait_for_dispatch()
    assert _headers(root) == [(0, 0, 0, 0, 0, 0)]
    path = root / "index" / _names(root)[0]
    with open(path, "r+b") as f:
        f.seek(36)
        f.write(struct.pack(">i", 1))
    with MessageStore.open(root, config) as store:
        offsets = _put(store, range(1))
        assert _missing(store, offsets) == []
    header = _headers(root)[0]
    assert header[5] == 3 and header[2] == offsets["k0"] == header[3]
    assert verify_store(root, config).ok


# -- I3: a deleted topic's records stay indexed ------------------------------------------------------


def test_a_deleted_topics_records_are_found_by_a_query_after_a_crash_too(tmp_path, config) -> None:
    """Deleting a topic does not touch the index (RocketMQ's neither), and recovery indexes every
    record again, the deleted topic's too: a query finds its old message in the live store, after
    a clean reopen and after a crash (the index rebuilt), where it found it only before the crash.
    Its records stay out of the consume queues."""
    root = tmp_path / "store"
    with MessageStore.open(root, config) as store:
        old = put_ok(store, Message("T", b"old", keys="k")).commit_log_offset
        put_ok(store, Message("U", b"u", keys="k"))
        assert store.wait_for_dispatch()
        assert store.delete_topics(["T"]) == ["T"]
        assert _found(store, "k") == [old]
        new = put_ok(store, Message("T", b"new", keys="k")).commit_log_offset
        assert store.wait_for_dispatch()
        assert _found(store, "k") == [old, new]
    with MessageStore.open(root, config) as store:
        assert _found(store, "k") == [old, new]
    (root / "abort").write_bytes(b"")  # as a crash leaves it: the last index file (not full) is rebuilt
    with MessageStore.open(root, config) as store:
        assert store.recovery.abnormal and store.recovery.index_end == -1  # the whole index indexed again
        assert _found(store, "k") == [old, new]
        assert store.get_max_offset_in_queue("T", 0) == 1
    report = verify_store(root, config)
    assert report.ok and not [n for n in report.notes if "not indexed" in n], (report.problems, report.notes)


# -- C3: verify and an indexCount over the file's room -----------------------------------------------


@pytest.mark.parametrize("which", [0, -1])  # a full file; the last one, half full (its unwritten entries zeros)
def test_verify_reads_an_index_count_over_the_files_room_as_full(tmp_path, config, which) -> None:
    """indexCount 0x7fffffff: the store reads the file as full, as RocketMQ does, and queries find
    its keys; verify reports the header once and checks the entries as the store reads them. It
    gave up on the file and reported each of its keys as not found by a query."""
    root = tmp_path / "store"
    with MessageStore.open(root, config) as store:
        offsets = _put(store, range(6))
    path = root / "index" / _names(root)[which]
    with open(path, "r+b") as f:
        f.seek(36)
        f.write(struct.pack(">i", 0x7FFFFFFF))
    report = verify_store(root, config)
    assert report.problems == [
        f"index/{path.name}: indexCount 2147483647 is out of range (at most {PER_FILE + 1}); "
        "read as full, as RocketMQ reads it"
    ]
    assert report.index_entries == report.keys == 12
    with MessageStore.open(root, config, read_only=True) as store:
        assert _missing(store, offsets) == []
