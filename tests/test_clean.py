"""Retention and disk protection (checklist I; spec 14), on real stores with one message per file.

As RocketMQ's ``DefaultMessageStoreCleanFilesTest`` does, every commit-log segment holds exactly
one message, consume-queue files hold a few units and index files seven keys; expiry is
simulated by setting the files' modification time in the past. Disk ratios are real: the tests
that need a full disk fill a small loop-mounted ext4 file system for real.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.main import cli
from rocketstore.errors import InvalidTopicError, StoreFileError
from rocketstore.files.disk import used_ratio
from rocketstore.files.file_queue import MappedFileQueue
from rocketstore.meta.fastjson import loads as fastjson_loads
from rocketstore.results import GetMessageStatus, PutMessageStatus
from rocketstore.running_flags import DISK_FULL
from rocketstore.verify import verify_store

BODY = b"x" * 100
HOUR = 3600


def clean_config(**settings: object) -> StoreConfig:
    """Segments of one message each; 4-unit queue files; 7-key index files; cleanup paced at 0 ms
    and triggered only by what a test sets up (deleteWhen is an hour that is not now)."""
    size = _record_size()
    base = {
        "mappedFileSizeCommitLog": size + size // 2,  # room for one record and its BLANK
        "mappedFileSizeConsumeQueue": 80,
        "maxHashSlotNum": 4,
        "maxIndexNum": 8,
        "brokerIP1": "127.0.0.1",
        "fileReservedTime": 1,
        "deleteWhen": str((time.localtime().tm_hour + 12) % 24),
        "deleteCommitLogFilesInterval": 0,
        "deleteConsumeQueueFilesInterval": 0,
        "diskMaxUsedSpaceRatio": 95,
        "cleanResourceInterval": 3_600_000,
    }
    return StoreConfig({**base, **settings})


_SIZE: list[int] = []


def _record_size() -> int:
    if not _SIZE:
        import tempfile

        with tempfile.TemporaryDirectory() as folder, MessageStore.open(folder, brokerIP1="127.0.0.1") as store:
            _SIZE.append(store.put(Message("CleanTopic", BODY, keys="k-0")).wrote_bytes)
    return _SIZE[0]


def fill(store: MessageStore, count: int, start: int = 0) -> list[int]:
    """Put ``count`` messages (one per segment); their commit-log offsets."""
    offsets = []
    for i in range(start, start + count):
        r = store.put(Message("CleanTopic", BODY, keys=f"k-{i}"))
        assert r.status == PutMessageStatus.PUT_OK, r
        offsets.append(r.commit_log_offset)
    assert store.wait_for_dispatch()
    return offsets


def segment_files(store: MessageStore) -> list[str]:
    return [f.path for f in store.commit_log.queue.files]


def age(paths: list[str], hours: float) -> None:
    """Set the files' modification time ``hours`` in the past."""
    when = time.time() - hours * HOUR
    for path in paths:
        os.utime(path, (when, when))


def now_is_delete_time() -> str:
    """A ``deleteWhen`` naming this hour and the next (a test may cross the hour)."""
    hour = time.localtime().tm_hour
    return f"{hour};{(hour + 1) % 24}"


def pull_all(store: MessageStore, topic: str, offset: int) -> list:
    """Every message of queue 0 from ``offset`` (a pull stops at the end of a queue file, as RocketMQ's)."""
    out = []
    while True:
        got = store.get_message("g", topic, 0, offset, 32)
        if got.status != GetMessageStatus.FOUND:
            return out
        out += got.messages
        offset = got.next_begin_offset


def cq_files(store: MessageStore) -> list[str]:
    cq = store.queues.find("CleanTopic", 0)
    return [f.file_name for f in cq.queue.files]


# -- delete by time ----------------------------------------------------------------------------------
def test_delete_by_time_deletes_at_most_10_files_per_run_and_queues_follow(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path / "s", clean_config(deleteWhen=now_is_delete_time()))
    try:
        offsets = fill(store, 55)
        files = segment_files(store)
        assert len(files) == 55  # one message per segment
        age(files[:15], hours=2)
        index_before = len(store.index.files)
        assert index_before >= 7

        # six hours on, every file has expired, but it is not a deleteWhen hour: nothing happens
        assert store.services.clean.run_once(time.time() + 6 * HOUR).commit_log_files == 0

        first = store.services.clean.run_once()
        assert (first.triggered_by, first.commit_log_files) == ("time", 10)
        second = store.services.clean.run_once()
        assert second.commit_log_files == 5
        assert store.services.clean.run_once().commit_log_files == 0
        for path in files[:15]:
            assert not os.path.exists(path)
        assert segment_files(store) == files[15:]
        assert store.min_phy_offset == offsets[15]

        # consume-queue files wholly below the new minimum went; the queue's minimum moved
        assert first.consume_queue_files + second.consume_queue_files == 3  # units 0-11 of 15 gone
        assert cq_files(store)[0] == f"{12 * 20:020d}"
        assert store.get_min_offset_in_queue("CleanTopic", 0) == 15
        # index files whose entries all lie below the minimum went (7 keys each: UNIQ_KEY and KEYS)
        assert first.index_files + second.index_files == 15 * 2 // 7
        assert all(f.end_phy_offset >= store.min_phy_offset for f in store.index.files[:-1])

        # reads below the minimum answer as RocketMQ does; the rest is all there
        got = store.get_message("g", "CleanTopic", 0, 3, 32)
        assert got.status == GetMessageStatus.OFFSET_TOO_SMALL
        assert got.next_begin_offset == 15
        assert [m.queue_offset for m in pull_all(store, "CleanTopic", 15)] == list(range(15, 55))
        assert store.look_message_by_offset(offsets[3]) is None
        assert store.query_message("CleanTopic", "k-3").messages == []
        assert [m.commit_log_offset for m in store.query_message("CleanTopic", "k-40").messages] == [offsets[40]]
        # index entries that outlived their records (in a file that ends above the minimum) are
        # no message and nothing unreadable: retention removed them, nothing is damaged
        below = [store.query_message("CleanTopic", f"k-{i}") for i in range(15)]
        assert any(r.index_hits for r in below) and not any(r.messages or r.unreadable for r in below)
    finally:
        store.shutdown()
    # the store reopens as trimmed, and verifies clean
    assert verify_store(tmp_path / "s", clean_config()).ok
    with MessageStore.open(tmp_path / "s", clean_config(), read_only=True) as again:
        assert again.min_phy_offset == offsets[15]
        assert again.get_min_offset_in_queue("CleanTopic", 0) == 15


def test_only_a_leading_run_is_deleted_and_several_hours_are_accepted(tmp_path: Path) -> None:
    hour = time.localtime().tm_hour
    config = clean_config(deleteWhen=f"{(hour + 3) % 24};{hour};{(hour + 1) % 24}")
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 12)
        files = segment_files(store)
        age(files[:4] + files[5:10], hours=2)  # file 4 is young: it stops the run
        assert store.services.clean.run_once().commit_log_files == 4
        assert segment_files(store) == files[4:]
        assert store.services.clean.run_once().commit_log_files == 0
        assert store.services.clean.is_time_to_delete(time.time() + 3 * HOUR)
        assert not store.services.clean.is_time_to_delete(time.time() + 6 * HOUR)


