"""rocketstore.verify, continued (tests/test_verify.py holds the helpers): review findings."""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import tree_hashes
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.main import cli
from rocketstore.errors import CorruptStoreError
from rocketstore.queues.index_file import HASH_SLOT_SIZE, INDEX_HEADER_SIZE
from rocketstore.verify import verify_store
from test_verify import (
    TINY,
    VECTOR_GEOMETRY,
    VECTORS,
    build_store,
    has,
    needs_vectors,
    patch,
    read,
    records,
    segment,
    tiny,
)


def test_a_live_topics_queue_folder_gone_is_damage_not_a_deleted_topic(tmp_path: Path) -> None:
    """TopicQ writes queue 1, then queue 0, and is never deleted (it stays in topics.json): its
    queue 1 folder gone hides those records from consumers. They are older than queue 0's first
    unit, but no queue of the topic started again from offset 0, so the topic was not deleted."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        offsets = []
        for queue_id in (1, 0):
            for i in range(5):
                result = store.put(Message("TopicQ", f"q{queue_id}-{i}".encode(), keys=f"k{queue_id}{i}"), queue_id)
                result.raise_for_status()
                offsets.append(result.commit_log_offset)
        assert store.wait_for_dispatch()
    assert verify_store(root, tiny()).ok
    shutil.rmtree(root / "consumequeue" / "TopicQ" / "1")
    report = verify_store(root, tiny())
    assert not report.ok
    assert [p for p in report.problems if "not in its consume queue" in p] == [
        f"record at {offsets[i]} (TopicQ/1 queue offset {i}): not in its consume queue" for i in range(5)
    ]
    assert not has(report.notes, "deleted topics")


def test_a_deleted_topic_written_again_in_another_queue_keeps_its_old_records_excused(tmp_path: Path) -> None:
    """The legitimate case next to the one above: TopicQ deleted, then written again in queue 0
    (which starts again at offset 0): the old records of queue 1 (no consume queue) are the
    deleted topic's, a note."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        for queue_id in (1, 0):
            for i in range(3):
                store.put(Message("TopicQ", b"old", keys=f"k{queue_id}{i}"), queue_id).raise_for_status()
        assert store.wait_for_dispatch()
        assert store.delete_topics(["TopicQ"]) == ["TopicQ"]
        assert store.put(Message("TopicQ", b"new"), 0).queue_offset == 0
        assert store.wait_for_dispatch()
    report = verify_store(root, tiny())
    assert report.ok, report.problems
    assert has(report.notes, "6 records of deleted topics (TopicQ")


def five_keyed(root: Path, body: bytes = b"x") -> Path:
    """A tiny store of five TopicA messages keyed k0..k4, dispatched and shut down."""
    with MessageStore.open(root, tiny()) as store:
        for i in range(5):
            store.put(Message("TopicA", body, keys=f"k{i}")).raise_for_status()
        assert store.wait_for_dispatch()
    return root


def test_a_store_verified_without_its_file_sizes_is_an_error_naming_them(tmp_path: Path) -> None:
    """Every commit-log, consume-queue and index file one size other than the configured one: the
    configuration is not the store's. An error (exit 2) giving the settings, as loading the store
    does, not a problem per file (exit 1) on a healthy store."""
    root = build_store(tmp_path / "store")
    before = tree_hashes(root)
    with pytest.raises(CorruptStoreError) as caught:
        verify_store(root, StoreConfig())
    text = str(caught.value)
    assert "--set mappedFileSizeCommitLog=4096" in text and "--set mappedFileSizeConsumeQueue=200" in text
    assert "index/: every file is" in text
    with pytest.raises(CorruptStoreError, match="--set mappedFileSizeCommitLog=4096") as caught:
        verify_store(root, tiny().copy(mappedFileSizeCommitLog=8192))
    assert "consumequeue/" not in str(caught.value) and "index/" not in str(caught.value)
    assert tree_hashes(root) == before
    result = CliRunner().invoke(cli, ["verify", str(root)])
    assert result.exit_code == 2 and "--set mappedFileSizeCommitLog=4096" in result.output


