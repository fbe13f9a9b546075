"""Applying dispatch requests: consume-queue units and index entries (the store's dispatchers).

A request is the tuple ``codec.scan`` describes. Requests come from the put path (which knows
them already) or from scanning the log (recovery, rebuilds, stores written elsewhere); either way
they arrive in log order and are applied in batches.
"""

from __future__ import annotations

from rocketstore.codec import sysflag as sf
from rocketstore.codec.scan import D_QUEUE_ID, D_STORE_TS, D_SYSFLAG, D_TOPIC
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.index_service import IndexService

_TX_MASK = sf.TRANSACTION_ROLLBACK_TYPE


class Dispatcher:
    """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex, for batches."""

    def __init__(self, queues: ConsumeQueueStore, index: IndexService | None, checkpoint: StoreCheckpoint) -> None:
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint

    def dispatch(self, requests: list[tuple]) -> None:
        """Build the consume queues (NOT/COMMIT records) and the index for ``requests``."""
        groups: dict[tuple[str, int], list[tuple]] = {}
        last_queued_ts = 0
        for r in requests:
            topic = r[D_TOPIC]
            if topic is None:  # an end-of-file marker
                continue
            tx = r[D_SYSFLAG] & _TX_MASK
            if tx == 0 or tx == sf.TRANSACTION_COMMIT_TYPE:
                key = (topic, r[D_QUEUE_ID])
                units = groups.get(key)
                if units is None:
                    groups[key] = units = []
                units.append(r)
                last_queued_ts = r[D_STORE_TS]
        find = self.queues.find_or_create
        for (topic, queue_id), units in groups.items():
            find(topic, queue_id).put_units(units)
        if last_queued_ts:
            self.checkpoint.logics_msg_timestamp = last_queued_ts
        if self.index is not None:
            self.index.build_index(requests)
