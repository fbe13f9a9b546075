"""Durability services (spec 13): SYNC_FLUSH group commit and its timeout, the transient store
pool's wrote >= committed >= flushed positions, and the consume-queue flush with the checkpoint."""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import threading
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli.inspect_cmd import inspect_store
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.results import GetMessageStatus, PutMessageStatus

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_EXTENT_UNKNOWN, FIEMAP_EXTENT_DELALLOC, FIEMAP_EXTENT_UNWRITTEN = 0x2, 0x4, 0x800


def written_bytes(path: Path) -> int:
    """Bytes of ``path`` the file system has on disk as written blocks (FIEMAP without its SYNC flag:
    delayed-allocation and unwritten extents do not count); skips where FIEMAP is unsupported."""
    count = 64
    request = bytearray(32 + 56 * count)
    struct.pack_into("=QQLLLL", request, 0, 0, 2**64 - 1, 0, 0, count, 0)
    with open(path, "rb") as f:
        try:
            fcntl.ioctl(f.fileno(), FS_IOC_FIEMAP, request)
        except OSError as exc:
            pytest.skip(f"FIEMAP unsupported here: {exc}")
    mapped = struct.unpack_from("=L", request, 20)[0]
    total = 0
    for i in range(mapped):
        _, _, length = struct.unpack_from("=QQQ", request, 32 + 56 * i)
        flags = struct.unpack_from("=L", request, 32 + 56 * i + 40)[0]
        if not flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_UNWRITTEN):
            total += length
    return total


def test_group_commit_serves_many_waiters_with_one_fsync(make_store, store_config: StoreConfig) -> None:
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH", mappedFileSizeCommitLog=1 << 20))
    service = store.services.flush
    results: list = []
    barrier = threading.Barrier(16)

    def producer(t: int) -> None:
        barrier.wait()
        for i in range(40):
            results.append(store.put(Message("Sync", b"x" * 512, keys=f"k{t}-{i}"), t % 4))

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 640 and {r.status for r in results} == {PutMessageStatus.PUT_OK}
    flushed = store.commit_log.queue.flushed_where
    assert all(r.commit_log_offset + r.wrote_bytes <= flushed for r in results)
    assert service.fsyncs < len(results)  # waiters were covered by fsyncs others made


def test_a_put_not_flushed_in_time_reports_flush_disk_timeout(make_store, store_config: StoreConfig) -> None:
    """syncFlushTimeout 0: the flush cannot beat it; the put says FLUSH_DISK_TIMEOUT once, yet the
    message is stored (RocketMQ's client treats it as sent, with a warning)."""
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH", syncFlushTimeout=0))
    result = store.put(Message("Sync", b"late", keys="late"))
    assert result.status == PutMessageStatus.FLUSH_DISK_TIMEOUT and result.ok
    assert store.look_message_by_offset(result.commit_log_offset).body == b"late"
    store.config.sync_flush_timeout = 5000
    assert store.put(Message("Sync", b"on time")).status == PutMessageStatus.PUT_OK


def test_parked_waiters_that_time_out_leave_the_group_and_nothing_is_lost(
    make_store, store_config: StoreConfig
) -> None:
    """syncFlushTimeout 0 under 8 producers: waiters park behind each other's flushes and give up
    at once, each put gets exactly one status (PUT_OK when a flush beat its clock, else
    FLUSH_DISK_TIMEOUT), no thread is left parked, and every message is stored and readable."""
    store = make_store(config=store_config.copy(flushDiskType="SYNC_FLUSH", syncFlushTimeout=0))
    results: list = []
    barrier = threading.Barrier(8)

    def producer(t: int) -> None:
        barrier.wait()
        results.extend(store.put(Message("Sync", f"{t}-{i}".encode(), keys=f"k{t}-{i}"), t % 2) for i in range(50))

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(results) == 400
    assert {r.status for r in results} <= {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT}
    assert PutMessageStatus.FLUSH_DISK_TIMEOUT in {r.status for r in results}
    assert store.services.flush.waiting == 0
    store.config.sync_flush_timeout = 5000
    assert store.put(Message("Sync", b"last")).status == PutMessageStatus.PUT_OK  # flushes everything before it
    assert store.wait_for_dispatch(10)
    bodies = {store.look_message_by_offset(r.commit_log_offset).body for r in results}
    assert bodies == {f"{t}-{i}".encode() for t in range(8) for i in range(50)}
    assert store.get_max_offset_in_queue("Sync", 0) + store.get_max_offset_in_queue("Sync", 1) == 401


