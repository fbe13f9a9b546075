"""Flushing: the commit log under ASYNC_FLUSH and SYNC_FLUSH (group commit), and the consume
queues (spec 13.2, 13.4, 13.6)."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from rocketstore.config import StoreConfig
from rocketstore.errors import FlushError
from rocketstore.log.commitlog import CommitLog
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.results import PutMessageStatus
from rocketstore.services.base import Service

_allocate_lock = threading.Lock  # a bare lock: a parked waiter blocks on its own

log = logging.getLogger(__name__)
COMMIT_PAUSE = 0.001  # seconds between the transient pool's commit rounds that puts wake
BUSY_COMMIT_PAUSE, BUSY_COMMIT_BYTES = 0.010, 256 << 10  # ... and after a round that committed this much


class FlushRealTimeService(Service):
    """ASYNC_FLUSH: every ``flushIntervalCommitLog`` ms flush when ``flushCommitLogLeastPages``
    pages are dirty, and everything every ``flushCommitLogThoroughInterval`` ms."""

    name = "flush-commitlog"

    def __init__(self, commit_log: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig) -> None:
        super().__init__(config.flush_interval_commit_log)
        self.commit_log = commit_log
        self.checkpoint = checkpoint
        self.config = config
        self._last_thorough = float("-inf")  # RocketMQ: the first round is thorough
        self.on_flush_failure: Callable[[FlushError], None] | None = None

    def on_failure(self, exc: BaseException) -> None:
        super().on_failure(exc)
        if isinstance(exc, FlushError) and self.on_flush_failure is not None:
            self.on_flush_failure(exc)

    def wake(self) -> None:
        """With ``flushCommitLogTimed`` (the default) the flush keeps to its interval whatever
        wakes it (a commit of the transient pool), as RocketMQ's thread sleeps it out."""
        if not self.config.flush_commit_log_timed:
            super().wake()

    def run_once(self, least_pages: int | None = None) -> bool:
        """One flush; True when nothing advanced."""
        self.interval_ms = self.config.flush_interval_commit_log
        if least_pages is None:
            least_pages = self.config.flush_commit_log_least_pages
            now = time.monotonic()
            if (now - self._last_thorough) * 1000 >= self.config.flush_commit_log_thorough_interval:
                self._last_thorough = now
                least_pages = 0
        queue = self.commit_log.queue
        nothing = queue.flush(least_pages)
        if queue.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = queue.store_timestamp
        return nothing

    def on_stop(self) -> None:
        queue = self.commit_log.queue
        for _ in range(len(queue.files) + 1):  # a flush covers one segment: repeat until nothing is left
            if self.run_once(0) and queue.flushed_where >= queue.max_offset():
                break


class CommitRealTimeService(Service):
    """The transient store pool's commit (spec 13.3): every ``commitIntervalCommitLog`` ms move
    written bytes from the write buffers into the files when ``commitCommitLogLeastPages`` pages
    are waiting, and everything every ``commitCommitLogThoroughInterval`` ms; then wake the flush."""

    name = "commit-commitlog"

    def __init__(self, commit_log: CommitLog, config: StoreConfig, flush: Service) -> None:
        super().__init__(config.commit_interval_commit_log)
        self.commit_log = commit_log
        self.config = config
        self.flush = flush
        self._last_thorough = float("-inf")  # RocketMQ: the first round is thorough
        self._moved = 0  # bytes the last round committed
        self.on_committed: Callable[[], None] | None = None  # wakes the reput service

    def commit_all_soon(self) -> None:
        """Make the next round a thorough one (everything written, however few pages), now."""
        self._last_thorough = float("-inf")
        self.wake()

    def run_once(self, least_pages: int | None = None) -> bool:
        """Commit what is ready; True when nothing advanced."""
        self.interval_ms = self.config.commit_interval_commit_log
        if least_pages is None:
            least_pages = self.config.commit_commit_log_least_pages
            now = time.monotonic()
            if (now - self._last_thorough) * 1000 >= self.config.commit_commit_log_thorough_interval:
                self._last_thorough = now
                least_pages = 0
        queue = self.commit_log.queue
        before = queue.committed_where
        for _ in range(len(queue.files) + 1):  # a commit covers one segment: go on while full ones advance
            if queue.commit(least_pages):
                break
        self._moved = queue.committed_where - before
        if self._moved:
            self._last_thorough = time.monotonic()  # RocketMQ's lastCommitTimestamp: the last commit
            self.flush.wake()
            if self.on_committed is not None:
                self.on_committed()
            return False
        return True

    def pause_after_run(self) -> float:
        """Puts wake this service (as RocketMQ's put path wakes its commit thread): after each
        round let them gather, for a millisecond rather than run a round per put, and for ten
        under a stream of puts (fewer, larger commits cost the putting thread less of the GIL)."""
        return BUSY_COMMIT_PAUSE if self._moved >= BUSY_COMMIT_BYTES else COMMIT_PAUSE

    def on_stop(self) -> None:
        self.run_once(0)


