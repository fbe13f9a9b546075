"""rocketstore.verify: a clean verdict on good stores, and damage named precisely on broken ones.

Every damaged store is a copy in tmp_path; the RocketMQ vector stores are only read. Where it
helps, the independent reader rmqread.py (the project's test oracle) is asked for its verdict too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import copy_store, tree_hashes
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.codec import record as rec
from rocketstore.errors import StoreNotFoundError
from rocketstore.export import iter_queued
from rocketstore.queues.index_file import HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_SIZE
from rocketstore.verify import VerifyReport, verify_store

VECTORS = conftest.VECTORS
RMQREAD = conftest.RMQREAD
VECTOR_GEOMETRY = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 2000,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 3000,
}
TINY = {
    "mappedFileSizeCommitLog": 4096,
    "mappedFileSizeConsumeQueue": 200,
    "maxHashSlotNum": 64,
    "maxIndexNum": 128,
    "brokerIP1": "127.0.0.1",
}
N = 60
needs_vectors = pytest.mark.skipif(not VECTORS.is_dir(), reason="the RocketMQ vector stores are not available")


# -- helpers -----------------------------------------------------------------------------------------
def tiny(**extra: object) -> StoreConfig:
    return StoreConfig(**{**TINY, **extra})


def build_store(root: Path, count: int = N) -> Path:
    """Two topics, three queues each, tags and two keys per message (and a UNIQ_KEY from the store)."""
    with MessageStore.open(root, tiny()) as store:
        for i in range(count):
            message = Message(
                ("TopicA", "TopicB")[i % 2],
                f"body-{i}|".encode() * (1 + i % 5),
                tags=f"Tag{i % 3}",
                keys=[f"k{i}", f"order-{i % 7}"],
            )
            store.put(message, queue_id=i % 3).raise_for_status()
        assert store.wait_for_dispatch()
    return root


def records(root: Path) -> list[dict]:
    """Every queued record: topic, queueId, queueOffset, offset, size, sysFlag (log order)."""
    with MessageStore.open(root, tiny(), read_only=True) as store:
        rows = [
            {
                "topic": m.topic,
                "queueId": m.queue_id,
                "queueOffset": q,
                "offset": m.commit_log_offset,
                "size": m.store_size,
                "sysFlag": m.sys_flag,
            }
            for m, q, _tags, _size in iter_queued(store)
        ]
    return sorted(rows, key=lambda r: r["offset"])


def segment(root: Path, offset: int, size: int = TINY["mappedFileSizeCommitLog"]) -> tuple[Path, int]:
    """(commit-log file, position in it) of a commit-log offset."""
    return root / "commitlog" / f"{offset - offset % size:020d}", offset % size


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def read(path: Path, pos: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(size)


def rmqread_check(root: Path, config: dict) -> subprocess.CompletedProcess:
    flags = [
        "--commitlog-size",
        str(config["mappedFileSizeCommitLog"]),
        "--cq-size",
        str(config["mappedFileSizeConsumeQueue"]),
        "--slots",
        str(config["maxHashSlotNum"]),
        "--index-num",
        str(config["maxIndexNum"]),
    ]
    return subprocess.run(
        [sys.executable, str(RMQREAD), "check", str(root), *flags], capture_output=True, text=True, timeout=120
    )


def agrees_with_rmqread(root: Path, report: VerifyReport, config: dict = TINY) -> None:
    if RMQREAD.is_file():
        done = rmqread_check(root, config)
        assert (done.returncode == 0) == report.ok, (done.stdout, report.problems)


def has(lines: list[str], *parts: str) -> bool:
    return any(all(p in line for p in parts) for line in lines)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    return build_store(tmp_path / "store")


# -- good stores -------------------------------------------------------------------------------------
def test_a_freshly_written_store_is_clean(built: Path) -> None:
    before = tree_hashes(built)
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert report.problem_count == 0 and report.problems == []
    assert not report.abort_file
    assert report.records == N and report.units == N
    assert report.queues == 6
    assert report.commit_log_files >= 3  # 4 KiB segments: several of them, each ended by a BLANK
    assert report.index_files >= 2  # 3 keys per message, 127 entries per index file
    assert report.index_entries == report.keys == 3 * N
    assert report.log_end_reason == "end of data"
    assert tree_hashes(built) == before  # verify changes nothing
    agrees_with_rmqread(built, report)
    d = report.to_dict()
    assert d["ok"] is True and d["counts"]["records"] == N and d["problemCount"] == 0


def test_store_times_that_went_back_are_not_a_problem(tmp_path: Path) -> None:
    """A broker whose clock stepped back writes later records with earlier store times, and its
    index file a begin time after its end time: RocketMQ writes such stores, so verify passes them."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        results = [store.put(Message("T", b"m", keys=k)) for k in "acb"]
        assert all(r.ok for r in results)
        first = results[0].store_timestamp
    segment = root / "commitlog" / ("0" * 20)
    with open(segment, "r+b") as f:
        for result, when in ((results[1], first + 2000), (results[2], first - 10000)):
            f.seek(result.commit_log_offset + rec.store_timestamp_position(0))
            f.write(struct.pack(">q", when))
    shutil.rmtree(root / "index")
    with MessageStore.open(root, tiny()) as store:  # rebuilt from the log: begin a's time, end b's
        assert store.wait_for_dispatch()
        assert [m.commit_log_offset for m in store.query_message("T", "c", 32, first - 1, first + 3000).messages] == [
            results[1].commit_log_offset
        ]
    report = verify_store(root, tiny())
    assert report.ok, report.problems