def test_a_segment_cut_short_is_still_a_problem_not_a_size_hint(tmp_path: Path) -> None:
    """One commit-log segment cut in the middle of its records is damage, even when it is the
    only one (the hint is for files whose data does not run into their end)."""
    root = five_keyed(tmp_path / "store", body=b"x" * 100)
    os.truncate(root / "commitlog" / f"{0:020d}", 300)
    report = verify_store(root, tiny())
    assert has(report.problems, "300 bytes, the configured size is 4096")


def test_a_lone_consume_queue_or_index_file_cut_short_is_a_problem_not_a_size_hint(tmp_path: Path) -> None:
    """One queue of one file, one index file: cut short, each was every file of its kind at one
    other size, and verify called the configuration wrong (exit 2, a --set hint). It takes two
    files to say so; one is damage."""
    root = five_keyed(tmp_path / "store")
    (index_file,) = (root / "index").iterdir()
    os.truncate(root / "consumequeue" / "TopicA" / "0" / f"{0:020d}", 60)
    os.truncate(index_file, 1000)
    report = verify_store(root, tiny())
    assert has(report.problems, "60 bytes"), report.problems
    assert has(report.problems, "1000 bytes"), report.problems


@needs_vectors
def test_a_rocketmq_store_verified_without_its_sizes_is_an_error_naming_them() -> None:
    root = VECTORS / "sample-clean" / "store"
    with pytest.raises(CorruptStoreError) as caught:
        verify_store(root, StoreConfig())
    text = str(caught.value)
    assert "--set mappedFileSizeCommitLog=65536" in text and "--set mappedFileSizeConsumeQueue=2000" in text
    assert verify_store(root, StoreConfig(**VECTOR_GEOMETRY)).ok