def _pool_committed_by_hand(store_config: StoreConfig, **settings: object) -> StoreConfig:
    """The transient store pool with 64 KiB segments, its commit service idle for an hour: the
    test commits by hand, after ``_first_commit_round`` (a put wakes the service)."""
    return store_config.copy(
        transientStorePoolEnable=True,
        mappedFileSizeCommitLog=1 << 16,
        commitIntervalCommitLog=3_600_000,
        commitCommitLogThoroughInterval=3_600_000,
        **settings,
    )


def _first_commit_round(store: MessageStore) -> None:
    """The commit service's first round, thorough as in RocketMQ, done before any put: the rounds
    a put wakes then commit only once commitCommitLogLeastPages pages wait."""
    store.services.commit.run_once()


def test_a_flush_of_the_pool_claims_in_the_checkpoint_only_the_records_it_made_durable(tmp_path, store_config) -> None:
    """physicMsgTimestamp is the store time of the last record on disk: with the transient store
    pool, the last one committed and flushed, not one still in the write buffer."""
    hour = 3_600_000
    config = _pool_committed_by_hand(store_config, flushIntervalCommitLog=hour, flushCommitLogThoroughInterval=hour)
    store = MessageStore.open(tmp_path / "store", config)
    try:
        _first_commit_round(store)
        committed = store.put(Message("Pool", b"committed"))
        store.services.commit.run_once(0)
        while int(time.time() * 1000) <= committed.store_timestamp:  # the next record gets a later store time
            pass
        buffered = store.put(Message("Pool", b"buffered"))  # under commitCommitLogLeastPages: not committed
        assert buffered.store_timestamp > committed.store_timestamp
        store.services.flush.run_once(0)
        assert store.positions()["flushed"] == committed.commit_log_offset + committed.wrote_bytes
        assert store.checkpoint.physic_msg_timestamp == committed.store_timestamp
    finally:
        store.shutdown()


def test_the_transient_store_pool_commits_then_flushes(tmp_path: Path, store_config: StoreConfig) -> None:
    """Writes land in a pool buffer; the file sees them only when the commit service moves them;
    the flush makes them durable. Dispatch follows the committed position, inspect shows all
    three, and a clean shutdown commits, dispatches and removes abort."""
    hour = 3_600_000
    config = _pool_committed_by_hand(
        store_config, transientStorePoolSize=2, flushIntervalCommitLog=hour, flushCommitLogThoroughInterval=hour
    )
    path = tmp_path / "store"
    store = MessageStore.open(path, config)
    try:
        _first_commit_round(store)
        puts = [store.put(Message("Pool", b"p" * 100, keys=f"k{i}"), 0) for i in range(20)]
        assert all(p.status == PutMessageStatus.PUT_OK for p in puts)
        end = puts[-1].commit_log_offset + puts[-1].wrote_bytes
        pos = store.positions()
        assert pos["wrote"] == end and pos["committed"] == 0 and pos["flushed"] == 0
        segment = path / "commitlog" / f"{0:020d}"
        with open(segment, "rb") as f:
            assert f.read(end) == bytes(end)  # nothing in the file yet
        assert store.get_message("g", "Pool", 0, 0).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE

        store.services.commit.run_once(0)
        pos = store.positions()
        assert pos["wrote"] == pos["committed"] == end and pos["flushed"] == 0
        with open(segment, "rb") as f:
            assert f.read(end)[4:8] == bytes.fromhex("DAA320A7")  # the first record's magic code
        store.wait_for_dispatch()
        assert store.get_max_offset_in_queue("Pool", 0) == 20

        store.services.flush.run_once()
        store.commit_log.queue.flush(0)
        assert store.positions()["flushed"] == end
        info = inspect_store(store)["commitLog"]["positions"]
        assert info["wrote"] >= info["committed"] >= info["flushed"] == end

        more = store.put(Message("Pool", b"tail", keys="tail"), 0)
        assert store.positions()["wrote"] > store.positions()["committed"]
    finally:
        store.shutdown()
    assert not (path / "abort").exists()  # the uncommitted tail was committed and dispatched
    with MessageStore.open(path, config) as again:
        assert again.last_exit_ok
        assert again.look_message_by_offset(more.commit_log_offset).body == b"tail"
        assert again.get_max_offset_in_queue("Pool", 0) == 21