@needs_vectors
@pytest.mark.parametrize(("sample", "records", "keys"), [("sample-clean", 1555, 3500), ("sample-crash", 1000, 2242)])
def test_vector_stores_get_rmqreads_verdict(sample: str, records: int, keys: int) -> None:
    root = VECTORS / sample / "store"
    before = tree_hashes(root)
    report = verify_store(root, StoreConfig(**VECTOR_GEOMETRY))
    assert tree_hashes(root) == before
    assert report.ok, report.problems
    assert report.records == records and report.units == records and report.keys == keys
    if RMQREAD.is_file():
        done = rmqread_check(root, VECTOR_GEOMETRY)
        assert done.returncode == 0
        assert f"{records} records" in done.stdout and f"{keys} keys looked up" in done.stdout
    if sample == "sample-crash":  # abort file: what recovery repairs is noted, not a problem
        assert report.abort_file
        assert has(report.notes, "index/20261122015724132", "newer than the checkpoint")
        assert has(report.notes, "empty file(s) after the log end")
        assert has(report.notes, "not indexed", "abnormal recovery indexes them")
    else:
        assert report.notes == []


# -- the commit log ----------------------------------------------------------------------------------
def test_a_flipped_body_byte_is_a_crc_problem(built: Path) -> None:
    target = records(built)[N // 2]
    path, pos = segment(built, target["offset"])
    body_at = pos + rec.header_for(target["sysFlag"]).size
    patch(path, body_at, bytes([read(path, body_at, 1)[0] ^ 0x40]))
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, f"{path.name}@{pos} (offset {target['offset']})", "body CRC")
    assert has(report.problems, "non-zero bytes follow it")  # valid records after it: certainly a problem
    assert report.log_end == target["offset"]
    agrees_with_rmqread(built, report)


def _recovered_end(root: Path, **config: object) -> int:
    """Where an open's recovery ends the log (a read-only open recovers in memory)."""
    with MessageStore.open(root, tiny(**config), read_only=True) as store:
        return store.commit_log.max_offset()


def test_after_a_crash_verify_cuts_the_log_where_recovery_from_the_checkpoint_would(tmp_path: Path) -> None:
    """After a crash recovery checks the log from the checkpoint's segment on (the last whose first
    record is older than its safe time): a bad record before it is kept, as verify now says (it
    predicted a cut, and the loss of every record after it, that recovery does not make)."""
    built = build_store(tmp_path / "store", 250)
    rows = records(built)
    target = rows[0]
    path, pos = segment(built, target["offset"])
    body_at = pos + rec.header_for(target["sysFlag"]).size
    patch(path, body_at, bytes([read(path, body_at, 1)[0] ^ 0x40]))
    starts = [int(p.name) for p in sorted((built / "commitlog").iterdir())]
    last = max(s for s in starts if s <= rows[-1]["offset"])
    with MessageStore.open(built, tiny(), read_only=True) as store:
        first_ts = store.look_message_by_offset(last).store_timestamp
    # the checkpoint's safe time (3 s before its oldest timestamp) reaches that segment's first record
    with open(built / "checkpoint", "r+b") as f:
        f.write(struct.pack(">qqq", first_ts + 3000, first_ts + 3000, first_ts + 3000))
    (built / "abort").touch()
    report = verify_store(built, tiny())
    end = rows[-1]["offset"] + rows[-1]["size"]
    assert _recovered_end(built) == report.log_end == end
    assert report.problem_count == 1 and has(report.problems, "checks the log from the checkpoint's segment on")
    assert has(report.next_steps, "no command repairs a record in place")
    assert not has(report.next_steps, "rocketstore recover")


def test_with_crcs_unchecked_verify_keeps_the_record_recovery_keeps(tmp_path: Path) -> None:
    """checkCRCOnRecover=false keeps a record whose body CRC alone fails: verify given the setting
    reports the CRC and predicts no cut, and no unit or entry past one."""
    built = build_store(tmp_path / "store", 250)
    rows = records(built)
    target = rows[-5]
    path, pos = segment(built, target["offset"])
    body_at = pos + rec.header_for(target["sysFlag"]).size
    patch(path, body_at, bytes([read(path, body_at, 1)[0] ^ 0x40]))
    end = rows[-1]["offset"] + rows[-1]["size"]
    report = verify_store(built, tiny(checkCRCOnRecover=False))
    assert _recovered_end(built, checkCRCOnRecover=False) == report.log_end == end
    assert report.problem_count == 1 and has(report.problems, "body CRC", "recovery keeps it (checkCRCOnRecover=false)")
    assert verify_store(built, tiny()).log_end == target["offset"] == _recovered_end(built)


