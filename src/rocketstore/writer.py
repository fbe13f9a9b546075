"""The put path: check a message, encode it, append it, and wait for the flush it asks for.

Everything that does not depend on the record's place in the log (property string, UNIQ_KEY,
CRC, host bytes, lengths) is prepared before the put lock is taken (spec section 15).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.hosts import parse_host
from rocketstore.codec.ids import UniqKeyGenerator, tags_code
from rocketstore.codec.message import Message
from rocketstore.codec.properties import KEYS, TAGS, UNIQ_KEY, encode_properties
from rocketstore.config import StoreConfig
from rocketstore.errors import InvalidMessageError, RecordError
from rocketstore.log.commitlog import AppendResult, CommitLog
from rocketstore.results import PutMessageStatus, PutResult

MAX_RECORD_EXTRA = 64 * 1024  # a record may be up to maxMessageSize + 64 KiB

FlushHandler = Callable[[AppendResult, Sequence[Message]], PutMessageStatus]


def _no_wait(result: AppendResult, messages: Sequence[Message]) -> PutMessageStatus:
    return PutMessageStatus.PUT_OK


class MessageWriter:
    """Turns messages into records in the commit log."""

    def __init__(self, commit_log: CommitLog, config: StoreConfig, on_topic_queue: Callable[[str, int], None]) -> None:
        self.commit_log = commit_log
        self.config = config
        self.store_host = parse_host(config.store_host)
        self.uniq_keys = UniqKeyGenerator(self.store_host[:-4] if len(self.store_host) == 8 else b"\x7f\0\0\x01")
        self.flush_handler: FlushHandler = _no_wait
        self.on_topic_queue = on_topic_queue
        self._known_queues: set[tuple[str, int]] = set()
        self._topic_bytes: dict[str, bytes] = {}

    def _prepare(self, message: Message, queue_id: int, now: int, extra_props: str = "") -> tuple:
        """(prepared record, tags code, KEYS, UNIQ_KEY) or a PutResult refusing the message."""
        config = self.config
        body = message.body
        if len(body) > config.max_message_size:
            return PutResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                detail=f"the body is {len(body)} bytes; maxMessageSize is {config.max_message_size}",
            )
        props = message.properties
        uniq = props.get(UNIQ_KEY)
        text = encode_properties(props) if props else ""
        if uniq is None:
            uniq = self.uniq_keys.next(now)
            text = f"{text}\x02UNIQ_KEY\x01{uniq}" if text else f"UNIQ_KEY\x01{uniq}"
        if extra_props:
            text = f"{text}\x02{extra_props}"
        topic = message.topic
        topic_bytes = self._topic_bytes.get(topic)
        if topic_bytes is None:
            topic_bytes = self._topic_bytes[topic] = topic.encode("utf-8")
        born_host = parse_host(message.born_host) if message.born_host else self.store_host
        store_host = parse_host(message.store_host) if message.store_host else self.store_host
        try:
            prepared = rec.prepare(
                topic_bytes,
                body,
                text.encode("utf-8"),
                queue_id,
                message.flag,
                message.sys_flag,
                now if message.born_timestamp is None else message.born_timestamp,
                born_host,
                store_host,
                message.reconsume_times,
                message.prepared_transaction_offset,
                v2=config.auto_message_version_on_topic_len and len(topic) > rec.TOPIC_MAX_BYTES_V1,
                append_crc=config.enabled_append_prop_crc,
            )
        except RecordError as exc:
            status = (
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                if "properties" in str(exc)
                else PutMessageStatus.MESSAGE_ILLEGAL
            )
            return PutResult(status, detail=str(exc))
        if prepared.total > config.max_message_size + MAX_RECORD_EXTRA:
            return PutResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                detail=f"the record would be {prepared.total} bytes, over maxMessageSize + 64 KiB",
            )
        return prepared, tags_code(props.get(TAGS)), props.get(KEYS), uniq

    def put(self, message: Message, queue_id: int = 0) -> PutResult:
        _check_queue_id(queue_id)
        if type(message) is not Message:
            raise InvalidMessageError(f"put takes a Message, not {type(message).__name__}")
        item = self._prepare(message, queue_id, time.time_ns() // 1_000_000)
        if type(item) is PutResult:
            return item
        return self._append(message.topic, queue_id, [item], (message,))

    def put_batch(
        self, messages: Sequence[Message], queue_id: int = 0, properties: dict[str, str] | None = None
    ) -> PutResult:
        """Store messages of one topic as consecutive records; ``properties`` go into each one."""
        _check_queue_id(queue_id)
        if not messages:
            raise InvalidMessageError("a batch holds at least one message")
        topic = messages[0].topic
        for m in messages:
            if type(m) is not Message:
                raise InvalidMessageError(f"put_batch takes Messages, not {type(m).__name__}")
            if m.topic != topic:
                raise InvalidMessageError(f"a batch is for one topic: {topic!r} and {m.topic!r}")
            if m.sys_flag & sf.TRANSACTION_ROLLBACK_TYPE:
                return PutResult(PutMessageStatus.MESSAGE_ILLEGAL, detail="a batch cannot hold transaction messages")
            if m.properties.get("DELAY", "0") not in ("0", ""):
                return PutResult(PutMessageStatus.MESSAGE_ILLEGAL, detail="a batch cannot hold delayed messages")
        extra = encode_properties(properties) if properties else ""
        now = time.time_ns() // 1_000_000
        items = []
        for m in messages:
            item = self._prepare(m, queue_id, now, extra)
            if type(item) is PutResult:
                return item
            items.append(item)
        return self._append(topic, queue_id, items, messages)

    def _append(self, topic: str, queue_id: int, items: list[tuple], messages: Sequence[Message]) -> PutResult:
        if (topic, queue_id) not in self._known_queues:
            self._known_queues.add((topic, queue_id))
            self.on_topic_queue(topic, queue_id)
        result = self.commit_log.append(topic, queue_id, items)
        if result.status is not PutMessageStatus.PUT_OK:
            return PutResult(result.status, detail=result.detail)
        status = self.flush_handler(result, messages)
        return PutResult(
            status,
            result.wrote_offset,
            result.queue_offset,
            result.store_timestamp,
            result.wrote_bytes,
            len(items),
            result.offsets,
            items[0][0].store_host,
            [item[3] for item in items],
        )


def _check_queue_id(queue_id: object) -> None:
    if type(queue_id) is not int or not 0 <= queue_id <= 0x7FFFFFFF:
        raise InvalidMessageError(f"a queue id is an int from 0 to 2**31-1, not {queue_id!r}")
