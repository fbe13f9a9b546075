"""A flush the file system refuses: reported as a failure, never as PUT_OK (RocketMQ #2706/#9713).

The store sits on a real loop-mounted ext4; making the image immutable makes the device refuse
writes, so msync gets EIO from the kernel: no part of the store is mocked.
"""

from __future__ import annotations

import pytest

from rocketstore import Message, MessageStore
from rocketstore.errors import FlushError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.results import PutMessageStatus


def test_a_failed_sync_flush_fails_the_put_and_stops_writes(loop_fs, store_config):
    fs = loop_fs(32)
    config = store_config.copy(flushDiskType="SYNC_FLUSH")
    store = MessageStore.open(fs.mount / "store", config)
    try:
        assert store.put(Message("FlushTopic", b"before", tags="TagA")).status == PutMessageStatus.PUT_OK
        flushed = store.commit_log.flushed_where
        fs.fail_writes()
        failed = store.put(Message("FlushTopic", b"during", tags="TagA"))
        assert failed.status == PutMessageStatus.FLUSH_DISK_FAILED
        assert not failed.ok
        assert store.commit_log.flushed_where == flushed  # the flushed offset did not move past the failure
        refused = store.put(Message("FlushTopic", b"after", tags="TagA"))
        assert refused.status == PutMessageStatus.SERVICE_NOT_AVAILABLE  # no writes after a failed fsync
        # the kernel marked the lost pages clean: a retried msync "succeeds" without writing them,
        # so no later flush may move the flushed offset over them, nor dispatch show the message
        store.services.flush.run_once()  # the group commit's own round: it fails again
        assert store.commit_log.flushed_where == flushed
        store.reput.run_once()
        assert [m.body for m in store.get_message("g", "FlushTopic", 0, 0, 8).messages] == [b"before"]
    finally:
        fs.heal()
        store.shutdown()
    assert (fs.mount / "store" / "abort").exists()  # not a clean exit: the next open recovers


def test_a_failed_async_flush_stops_writes(loop_fs, store_config):
    fs = loop_fs(32)
    store = MessageStore.open(fs.mount / "store", store_config.copy(flushDiskType="ASYNC_FLUSH"))
    try:
        assert store.put(Message("FlushTopic", b"x" * 1000, tags="TagA")).ok
        fs.fail_writes()
        assert store.put(Message("FlushTopic", b"y" * 1000, tags="TagA")).ok  # ASYNC: stored, not yet flushed
        flushed = store.commit_log.flushed_where
        with pytest.raises(FlushError) as failure:
            store.services.flush.run_once(0)  # one round of the service, as its thread runs it
        store.services.flush.on_failure(failure.value)  # what the thread does with an exception
        assert store.commit_log.flushed_where == flushed
        assert store.put(Message("FlushTopic", b"z", tags="TagA")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    finally:
        fs.heal()
        store.shutdown()


def test_a_queue_whose_flush_failed_does_not_keep_the_others_dirty(loop_fs, store_config):
    fs = loop_fs(32)
    store = MessageStore.open(fs.mount / "store", store_config.copy(flushDiskType="ASYNC_FLUSH"))
    try:
        for topic in ("TopicA", "TopicB", "TopicA"):
            assert store.put(Message(topic, b"x", tags="TagA")).ok
            assert store.wait_for_dispatch()
            if topic == "TopicB":
                store.queues.flush(0)  # B clean from here on
        failing, other = store.queues.table[("TopicA", 0)], store.queues.table[("TopicB", 0)]
        fs.fail_writes()
        with pytest.raises(FlushError):
            failing.flush(0)  # A's file is latched from now on
        fs.heal()
        assert store.put(Message("TopicB", b"y", tags="TagA")).ok
        assert store.wait_for_dispatch()
        assert other.queue.flushed_where < other.queue.max_offset()
        with pytest.raises(FlushError):
            store.queues.flush(0)  # A still fails, and says so once every queue was tried
        assert other.queue.flushed_where == other.queue.max_offset()  # B was flushed all the same
    finally:
        store.shutdown()
    assert (fs.mount / "store" / "abort").exists()  # A's units may be lost: the next open recovers


def test_a_closed_file_is_not_counted_flushed(tmp_path) -> None:
    """A flush that finds its file closed (a store shutting down) writes nothing, so the flushed
    position stays: a SYNC put waiting for it must not be told its record is on disk."""
    mapped = MappedFile.create(str(tmp_path / "00000000000000000000"), 0, 4096)
    mapped.append(b"x" * 100)
    assert mapped.flush() == 100
    mapped.append(b"y" * 100)
    mapped.close()
    assert mapped.flush() == 100 and mapped.flushed_position == 100
