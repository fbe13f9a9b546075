"""Retry and dead-letter messages (spec 17.3): what a consumer's failed message becomes.

A message a consumer of group G could not handle is stored again for G alone: in
``%RETRY%G`` after a delay that grows with each attempt (level 3 + reconsumeTimes, through the
schedule topic), or, once it has been retried ``maxReconsumeTimes`` times, in ``%DLQ%G``.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from rocketstore.codec.message import JAVA_INT, Message, StoredMessage
from rocketstore.codec.properties import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, WAIT, java_map_order
from rocketstore.codec.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    validate_group,
    validate_topic,
)
from rocketstore.config_values import java_int_sum, java_is_blank
from rocketstore.errors import InvalidArgumentError, InvalidTopicError, MessageNotFoundError
from rocketstore.meta.subscription_groups import DEFAULT_RETRY_MAX_TIMES, SubscriptionGroupManager
from rocketstore.reader import check_arguments
from rocketstore.results import PutMessageStatus, PutResult

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

DLQ_NUMS_PER_GROUP = 1  # a dead-letter topic has one queue
PERM_WRITE = 2  # PermName.PERM_WRITE: the bit of a topic's perm that lets it be written
FIRST_RETRY_LEVEL = 3  # the first retry waits delay level 3 (10 s with the default table)


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def send_back_message(
    original: StoredMessage,
    group: str,
    groups: SubscriptionGroupManager,
    max_reconsume_times: int | None = None,
    delay_level: int = 0,
) -> tuple[Message, int, int] | None:
    """The message, queue id and queue count of its topic that RocketMQ's ``consumerSendMsgBack``
    stores for ``original``; None if the group has no retry queue (``retryQueueNums`` <= 0).

    Same body, flag, sysFlag and born information; the store's own host; ``reconsumeTimes`` + 1;
    ``RETRY_TOPIC`` (the first topic) and ``ORIGIN_MESSAGE_ID`` (the first msgId) kept across
    retries; ``WAIT=false``, as the broker sets it. Once reconsumeTimes reaches
    ``max_reconsume_times`` (None: the group's ``retryMaxTimes``; -1: 16), or for a negative
    ``delay_level``, queue 0 of the dead-letter topic with ``DELAY=0``; otherwise one of the
    group's ``retryQueueNums`` queues of the retry topic, at random, with ``DELAY`` =
    ``delay_level`` or 3 + reconsumeTimes.
    """
    retry_queue_nums = groups.setting(group, "retryQueueNums")
    if retry_queue_nums <= 0:
        return None
    if max_reconsume_times is None:
        max_reconsume_times = groups.setting(group, "retryMaxTimes")
    elif max_reconsume_times == -1:  # the client's "default" (other values are the broker's, as given)
        max_reconsume_times = DEFAULT_RETRY_MAX_TIMES
    props = dict(original.properties)
    if RETRY_TOPIC not in props:
        props[RETRY_TOPIC] = original.topic
    if original.reconsume_times >= max_reconsume_times or delay_level < 0:
        topic, queue_id, queue_nums = dlq_topic(group), 0, DLQ_NUMS_PER_GROUP
        props[DELAY] = "0"
    else:
        topic, queue_id, queue_nums = retry_topic(group), random.randrange(retry_queue_nums), retry_queue_nums
        # Java's int sums: past the int range the level wraps negative (no delay), as in RocketMQ
        level = delay_level if delay_level > 0 else java_int_sum(FIRST_RETRY_LEVEL, original.reconsume_times)
        props[DELAY] = str(level)
    try:
        validate_topic(topic)
    except InvalidTopicError as exc:  # a valid group (up to 255 characters) the prefix makes too long
        kind = "dead-letter" if topic.startswith(DLQ_GROUP_TOPIC_PREFIX) else "retry"
        raise InvalidTopicError(
            f"the group ({len(group)} characters) is too long for its {kind} topic: {exc}"
        ) from None
    if java_is_blank(props.get(ORIGIN_MESSAGE_ID)):
        props[ORIGIN_MESSAGE_ID] = original.msg_id
    props[WAIT] = "false"  # RocketMQ's broker does not wait for a flush of a sent-back message
    # written from the broker's HashMap of them (a delayed one is ordered again with REAL_* added)
    times = java_int_sum(original.reconsume_times, 1)
    message = original.copy_to(topic, java_map_order(props), reconsume_times=times)
    return message, queue_id, queue_nums


def send_back(
    store: MessageStore,
    group: str,
    message: StoredMessage | int,
    delay_level: int = 0,
    max_reconsume_times: int | None = None,
) -> PutResult:
    """``MessageStore.send_back``: store ``send_back_message``'s message, creating the group and
    its topics if missing. They are created once the checks here pass (a send-back they refuse
    leaves no entry) but before the put, as RocketMQ's ``consumerSendMsgBack``
    creates them: a put the store then refuses (not writeable, a body over ``maxMessageSize``)
    leaves the group and ``%RETRY%<group>`` created and written."""
    validate_group(group)
    if not isinstance(message, StoredMessage):
        try:
            (offset,) = check_arguments("send_back", message=(message, int))
        except InvalidArgumentError:
            raise InvalidArgumentError(
                "send_back: message is a StoredMessage (as a pull or a lookup gives it) or its commit-log "
                f"offset, not {type(message).__name__}"
            ) from None
        message = store.look_message_by_offset(offset)
        if message is None:
            raise MessageNotFoundError(f"no message at commit-log offset {offset}")
    delay_level, max_reconsume_times = check_arguments(
        "send_back", delay_level=(delay_level, int), max_reconsume_times=(max_reconsume_times, (int, type(None)))
    )
    for name, value in (("delay_level", delay_level), ("max_reconsume_times", max_reconsume_times)):
        if value is not None and not JAVA_INT[0] <= value <= JAVA_INT[1]:  # RocketMQ's request fields are ints
            raise InvalidArgumentError(
                f"send_back: {name} must be a Java int ({JAVA_INT[0]} .. {JAVA_INT[1]}), not {value}"
            )
    planned = send_back_message(message, group, store.subscription_groups, max_reconsume_times, delay_level)
    if planned is None:  # RocketMQ answers success and stores nothing
        reason = f"group {group} has no retry queue (retryQueueNums <= 0)"
        return PutResult.refused(PutMessageStatus.MESSAGE_ILLEGAL, reason)
    again, queue_id, queue_nums = planned
    if len(again.topic) > TOPIC_MAX_LENGTH and not store.config.auto_message_version_on_topic_len:
        raise InvalidTopicError(
            f"the retry topic {again.topic!r} is {len(again.topic)} characters: a V1 record holds "
            f"{TOPIC_MAX_LENGTH} (RocketMQ 4.9's limit), and autoMessageVersionOnTopicLen is false"
        )
    groups = store.subscription_groups
    if groups.find(group) is None:  # created: written at once, as SubscriptionGroupManager does
        groups.ensure(group)
        groups.persist()
    retry = retry_topic(group)  # created before the retry-or-DLQ choice, as consumerSendMsgBack does
    created = store.topics.ensure(retry, 0, queue_nums=groups.setting(group, "retryQueueNums"))
    perm = store.topics.find(retry)["perm"]
    if not perm & PERM_WRITE:  # consumerSendMsgBack's NO_PERMISSION, before the choice (never a new topic)
        why = f"the topic {retry} is not writeable (perm {perm}): sending back is forbidden"
        return PutResult.refused(PutMessageStatus.MESSAGE_ILLEGAL, why)
    if store.topics.ensure(again.topic, queue_id, queue_nums=queue_nums) or created:
        store.topics.persist()
    return store.writer.put_general(again, queue_id, new_uniq=False)  # a UNIQ_KEY is the client's to give