@pytest.mark.parametrize("abort", [False, True], ids=["clean-shutdown", "after-a-crash"])
def test_a_bad_record_in_an_old_segment_says_which_recovery_cuts_there(tmp_path: Path, abort: bool) -> None:
    """After a clean shutdown an open checks only the last 3 segments (recoverNormally): a bad
    record further back is cut by a recovery after a crash, not by the next open."""
    built = build_store(tmp_path / "store", 250)
    target = records(built)[0]
    path, pos = segment(built, target["offset"])
    body_at = pos + rec.header_for(target["sysFlag"]).size
    patch(path, body_at, bytes([read(path, body_at, 1)[0] ^ 0x40]))
    if abort:
        (built / "abort").touch()
    report = verify_store(built, tiny())
    assert report.commit_log_files > 4
    crash_only = has(report.problems, "a recovery after a crash would cut the log here", "checks only the last 3 files")
    assert crash_only is not abort
    assert has(report.problems, "which recovery drops (the log is cut here)") is abort
    # the next open keeps the log whole after a clean shutdown: the damage is the only problem, the
    # log ends at the end of the data, no unit or entry lies past a cut, and no CRC setting is needed
    assert has(report.problems + report.notes, "point at or past offset") is abort  # a note after a crash
    assert (report.log_end == target["offset"]) is abort
    assert report.problem_count == 1, report.problems
    assert has(report.next_steps, "checkCRCOnRecover") is abort
    assert has(report.next_steps, "no command repairs a record in place") is not abort
    if not abort:
        assert report.log_end_reason == "end of data"
        assert report.log_end == records(built)[-1]["offset"] + records(built)[-1]["size"]


@pytest.mark.parametrize("damage", ["crc", "totalsize"])
def test_every_record_is_checked_past_a_bad_one(built: Path, damage: str) -> None:
    """A damaged record does not end the check: it is skipped (by its TOTALSIZE when only its CRC
    fails, else to the next plausible record start) and a second one, segments later, is reported
    too. The units and index entries past where recovery cuts the log are one line, not hundreds."""
    recs = records(built)
    first, second = recs[5], recs[45]
    assert segment(built, first["offset"])[0] != segment(built, second["offset"])[0]
    for target in (first, second):
        path, pos = segment(built, target["offset"])
        if damage == "crc":
            body_at = pos + rec.header_for(target["sysFlag"]).size
            patch(path, body_at, bytes([read(path, body_at, 1)[0] ^ 0x40]))
        else:
            patch(path, pos, struct.pack(">i", 1 << 30))
    report = verify_store(built, tiny())
    assert report.log_end == first["offset"]  # where recovery cuts the log
    assert report.records == N - 2
    went_on = f"went on at offset {recs[6]['offset']}"
    assert has(report.problems, f"(offset {first['offset']})", "the log is cut here", went_on)
    assert has(report.problems, f"(offset {second['offset']})", f"went on at offset {recs[46]['offset']}")
    past = N - 5
    assert has(report.problems, f"{past} consume-queue units and {3 * past} index entries point at or past offset")
    assert report.problem_count == 3, report.problems
    agrees_with_rmqread(built, report)


def test_a_wrong_physicaloffset_field_is_a_problem(built: Path) -> None:
    target = records(built)[7]
    path, pos = segment(built, target["offset"])
    patch(path, pos + rec.PHYSICAL_OFFSET_POSITION, struct.pack(">q", target["offset"] + 1000))
    report = verify_store(built, tiny())
    assert has(report.problems, f"(offset {target['offset']})", f"PHYSICALOFFSET field says {target['offset'] + 1000}")
    named = [p for p in report.problems if "PHYSICALOFFSET" in p]
    assert named[0].startswith(f"commitlog/{path.name}@{pos} "), named  # as every problem names a segment
    assert report.records == N  # the record itself still reads
    agrees_with_rmqread(built, report)


def _tear_tail(root: Path) -> int:
    """Write the first 60 bytes of the last record again after it: a torn append. Returns its offset."""
    last = records(root)[-1]
    path, pos = segment(root, last["offset"])
    end = pos + last["size"]
    assert TINY["mappedFileSizeCommitLog"] - end > last["size"] + 8, "the test needs room after the last record"
    patch(path, end, read(path, pos, 60))
    return last["offset"] + last["size"]


def test_a_torn_tail_is_a_problem_without_abort_and_a_note_with_it(built: Path) -> None:
    torn = _tear_tail(built)
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, f"(offset {torn})", "a torn record at the end of the log")
    agrees_with_rmqread(built, report)

    (built / "abort").touch()
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert has(report.notes, f"(offset {torn})", "a torn record at the end of the log")
    agrees_with_rmqread(built, report)


