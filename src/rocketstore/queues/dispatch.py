"""Applying dispatch requests: consume-queue units and index entries (the store's dispatchers).

A request is the tuple ``codec.scan`` describes. Requests come from the put path (which knows
them already) or from scanning the log (recovery, rebuilds, stores written elsewhere); either way
they arrive in log order and are applied in batches.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from rocketstore.codec import sysflag as sf
from rocketstore.codec.scan import (
    D_OFFSET,
    D_QUEUE_ID,
    D_QUEUE_OFFSET,
    D_SIZE,
    D_STORE_TS,
    D_SYSFLAG,
    D_TAGS_CODE,
    D_TOPIC,
)
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, UNIT_DTYPE
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.index_service import IndexService

_QUEUE_KEY = itemgetter(D_TOPIC, D_QUEUE_ID)
_UNIT_FIELDS = (itemgetter(D_OFFSET), itemgetter(D_SIZE), itemgetter(D_TAGS_CODE), itemgetter(D_QUEUE_OFFSET))
_PREPARED_BIT = sf.TRANSACTION_PREPARED_TYPE  # set for PREPARED (0x4) and ROLLBACK (0xC)


class Dispatcher:
    """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex, for batches."""

    def __init__(self, queues: ConsumeQueueStore, index: IndexService | None, checkpoint: StoreCheckpoint) -> None:
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint

    def dispatch(self, requests: list[tuple]) -> None:
        """Build the consume queues (NOT/COMMIT records) and the index for ``requests``."""
        # NOT (0) and COMMIT (8) records are queued: bit 0x4 clear; end-of-file markers have no topic
        queued = [r for r in requests if r[D_TOPIC] is not None and not r[D_SYSFLAG] & _PREPARED_BIT]
        if queued:
            n = len(queued)
            queue_keys = list(map(_QUEUE_KEY, queued))
            ids = {k: i for i, k in enumerate(dict.fromkeys(queue_keys))}
            queue_of = np.fromiter(map(ids.__getitem__, queue_keys), dtype=np.int64, count=n)
            columns = [np.fromiter(map(get, queued), dtype=np.int64, count=n) for get in _UNIT_FIELDS]
            if len(ids) > 1:
                order = np.argsort(queue_of, kind="stable")
                queue_of = queue_of[order]
                columns = [c[order] for c in columns]
                bounds = np.flatnonzero(np.diff(queue_of)) + 1
                starts = [0, *bounds.tolist()]
                ends = [*bounds.tolist(), n]
            else:
                starts, ends = [0], [n]
            packed = np.empty(n, dtype=UNIT_DTYPE)
            packed["phy"], packed["size"], packed["tags"] = columns[0], columns[1], columns[2]
            data = packed.tobytes()
            find = self.queues.find_or_create
            keys = list(ids)
            phys, sizes, _, queue_offsets = columns
            for a, b in zip(starts, ends, strict=True):
                topic, queue_id = keys[int(queue_of[a])]
                find(topic, queue_id).put_unit_arrays(
                    phys[a:b], sizes[a:b], queue_offsets[a:b], data[a * CQ_STORE_UNIT_SIZE : b * CQ_STORE_UNIT_SIZE]
                )
            self.checkpoint.logics_msg_timestamp = queued[-1][D_STORE_TS]
        if self.index is not None:
            self.index.build_index(requests)
