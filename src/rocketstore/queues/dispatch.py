"""Applying dispatch requests: consume-queue units and index entries (the store's dispatchers).

A request is the tuple ``codec.scan`` describes. Requests come from the put path (which knows
them already) or from scanning the log (recovery, rebuilds, stores written elsewhere); either way
they arrive in log order and are applied in batches.
"""

from __future__ import annotations

import numpy as np

from rocketstore.codec import sysflag as sf
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, UNIT_DTYPE
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.index_service import IndexService
from rocketstore.queues.records import Records

_PREPARED_BIT = sf.TRANSACTION_PREPARED_TYPE  # set for PREPARED (0x4) and ROLLBACK (0xC)


class Dispatcher:
    """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex, for batches."""

    def __init__(self, queues: ConsumeQueueStore, index: IndexService | None, checkpoint: StoreCheckpoint) -> None:
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint

    def dispatch(self, requests: list[tuple]) -> None:
        """Build the consume queues (NOT/COMMIT records) and the index for ``requests``."""
        records = Records.of(requests)
        if not len(records):
            return
        # NOT (0) and COMMIT (8) records are queued: bit 0x4 clear
        queued = records.select((records.sys_flags & _PREPARED_BIT) == 0)
        n = len(queued)
        if n:
            queue_keys = queued.queue_keys
            ids = {k: i for i, k in enumerate(dict.fromkeys(queue_keys))}
            phys, sizes, queue_offsets = queued.offsets, queued.sizes, queued.queue_offsets
            packed = np.empty(n, dtype=UNIT_DTYPE)
            packed["phy"], packed["size"], packed["tags"] = phys, sizes, queued.tags
            if len(ids) > 1:
                queue_of = np.fromiter(map(ids.__getitem__, queue_keys), dtype=np.int64, count=n)
                order = np.argsort(queue_of, kind="stable")
                queue_of = queue_of[order]
                phys, sizes, queue_offsets, packed = phys[order], sizes[order], queue_offsets[order], packed[order]
                bounds = np.flatnonzero(np.diff(queue_of)).tolist()
                starts = [0, *(b + 1 for b in bounds)]
                ends = [*(b + 1 for b in bounds), n]
                keys = [queue_keys[int(order[a])] for a in starts]
            else:
                starts, ends, keys = [0], [n], [queue_keys[0]]
            data = packed.tobytes()
            find = self.queues.find_or_create
            for key, a, b in zip(keys, starts, ends, strict=True):
                find(*key).put_unit_arrays(
                    phys[a:b], sizes[a:b], queue_offsets[a:b], data[a * CQ_STORE_UNIT_SIZE : b * CQ_STORE_UNIT_SIZE]
                )
            self.checkpoint.logics_msg_timestamp = int(queued.store_ts[-1])
        if self.index is not None:
            self.index.build_index(records)