class FlushConsumeQueueService(Service):
    """Every ``flushIntervalConsumeQueue`` ms flush the consume queues; on a thorough flush
    (``flushConsumeQueueThoroughInterval``) persist the checkpoint too."""

    name = "flush-consumequeue"

    def __init__(self, queues: ConsumeQueueStore, checkpoint: StoreCheckpoint, config: StoreConfig) -> None:
        super().__init__(config.flush_interval_consume_queue)
        self.queues = queues
        self.checkpoint = checkpoint
        self.config = config
        self._last_thorough = float("-inf")  # RocketMQ: the first round is thorough

    def run_once(self, least_pages: int | None = None) -> None:
        self.interval_ms = self.config.flush_interval_consume_queue
        thorough = least_pages == 0
        if least_pages is None:
            least_pages = self.config.flush_consume_queue_least_pages
            now = time.monotonic()
            if (now - self._last_thorough) * 1000 >= self.config.flush_consume_queue_thorough_interval:
                self._last_thorough = now
                least_pages, thorough = 0, True
        dispatched = self.checkpoint.logics_dispatched_timestamp  # read before: what the flush covers
        self.queues.flush(least_pages)
        if thorough:
            self.checkpoint.consume_queues_flushed(dispatched)

    def on_stop(self) -> None:
        self.run_once(0)