@pytest.mark.parametrize("file_number", [0, 1])
def test_the_first_entry_of_an_index_file_has_its_time_diff_checked(tmp_path: Path, file_number: int) -> None:
    """The first entry's time diff is taken against the header's begin time before the entry
    sets it: 0 in the first file, against the previous file's end time in a later one. A wrong
    one hides the key from a query by time range."""
    root = build_store(tmp_path / "store")
    files = sorted((root / "index").iterdir())
    assert len(files) >= 2
    entries_at = INDEX_HEADER_SIZE + TINY["maxHashSlotNum"] * HASH_SLOT_SIZE
    diff_at = entries_at + 20 + 4 + 8  # entry 1 (entry 0 is never written), after its hash and offset
    (diff,) = struct.unpack(">i", read(files[file_number], diff_at, 4))
    if file_number == 0:
        assert diff == 0
    else:  # against the previous file's endTimestamp, the header's second long
        (begin,) = struct.unpack(">q", read(files[1], 0, 8))
        (previous_end,) = struct.unpack(">q", read(files[0], 8, 8))
        assert diff == max((begin - previous_end) // 1000, 0)
    assert verify_store(root, tiny()).ok
    patch(files[file_number], diff_at, struct.pack(">i", diff + 99999))
    report = verify_store(root, tiny())
    assert report.problems == [f"index/{files[file_number].name} entry 1: time diff {diff + 99999}, expected {diff}"]


def test_the_first_entry_of_a_later_index_file_is_timed_from_the_previous_files_end(tmp_path: Path) -> None:
    """A file started a second after the previous one filled: its first entry's time diff is 1 or
    more (against the previous file's endTimestamp, not 0), and verify expects just that."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        for i in range(63):  # 2 keys each (the key and the UNIQ_KEY)
            store.put(Message("TopicA", b"x", keys=f"k{i}")).raise_for_status()
        store.put(Message("TopicA", b"x")).raise_for_status()  # the 127th entry: the first file is full
        assert store.wait_for_dispatch()
        time.sleep(1.2)
        store.put(Message("TopicA", b"x", keys="late")).raise_for_status()
        assert store.wait_for_dispatch()
    files = sorted((root / "index").iterdir())
    assert len(files) == 2
    diff_at = INDEX_HEADER_SIZE + TINY["maxHashSlotNum"] * HASH_SLOT_SIZE + 20 + 4 + 8
    (diff,) = struct.unpack(">i", read(files[1], diff_at, 4))
    assert diff >= 1  # 1 unless the dispatch wait took a while
    assert verify_store(root, tiny()).ok
    patch(files[1], diff_at, struct.pack(">i", 0))
    assert verify_store(root, tiny()).problems == [f"index/{files[1].name} entry 1: time diff 0, expected {diff}"]


def test_a_malformed_record_in_a_later_segment_is_named_by_its_own_offset(tmp_path: Path) -> None:
    """A TOTALSIZE that fits the file but not the record's fields: the text names the record's
    commit-log offset (the decoder saw the record alone and said 'the record at 0')."""
    root = build_store(tmp_path / "store")
    size = TINY["mappedFileSizeCommitLog"]
    rows = records(root)
    row = next(r for r in rows if r["offset"] > size and r["offset"] % size + r["size"] + 8 < size)
    path, pos = segment(root, row["offset"])
    patch(path, pos, struct.pack(">i", row["size"] + 6))
    report = verify_store(root, tiny())
    assert not report.ok
    assert has(report.problems, f"(offset {row['offset']}): a malformed record: the record at {row['offset']} has")
    assert not has(report.problems, "the record at 0 ")


def test_keys_not_indexed_when_every_index_file_is_newer_than_the_checkpoint(tmp_path: Path) -> None:
    """A crash with the only index file newer than the checkpoint: no index file counts, and the
    note says so (it named 'the index's last entry (offset -1)')."""
    root = five_keyed(tmp_path / "store")
    (index_file,) = (root / "index").iterdir()
    end_ts = struct.unpack(">q", read(index_file, 8, 8))[0]
    patch(root / "checkpoint", 16, struct.pack(">q", end_ts - 1000))  # indexMsgTimestamp
    (root / "abort").touch()
    report = verify_store(root, tiny())
    assert report.ok, report.problems
    assert has(report.notes, f"index/{index_file.name}: newer than the checkpoint")
    assert has(report.notes, "10 keys of 5 records are not indexed: every index file is newer than the checkpoint")
    assert not has(report.notes, "offset -1")


@needs_vectors
def test_the_rocketmq_crash_vectors_unindexed_keys_are_not_said_to_follow_offset_minus_1() -> None:
    report = verify_store(VECTORS / "sample-crash" / "store", StoreConfig(**VECTOR_GEOMETRY))
    assert report.ok, report.problems
    assert has(report.notes, "2242 keys of 994 records are not indexed: every index file is newer than the checkpoint")
    assert not has(report.notes, "offset -1")


@pytest.mark.parametrize(
    ("levels", "says"),
    [
        ("1s 7s", "they are delivered by those times"),
        ("1s", "no level serves this queue now (level 2; messageDelayLevel has 1), so they are not delivered"),
    ],
)
def test_schedule_units_of_an_earlier_delay_level_say_whether_a_level_still_serves_them(
    tmp_path: Path, levels: str, says: str
) -> None:
    """Units written at level 2 = 5 s, verified with another messageDelayLevel: delivered by their
    times while the level exists; with one level only, no timer serves queue 1 any more."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        for _ in range(3):
            store.put(Message("TopicA", b"x", properties={"DELAY": "2"})).raise_for_status()
        assert store.wait_for_dispatch()
    report = verify_store(root, tiny().copy(messageDelayLevel=levels))
    assert report.ok, report.problems
    assert has(report.notes, "consumequeue/SCHEDULE_TOPIC_XXXX/1: 3 units hold delivery times", says)
    other = "no level serves" if "delivered by" in says else "delivered by those times"
    assert not has(report.notes, other)


@pytest.mark.parametrize(("total", "said"), [(0, "is below the smallest record's 91 bytes"), (50, "is below")])
def test_a_totalsize_too_small_for_a_record_is_called_so(tmp_path: Path, total: int, said: str) -> None:
    """It was said not to 'fit in the N bytes left in the file', which is what a too large one does."""
    root = build_store(tmp_path / "store")
    row = records(root)[3]
    path, pos = segment(root, row["offset"])
    patch(path, pos, struct.pack(">i", total))
    report = verify_store(root, tiny())
    assert has(report.problems, f"(offset {row['offset']}): TOTALSIZE {total} {said}"), report.problems
    assert not has(report.problems, "bytes left in the file")


def test_a_gap_of_billions_of_segments_names_three_and_counts_the_rest(tmp_path: Path) -> None:
    """A segment named far past the others (a stray copy, a renamed file): the gap's missing
    segments are counted, not each named (one string per segment ran verify out of memory)."""
    root = build_store(tmp_path / "store")
    size = TINY["mappedFileSizeCommitLog"]
    last = max((root / "commitlog").iterdir())
    far = int(last.name) + size * (1 << 36)
    shutil.copy(last, root / "commitlog" / f"{far:020d}")
    report = verify_store(root, tiny())
    after = int(last.name) + size
    assert has(report.problems, f"a gap: {after:020d}, {after + size:020d}, {after + 2 * size:020d} and")
    assert has(report.problems, f"and {(1 << 36) - 4} more are missing (the file should start at {after})")


def test_units_and_entries_past_a_lost_tail_are_one_line_a_file(tmp_path: Path) -> None:
    """A crash that lost the log's last records (or a live writer's tail): the units and index
    entries pointing past the log end are one line for each queue or index file, not one each."""
    root = build_store(tmp_path / "store")
    rows = records(root)
    size = TINY["mappedFileSizeCommitLog"]
    last_segment = rows[-1]["offset"] // size
    lost = [r for r in rows if r["offset"] // size == last_segment]
    assert len(lost) >= 4
    path, pos = segment(root, lost[0]["offset"])
    patch(path, pos, bytes(size - pos))  # they never reached the disk
    (root / "abort").touch()
    report = verify_store(root, tiny())
    assert report.ok, report.problems
    past = [n for n in report.notes if "at or past the log end" in n]
    named = [n.split(" unit")[0].split(" entr")[0] for n in past]
    assert len(named) == len(set(named))  # one line a file
    queues = {(r["topic"], r["queueId"]) for r in lost}
    assert sum(" unit" in n for n in past) == len(queues)
    many = max(queues, key=lambda q: sum((r["topic"], r["queueId"]) == q for r in lost))
    count = sum((r["topic"], r["queueId"]) == many for r in lost)
    assert count > 1 and has(past, f"/{many[1]}", f"({count}) -> ")


def test_records_of_batch_cq_topics_are_noted_not_called_missing(tmp_path: Path) -> None:
    """RocketMQ 5 queues a topic whose queue.type is BatchCQ in batchconsumequeue/, which this store
    does not read: its records are not "missing from their consume queue" (with a rebuild as the
    next step, which no writable open of such a store takes) but noted as not checked."""
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(**TINY)) as store:
        for i in range(5):
            store.put(Message("X", f"x{i}")).raise_for_status()
        store.put(Message("T", b"t")).raise_for_status()
    shutil.rmtree(root / "consumequeue" / "X")
    topics = root / "config" / "topics.json"
    table = json.loads(topics.read_text())
    table["topicConfigTable"]["X"]["attributes"] = {"queue.type": "BatchCQ"}
    topics.write_text(json.dumps(table))
    report = verify_store(str(root), StoreConfig(**TINY))
    assert report.ok, report.problems
    assert any("5 records of BatchCQ topics (X)" in note for note in report.notes), report.notes