def test_a_checkpoint_ahead_of_the_data_is_a_problem_without_abort_and_a_note_with_it(built: Path) -> None:
    """Timestamps a day past the newest record claim data that is not there (abnormal recovery
    would start past records it must walk)."""
    path = built / "checkpoint"
    fields = struct.unpack(">qqq", read(path, 0, 24))
    day = 86_400_000
    patch(path, 0, struct.pack(">qqq", *(value + day for value in fields)))
    report = verify_store(built, tiny())
    assert not report.ok
    for name in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
        assert has(report.problems, "checkpoint:", name, "is later than")
    (built / "abort").touch()
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert has(report.notes, "checkpoint:", "physicMsgTimestamp")


def test_recovery_brings_a_checkpoint_ahead_of_the_data_back_to_it(built: Path) -> None:
    """A power cut took records the checkpoint already named: after the abnormal recovery and a
    clean exit, the checkpoint claims only the data kept."""
    path = built / "checkpoint"
    fields = struct.unpack(">qqq", read(path, 0, 24))
    patch(path, 0, struct.pack(">qqq", *(value + 86_400_000 for value in fields)))
    (built / "abort").touch()
    MessageStore.open(built, tiny()).shutdown()
    report = verify_store(built, tiny())
    assert report.ok, report.problems


def test_a_truncated_segment_is_a_problem_not_a_traceback(built: Path) -> None:
    path = sorted((built / "commitlog").iterdir())[1]
    os.truncate(path, TINY["mappedFileSizeCommitLog"] - 100)
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, f"commitlog/{path.name}", "3996 bytes, the configured size is 4096")
    assert has(report.notes, "could not be loaded")
    assert report.problem_count == 1  # the load error names the same file: reported once
    agrees_with_rmqread(built, report)


def test_a_padded_segment_is_a_problem(built: Path) -> None:
    path = sorted((built / "commitlog").iterdir())[0]
    with open(path, "ab") as f:
        f.write(b"\0" * 10)
    report = verify_store(built, tiny())
    assert has(report.problems, f"commitlog/{path.name}", "4106 bytes")
    agrees_with_rmqread(built, report)


def test_a_stray_file_in_the_commit_log_folder_is_a_problem(built: Path) -> None:
    (built / "commitlog" / "notes.txt").write_text("hello")
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, "commitlog/notes.txt", "stray file")
    agrees_with_rmqread(built, report)


def test_a_wrong_segment_name_is_a_gap(built: Path) -> None:
    last = sorted((built / "commitlog").iterdir())[-1]
    last.rename(last.with_name(f"{int(last.name) + 4096:020d}"))
    report = verify_store(built, tiny())
    assert has(report.problems, "a gap")


# -- consume queues ----------------------------------------------------------------------------------
def test_a_zeroed_unit_in_the_middle_of_a_queue(built: Path) -> None:
    queue = [r for r in records(built) if (r["topic"], r["queueId"]) == ("TopicA", 0)]
    assert len(queue) >= 8
    path = built / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    patch(path, 4 * 20, bytes(20))
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, f"consumequeue/TopicA/0/{path.name}", "ends at unit 4", "non-zero bytes follow")
    assert has(report.problems, f"record at {queue[4]['offset']} (TopicA/0 queue offset 4)", "not in its consume queue")
    agrees_with_rmqread(built, report)


def test_a_unit_with_a_wrong_size_or_tags_code(built: Path) -> None:
    queue = [r for r in records(built) if (r["topic"], r["queueId"]) == ("TopicB", 1)]
    path = built / "consumequeue" / "TopicB" / "1" / f"{0:020d}"
    patch(path, 2 * 20 + 8, struct.pack(">i", queue[2]["size"] + 1))
    patch(path, 3 * 20 + 12, struct.pack(">q", 12345))
    report = verify_store(built, tiny())
    assert has(
        report.problems, "consumequeue/TopicB/1 unit 2", f"size {queue[2]['size'] + 1}, record {queue[2]['size']}"
    )
    assert has(report.problems, "consumequeue/TopicB/1 unit 3", "tags code 12345")
    assert has(report.next_steps, "consume queues: build them again") and not has(report.next_steps, "header")
    agrees_with_rmqread(built, report)


@pytest.mark.parametrize("name", ["topics.json", "delayOffset.json"])
def test_a_config_file_unreadable_with_its_backup_gets_a_next_step_that_works(built: Path, tmp_path, name) -> None:
    """Neither the file nor its backup reads: the store does not load (RocketMQ's broker does not
    start), so recover cannot help; the step says to move both aside, and after it verify is clean."""
    config = built / "config"
    for path in (config / name, config / f"{name}.bak"):
        path.write_text('{"x":')
    report = verify_store(built, tiny())
    assert has(report.problems, "the store cannot be loaded", name)
    assert has(report.next_steps, f"{name} cannot be read, nor its backup", "move both out")
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in (config / name, config / f"{name}.bak"):
        path.rename(aside / path.name)
    assert verify_store(built, tiny()).ok


