"""Multi-dispatch (RocketMQ 4.9's ``enableMultiDispatch``) and light message queues (``enableLmq``).

A record whose ``INNER_MULTI_DISPATCH`` property lists queue names (``%LMQ%a,%LMQ%b``) is, besides
its own queue, put in each named queue at the offset ``INNER_MULTI_QUEUE_OFFSET`` gives in the
same place (``0,7``): queue id 0 for a light message queue (a name starting with ``%LMQ%``) when
the broker has ``enableLmq``, the record's own queue id otherwise (ConsumeQueue.multiDispatchLmqQueue). Those units are
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


def is_copy(properties: Mapping[str, str], topic: str, queue_id: int, queue_offset: int, own_queue_id: int) -> bool:
    """Whether a unit at ``queue_offset`` of queue ``topic``/``queue_id`` is the copy of a record with
    ``properties`` (in its own queue ``own_queue_id``): the record lists the queue, its two lists pair
    up (else RocketMQ dispatches no copy) and give that offset, and the queue id is the copy's (0 or
    its own for a light message queue, as the broker had enableLmq or not; its own for another)."""
    names = java_split(properties.get(INNER_MULTI_DISPATCH, ""), _SPLITTER)
    offsets = java_split(properties.get(INNER_MULTI_QUEUE_OFFSET, ""), _SPLITTER)
    if len(names) != len(offsets) or topic not in names:
        return False
    if java_int(offsets[names.index(topic)], bits=64) != queue_offset:
        return False
    return queue_id == own_queue_id or (queue_id == 0 and is_lmq(topic))