def test_consume_queue_flush_writes_the_checkpoint(make_store, store_config: StoreConfig) -> None:
    """A thorough consume-queue flush persists logicsMsgTimestamp (taken before the queues are
    flushed, as RocketMQ does); the commit-log flush sets physicMsgTimestamp."""
    store = make_store(
        config=store_config.copy(flushIntervalConsumeQueue=3_600_000, flushConsumeQueueThoroughInterval=3_600_000)
    )
    result = store.put(Message("Cp", b"x"))
    store.wait_for_dispatch()
    store.services.flush.run_once()
    store.commit_log.queue.flush(0)
    cq_service = store.services.flush_consume_queue
    cq_service.run_once(0)
    on_disk = StoreCheckpoint(os.path.join(store.root, "checkpoint"), writable=False)
    assert on_disk.logics_msg_timestamp == result.store_timestamp
    cq = store.queues.find("Cp", 0)
    assert cq.queue.flushed_where == 20  # the unit is on disk


def test_the_first_round_of_each_flush_service_is_thorough(make_store, store_config: StoreConfig) -> None:
    """As in RocketMQ (lastFlushTimestamp starts at 0), a flush service's first round after the
    open flushes everything and writes the checkpoint; later rounds wait for the thorough
    interval or for enough dirty pages."""
    hour = 3_600_000
    store = make_store(
        config=store_config.copy(
            mappedFileSizeCommitLog=1 << 20,
            flushIntervalCommitLog=hour,
            flushCommitLogThoroughInterval=hour,
            flushIntervalConsumeQueue=hour,
            flushConsumeQueueThoroughInterval=hour,
        )
    )
    path = os.path.join(store.root, "checkpoint")
    first = store.put(Message("Cp", b"x"))
    assert store.wait_for_dispatch()
    store.services.flush.run_once()
    assert store.commit_log.flushed_where == first.commit_log_offset + first.wrote_bytes
    store.services.flush_consume_queue.run_once()
    assert StoreCheckpoint(path, writable=False).logics_msg_timestamp == first.store_timestamp
    second = store.put(Message("Cp", b"y"))
    assert store.wait_for_dispatch() and second.store_timestamp >= first.store_timestamp
    store.services.flush.run_once()
    assert store.commit_log.flushed_where == second.commit_log_offset  # one dirty page: not yet
    store.services.flush_consume_queue.run_once()
    assert store.queues.find("Cp", 0).queue.flushed_where == 20


def test_a_checkpoint_written_by_an_index_roll_claims_no_unflushed_units(make_store, store_config: StoreConfig) -> None:
    """Rolling to a new index file persists the checkpoint; its logicsMsgTimestamp must still be
    what the last flush of every queue covered, not the last unit dispatched (still in dirty
    pages: after a power cut recovery would start past records whose units were lost)."""
    store = make_store(
        config=store_config.copy(flushIntervalConsumeQueue=3_600_000, flushConsumeQueueThoroughInterval=3_600_000)
    )
    path = os.path.join(store.root, "checkpoint")
    results = [store.put(Message("Roll", b"x", keys=f"k{i}")) for i in range(200)]  # 400 entries, 128 a file
    assert store.wait_for_dispatch()
    assert len(store.index.files) >= 3
    on_disk = StoreCheckpoint(path, writable=False)
    assert on_disk.index_msg_timestamp > 0  # the rolls wrote the checkpoint
    assert on_disk.logics_msg_timestamp == 0  # no consume-queue flush yet
    cq_service = store.services.flush_consume_queue
    cq_service.run_once(0)
    assert StoreCheckpoint(path, writable=False).logics_msg_timestamp == results[-1].store_timestamp


def test_a_thorough_flush_covers_every_consume_queue_file_a_queue_moved_through(
    make_store, store_config: StoreConfig
) -> None:
    """A file queue's flush covers one file; a thorough consume-queue flush (and so shutdown and
    ``MessageStore.flush``) must not stop there when a queue filled several files since the last
    one, or a clean exit leaves units no fsync ever covered."""
    store = make_store(
        config=store_config.copy(flushIntervalConsumeQueue=3_600_000, flushConsumeQueueThoroughInterval=3_600_000)
    )
    for _ in range(25):  # 25 units of 20 bytes: three 200-byte consume-queue files
        assert store.put(Message("Spread", b"x" * 30)).ok
    assert store.wait_for_dispatch()
    store.flush()
    files = store.queues.find("Spread", 0).queue.files
    assert len(files) == 3
    assert [f.flushed_position for f in files] == [f.wrote_position for f in files] == [200, 200, 100]
    for _ in range(25):  # to 50 units: the rest of the third file, a fourth and a fifth
        assert store.put(Message("Spread", b"x" * 30)).ok
    assert store.wait_for_dispatch()
    cq_service = store.services.flush_consume_queue
    cq_service.run_once(0)
    files = store.queues.find("Spread", 0).queue.files
    assert [f.flushed_position for f in files] == [200] * 5