def test_a_record_header_saying_prepared_warns_that_a_queue_rebuild_would_shift_its_queue(built: Path) -> None:
    """The unit is right and the record's header (no CRC covers it) is damaged: the rebuild verify
    names for queue problems would drop the record from its queue and move every later unit down
    one offset, so the next step says so and when to keep the queues."""
    target = [r for r in records(built) if (r["topic"], r["queueId"]) == ("TopicA", 0)][3]
    path, pos = segment(built, target["offset"])
    patch(path, pos + 36, struct.pack(">i", target["sysFlag"] | 0x4))  # SYSFLAG: PREPARED
    report = verify_store(built, tiny())
    assert has(report.problems, "consumequeue/TopicA/0 unit 3", "the record is a prepared or rollback one")
    assert has(report.next_steps, "consume queues: build them again", "every later unit of that queue would move")


def test_a_unit_pointing_into_a_record(built: Path) -> None:
    queue = [r for r in records(built) if (r["topic"], r["queueId"]) == ("TopicA", 2)]
    path = built / "consumequeue" / "TopicA" / "2" / f"{0:020d}"
    patch(path, 20, struct.pack(">q", queue[1]["offset"] + 4))
    report = verify_store(built, tiny())
    assert has(report.problems, f"consumequeue/TopicA/2 unit 1 -> {queue[1]['offset'] + 4}", "no record starts there")


def test_an_undispatched_tail_is_a_note_with_abort_and_a_problem_without(built: Path) -> None:
    queue = [r for r in records(built) if (r["topic"], r["queueId"]) == ("TopicB", 2)]
    last = len(queue) - 1
    path = built / "consumequeue" / "TopicB" / "2" / f"{(last * 20) - (last * 20) % 200:020d}"
    patch(path, last * 20 % 200, bytes(20))
    report = verify_store(built, tiny())
    assert has(report.problems, f"record at {queue[-1]['offset']}", "not in its consume queue")

    (built / "abort").touch()
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert has(report.notes, "1 records are not in their consume queues yet")
    agrees_with_rmqread(built, report)


def test_units_and_entries_past_a_lost_tail_are_notes_after_a_crash(built: Path) -> None:
    last = records(built)[-1]
    path, pos = segment(built, last["offset"])
    patch(path, pos, bytes(last["size"]))  # the last record never reached the disk
    report = verify_store(built, tiny())
    assert has(report.problems, f"-> {last['offset']}: at or past the log end {last['offset']}")

    (built / "abort").touch()
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert has(report.notes, f"-> {last['offset']}: at or past the log end")
    agrees_with_rmqread(built, report)


def test_a_log_cleaned_up_at_the_front_with_queues_rebuilt_from_pre_blank_units(built: Path) -> None:
    first = sorted((built / "commitlog").iterdir())[0]
    first.unlink()  # as cleanup deletes an expired segment
    shutil.rmtree(built / "consumequeue")  # rebuilt by recovery: each queue starts with pre-blank units
    (built / "abort").touch()
    with MessageStore.open(built, tiny()) as store:
        assert store.min_phy_offset == 4096
    cq = (built / "consumequeue" / "TopicA" / "0" / f"{0:020d}").read_bytes()
    assert cq[:20] == struct.pack(">qiq", 0, 0x7FFFFFFF, 0)  # a pre-blank unit
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert report.log_min_offset == 4096 and report.records < N
    assert report.units == report.records  # the pre-blank units are not counted as units
    assert has(report.notes, "index entries point below the log's first offset")
    agrees_with_rmqread(built, report)


# -- index -------------------------------------------------------------------------------------------
def test_a_corrupted_index_entry_phy(built: Path) -> None:
    first = sorted((built / "index").iterdir())[0]
    at = INDEX_HEADER_SIZE + TINY["maxHashSlotNum"] * HASH_SLOT_SIZE + 3 * INDEX_SIZE + 4
    phy = struct.unpack(">q", read(first, at, 8))[0]
    patch(first, at, struct.pack(">q", phy + 1))
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, f"index/{first.name} entry 3 -> {phy + 1}: no record starts there")
    assert has(report.problems, f"of the record at {phy}", "is not found by a query")
    agrees_with_rmqread(built, report)


def test_an_index_entry_pointing_at_another_record(built: Path) -> None:
    first = sorted((built / "index").iterdir())[0]
    base = INDEX_HEADER_SIZE + TINY["maxHashSlotNum"] * HASH_SLOT_SIZE
    other = struct.unpack(">q", read(first, base + 9 * INDEX_SIZE + 4, 8))[0]
    phy = struct.unpack(">q", read(first, base + 2 * INDEX_SIZE + 4, 8))[0]
    assert other != phy
    patch(first, base + 2 * INDEX_SIZE + 4, struct.pack(">q", other))
    report = verify_store(built, tiny())
    assert has(report.problems, f"index/{first.name} entry 2 -> {other}", "matches no key of the record")
    agrees_with_rmqread(built, report)


