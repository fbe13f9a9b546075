"""Applying dispatch requests: consume-queue units and index entries (the store's dispatchers).

A request is the tuple ``codec.scan`` describes. Requests come from the put path (which knows
them already) or from scanning the log (recovery, rebuilds, stores written elsewhere); either way
they arrive in log order and are applied in batches.

Records of a deleted topic below the log end its deletion recorded (``meta.deleted_topics``) are
skipped for the consume queues: recovery and rebuilds walk the log again, and must not bring the
removed queue back. They are indexed all the same, as RocketMQ indexes every record it dispatches
(a deletion does not touch the index): a query finds them whether or not a crash came between.
Dispatch in a running store is past every such end, so the hot path pays one comparison per
batch for it.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from operator import itemgetter

import numpy as np

from rocketstore.codec import sysflag as sf
from rocketstore.codec.records import (
    D_OFFSET,
    D_QUEUE_ID,
    D_QUEUE_OFFSET,
    D_SIZE,
    D_STORE_TS,
    D_SYSFLAG,
    D_TAGS_CODE,
    D_TOPIC,
    REQUEST_LEN,
    Records,
)
from rocketstore.codec.topic import queue_folder_ok
from rocketstore.config import StoreConfig
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, UNIT, UNIT_DTYPE
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.index_service import IndexService

SMALL = 16  # up to this many records, dispatch goes record by record
CHUNK_BYTES = 4 << 20  # log bytes dispatched together (~3,500 1 KiB records): numpy temporaries stay small
_offset = itemgetter(D_OFFSET)
_PREPARED_BIT = sf.TRANSACTION_PREPARED_TYPE  # set for PREPARED (0x4) and ROLLBACK (0xC)
log = logging.getLogger(__name__)


class Dispatcher:
    """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex, for batches."""

    def __init__(
        self, queues: ConsumeQueueStore, index: IndexService, checkpoint: StoreCheckpoint, config: StoreConfig
    ) -> None:
        self.queues = queues
        self.index = index  # built while messageIndexEnable says so, read at each dispatch as RocketMQ reads it
        self.checkpoint = checkpoint
        self.config = config
        self.slave = config.broker_role == "SLAVE"  # stamps physicMsgTimestamp on dispatch too (it flushes no puts)
        self.deleted: dict[str, int] = {}  # deleted topic -> the log end when it was deleted
        self.skip_below = 0  # the highest of those ends: records at or after it are never skipped
        self.unqueued: set[str] = set()  # topics of damaged records that name no folder (warned about)

    def _queueable(self, topic: str) -> bool:
        """Whether records of ``topic`` go to a consume queue: not when it names no folder (a damaged
        record's, ``queue_folder_ok``), warned about once per name."""
        if queue_folder_ok(topic):
            return True
        if topic not in self.unqueued:
            self.unqueued.add(topic)
            log.warning("records of topic %r are not queued: the name cannot be a folder (a damaged record)", topic)
        return False

    def set_deleted(self, table: dict[str, int]) -> None:
        """Keep the records of each topic in ``table`` below its offset out of the consume queues
        from now on."""
        self.deleted = dict(table)
        self.skip_below = max(table.values(), default=0)

    def dispatch(self, requests: list[tuple]) -> None:
        """Build the consume queues (NOT/COMMIT records) and the index for dispatch requests."""
        if len(requests) <= SMALL and all(len(r) == REQUEST_LEN for r in requests):
            self._dispatch_few(requests)
            return
        # a backlog (the reput thread got the GIL late) goes in chunks of the log (requests are in
        # log order, so each chunk is found by bisection): arrays of a few thousand rows stay in
        # the CPU cache and in the heap, where a whole backlog's would be fresh (huge) pages the
        # kernel zeroes on every round
        i, n = 0, len(requests)
        while i < n:
            j = bisect.bisect_left(requests, requests[i][D_OFFSET] + CHUNK_BYTES, i + 1, n, key=_offset)
            self.dispatch_records(Records.of(requests[i:j]))
            i = j

    def _dispatch_few(self, requests: list[tuple]) -> None:
        """A handful of records (a quiet store, SYNC_FLUSH): record by record, without numpy's
        set-up costs, which would dominate here."""
        queued = requests
        if requests and requests[0][D_OFFSET] < self.skip_below:  # recovery of a store with deleted topics
            deleted = self.deleted
            queued = [r for r in requests if r[D_OFFSET] >= deleted.get(r[D_TOPIC], -1)]
        groups: dict[tuple[str, int], list[tuple]] = {}
        for r in queued:
            if r[D_TOPIC] is not None and not r[D_SYSFLAG] & _PREPARED_BIT:
                groups.setdefault((r[D_TOPIC], r[D_QUEUE_ID]), []).append(r)
        last = None  # the last record queued, in log order
        for (topic, queue_id), rows in groups.items():
            if not self._queueable(topic):
                continue
            if last is None or rows[-1][D_OFFSET] > last[D_OFFSET]:
                last = rows[-1]
            self.queues.find_or_create(topic, queue_id).put_unit_arrays(
                [r[D_OFFSET] for r in rows],
                [r[D_SIZE] for r in rows],
                [r[D_QUEUE_OFFSET] for r in rows],
                b"".join([UNIT.pack(r[D_OFFSET], r[D_SIZE], r[D_TAGS_CODE]) for r in rows]),
            )
        if last is not None:
            self._dispatched(last[D_STORE_TS])
        if self.config.message_index_enable:
            self.index.build_index_requests(requests)

    def _dispatched(self, store_timestamp: int) -> None:
        """The checkpoint's times after units up to a record of ``store_timestamp`` were appended
        (putMessagePositionInfoWrapper: physicMsgTimestamp too on a SLAVE)."""
        self.checkpoint.logics_dispatched_timestamp = store_timestamp
        if self.slave:
            self.checkpoint.physic_msg_timestamp = store_timestamp

    def dispatch_records(self, records: Records, *, index: bool = True) -> None:
        """Build the consume queues (NOT/COMMIT records) and, with ``index``, the index for ``records``."""
        if not len(records):
            return
        live = records
        if records.offsets[0] < self.skip_below:  # recovery or a rebuild of a store with deleted topics
            live = drop_deleted(records, self.deleted)
        queued, distinct = queued_records(live, self._queueable)
        n = len(queued)
        if n:
            topic_ids = {t: i for i, t in enumerate(distinct)}
            phys, sizes, queue_offsets = queued.offsets, queued.sizes, queued.queue_offsets
            packed = np.empty(n, dtype=UNIT_DTYPE)
            packed["phy"], packed["size"], packed["tags"] = phys, sizes, queued.tags
            topic_of = (
                np.fromiter(map(topic_ids.__getitem__, queued.topics), dtype=np.int64, count=n)
                if len(topic_ids) > 1
                else np.zeros(n, dtype=np.int64)
            )
            queue_of = (topic_of << 32) | (queued.queue_ids.astype(np.int64) & 0xFFFFFFFF)  # a damaged id < 0 too
            if (queue_of != queue_of[0]).any():
                order = np.argsort(queue_of, kind="stable")
                queue_of = queue_of[order]
                phys, sizes, queue_offsets, packed = phys[order], sizes[order], queue_offsets[order], packed[order]
                bounds = np.flatnonzero(np.diff(queue_of)).tolist()
                starts = [0, *(b + 1 for b in bounds)]
                ends = [*(b + 1 for b in bounds), n]
            else:
                starts, ends = [0], [n]
            topics = list(topic_ids)
            keys = [(topics[q >> 32], ((q & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000) for q in queue_of[starts].tolist()]
            data = packed.tobytes()
            find = self.queues.find_or_create
            for key, a, b in zip(keys, starts, ends, strict=True):
                find(*key).put_unit_arrays(
                    phys[a:b], sizes[a:b], queue_offsets[a:b], data[a * CQ_STORE_UNIT_SIZE : b * CQ_STORE_UNIT_SIZE]
                )
            self._dispatched(int(queued.store_ts[-1]))
        if index and self.config.message_index_enable:
            self.index.build_index(records)


def queued_records(
    records: Records, queueable: Callable[[str], bool] = queue_folder_ok
) -> tuple[Records, dict[str, None]]:
    """The records that go to a consume queue, and their topics (each once, in order): NOT (0) and
    COMMIT (8) ones, bit 0x4 clear, whose topic ``queueable`` takes (by default one that names a
    folder, ``queue_folder_ok``: a damaged record's may not)."""
    queued = records.select((records.sys_flags & _PREPARED_BIT) == 0)
    distinct = dict.fromkeys(queued.topics)
    unqueued = {t for t in distinct if not queueable(t)}
    if unqueued:
        kept = np.fromiter((t not in unqueued for t in queued.topics), dtype=bool, count=len(queued))
        queued = queued.select(kept)
        distinct = dict.fromkeys(queued.topics)
    return queued, distinct


def drop_deleted(records: Records, deleted: dict[str, int]) -> Records:
    """``records`` (log order) without the records of a topic in ``deleted`` that start below its
    offset there (``config/deletedTopics.json``: records of a topic deleted when the log ended
    there). Only the records below the highest such offset are looked at."""
    if not deleted or not len(records):
        return records
    below = int(np.searchsorted(records.offsets, max(deleted.values())))
    if not below:
        return records
    get = deleted.get
    ends = np.fromiter((get(t, -1) for t in records.topics[:below]), dtype=np.int64, count=below)
    gone = records.offsets[:below] < ends
    if not gone.any():
        return records
    keep = np.ones(len(records), dtype=bool)
    keep[:below] = ~gone
    return records.select(keep)