def test_the_fillers_of_a_rebuilt_queue_are_flushed_with_its_units(make_store, store_config: StoreConfig) -> None:
    """A queue rebuilt after retention starts with filler units; a flush writes them to disk
    like the units (they were marked flushed without an msync, and a power cut left zeros where
    recovery expects them, shifting the queue)."""
    config = store_config.copy(mappedFileSizeConsumeQueue=20000)
    store = make_store(config=config)
    for _ in range(900):
        assert store.put(Message("T", b"x" * 100)).ok
    store.shutdown()
    root = Path(store.root)
    segments = sorted((root / "commitlog").iterdir())
    for segment in segments[: len(segments) * 2 // 3]:
        segment.unlink()
    shutil.rmtree(root / "consumequeue")
    store = make_store(config=config)
    low = store.get_min_offset_in_queue("T", 0)
    assert low * 20 > 8192  # the fillers fill more than two pages
    store.flush()
    first = store.queues.find("T", 0).queue.files[0]
    assert first.flushed_position == first.wrote_position
    assert written_bytes(Path(first.path)) >= first.wrote_position


def test_warm_mapped_files_are_on_disk_ahead_of_the_writer(make_store, store_config: StoreConfig) -> None:
    """warmMapedFileEnable: the pages faulted in ahead of the writer are written out as zeros, so
    a SYNC_FLUSH flush overwrites allocated blocks; without it they wait for delayed allocation."""
    size = 1 << 20
    config = store_config.copy(flushDiskType="SYNC_FLUSH", mappedFileSizeCommitLog=size)
    stores = {warm: make_store(f"warm-{warm}", config.copy(warmMapedFileEnable=warm)) for warm in (False, True)}
    for warm, store in stores.items():
        result = store.put(Message("Warm", b"w" * 100, keys="k"), 0)
        assert result.status == PutMessageStatus.PUT_OK
        assert store.allocator.wait_idle(30)
        first = Path(store.commit_log.queue.files[0].path)
        if warm:
            assert store.allocator.warmed_bytes >= size  # the first segment, and the next one made ahead
            assert written_bytes(first) == size
        else:
            assert store.allocator.warmed_bytes == 0
            assert written_bytes(first) < size // 2  # the flushed record's blocks only
        assert store.wait_for_dispatch(10)
        found = store.get_message("consumer", "Warm", 0, 0, 1)
        assert [m.body for m in found.messages] == [b"w" * 100]


def test_with_the_pool_nothing_is_dispatched_before_it_is_committed(make_store, store_config: StoreConfig) -> None:
    """Readers see a pool-backed segment only up to its committed position (spec 13.3); a queue
    unit for a record not committed yet made pulls answer MESSAGE_WAS_REMOVING and consumers
    skip it. Dispatch waits for the commit, which wakes it."""
    store = make_store(
        config=store_config.copy(
            transientStorePoolEnable=True,
            transientStorePoolSize=2,
            commitIntervalCommitLog=3_600_000,
            commitCommitLogThoroughInterval=3_600_000,
        )
    )
    store.services.commit.stop()  # the test commits by hand
    for i in range(30):  # past the first 4 KiB segment
        assert store.put(Message("Pooled", b"m%02d" % i + b"x" * 200)).ok
    assert len(store.commit_log.queue.files) >= 2
    assert store.get_max_offset_in_queue("Pooled", 0) == 0
    assert store.get_message("g", "Pooled", 0, 0).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    for _ in range(len(store.commit_log.queue.files)):  # one commit covers one segment
        store.services.commit.run_once(0)
    assert store.wait_for_dispatch()
    got, offset = [], 0
    while offset < 30:
        result = store.get_message("g", "Pooled", 0, offset)
        assert result.status == GetMessageStatus.FOUND, result.status
        got += [m.body[:3] for m in result.messages]
        offset = result.next_begin_offset
    assert got == [b"m%02d" % i for i in range(30)]


def test_with_the_pool_waiting_for_dispatch_waits_for_what_was_written(make_store, store_config: StoreConfig) -> None:
    """wait_for_dispatch covers the puts made before it, committed or not yet: it returned at
    once while they still sat in the pool's buffer, and a pull right after found nothing."""
    store = make_store(
        config=store_config.copy(
            transientStorePoolEnable=True, transientStorePoolSize=2, commitCommitLogThoroughInterval=3_600_000
        )
    )
    for i in range(3):  # a few hundred bytes: fewer than commitCommitLogLeastPages
        assert store.put(Message("Pooled", b"m%d" % i)).ok
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "Pooled", 0, 0).messages] == [b"m0", b"m1", b"m2"]