def test_a_broken_index_chain_hides_keys_from_queries(built: Path) -> None:
    first = sorted((built / "index").iterdir())[0]
    base = INDEX_HEADER_SIZE + TINY["maxHashSlotNum"] * HASH_SLOT_SIZE
    count = struct.unpack(">i", read(first, 36, 4))[0]
    # the newest entry with a predecessor: cut its link
    for i in range(count - 1, 0, -1):
        prev = struct.unpack(">i", read(first, base + i * INDEX_SIZE + 16, 4))[0]
        if prev:
            break
    patch(first, base + i * INDEX_SIZE + 16, struct.pack(">i", 0))
    report = verify_store(built, tiny())
    assert has(report.problems, f"index/{first.name} entry {i}: previous entry 0, expected {prev}")
    assert has(report.problems, "is not found by a query")
    agrees_with_rmqread(built, report)


def test_an_index_header_out_of_range(built: Path) -> None:
    first = sorted((built / "index").iterdir())[0]
    patch(first, 36, struct.pack(">i", 10_000))
    report = verify_store(built, tiny())
    assert has(report.problems, f"index/{first.name}: indexCount 10000 is out of range")


def _drop_second_index_file_in_a_crash(root: Path) -> None:
    """Make the state a crash leaves: abort present, and the checkpoint older than index file 2."""
    first, second = sorted((root / "index").iterdir())[:2]
    end_ts = struct.unpack(">q", read(first, 8, 8))[0]
    patch(second, 8, struct.pack(">q", end_ts + 1000))  # newer than the checkpoint: recovery drops it
    patch(root / "checkpoint", 16, struct.pack(">q", end_ts))  # indexMsgTimestamp
    (root / "abort").touch()


def test_keys_straddling_a_dropped_index_file_are_noted_then_rebuilt(built: Path) -> None:
    # 127 entries per file, 3 keys per record: record 42's UNIQ_KEY is file 1's last entry and its
    # two keys went into file 2
    straddling = records(built)[42]
    _drop_second_index_file_in_a_crash(built)
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert has(report.notes, "newer than the checkpoint")
    assert has(report.notes, f"at or after the index's last entry (offset {straddling['offset']})")
    agrees_with_rmqread(built, report)

    with MessageStore.open(built, tiny()) as store:  # recovery in place
        assert store.recovery.abnormal
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert report.notes == [] or all("empty file" in n for n in report.notes)
    agrees_with_rmqread(built, report)


# -- the report ----------------------------------------------------------------------------------------
def test_max_problems_limits_the_list_but_counts_everything(built: Path) -> None:
    for target in records(built):  # every record fails its CRC: a problem each
        path, pos = segment(built, target["offset"])
        body_at = pos + rec.header_for(target["sysFlag"]).size
        patch(path, body_at, bytes([read(path, body_at, 1)[0] ^ 1]))
    report = verify_store(built, tiny(), max_problems=5)
    assert len(report.problems) == 5
    assert report.problem_count > 5 * 10
    assert report.to_dict()["problemCount"] == report.problem_count
    full = verify_store(built, tiny())
    assert full.problem_count == report.problem_count and len(full.problems) == full.problem_count


# -- the config files --------------------------------------------------------------------------------
def _committed(root: Path, offsets: dict[int, int]) -> None:
    """Commit consumer offsets of group ``g``; persisted now and at shutdown, so that
    consumerOffset.json gets a backup (.bak) holding them too."""
    with MessageStore.open(root, tiny()) as store:
        for queue_id, offset in offsets.items():
            store.commit_offset("g", "TopicA", queue_id, offset)
        store.consumer_offsets.persist()
    assert (root / "config" / "consumerOffset.json.bak").is_file()


def test_a_broken_config_file_is_a_problem_naming_what_loading_falls_back_to(built: Path) -> None:
    _committed(built, {0: 5, 1: 7})
    assert verify_store(built, tiny()).ok
    offsets = built / "config" / "consumerOffset.json"
    offsets.write_text('{"offsetTable": {"TopicA@g": {"0": "five"}}}')  # JSON, but not offsets
    report = verify_store(built, tiny())
    assert not report.ok
    assert has(report.problems, "consumerOffset.json", "unexpected content", "older state", ".bak")
    with MessageStore.open(built, tiny(), read_only=True) as store:  # what the problem says
        assert store.query_offset("g", "TopicA", 0) == 5
    (built / "config" / "consumerOffset.json.bak").unlink()
    report = verify_store(built, tiny())
    assert has(report.problems, "consumerOffset.json", "no backup", "empty")
    offsets.write_text("{")
    (built / "config" / "topics.json").write_text("[]")
    report = verify_store(built, tiny())
    assert has(report.problems, "consumerOffset.json", "not JSON")
    assert has(report.problems, "topics.json", "JSON list")
    assert report.problem_count == 2
    offsets.write_bytes(b"")  # blank, no backup: a first unsynced write cut by a power loss
    for name in ("topics.json", "topics.json.bak"):
        (built / "config" / name).unlink(missing_ok=True)
    report = verify_store(built, tiny())
    assert has(report.problems, "consumerOffset.json", "empty", "no backup")
    assert report.problem_count == 1, report.problems  # a missing file with no backup: no such config yet


