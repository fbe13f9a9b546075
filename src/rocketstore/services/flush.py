"""Flushing: the commit log under ASYNC_FLUSH, and the consume queues (spec 13.2, 13.6)."""

from __future__ import annotations

import logging
import time

from rocketstore.config import StoreConfig
from rocketstore.log.commitlog import CommitLog
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.services.base import Service

log = logging.getLogger(__name__)


class FlushRealTimeService(Service):
    """ASYNC_FLUSH: every ``flushIntervalCommitLog`` ms flush when ``flushCommitLogLeastPages``
    pages are dirty, and everything every ``flushCommitLogThoroughInterval`` ms."""

    name = "flush-commitlog"

    def __init__(self, commit_log: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig) -> None:
        super().__init__(config.flush_interval_commit_log)
        self.commit_log = commit_log
        self.checkpoint = checkpoint
        self.config = config
        self._last_thorough = time.monotonic()

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
        for _ in range(10):  # a flush covers one segment: repeat until nothing is left
            if self.run_once(0):
                break


class FlushConsumeQueueService(Service):
    """Every ``flushIntervalConsumeQueue`` ms flush the consume queues; on a thorough flush
    (``flushConsumeQueueThoroughInterval``) persist the checkpoint too."""

    name = "flush-consumequeue"

    def __init__(self, queues: ConsumeQueueStore, checkpoint: StoreCheckpoint, config: StoreConfig) -> None:
        super().__init__(config.flush_interval_consume_queue)
        self.queues = queues
        self.checkpoint = checkpoint
        self.config = config
        self._last_thorough = time.monotonic()

    def run_once(self, least_pages: int | None = None) -> None:
        self.interval_ms = self.config.flush_interval_consume_queue
        thorough = least_pages == 0
        if least_pages is None:
            least_pages = self.config.flush_consume_queue_least_pages
            now = time.monotonic()
            if (now - self._last_thorough) * 1000 >= self.config.flush_consume_queue_thorough_interval:
                self._last_thorough = now
                least_pages, thorough = 0, True
        logics_ts = self.checkpoint.logics_msg_timestamp
        self.queues.flush(least_pages)
        if thorough:
            self.checkpoint.logics_msg_timestamp = logics_ts
            self.checkpoint.flush()

    def on_stop(self) -> None:
        self.run_once(0)