def test_with_the_pool_an_acknowledged_put_is_read_once_committed(make_store, store_config: StoreConfig) -> None:
    """As RocketMQ reads a segment only up to its committed position, a put still in the pool's
    buffer is not found by offset or msgId (the README says so); once committed it is."""
    store = make_store(
        config=store_config.copy(
            transientStorePoolEnable=True, transientStorePoolSize=2, commitCommitLogThoroughInterval=3_600_000
        )
    )
    put = store.put(Message("Pooled", b"m"))  # fewer bytes than commitCommitLogLeastPages: not committed
    assert put.ok
    assert store.look_message_by_offset(put.commit_log_offset) is None
    assert store.look_message_by_msg_id(put.msg_id) is None
    store.flush()
    assert store.look_message_by_offset(put.commit_log_offset).body == b"m"
    assert store.look_message_by_msg_id(put.msg_id).body == b"m"


def test_shutdown_unmaps_every_pool_buffer_the_written_segment_included(make_store, store_config) -> None:
    """The segment being written held its buffer past shutdown (a segment's worth of memory per
    closed store, until the store object went); the pool now gets it back and unmaps it."""
    store = make_store(config=store_config.copy(transientStorePoolEnable=True, transientStorePoolSize=2))
    for i in range(3):
        assert store.put(Message("Pooled", b"m%d" % i)).ok
    written = store.commit_log.queue.files[-1]
    buffer = written.write_buffer
    assert buffer is not None
    store.shutdown()
    assert written.write_buffer is None and buffer.closed
    assert [f for f in store.commit_log.queue.files if f.write_buffer is not None] == []


def test_the_flushed_offset_never_goes_back_under_concurrent_flushes(make_store, store_config) -> None:
    """store.flush() beside the flush service, while a producer writes: msync releases the GIL,
    and a flush that read an older target and ended last used to set the offset back."""
    config = store_config.copy(
        mappedFileSizeCommitLog=1 << 20,
        mappedFileSizeConsumeQueue=20 * 1_000_000,
        messageIndexEnable=False,
        flushIntervalCommitLog=1,
        flushCommitLogThoroughInterval=1,
    )
    store = make_store(config=config)
    queue = store.commit_log.queue
    body = os.urandom(2000)
    went_back: list[tuple[int, int]] = []
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            store.put(Message("T", body))

    def flush() -> None:
        while not stop.is_set():
            store.flush()

    threads = [threading.Thread(target=f) for f in (write, flush)]
    for t in threads:
        t.start()
    last = 0
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            now = queue.flushed_where
            if now < last:
                went_back.append((last, now))
            last = now
            time.sleep(0)  # let the flushes run between looks
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert went_back == []


def test_a_pool_run_dry_commits_the_full_segment_before_a_new_one_takes_records(make_store, store_config) -> None:
    """Every pool buffer lent (one here), a new segment was written straight into its file while
    the full segment before it still waited in its buffer: records readable, and on disk, behind
    bytes a crash would lose; recovery then cut at that hole and dropped them, acknowledged and
    durable as they were, and every command that writes refused the store as damaged. The roll
    now commits the full segment first, and the new one writes into the buffer it gave back."""
    config = _pool_committed_by_hand(store_config, transientStorePoolSize=1)
    store = make_store(config=config)
    _first_commit_round(store)
    results = []
    while len(store.commit_log.queue.files) < 2:
        results.append(store.put(Message("Pool", b"p" * 1000)))
        assert results[-1].ok
    first, second = store.commit_log.queue.files
    assert store.commit_log.queue.committed_where == first.end_offset  # the full one, before the new one's record
    assert second.write_buffer is not None
    positions = store.positions()
    assert positions["committed"] == first.end_offset < positions["wrote"]
    assert store.look_message_by_offset(results[-2].commit_log_offset) is not None
    assert store.look_message_by_offset(results[-1].commit_log_offset) is None  # in the buffer until committed
    store.services.commit.run_once(0)
    assert store.positions()["committed"] == positions["wrote"]
    assert store.look_message_by_offset(results[-1].commit_log_offset) is not None