def test_a_broken_config_file_is_logged_when_loaded(built: Path, caplog: pytest.LogCaptureFixture) -> None:
    _committed(built, {0: 3})
    (built / "config" / "consumerOffset.json").write_bytes(b"\xff\xfe not text")
    with (
        caplog.at_level(logging.ERROR, logger="rocketstore.meta.json_files"),
        MessageStore.open(built, tiny(), read_only=True) as store,
    ):
        assert store.query_offset("g", "TopicA", 0) == 3  # the backup's
    assert has([r.getMessage() for r in caplog.records], "consumerOffset.json", "not UTF-8", "its backup")


def test_a_missing_store_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        verify_store(tmp_path / "nothing", tiny())
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError):  # not "clean": a mistyped path is not a healthy store
        verify_store(tmp_path / "empty", tiny())


def test_records_without_tags_or_keys(tmp_path: Path) -> None:
    """Property strings holding only a UNIQ_KEY (no separator at all in a scanned window)."""
    with MessageStore.open(tmp_path / "s", tiny()) as store:
        for _ in range(3):
            store.put(Message("TopicA", b"x")).raise_for_status()
        assert store.wait_for_dispatch()
    report = verify_store(tmp_path / "s", tiny())
    assert report.ok, report.problems
    assert report.records == 3 and report.keys == 3


# -- bugs found elsewhere --------------------------------------------------------------------------------
def test_a_put_into_the_schedule_topic_gets_the_delivery_time_as_tags_code(tmp_path: Path) -> None:
    props = {"DELAY": "2", "REAL_TOPIC": "TopicA", "REAL_QID": "0"}
    with MessageStore.open(tmp_path / "s", tiny()) as store:
        result = store.put(Message("SCHEDULE_TOPIC_XXXX", b"x", tags="TagA", properties=props), queue_id=1)
        result.raise_for_status()
        assert store.wait_for_dispatch()
        unit = store.queues.find("SCHEDULE_TOPIC_XXXX", 1).get_unit(0)
    report = verify_store(tmp_path / "s", tiny())
    assert unit[2] == result.store_timestamp + 5000  # level 2 = 5 s
    assert report.ok, report.problems


def test_a_killed_rebuilds_work_folder_is_a_note(built: Path) -> None:
    (built / ".rebuild-0badc0de" / "parts").mkdir(parents=True)
    report = verify_store(built, tiny())
    assert report.ok
    assert has(report.notes, ".rebuild-0badc0de", "did not finish")


def test_records_a_live_queue_lost_the_head_of_are_problems(tmp_path: Path) -> None:
    """A queue whose first file is gone (the topic was not deleted) hides its first messages
    from consumers: those records are problems, not an earlier life of the queue."""
    root = tmp_path / "store"
    config = tiny().copy(mappedFileSizeCommitLog=65536)
    with MessageStore.open(root, config) as store:
        for i in range(25):
            store.put(Message("T", b"x" * 50, keys=f"k{i}")).raise_for_status()
        assert store.wait_for_dispatch()
    (root / "consumequeue" / "T" / "0" / f"{0:020d}").unlink()  # units 0..9
    report = verify_store(root, config)
    assert not report.ok
    assert sum("not in its consume queue" in p for p in report.problems) == 10


