"""A put's checks and preparation, which need no commit log: whether a message can be stored
and the record it becomes, everything that does not depend on its place in the log (property
string, UNIQ_KEY, CRC, host bytes, lengths; spec section 15), the DELAY rewrite for the schedule
topic (spec 17.1). The store's writer, the CLI and the Spark sink's tasks share it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.hosts import parse_host
from rocketstore.codec.ids import UniqKeyGenerator, tags_code
from rocketstore.codec.message import Message, as_int
from rocketstore.codec.properties import (
    DELAY,
    KEYS,
    PROPERTY_CRC32,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    UNIQ_KEY,
    WAIT,
    encode_properties,
    java_map_order,
)
from rocketstore.codec.scan import delay_of_level, java_int
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.config import StoreConfig, delay_level_millis
from rocketstore.errors import InvalidMessageError, RecordError, shown
from rocketstore.log.commitlog import DELIVER_AFTER, too_big_for_segment
from rocketstore.results import PutMessageStatus, PutResult
from rocketstore.services.schedule import real_destination

MAX_RECORD_EXTRA = 64 * 1024  # a record may be up to maxMessageSize + 64 KiB
SENT_FIELDS = 22  # per message of a batch as a producer sends it (MessageDecoder.encodeMessage)
_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
_time_ns = time.time_ns
_NO_EXTRA = (None, None, None, 0, 0, 0)


def _well_formed(text: str, props: dict[str, str]) -> bool:
    """Whether ``text`` (``props`` encoded) reads back as ``props``: every name and value non-empty,
    no \\x02 inside one (one between two properties), and no \\x01 in a name (a value's reads
    back as its own: RocketMQ's parser splits a property at its first)."""
    n = len(props)
    return text.count("\x02") == n - 1 and "\x01" not in "".join(props) and all(props) and all(props.values())


def checked_queue_id(queue_id: object) -> int:
    """``queue_id`` as an int (numpy's integers too) from 0 to 2**31-1; InvalidMessageError else."""
    if type(queue_id) is not int:
        queue_id = as_int("a queue id", queue_id)
    if not 0 <= queue_id <= 0x7FFFFFFF:
        raise InvalidMessageError(f"a queue id is an int from 0 to 2**31-1, not {shown(queue_id)}")
    return queue_id


def _bad_properties() -> PutResult:
    """The refusal of properties changed in place to what a record cannot hold."""
    return PutResult.refused(
        _ILLEGAL,
        "property names must be non-empty UTF-8 text without \\x01 or \\x02, values non-empty UTF-8 text without \\x02",
    )


def delay_level(text: str) -> int | PutResult:
    """The level a ``DELAY`` text asks for, as Java's Integer.parseInt reads it; where that
    throws, the refusal of the put."""
    level = java_int(text)
    if level is None:
        return PutResult.refused(_ILLEGAL, f"DELAY must be a delay level (an integer), not {shown(text)}")
    return level


def waits(properties: Mapping[str, str] | None) -> bool:
    """Whether a put waits for its flush (and replication), as isWaitStoreMsgOK: WAIT absent or "true" in any case."""
    value = properties.get(WAIT) if properties else None
    return value is None or (value.isascii() and value.lower() == "true")


def plain_properties(tags: str | None, keys: str | None, uniq: str) -> str:
    """The property string of a message made of tags and keys alone, in the client's order."""
    if tags is None:
        return f"UNIQ_KEY\x01{uniq}" if keys is None else f"KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}"
    if keys is None:
        return f"TAGS\x01{tags}\x02UNIQ_KEY\x01{uniq}"
    return f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}"