def test_young_files_stay_and_the_newest_file_always_stays(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        fill(store, 5)
        files = segment_files(store)
        age(files, hours=2)  # every file expired, the last (being written) too
        assert store.clean_expired_files().commit_log_files == 4
        assert segment_files(store) == files[4:]
        fill(store, 2, start=5)
        assert store.clean_expired_files().commit_log_files == 1  # the old newest is not newest now
        assert store.clean_expired_files().commit_log_files == 0  # the new ones are young


def test_a_reopen_keeps_the_newest_segments_age(tmp_path: Path) -> None:
    """Recovery cuts the newest segment at the end of its data (zeros after it) on every open; the
    file keeps its modification time, so retention still ages it from its last write."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        fill(store, 3)
        files = segment_files(store)
    age(files, hours=5)
    before = [os.stat(f).st_mtime for f in files]
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        assert segment_files(store) == files
        assert [os.stat(f).st_mtime for f in files] == before


# -- manual delete -----------------------------------------------------------------------------------
def test_manual_delete_outside_delete_when(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        fill(store, 30)
        files = segment_files(store)
        age(files[:25], hours=2)
        service = store.services.clean
        assert service.run_once().commit_log_files == 0  # not the hour, the disk is fine
        rounds = service.rounds
        service.execute_delete_files_manually()  # wakes the service: its thread deletes a batch
        assert service.wait_for_round(rounds + 1, timeout=10)
        assert len(segment_files(store)) == 30 - 10
        assert service.run_once().commit_log_files == 10  # the next rounds go on, whatever the hour
        assert service.run_once().commit_log_files == 5
        assert service.run_once().commit_log_files == 0
        assert service.manual_delete_times == 20 - 4
        assert segment_files(store) == files[25:]


def test_exports_walking_a_store_go_on_past_files_cleanup_deletes_meanwhile(tmp_path: Path) -> None:
    """A walk of the log or of the queues (the export's generators) while cleanup in the same
    process deletes the files ahead of it goes on with the files that are left; it used to stop
    there, as if the store ended."""
    from rocketstore.export import iter_log, iter_units

    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        fill(store, 30)
        for walk, position in ((iter_log, "queue_offset"), (iter_units, "queue_offset")):
            it = walk(store)
            assert getattr(next(it), position) == store.get_min_offset_in_queue("CleanTopic", 0)
            age(segment_files(store)[:10], hours=2)
            assert store.clean_expired_files().commit_log_files == 10
            first = store.get_min_offset_in_queue("CleanTopic", 0)
            rest = [getattr(x, position) for x in it]
            assert rest[-(store.get_max_offset_in_queue("CleanTopic", 0) - first) :] == list(
                range(first, store.get_max_offset_in_queue("CleanTopic", 0))
            ), rest


def test_clean_command(tmp_path: Path) -> None:
    config = clean_config()
    with MessageStore.open(tmp_path / "s", config) as store:
        offsets = fill(store, 25)
        age(segment_files(store)[:22], hours=2)
    settings = [f"--set={k}={v}" for k, v in config.changed().items() if k != "storePathRootDir"]
    done = CliRunner().invoke(cli, ["clean", str(tmp_path / "s"), "--json", *settings])
    assert done.exit_code == 0, done.output
    info = json.loads(done.output)
    assert info["deleted"]["commitLogFiles"] == 22
    assert info["minOffset"] == offsets[22]
    assert verify_store(tmp_path / "s", config).ok


# -- reference counting ------------------------------------------------------------------------------
def test_a_held_file_is_not_destroyed_until_released(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", clean_config(destroyMapedFileIntervalForcibly=3_600_000)) as store:
        offsets = fill(store, 6)
        files = segment_files(store)
        age(files, hours=2)
        reader = store.commit_log.queue.files[1]
        assert reader.hold()  # a reader is on file 1
        run = store.clean_expired_files()
        assert run.commit_log_files == 1  # file 0 went; file 1 lost its name but is still mapped
        assert not os.path.exists(files[1]) and not reader.available
        assert reader.read(0, 8)  # the holder still reads its bytes
        assert store.min_phy_offset == offsets[2]  # a file being deleted does not count
        assert store.get_message("g", "CleanTopic", 0, 1, 1).status == GetMessageStatus.OFFSET_TOO_SMALL
        # lookups by offset and by key see it gone too, as RocketMQ's (whose hold() fails on it)
        assert store.look_message_by_offset(offsets[1]) is None
        assert store.query_message("CleanTopic", "k-1").messages == []
        assert store.query_message("CleanTopic", "k-2").messages != []
        reader.release()
        run = store.clean_expired_files()
        assert run.commit_log_files == 4
        assert segment_files(store) == files[5:]


def test_a_hanged_file_is_destroyed_forcibly_later(tmp_path: Path) -> None:
    config = clean_config(destroyMapedFileIntervalForcibly=0, redeleteHangedFileInterval=0)
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 4)
        files = segment_files(store)
        mapped = store.commit_log.queue.files[0]
        assert mapped.hold()  # a reader that never lets go
        mapped.shutdown(0)  # a delete attempt made it unavailable and took its name
        assert not os.path.exists(files[0])
        run = store.services.clean.run_once()  # nothing expired: only the hanged file is redone
        assert run.hanged_files == 1
        assert not os.path.exists(files[0])
        assert segment_files(store) == files[1:]


def test_later_deletes_and_the_close_of_a_file_whose_name_went_are_quiet(tmp_path: Path, caplog) -> None:
    """Files doomed while held lost their names at the first attempt: the hanged-file redelete
    and the store's close (a consume-queue file is still held then) meet the missing names
    without an error or a warning, and the store reopens without them."""
    config = clean_config(destroyMapedFileIntervalForcibly=3_600_000)
    with caplog.at_level(logging.WARNING, logger="rocketstore"), MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 12)
        files = segment_files(store)
        age(files[:5], hours=2)
        segment, queue_file = store.commit_log.queue.files[4], store.queues.find("CleanTopic", 0).queue.files[0]
        assert segment.hold() and queue_file.hold()  # readers that never let go
        assert store.clean_expired_files().commit_log_files == 4
        assert not os.path.exists(segment.path) and not os.path.exists(queue_file.path)
        assert segment.read(0, 8) != bytes(8)
        assert store.commit_log.queue.retry_delete_first_file(0)  # the hanged-file redelete, forced
        assert segment.cleanup_over and segment_files(store) == files[5:]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert sorted(os.listdir(tmp_path / "s" / "commitlog")) == [os.path.basename(p) for p in files[5:]]
    assert queue_file.file_name not in os.listdir(os.path.dirname(queue_file.path))
    assert verify_store(tmp_path / "s", config).ok


# -- disk ratios -------------------------------------------------------------------------------------
def ballast(folder: Path, target_ratio: float, fs) -> None:
    """Fill the file system with a plain file until it is ``target_ratio`` used."""
    st = os.statvfs(fs.mount)
    need = int((target_ratio - (1 - st.f_bfree / st.f_blocks)) * st.f_blocks * st.f_frsize)
    if need > 0:
        with open(folder / "ballast", "ab") as f:
            os.posix_fallocate(f.fileno(), f.seek(0, 2), need)


def test_delete_by_space_removes_expired_files_only(loop_fs, tmp_path: Path) -> None:
    fs = loop_fs(32)
    config = clean_config(diskMaxUsedSpaceRatio=40, diskSpaceCleanForciblyRatio=85)
    with MessageStore.open(fs.mount / "s", config) as store:
        fill(store, 20)
        files = segment_files(store)
        age(files[:12], hours=2)
        assert store.services.clean.run_once().commit_log_files == 0  # 40 % not reached yet
        ballast(fs.mount, 0.5, fs)
        first = store.services.clean.run_once()
        assert (first.triggered_by, first.commit_log_files) == ("space", 10)
        assert store.services.clean.run_once().commit_log_files == 2  # the young ones stay
        assert store.services.clean.run_once().commit_log_files == 0
        assert segment_files(store) == files[12:]
        assert not store.running_flags & DISK_FULL


def test_past_the_forcible_ratio_young_files_go_too(loop_fs) -> None:
    fs = loop_fs(32)
    config = clean_config(diskSpaceCleanForciblyRatio=50)
    with MessageStore.open(fs.mount / "s", config) as store:
        fill(store, 15)
        files = segment_files(store)
        ballast(fs.mount, 0.6, fs)
        run = store.services.clean.run_once()
        assert (run.triggered_by, run.commit_log_files) == ("space", 10)
        assert store.services.clean.run_once().commit_log_files == 4
        assert segment_files(store) == files[14:]  # never the newest
    forbidden = clean_config(diskSpaceCleanForciblyRatio=50, cleanFileForciblyEnable=False)
    with MessageStore.open(fs.mount / "t", forbidden) as store:
        fill(store, 5)
        assert store.services.clean.run_once().commit_log_files == 0


def _filling_disk_config() -> StoreConfig:
    """1 MiB segments for a 48 MiB file system; cleanup runs only when a test calls it (nothing
    young is deleted behind its back, nor the files it ages by a periodic round)."""
    return StoreConfig(
        mappedFileSizeCommitLog=1 << 20,
        mappedFileSizeConsumeQueue=6000,
        maxHashSlotNum=64,
        maxIndexNum=4096,
        brokerIP1="127.0.0.1",
        cleanFileForciblyEnable=False,
        cleanResourceInterval=3_600_000,
        fileReservedTime=1,
        deleteWhen=str((time.localtime().tm_hour + 12) % 24),
        deleteCommitLogFilesInterval=0,
    )


def test_disk_full_refuses_puts_keeps_reads_and_resumes_after_cleanup(loop_fs) -> None:
    """Fill a real 48 MiB file system with 1 MiB segments: past 90 % puts are refused with
    SERVICE_NOT_AVAILABLE, every acknowledged message stays readable, and once cleanup frees
    space puts are accepted again."""
    fs = loop_fs(48)
    config = _filling_disk_config()
    body = os.urandom(60_000)
    acked: list[tuple[int, int]] = []
    with MessageStore.open(fs.mount / "s", config) as store:
        refused = None
        for i in range(2000):
            r = store.put(Message("FullTopic", body, keys=f"k-{i}"))
            if r.status != PutMessageStatus.PUT_OK:
                refused = r
                break
            acked.append((r.commit_log_offset, r.queue_offset))
        assert refused is not None, "the file system never filled"
        assert refused.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert store.running_flags & DISK_FULL
        assert fs.usage() > 0.9
        again = store.put(Message("FullTopic", b"again"))
        assert again.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "DISK_FULL" in again.detail and "diskSpaceWarningLevelRatio" in again.detail
        assert store.put_batch([Message("FullTopic", b"b")]).status == PutMessageStatus.SERVICE_NOT_AVAILABLE

        # every acknowledged message is there and readable
        assert store.wait_for_dispatch()
        got = pull_all(store, "FullTopic", 0)
        assert [(m.commit_log_offset, m.queue_offset) for m in got] == acked
        assert all(m.body == body for m in got)
        assert store.disk_report()["diskFull"]

        # cleanup: the oldest files have expired; deleting them brings usage under 90 %
        files = segment_files(store)
        age(files[:10], hours=2)
        run = store.clean_expired_files(manually=False)  # the disk ratio itself triggers it
        assert run.triggered_by == "space" and run.commit_log_files == 10
        assert not store.running_flags & DISK_FULL
        r = store.put(Message("FullTopic", body, keys="after"))
        assert r.status == PutMessageStatus.PUT_OK
        assert store.wait_for_dispatch()
        first_kept = store.get_min_offset_in_queue("FullTopic", 0)
        kept = [(m.commit_log_offset, m.queue_offset) for m in pull_all(store, "FullTopic", first_kept)]
        assert kept == [a for a in acked if a[0] >= store.min_phy_offset] + [(r.commit_log_offset, r.queue_offset)]
    assert verify_store(fs.mount / "s", config).ok


def test_dispatch_out_of_disk_while_puts_are_refused_recovers_once_cleanup_frees_room(loop_fs) -> None:
    """The disk past diskSpaceWarningLevelRatio (puts refused, DISK_FULL) and then wholly full:
    dispatch, behind, fails for want of room in its queue and index files. Three failures in a
    row set WRITE_LOGICS_QUEUE_ERROR, which only a reopen clears, so the cleanup the watermarks
    are there for could not bring puts back. While DISK_FULL refuses puts already, a dispatch
    failing for want of room does not stop the store: once cleanup frees room it catches up,
    and puts are taken again."""
    fs = loop_fs(48)
    config = _filling_disk_config()
    body = os.urandom(60_000)
    with MessageStore.open(fs.mount / "s", config) as store:
        for i in range(200):  # a dozen segments dispatched: what cleanup may delete
            assert store.put(Message("FullTopic", body, keys=f"k-{i}")).status == PutMessageStatus.PUT_OK
        assert store.wait_for_dispatch()
        store.reput.stop()  # then dispatch falls behind: it needs room (a new queue file) once the disk is full
        for i in range(200, 2000):
            if store.put(Message("FullTopic", body, keys=f"k-{i}")).status != PutMessageStatus.PUT_OK:
                break
        assert store.running_flags & DISK_FULL and store.dispatch_behind_bytes() > 0
        ballast = fs.mount / "ballast"
        with open(ballast, "wb") as f:  # the rest of the disk, to the last block
            chunk = 1 << 20
            while chunk >= 4096:
                try:
                    os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, chunk)
                except OSError:
                    chunk //= 2
        store.services.clean.stop()  # (a round of its own would measure the disk, and set DISK_FULL again)
        store.set_running_flags(clear_bits=DISK_FULL)  # as if the disk filled between two of cleanup's checks
        store.reput.start()
        deadline = time.monotonic() + 30
        while store.reput.failures < 4 and time.monotonic() < deadline:  # no event tells a failed round
            time.sleep(0.01)
        assert store.reput.failures >= 4 and isinstance(store.reput.last_error, OSError)
        assert store.running_flags == DISK_FULL  # not WRITE_LOGICS_QUEUE_ERROR
        ballast.unlink()
        age(segment_files(store)[:10], hours=2)
        assert store.clean_expired_files(manually=False).commit_log_files == 10
        assert not store.running_flags
        assert store.wait_for_dispatch(30)
        assert store.put(Message("FullTopic", b"after")).status == PutMessageStatus.PUT_OK
    assert verify_store(fs.mount / "s", config).ok


def test_the_used_ratio_leaves_out_the_blocks_reserved_for_root(loop_fs) -> None:
    """RocketMQ's getDiskPartitionSpaceUsedPercent is used / (used + usable), as df shows it: on a
    file system with 5 % reserved for root, 92 % used by df is past diskSpaceWarningLevelRatio
    (90) and puts are refused, though used / total is under 90 %."""
    fs = loop_fs(64, reserved_percent=5)
    with open(fs.mount / "ballast", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 47 << 20)
    st = os.statvfs(fs.mount)
    used = st.f_blocks - st.f_bfree
    df = -(-used * 100 // (used + st.f_bavail)) / 100  # what df says, rounded up
    assert used / st.f_blocks < 0.9 < df
    assert used_ratio(str(fs.mount)) == df
    with MessageStore.open(fs.mount / "s", clean_config()) as store:
        assert store.running_flags & DISK_FULL
        assert store.put(Message("T", b"x")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_several_commit_log_folders(loop_fs, tmp_path: Path) -> None:
    """Segments spread over three folders; a folder past the clean-forcibly ratio takes no new
    segment; DISK_FULL only when every folder is past the warning ratio."""
    disks = [loop_fs(24) for _ in range(3)]
    paths = [str(d.mount / "commitlog") for d in disks]
    config = clean_config(storePathCommitLog=",".join(paths))
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 6)
        spread = [os.path.dirname(p) for p in segment_files(store)]
        assert set(spread) == set(paths)  # round robin over the folders

        ballast(disks[0].mount, 0.92, disks[0])  # the first folder is full
        store.services.clean.check_disk()
        assert store.services.clean.full_paths == {paths[0]}
        assert not store.running_flags & DISK_FULL  # the others have room
        fill(store, 6, start=6)
        new = [os.path.dirname(p) for p in segment_files(store)[6:]]
        assert paths[0] not in new and set(new) == set(paths[1:])
        report = store.disk_report()
        assert report["ratios"][paths[0]] > 0.9 and report["fullPaths"] == [paths[0]]

        for d in disks[1:]:
            ballast(d.mount, 0.92, d)
        store.services.clean.check_disk()
        assert store.running_flags & DISK_FULL
        assert store.put(Message("CleanTopic", BODY)).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        for d in disks:
            os.unlink(d.mount / "ballast")
        store.services.clean.check_disk()
        assert not store.running_flags & DISK_FULL
        assert store.put(Message("CleanTopic", BODY)).status == PutMessageStatus.PUT_OK
    with MessageStore.open(tmp_path / "s", config, read_only=True) as again:
        assert again.get_max_offset_in_queue("CleanTopic", 0) == 13


# -- the service and the admin side ------------------------------------------------------------------
def test_the_clean_service_runs_in_the_store(tmp_path: Path) -> None:
    config = clean_config(deleteWhen=now_is_delete_time(), cleanResourceInterval=20)
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 8)
        files = segment_files(store)
        age(files[:5], hours=2)
        service = store.services.clean
        assert service.wait_for_round(service.rounds + 1, timeout=10)  # the thread ran a round itself
        assert segment_files(store) == files[5:]
        assert store.services.clean.running
    assert not store.services.clean.running


def test_delete_topics_and_clean_unused_topics(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        for topic in ("KeepMe", "DropMe", "AlsoDrop"):
            store.put(Message(topic, BODY), 1)
        assert store.wait_for_dispatch()
        assert store.delete_topics(["DropMe"]) == ["DropMe"]
        assert not (tmp_path / "s" / "consumequeue" / "DropMe").exists()
        assert store.clean_unused_topics({"KeepMe"}) == ["AlsoDrop"]
        assert sorted(store.queue_ids()) == ["KeepMe"]
        assert store.get_message("g", "DropMe", 1, 0, 1).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
        r = store.put(Message("DropMe", BODY), 1)  # a topic can come back, from offset 0
        assert r.queue_offset == 0
    topics = json.loads((tmp_path / "s" / "config" / "topics.json").read_text())["topicConfigTable"]
    assert "AlsoDrop" not in topics and "KeepMe" in topics


def test_a_deleted_topic_s_consumer_offsets_go_with_it(tmp_path: Path) -> None:
    """As RocketMQ's deleteTopic (cleanOffsetByTopic): a topic that comes back starts at queue
    offset 0, and its groups read it from there, not from the offsets of the topic deleted."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        for topic in ("KeepMe", "DropMe", "AlsoDrop"):
            store.put(Message(topic, BODY), 1)
            for group in ("g", "h"):
                store.commit_offset(group, topic, 1, 1)
        assert store.wait_for_dispatch()
        store.delete_topics(["DropMe"])
        store.clean_unused_topics({"KeepMe", "DropMe"})
        assert [store.query_offset(g, t, 1) for g in "gh" for t in ("KeepMe", "DropMe", "AlsoDrop")] == [1, -1, -1] * 2
        store.put(Message("DropMe", b"again"), 1).raise_for_status()
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        assert store.query_offset("g", "DropMe", 1) == -1 and store.query_offset("h", "KeepMe", 1) == 1
        assert store.get_message("g", "DropMe", 1, 0).messages[0].body == b"again"
    table = fastjson_loads((tmp_path / "s" / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert sorted(table) == ["KeepMe@g", "KeepMe@h"]


def test_an_open_drops_the_offsets_a_deletion_cut_short_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deletion whose consumerOffset.json write did not happen before a crash (here a failed write,
    and the store's files copied as the crash leaves them): the next open drops the deleted topic's
    offsets, once."""
    crashed = tmp_path / "crashed"
    offsets = crashed / "config" / "consumerOffset.json"
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        for topic in ("KeepMe", "DropMe"):
            store.put(Message(topic, BODY), 1).raise_for_status()
            store.commit_offset("g", topic, 1, 1)
        store.consumer_offsets.persist()
        assert store.wait_for_dispatch()
        with monkeypatch.context() as patch:
            patch.setattr(store.consumer_offsets, "_write", lambda text: (_ for _ in ()).throw(OSError(5, "EIO")))
            with pytest.raises(StoreFileError, match="consumer offsets not"):
                store.delete_topics(["DropMe"])
        store.flush()
        shutil.copytree(tmp_path / "s", crashed)  # what a crash now leaves (abort included)
    (crashed / "lock").unlink(missing_ok=True)
    with MessageStore.open(crashed, clean_config(), read_only=True) as store:
        assert store.query_offset("g", "DropMe", 1) == 1  # a read-only open changes nothing
    with MessageStore.open(crashed, clean_config()) as store:
        assert store.query_offset("g", "DropMe", 1) == -1 and store.query_offset("g", "KeepMe", 1) == 1
        store.commit_offset("g", "DropMe", 1, 7)  # committed after the deletion: it stays
    assert sorted(fastjson_loads(offsets.read_text())["offsetTable"]) == ["DropMe@g", "KeepMe@g"]
    with MessageStore.open(crashed, clean_config()) as store:
        assert store.query_offset("g", "DropMe", 1) == 7


def test_an_offset_committed_to_a_deleted_topic_stays(tmp_path: Path) -> None:
    """A group that commits an offset of a topic after its deletion (before it comes back) keeps
    it across a reopen, as it keeps one of a topic that never existed."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        store.put(Message("T0", BODY), 0).raise_for_status()
        assert store.wait_for_dispatch()
        store.delete_topics(["T0"])
        store.commit_offset("g1", "T0", 0, 41)
        store.commit_offset("g1", "Never", 0, 7)
    for _ in range(2):
        with MessageStore.open(tmp_path / "s", clean_config()) as store:
            assert (store.query_offset("g1", "T0", 0), store.query_offset("g1", "Never", 0)) == (41, 7)


def test_delete_topics_keeps_a_topic_not_yet_dispatched(tmp_path: Path) -> None:
    """The topics to keep were listed from the consume queues before dispatch caught up: a topic
    whose records were not yet queued was deleted too (queues, deletedTopics.json), for good."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        store.reput.stop()  # what the producer just put is not dispatched yet
        for _ in range(5):
            store.put(Message("Fresh", BODY), 0)
        store.put(Message("Doomed", BODY), 0)
        assert store.queue_ids() == {}
        assert store.delete_topics(["Doomed"]) == ["Doomed"]
        assert store.queue_ids() == {"Fresh": [0]} and store.get_max_offset_in_queue("Fresh", 0) == 5
    deleted = json.loads((tmp_path / "s" / "config" / "deletedTopics.json").read_text())["deletedTopicTable"]
    assert list(deleted) == ["Doomed"]
    with MessageStore.open(tmp_path / "s", clean_config(), read_only=True) as store:
        assert store.get_max_offset_in_queue("Fresh", 0) == 5  # recovery queues them all again


def test_the_deletion_mark_of_a_topic_created_again_outlives_retention(tmp_path: Path) -> None:
    """deletedTopics.json drops the marks retention has passed (no record of the old topic left)
    at the next deletion, but not the mark of a topic that has queues again: a stream's offsets
    tell by it that the topic was created again since they were planned."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        for topic in ("Again", "Gone", "Filler"):
            store.put(Message(topic, BODY), 0)
        assert store.wait_for_dispatch()
        assert store.delete_topics(["Again", "Gone"]) == ["Again", "Gone"]
        marks = dict(store.deleted_topics.table)
        fill(store, 6)
        store.put(Message("Again", BODY), 0).raise_for_status()  # created again
        assert store.wait_for_dispatch()
        store.flush()
        age(segment_files(store), hours=2)
        assert store.clean_expired_files().commit_log_files > 0
        assert store.min_phy_offset > max(marks.values())  # no record of the deleted topics left
        store.delete_topics(["Filler"])
        assert set(store.deleted_topics.table) == {"Again", "Filler"}  # Gone's mark went, Again's stayed
        assert store.deleted_topics.table["Again"] == marks["Again"]


def test_a_deletion_mark_past_a_java_long_is_a_bad_config_file(tmp_path: Path) -> None:
    """A mark no commit-log offset can be (2**63 and up) makes deletedTopics.json unreadable, as a
    negative one does: the open goes on without it, never an OverflowError out of numpy."""
    root = tmp_path / "s"
    with MessageStore.open(root, clean_config()) as store:
        store.put(Message("T", BODY), 0)
        assert store.wait_for_dispatch()
        store.delete_topics(["T"])
    for bad in (2**63, 2**64, -1):
        (root / "config" / "deletedTopics.json").write_text(json.dumps({"deletedTopicTable": {"T": bad}}))
        for read_only in (True, False):
            with MessageStore.open(root, clean_config(), read_only=read_only) as store:
                assert "not a commit-log offset" in (store.deleted_topics.load_problem or "")


def test_the_schedule_and_transaction_op_topics_are_never_removed(tmp_path: Path) -> None:
    """cleanUnusedTopic keeps SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_OP_HALF_TOPIC whatever the keep
    set says (pending delayed messages live there); deleting them by name is refused."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        store.services.schedule.stop()
        later = store.put(Message("Orders", BODY, properties={"DELAY": "2"}), 0)
        store.put(Message("RMQ_SYS_TRANS_OP_HALF_TOPIC", BODY), 0)
        assert store.wait_for_dispatch()
        assert store.clean_unused_topics({"Orders"}) == []
        with pytest.raises(InvalidTopicError, match="SCHEDULE_TOPIC_XXXX"):
            store.delete_topics(["SCHEDULE_TOPIC_XXXX", "Orders"])
        assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 1) == 1
        store.services.schedule.run_once(now=later.store_timestamp + 60_000)
        assert store.wait_for_dispatch()
        assert store.get_max_offset_in_queue("Orders", 0) == 1  # the delayed message came due and was delivered


def test_inspect_shows_disk_ratios_and_the_next_deletion(tmp_path: Path) -> None:
    config = clean_config()
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 3)
        age(segment_files(store)[:1], hours=0.5)
    settings = [f"--set={k}={v}" for k, v in config.changed().items() if k != "storePathRootDir"]
    done = CliRunner().invoke(cli, ["inspect", str(tmp_path / "s"), "--json", *settings])
    assert done.exit_code == 0, done.output
    disk = json.loads(done.output)["disk"]
    commitlog = str(tmp_path / "s" / "commitlog")
    assert 0 < disk["ratios"][commitlog] < 1
    nxt = disk["nextDeletion"]
    assert nxt["file"] == f"{0:020d}"
    assert abs(nxt["expiresAt"] - (time.time() + 0.5 * HOUR) * 1000) < 60_000  # 1 h after its mtime
    assert time.localtime(nxt["deletesAt"] / 1000).tm_hour == int(config.delete_when)
    assert nxt["deletesAt"] >= nxt["expiresAt"]
    text = CliRunner().invoke(cli, ["inspect", str(tmp_path / "s"), *settings])
    assert "disk" in text.output and "next deletion" in text.output


def test_queue_files_left_by_a_crash_after_segment_deletion_go_in_the_first_round(tmp_path: Path) -> None:
    """Segments deleted, then the process gone before the queues and index followed: the next
    open's first round still drops what lies below the log's minimum (RocketMQ starts its
    lastPhysicalMinOffset at 0; starting at the minimum found at open left them for good)."""
    store = MessageStore.open(tmp_path / "s", clean_config(deleteWhen=now_is_delete_time()))
    try:
        fill(store, 20)
        age(segment_files(store)[:10], hours=2)
        store.services.clean.stop()
        assert store.services.clean.delete_expired_files(None, manual=True).commit_log_files == 10
        queue_files = len(cq_files(store))
    finally:
        store.shutdown()
    store = MessageStore.open(tmp_path / "s", clean_config())
    try:
        assert len(cq_files(store)) == queue_files
        run = store.clean_expired_files(manually=False)
        assert run.commit_log_files == 0 and run.consume_queue_files == 2 and run.index_files > 0
        assert cq_files(store)[0] == f"{8 * 20:020d}"
    finally:
        store.shutdown()


def test_a_queue_file_held_while_it_was_deleted_goes_in_a_later_round(tmp_path: Path) -> None:
    """A consume-queue file a reader held when its round came (a hanged file) is destroyed by a
    later round, and that round goes on with the other files (it failed on the unmapped file)."""
    store = MessageStore.open(tmp_path / "s", clean_config(deleteWhen=now_is_delete_time()))
    try:
        fill(store, 20)
        files = segment_files(store)
        age(files[:5], hours=2)
        cq = store.queues.find("CleanTopic", 0)
        held = cq.queue.files[0]
        assert held.hold()  # a reader is on it
        assert store.services.clean.run_once().commit_log_files == 5
        assert held in cq.queue.files and not held.available
        held.release()  # the reader is done: the mapping goes, the file is still listed
        age(files[5:10], hours=2)
        run = store.services.clean.run_once()
        assert run.commit_log_files == 5
        assert run.consume_queue_files == 2
        assert held not in cq.queue.files and not os.path.exists(held.path)
        assert cq_files(store)[0] == f"{8 * 20:020d}"
    finally:
        store.shutdown()


def test_a_key_query_skips_an_index_file_cleanup_is_deleting(tmp_path: Path) -> None:
    """An index file still held when cleanup deleted it stays listed, unmapped once released:
    a query by key stops there (its entries lie below the log's minimum) instead of reading a
    closed mapping; the newer files still answer."""
    store = MessageStore.open(tmp_path / "s", clean_config(deleteWhen=now_is_delete_time()))
    try:
        fill(store, 20)
        age(segment_files(store)[:10], hours=2)
        oldest = store.index.files[0]
        assert oldest.mapped.hold()  # a query is in it
        assert store.services.clean.run_once().commit_log_files == 10
        assert oldest in store.index.files and not oldest.mapped.available
        oldest.mapped.release()  # the query is done: the mapping goes
        assert [m.keys for m in store.query_message("CleanTopic", "k-0").messages] == []
        assert [m.keys for m in store.query_message("CleanTopic", "k-19").messages] == ["k-19"]
    finally:
        store.shutdown()


def test_cleanup_keeps_segments_not_dispatched_yet(tmp_path: Path) -> None:
    """Records dispatch has not reached stay, however old: deleting them would leave a hole in
    their consume queue (and under SYNC_FLUSH or the transient pool, data not flushed or
    committed yet)."""
    store = MessageStore.open(tmp_path / "s", clean_config())
    try:
        fill(store, 12)
        store.reput.stop()
        for i in range(12, 20):
            assert store.put(Message("CleanTopic", BODY, keys=f"k-{i}")).ok
        dispatched = store.reput.reput_from
        age(segment_files(store), hours=2)
        run = store.clean_expired_files()
        assert run.commit_log_files == 11  # the 12 dispatched segments but the one dispatch is in
        assert store.min_phy_offset <= dispatched
        store.reput.start()
        assert store.wait_for_dispatch()
        first = store.get_min_offset_in_queue("CleanTopic", 0)
        assert [m.queue_offset for m in pull_all(store, "CleanTopic", first)] == list(range(11, 20))  # no hole
        assert store.clean_expired_files().commit_log_files == 8  # all but the last, now
    finally:
        store.shutdown()


def test_flush_and_commit_go_on_when_segments_they_had_not_reached_were_deleted(tmp_path: Path) -> None:
    """Whatever deleted them, segments the flush (or the pool's commit) had not reached must not
    stop it for good: it goes on from the log's first segment (data below it is gone)."""
    # a buffer for each segment: a roll that finds none free commits the full segments first
    store = MessageStore.open(tmp_path / "s", clean_config(transientStorePoolEnable=True, transientStorePoolSize=12))
    try:
        store.services.flush.stop()
        store.services.commit.stop()
        fill_no_wait = [store.put(Message("CleanTopic", BODY, keys=f"k-{i}")) for i in range(10)]
        assert all(r.ok for r in fill_no_wait)
        queue = store.commit_log.queue
        assert queue.flushed_where == queue.committed_where == 0
        assert queue.delete_expired_by_time(0, 0, 1000, True, 5, keep_from=None) == 5
        while not queue.commit(0):
            pass
        while not queue.flush(0):
            pass
        assert queue.committed_where == queue.flushed_where == store.max_phy_offset
        assert store.wait_for_dispatch()
    finally:
        store.shutdown()


def test_deleting_a_topic_while_it_is_written_leaves_a_consistent_store(tmp_path: Path) -> None:
    """A producer keeps writing to a topic while it is deleted, again and again: dispatch never
    writes into a queue being removed (it failed on every round after, WRITE_LOGICS_QUEUE_ERROR),
    and the queue the topic gets again serves each message at its own queue offset."""
    import threading

    store = MessageStore.open(tmp_path / "s", clean_config(mappedFileSizeCommitLog=65536))
    stop = threading.Event()
    refused: list[object] = []

    def produce() -> None:
        i = 0
        while not stop.is_set():
            result = store.put(Message("Busy", BODY, keys=f"b-{i}"))
            if not result.ok:
                refused.append(result)
                return
            i += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        for _ in range(5):
            assert store.put(Message("Busy", BODY)).ok  # the topic is there to delete
            assert store.delete_topics(["Busy"]) == ["Busy"]
    finally:
        stop.set()
        producer.join()
    try:
        assert refused == [] and store.running_flags == 0 and store.reput.failures == 0
        assert store.wait_for_dispatch()
        first = store.get_min_offset_in_queue("Busy", 0)
        served = pull_all(store, "Busy", first)
        assert served and [m.queue_offset for m in served] == list(range(first, first + len(served)))
    finally:
        store.shutdown()


def test_cleaning_now_runs_at_most_20_rounds(tmp_path: Path) -> None:
    """clean_expired_files goes on while rounds delete something, for at most the 20 rounds
    RocketMQ's executeDeleteFilesManually arms: a writer rolling segments as fast as they go
    cannot keep it running for ever."""
    config = clean_config()
    store = MessageStore.open(tmp_path / "s", config)
    try:
        fill(store, 215)
        store.flush()  # else the flush thread may hold an old segment, and a round ends at it
        age(segment_files(store), hours=2)
        first = store.clean_expired_files()
        assert (first.commit_log_files, first.more_left) == (200, True)  # 20 rounds of deleteFileBatchMax 10
        rest = store.clean_expired_files()
        assert (rest.commit_log_files, rest.more_left) == (14, False)  # the rest, but the last segment
    finally:
        store.shutdown()
    # `rocketstore clean` says when the rounds ran out with files still going
    with MessageStore.open(tmp_path / "s", config) as store:
        fill(store, 205)
        store.flush()
        age(segment_files(store), hours=2)
    settings = [f"--set={k}={v}" for k, v in config.changed().items() if k != "storePathRootDir"]
    for more_left in (True, False):
        done = CliRunner().invoke(cli, ["clean", str(tmp_path / "s"), *settings])
        assert done.exit_code == 0, done.output
        assert ("more may be left: run clean again" in done.output) is more_left, done.output
    done = CliRunner().invoke(cli, ["clean", str(tmp_path / "s"), "--json", *settings])
    assert json.loads(done.output)["moreLeft"] is False


def test_verify_notes_the_records_of_a_deleted_topic(tmp_path: Path) -> None:
    """After clean --delete-topic the topic's records stay in the log until retention deletes
    them: verify notes them instead of failing the store."""
    root = tmp_path / "s"
    config = clean_config(mappedFileSizeCommitLog=65536)
    with MessageStore.open(root, config) as store:
        for topic in ("Kept", "Gone"):
            for i in range(5):
                assert store.put(Message(topic, BODY, keys=f"{topic}-{i}")).ok
        assert store.wait_for_dispatch()
        assert store.delete_topics(["Gone"]) == ["Gone"]
    report = verify_store(root, config)
    assert report.ok, report.problems
    assert any("5 records of deleted topics (Gone" in n for n in report.notes)
    with MessageStore.open(root, config) as store:  # the reopen does not dispatch Gone's records again
        assert store.get_max_offset_in_queue("Gone", 0) == 0 and "Gone" not in store.queue_ids()
        assert store.delete_topics(["Gone"]) == []
        assert store.put(Message("Gone", BODY)).queue_offset == 0  # written again, from offset 0
    report = verify_store(root, config)
    assert report.ok, report.problems
    assert any("5 records of deleted topics (Gone" in n for n in report.notes)


def test_verify_notes_a_deleted_topics_records_in_queues_not_written_again(tmp_path: Path) -> None:
    """A deleted topic written again in only some of its old queues: the old records of the
    others (no consume queue now) are the deleted topic's too, not missing units."""
    root = tmp_path / "s"
    config = clean_config(mappedFileSizeCommitLog=65536)
    with MessageStore.open(root, config) as store:
        for i in range(4):
            assert store.put(Message("Back", BODY), i % 2).ok
        assert store.wait_for_dispatch() and store.delete_topics(["Back"]) == ["Back"]
        assert store.put(Message("Back", BODY), 0).queue_offset == 0
        late = store.put(Message("Back", BODY), 1)  # queue 1 written again too, then its queue lost
        assert store.wait_for_dispatch()
    report = verify_store(root, config)
    assert report.ok, report.problems
    assert any("4 records of deleted topics (Back" in n for n in report.notes)
    shutil.rmtree(root / "consumequeue" / "Back" / "1")  # a record after the topic came back: missing
    report = verify_store(root, config)
    assert [p for p in report.problems if "not in its consume queue" in p] == [
        f"record at {late.commit_log_offset} (Back/1 queue offset 0): not in its consume queue"
    ]


def test_segments_made_while_a_cleanup_deletes_others_are_all_kept(tmp_path: Path) -> None:
    """A new segment (the put or reput thread) and a deletion (the clean thread) change a file
    queue's list at the same time: neither change may be lost. A lost new segment is written
    but unreadable, and its name is made again at the next roll (EEXIST: no more puts)."""
    queue = MappedFileQueue(str(tmp_path / "q"), 4096)
    stop = threading.Event()

    def roll() -> None:
        while not stop.is_set():
            if len(queue.files) < 100:  # a starved cleaner must not run the process out of files
                queue.last_mapped_file(0).wrote_position = 4096  # full: the next call makes a new one

    def clean() -> None:
        try:
            for _ in range(5_000):
                queue.delete_files([f for f in queue.files[:-1] if f.destroy(0)])
        finally:
            stop.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    threads = [threading.Thread(target=roll), threading.Thread(target=clean)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop.set()
        sys.setswitchinterval(interval)
    on_disk = sorted(os.listdir(tmp_path / "q"))
    assert [f.file_name for f in queue.files] == on_disk
    queue.close()


def test_a_first_segment_held_during_cleanup_is_deleted_by_shutdown(tmp_path: Path, store_config: StoreConfig) -> None:
    """A cleanup round that meets a held segment (a flush or a reader on it) shuts it down but
    cannot delete it yet; the minimum offsets move past it at once. A shutdown before the next
    round must finish the deletion: a reopen used to find it again, its records in no queue."""
    path = tmp_path / "store"
    config = store_config.copy(deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0)
    with MessageStore.open(path, config) as store:
        for i in range(200):
            assert store.put(Message("T", b"x" * 100, keys=f"k{i}")).ok
        assert store.wait_for_dispatch()
        held = store.commit_log.queue.files[3]
        assert held.hold()  # as a flush or a reader holds it
        assert store.clean_expired_files(now=time.time() + 100 * HOUR).commit_log_files == 3
        min_phy, min_queue = store.min_phy_offset, store.get_min_offset_in_queue("T", 0)
        assert min_phy == held.end_offset and not os.path.exists(held.path)  # skipped, its name gone, still mapped
        held.release()
    assert not os.path.exists(held.path)
    with MessageStore.open(path, config) as store:
        assert (store.min_phy_offset, store.get_min_offset_in_queue("T", 0)) == (min_phy, min_queue)
    assert verify_store(path, config).ok


def test_files_held_while_cleanup_deleted_them_stay_gone_after_a_sigkill(
    tmp_path: Path, store_config: StoreConfig
) -> None:
    """A commit-log segment, a consume-queue file and an index file a reader held when cleanup
    deleted them lose their names at once (the holders keep reading the mapping): a SIGKILL
    before the holders let go must not bring them back. A segment that came back was dispatched
    again by recovery into the front of its consume queue but not into the index (verify failed)."""
    path = tmp_path / "store"
    config = store_config.copy(deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0)
    code = textwrap.dedent(
        f"""
        import json, os, signal, time
        from rocketstore import Message, MessageStore, StoreConfig
        store = MessageStore.open({str(path)!r}, StoreConfig({config.to_dict()!r}))
        for i in range(200):
            assert store.put(Message("T", b"x" * 100, keys=f"k{{i}}")).ok
        assert store.wait_for_dispatch()
        held = [store.commit_log.queue.files[3], store.queues.find("T", 0).queue.files[0], store.index.files[0].mapped]
        assert all(mapped.hold() for mapped in held)  # readers on them
        assert store.clean_expired_files(now=time.time() + 100 * {HOUR}).commit_log_files == 3
        store.flush()
        print(json.dumps({{
            "paths": [mapped.path for mapped in held],
            "readable": [mapped.read(0, 20) != bytes(20) for mapped in held],
            "min_phy": store.min_phy_offset,
            "min_queue": store.get_min_offset_in_queue("T", 0),
        }}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    before = json.loads(done.stdout)
    assert before["readable"] == [True, True, True]  # the holders still read their bytes
    assert [p for p in before["paths"] if os.path.exists(p)] == []
    with MessageStore.open(path, config) as store:
        assert store.recovery.abnormal
        assert store.min_phy_offset == before["min_phy"]
        assert store.get_min_offset_in_queue("T", 0) == before["min_queue"]
    assert [p for p in before["paths"] if os.path.exists(p)] == []
    report = verify_store(path, config)
    assert report.ok, report.problems[:5]


def test_the_log_minimum_skips_every_segment_a_cleanup_round_has_deleted_so_far(tmp_path: Path) -> None:
    """A round destroys its segments one by one, ``deleteCommitLogFilesInterval`` apart, and drops
    them from the list at its end: meanwhile the minimum named the second one, already unmapped
    (a lookup at the minimum found nothing, a pull skipped its units)."""
    import threading

    store = MessageStore.open(tmp_path / "s", clean_config(deleteCommitLogFilesInterval=400))
    try:
        offsets = fill(store, 6)
        age(segment_files(store)[:4], hours=2)
        files = list(store.commit_log.queue.files)
        cleaning = threading.Thread(target=store.clean_expired_files)
        cleaning.start()
        deadline = time.monotonic() + 10
        while files[1].available and time.monotonic() < deadline:
            time.sleep(0.001)  # the second destroy shows only in this flag; 400 ms follow it
        assert not files[1].available and files[2].available
        assert store.min_phy_offset == offsets[2]
        assert store.look_message_by_offset(store.min_phy_offset).keys == "k-2"
        cleaning.join()
        assert store.min_phy_offset == offsets[4]
    finally:
        store.shutdown()


# -- durable topic deletion (config/deletedTopics.json) ----------------------------------------------

DELETE_GEOMETRY = {
    "mappedFileSizeCommitLog": 4096,
    "mappedFileSizeConsumeQueue": 200,
    "maxHashSlotNum": 64,
    "maxIndexNum": 128,
    "brokerIP1": "127.0.0.1",
}


def deleted_table(root: Path) -> dict[str, int]:
    return json.loads((root / "config" / "deletedTopics.json").read_text())["deletedTopicTable"]


def topics_json(root: Path) -> dict[str, object]:
    return json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]


def pull_queue(store: MessageStore, topic: str, queue_id: int) -> list:
    out, offset = [], store.get_min_offset_in_queue(topic, queue_id)
    while True:
        got = store.get_message("g", topic, queue_id, offset, 32)
        if got.status != GetMessageStatus.FOUND:
            return out
        out += got.messages
        offset = got.next_begin_offset


def put_t0_and_del(store: MessageStore) -> None:
    """40 T0 messages, then 20 DEL ones (4 queues) with one T0 message after the 10th: the
    remaining queues end before the last DEL records."""
    for i in range(40):
        assert store.put(Message("T0", b"x" * 100, keys=f"k{i}"), i % 4).ok
    for i in range(20):
        assert store.put(Message("DEL", b"old-%d" % i, keys=f"old{i}"), i % 4).ok
        if i == 9:
            assert store.put(Message("T0", b"z", keys="mid"), 0).ok
    assert store.wait_for_dispatch()


def test_a_deleted_topic_does_not_come_back_at_a_clean_reopen(tmp_path: Path) -> None:
    """Normal recovery dispatches the log from where the remaining consume queues end: the
    deleted topic's records after that point were dispatched again, bringing back a partial
    queue and its topics.json entry."""
    root, config = tmp_path / "s", StoreConfig(DELETE_GEOMETRY)
    with MessageStore.open(root, config) as store:
        put_t0_and_del(store)
        end = store.max_phy_offset
        assert store.delete_topics(["DEL"]) == ["DEL"]
    assert deleted_table(root) == {"DEL": end}
    assert verify_store(root, config).ok
    with MessageStore.open(root, config) as store:
        assert not store.recovery.abnormal
        assert "DEL" not in store.queue_ids()
        assert all(store.get_max_offset_in_queue("DEL", q) == 0 for q in range(4))
        assert len(pull_queue(store, "T0", 0)) == 11
    assert "DEL" not in topics_json(root)
    report = verify_store(root, config)
    assert report.ok, report.problems
    assert any("20 records of deleted topics (DEL" in n for n in report.notes)


def test_a_rebuild_skips_the_records_of_a_deleted_topic(tmp_path: Path) -> None:
    """consumequeue/ and index/ deleted: the reopen rebuilds them from the whole log, the queues
    without the deleted topic's old records (the topic written again holds only its new messages),
    the index with them, as RocketMQ indexes every record."""
    root, config = tmp_path / "s", StoreConfig(DELETE_GEOMETRY)
    with MessageStore.open(root, config) as store:
        put_t0_and_del(store)
        assert store.delete_topics(["DEL"]) == ["DEL"]
        new = [store.put(Message("DEL", b"new-%d" % i, keys=f"new{i}"), 1) for i in range(2)]
        assert [r.queue_offset for r in new] == [0, 1]
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "abort").touch()  # as a crash leaves it: the index is rebuilt too
    with MessageStore.open(root, config) as store:
        assert store.queue_ids()["DEL"] == [1]
        served = pull_queue(store, "DEL", 1)
        assert [(m.commit_log_offset, m.queue_offset, m.body) for m in served] == [
            (r.commit_log_offset, i, b"new-%d" % i) for i, r in enumerate(new)
        ]
        assert [m.body for m in store.query_message("DEL", "old1").messages] == [b"old-1"]
        assert [m.body for m in store.query_message("DEL", "new1").messages] == [b"new-1"]
        assert sum(store.get_max_offset_in_queue("T0", q) for q in range(4)) == 41
    assert "DEL" in topics_json(root)  # written again: a topic again
    report = verify_store(root, config)
    assert report.ok, report.problems


def test_a_topic_deleted_twice_keeps_the_later_end(tmp_path: Path) -> None:
    root, config = tmp_path / "s", StoreConfig(DELETE_GEOMETRY)
    with MessageStore.open(root, config) as store:
        put_t0_and_del(store)
        assert store.delete_topics(["DEL"]) == ["DEL"]
        first = deleted_table(root)["DEL"]
        for i in range(3):
            assert store.put(Message("DEL", b"second-%d" % i), 0).queue_offset == i
        assert store.wait_for_dispatch()
        second_end = store.max_phy_offset
        assert store.delete_topics(["DEL"]) == ["DEL"]
        assert deleted_table(root) == {"DEL": second_end} and second_end > first
        last = store.put(Message("DEL", b"third"), 0)
        assert last.queue_offset == 0
    for rebuild in (False, True):
        if rebuild:
            shutil.rmtree(root / "consumequeue")
        with MessageStore.open(root, config) as store:
            served = pull_queue(store, "DEL", 0)
            assert [(m.commit_log_offset, m.queue_offset, m.body) for m in served] == [
                (last.commit_log_offset, 0, b"third")
            ]
            assert store.queue_ids()["DEL"] == [0]
        report = verify_store(root, config)
        assert report.ok, report.problems


def test_a_deletion_cut_short_is_finished_at_the_next_open(tmp_path: Path, caplog) -> None:
    """A crash after deletedTopics.json was written, before every queue folder went: the open
    removes the queues left (their units all point below the deletion's end), and a read-only
    open serves them no more either, without writing anything (nor saying it removed them)."""
    root, config = tmp_path / "s", StoreConfig(DELETE_GEOMETRY)
    with MessageStore.open(root, config) as store:
        put_t0_and_del(store)
        shutil.copytree(root / "consumequeue" / "DEL", tmp_path / "DEL")
        assert store.delete_topics(["DEL"]) == ["DEL"]
    shutil.copytree(tmp_path / "DEL" / "2", root / "consumequeue" / "DEL" / "2")
    config_files = {p.name: p.read_bytes() for p in (root / "config").iterdir()}
    with MessageStore.open(root, config, read_only=True) as store:
        assert "DEL" not in store.queue_ids()
    assert {p.name: p.read_bytes() for p in (root / "config").iterdir()} == config_files
    assert (root / "consumequeue" / "DEL" / "2").is_dir()
    said = [r.getMessage() for r in caplog.records if "consumequeue/DEL/2" in r.getMessage()]
    assert len(said) == 1 and "left out" in said[0] and "the next writable open removes it" in said[0]
    report = verify_store(root, config)
    assert report.ok and [n for n in report.notes if "consumequeue/DEL/2" in n] == [
        "consumequeue/DEL/2: a queue of a deleted topic that its deletion did not remove (cut short): "
        "the next writable open removes it"
    ]
    caplog.clear()
    with MessageStore.open(root, config) as store:
        assert "DEL" not in store.queue_ids()
        assert store.put(Message("DEL", b"new"), 2).queue_offset == 0
    assert not (root / "consumequeue" / "DEL" / "0").exists()
    said = [r.getMessage() for r in caplog.records if "consumequeue/DEL/2" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("removed now")
    report = verify_store(root, config)
    assert report.ok, report.problems


def test_deleted_topics_whose_records_retention_removed_are_forgotten(tmp_path: Path) -> None:
    """An entry of deletedTopics.json whose end is at or below the log's first offset names no
    record any more: it goes when the file is next written. A store that never deleted a topic
    has no such file."""
    root = tmp_path / "s"
    with MessageStore.open(root, clean_config()) as store:
        assert store.put(Message("Old", BODY), 0).ok
        fill(store, 3)
        assert not (root / "config" / "deletedTopics.json").exists()
        assert store.delete_topics(["Old"]) == ["Old"]
        assert deleted_table(root) == {"Old": store.max_phy_offset}
        fill(store, 3, start=3)
        store.flush()
        age(segment_files(store)[:-1], hours=2)
        assert store.clean_expired_files().commit_log_files == 6
        assert store.min_phy_offset > deleted_table(root)["Old"]
        assert store.put(Message("Young", BODY), 0).ok
        assert store.wait_for_dispatch() and store.delete_topics(["Young"]) == ["Young"]
        assert deleted_table(root) == {"Young": store.max_phy_offset}


@pytest.mark.parametrize("pool", [False, True], ids=["mapped", "transient-pool"])
def test_a_deletion_flushes_the_log_up_to_the_end_it_records(tmp_path: Path, pool: bool) -> None:
    """deletedTopics.json records X, the log's end at the deletion: the log is made durable up to
    X first (committed, with the transient store pool, then flushed), or a power loss under
    ASYNC_FLUSH could end the recovered log below X, where the topic's new records would be taken
    for deleted ones. The flush service idles for an hour here: only the deletion flushes."""
    settings: dict[str, object] = {
        "mappedFileSizeCommitLog": 1 << 20,
        "mappedFileSizeConsumeQueue": 6000,
        "brokerIP1": "127.0.0.1",
        "flushIntervalCommitLog": 3_600_000,
        "flushCommitLogThoroughInterval": 3_600_000,
    }
    if pool:
        settings |= {"transientStorePoolEnable": True, "transientStorePoolSize": 2}
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(settings)) as store:
        for i in range(10):
            assert store.put(Message("T0", BODY), 0).ok
            assert store.put(Message("DEL", b"old-%d" % i), 0).ok
        assert store.wait_for_dispatch()
        assert store.commit_log.flushed_where < store.max_phy_offset  # nothing flushed so far
        assert store.delete_topics(["DEL"]) == ["DEL"]
        end = deleted_table(root)["DEL"]
        assert end == store.max_phy_offset
        assert store.commit_log.flushed_where >= end


def test_a_filtered_unit_after_a_removed_one_answers_no_matched_message(make_store, store_config) -> None:
    """Between the commit log's cleanup and its consume queue's: units into the deleted segment
    answer MESSAGE_WAS_REMOVING, but a later unit the tag filter drops (nothing found yet) decides
    the status, NO_MATCHED_MESSAGE, as in RocketMQ's getMessage (the last unit looked at decides)."""
    config = store_config.copy(  # one consume-queue file: its cleanup (in the background) never runs under the pull
        fileReservedTime=0,
        destroyMapedFileIntervalForcibly=0,
        deleteFileBatchMax=1,
        mappedFileSizeConsumeQueue=20 * 100,
    )
    store = make_store(config=config)
    results = [store.put(Message("T", b"x" * 20, tags="A"), 0) for _ in range(60)]
    first_segment = sum(r.commit_log_offset < store_config.mapped_file_size_commit_log for r in results)
    store.shutdown()
    shutil.rmtree(store.root)
    store = make_store(config=config)
    store.services.clean.stop()  # only the deletion below: a round of its own would correct the queue's minimum
    for i in range(60):
        store.put(Message("T", b"x" * 20, tags="A" if i < first_segment else "B"), 0).raise_for_status()
    assert store.wait_for_dispatch()
    start = first_segment - 2  # two A units in segment 0, then B units in segment 1
    assert store.services.clean.delete_expired_files(time.time() + 10, manual=True).commit_log_files == 1
    got = store.get_message("g", "T", 0, start, 32, tags="A")
    assert got.status == GetMessageStatus.NO_MATCHED_MESSAGE and not got.messages
    assert got.next_begin_offset == 60


def test_delete_topics_removes_a_topic_that_has_only_its_topics_json_entry(tmp_path: Path) -> None:
    """As RocketMQ's deleteTopic (the topic's config goes whether or not it has queues): a retry
    topic whose only message still waits in the schedule topic was kept, and reported not deleted."""
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        store.put(Message("T", BODY), 0).raise_for_status()
        assert store.wait_for_dispatch()
        store.send_back("g", store.get_message("g", "T", 0, 0).messages[0]).raise_for_status()
        store.commit_offset("g", "%RETRY%g", 0, 1)
        assert store.topics.find("%RETRY%g") is not None and "%RETRY%g" not in store.queue_ids()
        assert store.delete_topics(["%RETRY%g", "Unknown"]) == ["%RETRY%g"]
        assert store.topics.find("%RETRY%g") is None and store.query_offset("g", "%RETRY%g", 0) == -1
    topics = json.loads((tmp_path / "s" / "config" / "topics.json").read_text())["topicConfigTable"]
    assert "%RETRY%g" not in topics and "T" in topics
    with MessageStore.open(tmp_path / "s", clean_config()) as store:
        assert store.topics.find("%RETRY%g") is None
        assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1  # the retry still waits


def test_a_deleted_topic_is_pending_until_its_offsets_are_written_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The deletion's consumerOffset.json write failed: the next write of that file (the shutdown's)
    takes the topic off offsetsPending, so an offset committed after the deletion survives the
    reopen; a failed deletedTopics.json write after the deletion is logged, not raised."""
    root = tmp_path / "s"
    deleted = root / "config" / "deletedTopics.json"
    with MessageStore.open(root, clean_config()) as store:
        store.put(Message("T0", BODY), 0).raise_for_status()
        store.commit_offset("g", "T0", 0, 1)
        assert store.wait_for_dispatch()
        with monkeypatch.context() as patch:
            patch.setattr(store.consumer_offsets, "_write", lambda text: (_ for _ in ()).throw(OSError(5, "EIO")))
            with pytest.raises(StoreFileError, match="consumer offsets not"):
                store.delete_topics(["T0"])
        assert fastjson_loads(deleted.read_text())["offsetsPending"] == ["T0"]
        store.commit_offset("g", "T0", 0, 41)
    assert "offsetsPending" not in fastjson_loads(deleted.read_text())
    with MessageStore.open(root, clean_config()) as store:
        assert store.query_offset("g", "T0", 0) == 41
        store.put(Message("T1", BODY), 0).raise_for_status()
        assert store.wait_for_dispatch()
        real, writes = store.deleted_topics._write, []

        def second_fails(text: str) -> None:  # the deletion's record goes through, the pending's end not
            writes.append(text)
            if len(writes) == 2:
                raise OSError(5, "EIO")
            real(text)

        with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, "rocketstore.meta.deleted_topics"):
            patch.setattr(store.deleted_topics, "_write", second_fails)
            assert store.delete_topics(["T1"]) == ["T1"]
        assert len(writes) == 2 and "the next open drops the offsets" in caplog.text
