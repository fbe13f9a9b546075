"""Multi-dispatch (RocketMQ 4.9's ``enableMultiDispatch``) and light message queues (``enableLmq``).

A record whose ``INNER_MULTI_DISPATCH`` property lists queue names (``%LMQ%a,%LMQ%b``) is, besides
its own queue, put in each named queue at the offset ``INNER_MULTI_QUEUE_OFFSET`` gives in the
same place (``0,7``): queue id 0 for a light message queue (a name starting with ``%LMQ%``), the
record's own queue id for any other name (ConsumeQueue.multiDispatchLmqQueue). Those units are
copies: the record belongs to its own topic. This store reads such queues but does not write them.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketstore.codec.scan import java_int
from rocketstore.config_values import java_split

INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
LMQ_PREFIX = "%LMQ%"  # MixAll.LMQ_PREFIX
_SPLITTER = ","  # MixAll.MULTI_DISPATCH_QUEUE_SPLITTER


def is_lmq(topic: str) -> bool:
    """Whether ``topic`` names a light message queue (MixAll.isLmq)."""
    return topic.startswith(LMQ_PREFIX)


def copy_place(properties: Mapping[str, str], topic: str, own_queue_id: int) -> tuple[int, int] | None:
    """(queue id, queue offset) of the copy a record with ``properties`` (its own queue id
    ``own_queue_id``) has in queue ``topic``; None when it lists no such queue, or its two lists
    do not pair up (RocketMQ then dispatches no copy) or the offset is not a Java long."""
    names = java_split(properties.get(INNER_MULTI_DISPATCH, ""), _SPLITTER)
    offsets = java_split(properties.get(INNER_MULTI_QUEUE_OFFSET, ""), _SPLITTER)
    if len(names) != len(offsets) or topic not in names:
        return None
    offset = java_int(offsets[names.index(topic)], bits=64)
    if offset is None:
        return None
    return (0 if is_lmq(topic) else own_queue_id), offset