def test_the_schedule_topics_queues_gone_is_damage_not_a_deleted_topic(tmp_path: Path) -> None:
    """SCHEDULE_TOPIC_XXXX is never deleted: its queue folder gone is a problem, even when
    topics.json has no entry for it."""
    root = tmp_path / "store"
    with MessageStore.open(root, tiny()) as store:
        store.put(Message("TopicA", b"x", properties={"DELAY": "3"})).raise_for_status()
        assert store.wait_for_dispatch()
    topics = root / "config" / "topics.json"
    table = json.loads(topics.read_text())
    del table["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]
    topics.write_text(json.dumps(table))
    shutil.rmtree(root / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
    report = verify_store(root, tiny())
    assert not report.ok
    assert has(report.problems, "(SCHEDULE_TOPIC_XXXX/", "not in its consume queue")
    assert not has(report.notes, "deleted topics")


@needs_vectors
@pytest.mark.parametrize("gone", ["PayTopic", "SCHEDULE_TOPIC_XXXX"])
def test_a_queue_folder_gone_from_a_store_without_topics_json_is_damage(tmp_path: Path, gone: str) -> None:
    """A RocketMQ store without config/topics.json cannot say a topic was deleted: its records
    without a consume queue are problems."""
    root = copy_store(VECTORS / "sample-clean" / "store", tmp_path / "store")
    assert not (root / "config" / "topics.json").exists()
    shutil.rmtree(root / "consumequeue" / gone)
    report = verify_store(root, StoreConfig(**VECTOR_GEOMETRY))
    assert not report.ok
    assert has(report.problems, f"({gone}/", "not in its consume queue")
    assert not has(report.notes, "deleted topics")


def test_a_store_in_use_is_said_to_be(built: Path) -> None:
    """A store a process has open (it holds the lock, abort is there) is not reported as crashed
    and clean without a word: verify says who has it open and that its tail may be mid-write."""
    assert verify_store(built, tiny()).lock_held_by is None
    with MessageStore.open(built, tiny()):
        report = verify_store(built, tiny())
    assert report.lock_held_by == os.getpid()
    assert report.to_dict()["lockHeldBy"] == os.getpid()
    assert dict(report.summary_rows())["last exit"].startswith("in use: this process has it open")
    assert has(report.notes, "the store is in use", "mid-write")


def test_a_store_written_without_an_index_gets_the_hint(tmp_path: Path) -> None:
    """No index/ at all (messageIndexEnable=false when written): one problem naming the setting."""
    root = tmp_path / "store"
    config = tiny().copy(messageIndexEnable=False)
    with MessageStore.open(root, config) as store:
        for i in range(5):
            store.put(Message("TopicA", b"x", keys=f"k{i}")).raise_for_status()
        assert store.wait_for_dispatch()
    assert not (root / "index").exists() or not any((root / "index").iterdir())
    report = verify_store(root, tiny())
    assert report.problem_count == 1
    assert has(report.problems, "no index files", "--set messageIndexEnable=false")
    assert verify_store(root, config).ok


@pytest.mark.parametrize("name", ["99999999999999999999", "2147483648", "-2147483649", "007", "+1", "\u0663"])
def test_a_queue_folder_not_named_by_a_java_int_is_skipped(built: Path, name: str) -> None:
    """RocketMQ names a queue folder by its int queue id (Integer.toString): a name past the int
    range, with a leading zero or sign, or of other scripts' digits, names no queue (int() takes
    some of them, and its queue would be read from another folder than the one its files are in)."""
    topic_dir = next(p for p in (built / "consumequeue").iterdir() if (p / "1").is_dir())
    (topic_dir / "1").rename(topic_dir / name)
    report = verify_store(built, tiny())
    assert has(report.notes, f"consumequeue/{topic_dir.name}/{name}", "not a queue folder, skipped")
    assert not report.ok and has(report.problems, "not in its consume queue")  # queue 1 has none now
    with MessageStore.open(built, tiny(), read_only=True) as store:  # queue 1 is built again from the log
        assert store.get_max_offset_in_queue(topic_dir.name, 1) == N // 6
        assert all(os.path.basename(cq.path) != name for cq in store.queues.table.values())


def test_a_config_file_without_its_table_is_a_problem(built: Path) -> None:
    for name in ("topics.json", "topics.json.bak"):
        (built / "config" / name).unlink(missing_ok=True)
    (built / "config" / "topics.json").write_text('{"offsetTable":{"TopicA@g1":{0:3}}}')
    report = verify_store(built, tiny())
    assert has(report.problems, "topics.json", "no topicConfigTable"), report.problems


def test_checkpoint_times_before_1970_are_noted(built: Path) -> None:
    """No store writes a negative time (an all-0xff checkpoint reads -1): a note, as abnormal
    recovery then walks the log from its first segment, which loses nothing."""
    path = built / "checkpoint"
    patch(path, 0, b"\xff" * 24)
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    for name in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
        assert has(report.notes, "checkpoint:", name, "-1", "before 1970")


def test_topics_with_queues_but_no_topics_json_entry_are_noted(built: Path) -> None:
    """A RocketMQ broker answers pulls of a topic it has no config of with TOPIC_NOT_EXIST; the next
    writable open adds the entries (as after puts a crash cut short). A store without the file (as
    RocketMQ's store writes alone, without a broker) gets no note."""
    for name in ("topics.json", "topics.json.bak"):
        (built / "config" / name).unlink(missing_ok=True)
    assert not has(verify_store(built, tiny()).notes, "topics.json")
    (built / "config" / "topics.json").write_text('{"topicConfigTable":{}}')
    report = verify_store(built, tiny())
    assert report.ok, report.problems
    assert has(report.notes, "topics.json", "no entry", "TopicA", "TopicB", "TOPIC_NOT_EXIST")
    MessageStore.open(built, tiny()).shutdown()
    assert not has(verify_store(built, tiny()).notes, "topics.json")