def test_with_the_pool_a_put_wakes_the_commit_and_is_dispatched_at_once(make_store, store_config) -> None:
    """RocketMQ's put path wakes the commit thread when the pool is on: a put is committed and
    dispatched without waiting for commitIntervalCommitLog (an hour here)."""
    config = store_config.copy(
        transientStorePoolEnable=True,
        commitIntervalCommitLog=3_600_000,
        commitCommitLogThoroughInterval=0,  # every round commits whatever is written
    )
    store = make_store(config=config)
    assert store.put(Message("Pool", b"now")).ok
    assert store.reput.wait_caught_up(timeout=10)  # not wait_for_dispatch: that commits itself
    assert store.get_message("g", "Pool", 0, 0, 1).messages[0].body == b"now"


@pytest.mark.parametrize("timed", [True, False])
def test_flush_commit_log_timed_keeps_the_flush_to_its_interval(make_store, store_config, timed) -> None:
    """flushCommitLogTimed (the default): the ASYNC flush sleeps its interval out whatever wakes it
    (a commit of the pool); without it a wake-up flushes at once."""
    store = make_store(config=store_config.copy(flushCommitLogTimed=timed, flushIntervalCommitLog=3_600_000))
    flush = store.services.flush
    flush.wake_event.clear()
    flush.wake()
    assert flush.wake_event.is_set() is not timed


def test_the_flush_type_is_the_one_the_store_was_opened_with(make_store, store_config: StoreConfig) -> None:
    """The flush service and the put's wait are chosen at the open: a flushDiskType changed on the
    running store used to turn on only SYNC_FLUSH's rule that dispatch waits for the flush, so
    puts were acknowledged at once but consumers saw them only after a thorough ASYNC flush."""
    store_config.flush_interval_commit_log = 600_000
    store_config.flush_commit_log_thorough_interval = 600_000
    store = make_store()
    store.put(Message("T", b"first")).raise_for_status()  # the first (thorough) flush round is behind us
    assert store.wait_for_dispatch(timeout=10)
    store.config.flushDiskType = "SYNC_FLUSH"
    store.put(Message("T", b"second")).raise_for_status()
    assert store.wait_for_dispatch(timeout=5)
    assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"first", b"second"]


def test_a_sync_store_shut_down_during_a_flush_flushes_and_dispatches_what_came_after(
    tmp_path, store_config: StoreConfig
) -> None:
    """A putting thread leads a long flush (4 MB to write) when WAIT=false puts come and the store
    is shut down at once: the last flush waits for the leader's, then flushes what it did not
    cover, and the commit log's flush stops before dispatch (as RocketMQ stops its commit log
    before its reput), so dispatch, which goes no further than the flush, finishes: a clean
    exit. The last round used to give up while a leader flushed, and dispatch stopped first:
    WAIT=false records unflushed at close, ``abort`` kept."""
    import threading
    import time

    root = tmp_path / "store"
    config = store_config.copy(flushDiskType="SYNC_FLUSH", mappedFileSizeCommitLog=16 << 20)
    store = MessageStore.open(root, config)
    store.put(Message("T", b"first")).raise_for_status()
    leader = threading.Thread(target=lambda: store.put(Message("T", os.urandom(4 << 20))))
    flush = store.services.flush
    leader.start()
    deadline = time.monotonic() + 10
    while not flush._flushing and leader.is_alive() and time.monotonic() < deadline:
        time.sleep(0)  # the leader's flush is what this waits for: it shows only in this flag
    assert flush._flushing, "the big put's flush was over before the test could see it"
    for i in range(20):
        store.put(Message("T", b"%d" % i, properties={"WAIT": "false"})).raise_for_status()
    store.shutdown(wait_for_dispatch=0)
    leader.join()
    assert not (root / "abort").exists()
    with MessageStore.open(root, config) as again:
        assert not again.recovery.abnormal
        assert again.get_max_offset_in_queue("T", 0) == 22