class GroupCommitService(Service):
    """SYNC_FLUSH (spec 13.4): a putting thread waits until the flushed offset covers its records,
    and one fsync serves every waiter it covers.

    The waiters commit as a group among themselves: the first one not yet covered leads (it
    flushes; the fsync releases the GIL, so the others keep appending meanwhile), the rest park on
    a lock of their own. After a flush the leader wakes exactly the waiters it covered and hands
    the lead to the oldest one still uncovered. Waking only those matters in CPython: every
    woken thread must win the GIL back, and a herd of them woken to find nothing changed would
    hold up the next fsync. The service thread only flushes what no one waits for
    (``WAIT=false`` puts).

    A waiter not covered within ``syncFlushTimeout`` gets FLUSH_DISK_TIMEOUT. A failed fsync (an
    OSError from the file system) fails every waiter it would have covered with FLUSH_DISK_FAILED
    and the flushed offset stays where the disk last confirmed it; ``on_failure`` lets the store
    stop taking writes, since after a failed fsync the kernel may have dropped the dirty pages.
    """

    name = "group-commit"

    def __init__(self, commit_log: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig) -> None:
        super().__init__(10)
        self.commit_log = commit_log
        self.checkpoint = checkpoint
        self.config = config
        self._mutex = threading.Lock()
        self._flushing = False
        self._idle = threading.Condition(self._mutex)  # told when a flush ends (the last round waits for one)
        self._waiters: collections.deque[list] = collections.deque()  # [end offset, parked lock], oldest first
        self._failed_upto = -1  # records ending at or below this offset were in a failed flush
        self.on_flushed: Callable[[], None] | None = None  # wakes the reput service
        self.on_flush_failure: Callable[[FlushError], None] | None = None
        self.fsyncs = 0

    @property
    def waiting(self) -> int:
        """Threads parked until a flush covers them."""
        return len(self._waiters)

    def wait_flushed(self, next_offset: int, timeout_s: float) -> PutMessageStatus:
        """Block until the flushed offset reaches ``next_offset`` (the end of the caller's records)."""
        queue = self.commit_log.queue
        deadline = time.monotonic() + timeout_s
        mutex = self._mutex
        while True:
            with mutex:
                if queue.flushed_where >= next_offset:
                    return PutMessageStatus.PUT_OK
                if next_offset <= self._failed_upto:
                    return PutMessageStatus.FLUSH_DISK_FAILED
                lead = not self._flushing
                if lead:
                    self._flushing = True
                else:
                    waiter = [next_offset, _allocate_lock()]
                    waiter[1].acquire()
                    self._waiters.append(waiter)
            if lead:
                try:
                    self._flush_up_to(queue.max_offset())
                finally:
                    self._flush_done()
                if time.monotonic() > deadline:  # covered later than promised, failed, or not at all
                    if next_offset <= self._failed_upto and queue.flushed_where < next_offset:
                        return PutMessageStatus.FLUSH_DISK_FAILED
                    return PutMessageStatus.FLUSH_DISK_TIMEOUT
                continue
            left = deadline - time.monotonic()
            if not (left > 0 and waiter[1].acquire(timeout=left)):
                with mutex:
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:  # woken meanwhile: look again
                        continue
                    if queue.flushed_where >= next_offset:
                        return PutMessageStatus.PUT_OK
                    return PutMessageStatus.FLUSH_DISK_TIMEOUT

    def _flush_done(self) -> None:
        """After a flush: wake the waiters it covered (or failed) and the oldest one it did not,
        which leads the next flush."""
        flushed = self.commit_log.queue.flushed_where
        with self._mutex:
            self._flushing = False
            self._idle.notify_all()
            waiters = self._waiters
            if not waiters:
                return
            covered = max(flushed, self._failed_upto)
            kept = collections.deque()
            for waiter in waiters:
                if waiter[0] <= covered:
                    waiter[1].release()
                else:
                    kept.append(waiter)
            if kept:
                kept.popleft()[1].release()
            self._waiters = kept

    def _flush_up_to(self, target: int) -> None:
        """Flush until ``target`` (one flush covers one segment); called without the mutex."""
        queue = self.commit_log.queue
        before = queue.flushed_where
        try:
            for _ in range(len(queue.files) + 1):
                if queue.flushed_where >= target:
                    break
                queue.flush(0)
                self.fsyncs += 1
        except FlushError as exc:
            log.error("group commit: %s", exc)
            with self._mutex:
                self._failed_upto = max(self._failed_upto, target)
            if self.on_flush_failure is not None:
                self.on_flush_failure(exc)
        if queue.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = queue.store_timestamp
        if queue.flushed_where > before and self.on_flushed is not None:
            self.on_flushed()

    def run_once(self) -> None:
        """Flush what nobody is waiting for (puts with WAIT=false), unless a waiter is at it."""
        self._flush_all(0)

    def on_stop(self) -> None:
        """The last round flushes everything written: a putting thread leading a flush covers only
        what it saw when it began, so its flush is waited for (``syncFlushTimeout`` at most) and
        what was appended meanwhile (WAIT=false puts) flushed after it."""
        self._flush_all(self.config.sync_flush_timeout / 1000)

    def _flush_all(self, wait_s: float) -> None:
        """Lead a flush of everything written; a flush already running is waited for up to
        ``wait_s`` seconds (0: it is left to cover what it can)."""
        queue = self.commit_log.queue
        with self._mutex:
            if self._flushing and not (wait_s > 0 and self._idle.wait_for(lambda: not self._flushing, wait_s)):
                if wait_s > 0:
                    log.warning("group commit: a flush still runs at shutdown; the rest is left to recovery")
                return
            if queue.flushed_where >= queue.max_offset():
                return
            self._flushing = True
        try:
            self._flush_up_to(queue.max_offset())
        finally:
            self._flush_done()
