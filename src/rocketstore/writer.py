"""The put path: append prepared messages to the commit log and wait for the flush they ask for.

Everything that does not depend on the record's place in the log is prepared (``prepare.py``)
before the put lock is taken (spec section 15). This is the hottest code of the store: it reads
config values and caches into locals and avoids per-message objects beyond the record bytes,
the dispatch tuple and the result.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.crc import crc32
from rocketstore.codec.ids import _tags_cache, tags_code
from rocketstore.codec.message import Message, checked_properties
from rocketstore.codec.properties import DELAY, KEYS, TAGS, UNIQ_KEY, encode_properties
from rocketstore.config import StoreConfig
from rocketstore.errors import InvalidMessageError
from rocketstore.log.commitlog import AppendResult, CommitLog, too_big_for_segment
from rocketstore.prepare import SENT_FIELDS, MessagePreparer, checked_queue_id, delay_level, plain_properties, waits
from rocketstore.results import PutMessageStatus, PutResult
from rocketstore.running_flags import DISK_FULL, NOT_WRITEABLE_BITS
from rocketstore.running_flags import describe as describe_flags

_PUT_OK = PutMessageStatus.PUT_OK
_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
_time_ns = time.time_ns

_store_host_of = operator.itemgetter(rec.P_STORE_HOST)  # a prepared record's store host bytes
_PER_MESSAGE = frozenset({TAGS, KEYS, UNIQ_KEY})  # not for a batch's common properties


def _delayed_in_batch(properties: Mapping[str, str]) -> PutResult | None:
    """The refusal of a batch whose messages ``properties`` (their own or the common ones) delay:
    RocketMQ's MessageBatch holds no delayed message ("-1" or "00" is no delay); a DELAY Java's
    parseInt does not read is refused as for a single put. None when they delay nothing."""
    text = properties.get(DELAY, "0")
    if text in ("0", ""):
        return None
    level = delay_level(text)
    if type(level) is PutResult:
        return level
    return PutResult.refused(_ILLEGAL, "a batch cannot hold delayed messages") if level > 0 else None


FlushHandler = Callable[[AppendResult], PutMessageStatus]  # waits for the SYNC flush of a put


class MessageWriter(MessagePreparer):
    """Turns messages into records in the commit log."""

    def __init__(
        self, commit_log: CommitLog, config: StoreConfig, on_new_queue: Callable[[tuple[str, int]], None]
    ) -> None:
        super().__init__(config)
        self.commit_log = commit_log
        self.flush_handler: FlushHandler | None = None
        self.flush_wake: Callable[[], None] | None = None  # wakes the SYNC flush for puts that do not wait
        commit_log.on_new_queue = on_new_queue
        self._topic_heads: dict[str, bytes] = {}  # topic length byte + topic, for append_plain
        self._plain = len(self.store_host) == 8  # the store host is IPv4: the plain appender can be used
        self.refusal: Callable[[], PutResult] | None = None  # set by the store when puts are refused
        self.put = self._make_put()

    def _make_put(self) -> Callable[[Message, int], PutResult]:
        """``put(message, queue_id=0)``: a closure, because one put is the store's hottest path.

        Messages made of tags and keys alone, for the store's own (IPv4) host and a topic it has
        seen, go straight to the commit log's plain appender; everything else (and any refusal)
        takes the general path, ``put_general``."""
        writer = self
        heads = self._topic_heads
        config = self.config
        next_uniq = self.uniq_keys.next
        cached_tags_code = _tags_cache.get
        general = self.put_general
        host = self.store_host
        append = self.commit_log.plain_appender(host) if self._plain else None
        log = self.commit_log
        busy = self.page_cache_busy
        short = rec._SHORT.pack
        join = b"".join
        put_ok = _PUT_OK
        max_props = rec.PROPERTIES_MAX_LENGTH

        def put(message: Message, queue_id: int = 0) -> PutResult:
            """Store one message in ``queue_id`` of its topic."""  # MessageStore.put's, for help()
            if (
                writer.refusal is not None
                or type(message) is not Message
                or type(queue_id) is not int
                or message._props is not None
                or message._extra is not None
                or append is None
                or not 0 <= queue_id <= 0x7FFFFFFF
            ):
                return general(message, queue_id)
            topic = message._topic
            head = heads.get(topic)
            body = message._body
            if head is None or len(body) > config.max_message_size or config.enabled_append_prop_crc:
                return general(message, queue_id)
            now = _time_ns() // 1_000_000
            if log.begin_time_in_lock:
                refused = busy(now)
                if refused is not None:
                    return refused
            uniq = next_uniq(now)
            tags, keys = message._tags, message._keys
            text = plain_properties(tags, keys, uniq)
            if tags is None:
                code = 0
            else:
                code = cached_tags_code(tags)
                if code is None:
                    code = tags_code(tags)
            props = text.encode()
            if len(props) > max_props:
                return general(message, queue_id)
            tail = join((head, short(len(props)), props))
            total = 88 + len(body) + len(tail)
            phy, queue_offset, store_ts = append(
                topic,
                queue_id,
                (topic, queue_id),
                body,
                tail,
                total,
                crc32(body) & 0x7FFFFFFF,
                message._flag,
                now,
                code,
                keys,
                uniq,
            )
            if phy < 0:
                if phy == -2:
                    return PutResult.refused(_ILLEGAL, too_big_for_segment(total, config.mapped_file_size_commit_log))
                return writer.not_appended()
            status = put_ok
            handler = writer.flush_handler
            if handler is not None:
                status = handler((status, phy, total, queue_offset, store_ts, None, ""))
            return PutResult((status, phy, queue_offset, store_ts, total, 1, None, host, uniq, ""))

        return put

    def put_general(
        self, message: Message, queue_id: int = 0, *, schedule: bool = True, wait: bool = True, new_uniq: bool = True
    ) -> PutResult:
        """Any put: checks, refusals, and messages the fast path does not take.

        With ``schedule`` a message asking for a ``DELAY`` level goes to ``SCHEDULE_TOPIC_XXXX``
        first (spec 17.1); without it the message is stored as given (import, redelivery).
        ``wait=False`` does not wait for a SYNC flush, as a ``WAIT=false`` property does not.
        ``new_uniq=False`` gives no ``UNIQ_KEY`` to a message without one (the store's own puts
        of stored messages: a producer's client gives it, never the broker).
        """
        if self.refusal is not None:
            return self.refusal()
        busy = self.page_cache_busy(_time_ns() // 1_000_000)
        if busy is not None:
            return busy
        placed = self.placed(message, queue_id, schedule=schedule)
        if type(placed) is PutResult:
            return placed
        if placed[0] is not message and (on_new_queue := self.commit_log.on_new_queue) is not None:
            on_new_queue((message.topic, queue_id))  # delayed: its topic and queue exist while it waits, as
            # RocketMQ's broker makes them before the store takes it (createTopicInSendMessageMethod)
        return self._put_prepared(*placed, wait, new_uniq=new_uniq)

    def _topic_head(self, topic: str) -> bytes | None:
        """The topic length byte and topic of V1 records (cached), None for a topic needing V2."""
        raw = topic.encode("utf-8")
        if len(raw) > rec.TOPIC_MAX_BYTES_V1:
            return None
        head = self._topic_heads[topic] = bytes((len(raw),)) + raw
        return head

    def _put_prepared(self, message: Message, queue_id: int, wait: bool = True, *, new_uniq: bool = True) -> PutResult:
        topic = message.topic
        if topic not in self._topic_heads:
            self._topic_head(topic)
        prepared = self._prepare(message, queue_id, _time_ns() // 1_000_000, new_uniq=new_uniq)
        if type(prepared) is PutResult:
            return prepared
        return self._append(topic, queue_id, [prepared], (message,), wait)

    def put_batch(
        self, messages: Sequence[Message], queue_id: int = 0, properties: Mapping[str, str] | None = None
    ) -> PutResult:
        """Store messages of one topic as consecutive records; ``properties`` go into each one."""
        if self.refusal is not None:
            return self.refusal()
        queue_id = checked_queue_id(queue_id)
        if type(messages) is not list:
            if isinstance(messages, Message) or not isinstance(messages, Iterable):
                raise InvalidMessageError(f"put_batch takes a list of Messages, not {type(messages).__name__}")
            messages = list(messages)
        if not messages:
            raise InvalidMessageError("a batch holds at least one message")
        for m in messages:
            if type(m) is not Message:
                raise InvalidMessageError(f"put_batch takes Messages, not {type(m).__name__}")
        topic = messages[0]._topic
        for m in messages:
            if m._topic != topic:
                raise InvalidMessageError(f"a batch is for one topic: {topic!r} and {m.topic!r}")
        # plain: tags and keys alone (the common batch), checked in one pass over each field
        plain = self._plain and {m._extra is None and m._props is None for m in messages} == {True}
        if not plain:
            for m in messages:
                if m._extra is not None and m.sys_flag & sf.TRANSACTION_ROLLBACK_TYPE:
                    return PutResult.refused(_ILLEGAL, "a batch cannot hold transaction messages")
                if m._extra is not None and m.prepared_transaction_offset:  # RocketMQ's batch records carry 0
                    return PutResult.refused(
                        _ILLEGAL, "a batch cannot hold transaction messages (a prepared_transaction_offset)"
                    )
                if m._props is not None and (delayed := _delayed_in_batch(m._props)) is not None:
                    return delayed
        extra = ""
        if properties:
            properties = checked_properties(properties)
            fixed = sorted(set(properties) & _PER_MESSAGE)
            if fixed:
                names = ", ".join(fixed)
                raise InvalidMessageError(f"a batch's common properties cannot set {names}: set it per message")
            if (delayed := _delayed_in_batch(properties)) is not None:  # given for all: refused as for one
                return delayed
            extra = encode_properties(properties)
        now = _time_ns() // 1_000_000
        busy = self.page_cache_busy(now)
        if busy is not None:
            return busy
        head = self._topic_heads.get(topic) or self._topic_head(topic)
        if plain and head is not None and not self.config.enabled_append_prop_crc:
            result = self._put_plain_batch(topic, head, queue_id, messages, extra, now, waits(properties))
            if result is not None:
                return result
        prepare = self._prepare
        items = []
        for m in messages:
            prepared = prepare(m, queue_id, now, extra)
            if type(prepared) is PutResult:
                return prepared
            items.append(prepared)
        # a prepared record's tail is the topic's length and name, the properties' length, then its
        # own properties, the common ones after a separator, and one before the CRC the store appends
        prefix = len(topic.encode()) + 2 + (2 if items[0][2] == rec.MESSAGE_MAGIC_CODE_V2 else 1)
        common = len(extra.encode()) + 1 if extra else 0
        sent = sum([SENT_FIELDS + len(p[12]) + len(p[13]) - prefix - common - p[14] for p in items])
        too_big = self._over_batch_limit(sent)  # (a refused PutResult is falsy)
        if too_big is None:
            too_big = self._over_record_limit(sum([p[1] for p in items]), "the batch")
        if too_big is not None:
            return too_big
        return self._append(topic, queue_id, items, messages, waits(properties))

    def _put_plain_batch(
        self,
        topic: str,
        head: bytes,
        queue_id: int,
        messages: Sequence[Message],
        extra: str,
        now: int,
        wait: bool = True,
    ) -> PutResult | None:
        """A batch of tags-and-keys messages for the store's own host (None: take the general path).

        Built column by column, a list per field, so that each step runs as one comprehension."""
        bodies = [m._body for m in messages]
        if max(map(len, bodies)) > self.config.max_message_size:
            return None
        uniqs = self.uniq_keys.next_many(now, len(messages))
        tags = [m._tags for m in messages]
        keys = [m._keys for m in messages]
        texts = map(plain_properties, tags, keys, uniqs)
        if extra:
            texts = (f"{text}\x02{extra}" for text in texts)
        props = [text.encode() for text in texts]
        if max(map(len, props)) > rec.PROPERTIES_MAX_LENGTH:
            return None
        short = rec._SHORT.pack
        tails = [head + short(len(p)) + p for p in props]
        sizes = [88 + len(body) + len(tail) for body, tail in zip(bodies, tails, strict=True)]
        common = len(extra.encode()) + 1 if extra else 0
        sent = sum(map(len, bodies)) + sum(map(len, props)) + (SENT_FIELDS - common) * len(props)
        too_big = self._over_batch_limit(sent)  # (a refused PutResult is falsy)
        if too_big is None:
            too_big = self._over_record_limit(sum(sizes), "the batch")
        if too_big is not None:
            return too_big
        crcs = [crc32(body) & 0x7FFFFFFF for body in bodies]
        codes = [0 if t is None else tags_code(t) for t in tags]
        result = self.commit_log.append_plain_batch(
            topic,
            queue_id,
            (bodies, tails, sizes, crcs, [m._flag for m in messages], codes, keys, uniqs),
            now,
            self.store_host,
        )
        if result[0] is not _PUT_OK:
            return self.not_appended(result)
        status = self._flushed(result, wait)
        return PutResult(  # tuples inside: a PutResult hashes
            (
                status,
                result[1],
                result[3],
                result[4],
                result[2],
                len(bodies),
                tuple(result[5]),
                self.store_host,
                tuple(uniqs),
                "",
            )
        )

    def refusal_for(self, flags: int) -> Callable[[], PutResult] | None:
        """How puts are refused with the store's RunningFlags ``flags`` (None: they are taken): a
        SLAVE takes none, nor a store that is not writeable (SERVICE_NOT_AVAILABLE)."""
        if self.config.broker_role == "SLAVE":
            return lambda: PutResult.refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, "a SLAVE store takes no puts")
        if not flags & NOT_WRITEABLE_BITS:
            return None
        why = f"the store is not writeable: {', '.join(describe_flags(flags & NOT_WRITEABLE_BITS))}"
        if flags & DISK_FULL:
            why += " (the disk is past diskSpaceWarningLevelRatio: puts resume once cleanup frees space)"
        return lambda: PutResult.refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, why)

    def page_cache_busy(self, now: int) -> PutResult | None:
        """OS_PAGE_CACHE_BUSY when the put lock has been held for over
        ``osPageCacheBusyTimeOutMills`` (a write stalled on the disk, RocketMQ's
        isOSPageCacheBusy): a producer is told to go elsewhere rather than wait. None otherwise."""
        begin = self.commit_log.begin_time_in_lock
        if begin and self.config.os_page_cache_busy_time_out_mills < now - begin < 10_000_000:
            return PutResult.refused(
                PutMessageStatus.OS_PAGE_CACHE_BUSY, f"the commit log has been busy for {now - begin} ms"
            )
        return None

    def not_appended(self, result: AppendResult | None = None) -> PutResult:
        """The answer to a put the commit log refused (``result``; None: it found no segment).
        Refused because the store shuts down (a put that passed the store's check just before),
        it is the answer every later put gets (StoreClosedError)."""
        if self.commit_log.refusing and self.refusal is not None:
            return self.refusal()
        if result is None:
            return PutResult.refused(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, self.commit_log.no_room())
        return PutResult.refused(result[0], result[6])

    def _flushed(self, result: AppendResult, wait: bool) -> PutMessageStatus:
        """The status of appended records once the flush (and replication) they wait for is done;
        a producer may ask not to wait (WAIT=false): the flush is only woken then."""
        if self.flush_handler is None:
            return _PUT_OK
        if wait:
            return self.flush_handler(result)
        if self.flush_wake is not None:
            self.flush_wake()
        return _PUT_OK

    def _append(
        self, topic: str, queue_id: int, items: list[tuple], messages: Sequence[Message], wait: bool = True
    ) -> PutResult:
        result = self.commit_log.append(topic, queue_id, items)
        if result[0] is not _PUT_OK:
            return self.not_appended(result)
        wait = wait and all(m._props is None or waits(m._props) for m in messages)
        status = self._flushed(result, wait)
        host = items[0][rec.P_STORE_HOST]
        if len(items) > 1:  # the records' store hosts, compared in C (no Python per message): 0.6 us for 32
            hosts = list(map(_store_host_of, items))
            if hosts.count(host) != len(hosts):  # a batch of messages given several: each record's own
                host = tuple(hosts)
        return PutResult(
            (
                status,
                result[1],
                result[3],
                result[4],
                result[2],
                len(items),
                None if result[5] is None else tuple(result[5]),
                host,
                tuple([p[rec.P_UNIQ] for p in items]),
                "",
            )
        )