class MessagePreparer:
    """A put's checks and preparation, which need no commit log: what ``put`` would store for a
    message, or why it would refuse it, without storing anything (the Spark sink's tasks check
    their rows with it)."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.delay_millis = delay_level_millis(config.message_delay_level)
        self.store_host = parse_host(config.store_host)
        self.uniq_keys = UniqKeyGenerator(self.store_host[:-4])  # its address: 4 or 16 bytes (spec 4.2)
        self._topic_bytes: dict[str, bytes] = {}

    def placed(self, message: Message, queue_id: int = 0, *, schedule: bool = True) -> tuple[Message, int] | PutResult:
        """The message and queue a put stores: with ``schedule``, one asking for a ``DELAY`` level
        is rewritten for ``SCHEDULE_TOPIC_XXXX``; a PutResult for a DELAY that is not a level.
        Raises InvalidMessageError for a queue id or message of the wrong type."""
        queue_id = checked_queue_id(queue_id)
        if type(message) is not Message:
            raise InvalidMessageError(f"put takes a Message, not {type(message).__name__}")
        if schedule and message._props is not None and DELAY in message._props:
            return self._delayed(message, queue_id)
        return message, queue_id

    def check(self, message: Message, queue_id: int = 0, *, schedule: bool = True) -> PutResult | None:
        """The refusal ``put_general`` would give ``message`` (None: it would be stored), the
        store's own state (read-only, disk full) aside; nothing is stored."""
        placed = self.placed(message, queue_id, schedule=schedule)
        if type(placed) is PutResult:
            return placed
        message, queue_id = placed
        prepared = self._prepare(message, queue_id, _time_ns() // 1_000_000, new_uniq=schedule)
        if type(prepared) is PutResult:
            return prepared
        too_big = too_big_for_segment(prepared[1], self.config.mapped_file_size_commit_log)
        return None if too_big is None else PutResult.refused(_ILLEGAL, too_big)

    def _prepare(
        self, message: Message, queue_id: int, now: int, extra_props: str = "", *, new_uniq: bool = True
    ) -> tuple:
        """A prepared record (``record.prepare``), or a PutResult refusing the message.

        A message without a ``UNIQ_KEY`` gets one, as RocketMQ's producers give it, unless
        ``new_uniq`` is false (a message stored as it was: import, redelivery)."""
        config = self.config
        body = message._body
        if len(body) > config.max_message_size:
            return PutResult.refused(
                _ILLEGAL, f"the body is {len(body)} bytes; maxMessageSize is {config.max_message_size}"
            )
        props = message.properties
        if config.enabled_append_prop_crc and PROPERTY_CRC32 in props:  # the store appends its own (spec 3.6)
            props = {k: v for k, v in props.items() if k != PROPERTY_CRC32}
        extra = message._extra or _NO_EXTRA
        uniq = props.get(UNIQ_KEY)
        try:
            text = encode_properties(props) if props else ""
        except TypeError:  # a name or value that is not text
            return _bad_properties()
        if props and not _well_formed(text, props):  # the dict may have been changed in place
            return _bad_properties()
        if uniq is None and new_uniq:
            uniq = self.uniq_keys.next(now)
            if message._topic == SCHEDULE_TOPIC and REAL_TOPIC in props:  # delayed: the key in the map's order
                text = encode_properties(java_map_order({**props, UNIQ_KEY: uniq}))
            else:
                text = f"{text}\x02UNIQ_KEY\x01{uniq}" if text else f"UNIQ_KEY\x01{uniq}"
        if extra_props:
            text = f"{text}\x02{extra_props}"
        topic = message._topic
        if topic == SCHEDULE_TOPIC:
            if DELAY in props and type(level := delay_level(props[DELAY])) is PutResult:
                return level  # RocketMQ would end the log at it when it reads it back
            if (undeliverable := self._undeliverable(props, queue_id)) is not None:
                return undeliverable
        topic_bytes = self._topic_bytes.get(topic)
        if topic_bytes is None:
            topic_bytes = self._topic_bytes[topic] = topic.encode("utf-8")
        store_host = self.store_host
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate put in the dict in place
            return _bad_properties()
        try:
            prepared = rec.prepare(
                topic_bytes,
                body,
                encoded,
                queue_id,
                message._flag,
                extra[3],
                now if extra[0] is None else extra[0],
                parse_host(extra[1]) if extra[1] else store_host,
                parse_host(extra[2]) if extra[2] else store_host,
                extra[4],
                extra[5],
                self._tags_code(topic, props),
                props.get(KEYS),
                uniq,
                v2=len(topic) > rec.TOPIC_MAX_BYTES_V1 and config.auto_message_version_on_topic_len,
                append_crc=config.enabled_append_prop_crc,
            )
        except RecordError as exc:
            status = (
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                if "properties" in str(exc)
                else PutMessageStatus.MESSAGE_ILLEGAL
            )
            return PutResult.refused(status, str(exc))
        refused = self._over_record_limit(prepared[1], "the record")
        if refused is None and topic == SCHEDULE_TOPIC and REAL_TOPIC in props:
            refused = self._delivery_too_big(prepared, len(body), len(topic_bytes), props[REAL_TOPIC])
        return prepared if refused is None else refused  # (a refused PutResult is falsy)

    def _undeliverable(self, props: dict[str, str], queue_id: int) -> PutResult | None:
        """MESSAGE_ILLEGAL for a schedule record delivery could never store: ``real_destination``
        fails, its queue (level - 1) is past messageDelayLevel's, or its real topic is over 127
        bytes where records are V1 only (autoMessageVersionOnTopicLen=false; checkMessage's refusal)."""
        try:
            destination = real_destination(props)
        except ValueError as exc:
            return PutResult.refused(_ILLEGAL, f"a schedule record that could never be delivered: {exc}")
        if destination is not None and queue_id >= len(self.delay_millis):
            why = f"messageDelayLevel has {len(self.delay_millis)} levels (--set messageDelayLevel=...)"
            return PutResult.refused(_ILLEGAL, f"delay level {queue_id + 1} is never delivered: {why}")
        if destination is None or self.config.auto_message_version_on_topic_len:
            return None
        size = len(destination[0].encode("utf-8"))  # (a valid topic: ASCII)
        if size <= rec.TOPIC_MAX_BYTES_V1:
            return None
        return PutResult.refused(
            _ILLEGAL, f"the real topic is {size} bytes; a V1 record holds at most {rec.TOPIC_MAX_BYTES_V1}"
        )

    def _delivery_too_big(self, prepared: tuple, body_len: int, topic_len: int, real_topic: str) -> PutResult | None:
        """MESSAGE_ILLEGAL for a schedule record (``prepared``, with a ``topic_len``-byte topic)
        whose delivered record would not fit a commit-log segment: the same header, body and
        properties, ``real_topic`` in place of SCHEDULE_TOPIC_XXXX (a V2 record past 127 bytes).
        Stored, its delivery would be refused at every attempt."""
        sys_flag = prepared[rec.P_SYSFLAG]
        props_len = prepared[rec.P_TOTAL] - rec.record_length(sys_flag, body_len, topic_len, 0)
        real_len = len(real_topic.encode("utf-8"))
        v2 = real_len > rec.TOPIC_MAX_BYTES_V1 and self.config.auto_message_version_on_topic_len
        delivered = rec.record_length(sys_flag, body_len, real_len, props_len, v2)
        too_big = too_big_for_segment(delivered, self.config.mapped_file_size_commit_log)
        return None if too_big is None else PutResult.refused(_ILLEGAL, f"delivered to {real_topic}: {too_big}")

    def _over_record_limit(self, total: int, what: str) -> PutResult | None:
        """MESSAGE_ILLEGAL when ``total`` bytes of records (one record or a batch, which RocketMQ's
        batch encoder holds to the same limit) pass maxMessageSize + 64 KiB; None when within it."""
        if total > self.config.max_message_size + MAX_RECORD_EXTRA:
            return PutResult.refused(_ILLEGAL, f"{what} would be {total} bytes, over maxMessageSize + 64 KiB")
        return None

    def _over_batch_limit(self, sent: int) -> PutResult | None:
        """MESSAGE_ILLEGAL when the batch as a producer sends it is over maxMessageSize, as RocketMQ's
        ``putMessages`` checks it ("PutMessages body length too long"): ``sent`` bytes, per message
        :data:`SENT_FIELDS`, its body and its own properties (not the batch's common ones), as a 4.9
        producer writes them (a 5.x one ends them with one more separator); None when within it."""
        if sent > self.config.max_message_size:
            limit = self.config.max_message_size
            return PutResult.refused(_ILLEGAL, f"the batch as sent is {sent} bytes; maxMessageSize is {limit}")
        return None

    def _tags_code(self, topic: str, props: dict[str, str]) -> int | tuple[str, int]:
        """The consume-queue tags code; for a delayed message in SCHEDULE_TOPIC_XXXX, its delay,
        which the commit log adds to the store time (the unit holds the delivery time)."""
        if topic == SCHEDULE_TOPIC:
            delay = delay_of_level(props.get(DELAY), self.delay_millis)
            if delay is not None:
                return (DELIVER_AFTER, delay)
        return tags_code(props.get(TAGS))

    def _delayed(self, message: Message, queue_id: int) -> tuple[Message, int] | PutResult:
        """A message with ``DELAY`` > 0 rewritten for the schedule topic (spec 17.1): the level
        capped at the highest one, the real topic and queue kept in ``REAL_TOPIC``/``REAL_QID``,
        queue ``level - 1``. Other messages (no delay, prepared or rolled-back transactions, a
        message already in the schedule topic) come back unchanged."""
        props = message._props
        level = delay_level(props[DELAY])
        if type(level) is PutResult:
            return level
        if level <= 0 or message.topic == SCHEDULE_TOPIC or not sf.goes_to_consume_queue(message.sys_flag):
            return message, queue_id
        delayed = dict(props)
        if level > len(self.delay_millis):  # capped; a level in range keeps the producer's text ("03")
            level = len(self.delay_millis)
            delayed[DELAY] = str(level)
        delayed[REAL_TOPIC] = message.topic
        delayed[REAL_QID] = str(queue_id)
        return message.with_topic(SCHEDULE_TOPIC, java_map_order(delayed)), level - 1
