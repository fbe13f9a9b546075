"""The read path: pulls through the consume queues, lookups by offset and msgId, key queries,
offsets by time (spec section 16)."""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import numbers
import os
from collections.abc import Iterable

from rocketstore.codec import record as rec
from rocketstore.codec.ids import decode_offset_msg_id, java_hash
from rocketstore.codec.message import JAVA_LONG, StoredMessage, as_int, plain_str
from rocketstore.codec.properties import split_keys
from rocketstore.config import StoreConfig
from rocketstore.config_values import java_int_wrap, java_trim
from rocketstore.errors import InvalidArgumentError, StoreClosedError, shown
from rocketstore.log.commitlog import CommitLog
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, EXT_ADDRESSES_BELOW, unit_columns, unit_places
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.index_service import IndexService
from rocketstore.results import GetMessageStatus, GetResult, QueryResult

_MAX_PULL_SIZE = 128 * 1024 * 1024
_NAMED = 10  # the unreadable units a pull's warning names one by one
_NOT_HELD = "the commit log does not hold it"

log = logging.getLogger(__name__)

try:
    _TOTAL_RAM = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError):  # pragma: no cover
    _TOTAL_RAM = 8 << 30


def check_arguments(call: str, **given: tuple[object, type | tuple[type, ...]]) -> list:
    """The values of ``name=(value, type)``, integers as Python ints (``as_int``: numpy's too,
    not a bool), text as a plain str (numpy.str_ too) and, where ``float`` is given, any finite
    real number (numpy's too, not a bool) as a float; InvalidArgumentError for a value not of its
    type (None passes where ``type(None)`` is given)."""
    out = []
    for name, (value, kind) in given.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (value is None and type(None) in kinds) or (str in kinds and isinstance(value, str)):
            out.append(plain_str(value))
        elif int in kinds:
            out.append(as_int(f"{call}: {name}", value, InvalidArgumentError))
        elif float in kinds and _finite_real(value):
            out.append(float(value))  # type: ignore[arg-type]
        else:
            what = "finite number" if float in kinds else kinds[0].__name__
            raise InvalidArgumentError(f"{call}: {name} must be a {what}, not {shown(value)}")
    return out


def _finite_real(value: object) -> bool:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past any float
        return False


def _queue_arguments(call: str, topic: object, queue_id: object, offset: object) -> list:
    """``check_arguments`` of a (topic, queue id, queue offset) call."""
    return check_arguments(call, topic=(topic, str), queue_id=(queue_id, int), offset=(offset, int))


def subscription_tags(tags: str | None) -> frozenset[str] | None:
    """A subscription expression -> the tags it accepts; None means every message.

    As RocketMQ's FilterAPI: only None, ``""`` and ``"*"`` mean every message; each tag between
    ``||`` is trimmed as Java's ``String.trim`` trims (characters up to U+0020 only), and an
    expression of blanks accepts no tag at all."""
    if tags is None or tags == "" or tags == "*":
        return None
    return frozenset(t for t in map(java_trim, tags.split("||")) if t)


def tag_hashes(accepted: frozenset[str] | None) -> frozenset[int] | None:
    """The tags a subscription accepts (``subscription_tags``) -> their hashes, as a consume
    queue's tags codes hold them; None means every message."""
    return None if accepted is None else frozenset(map(java_hash, accepted))


def _warn_unreadable(queue: str, unreadable: list[tuple[int, int, str]]) -> None:
    """Log a WARNING naming the (queue offset, commit-log offset, why) of the units a pull of
    ``queue`` ("topic/queueId") passed over because their record cannot be read."""
    named = ", ".join(f"queue offset {q} (commit-log offset {phy}, {why})" for q, phy, why in unreadable[:_NAMED])
    more = len(unreadable) - _NAMED
    log.warning(
        "get_message: %s: %d unit(s) passed over, their record cannot be read: %s%s",
        queue,
        len(unreadable),
        named,
        f", and {more} more" if more > 0 else "",
    )


class MessageReader:
    def __init__(
        self, commit_log: CommitLog, queues: ConsumeQueueStore, index: IndexService, config: StoreConfig
    ) -> None:
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.config = config

    def _still_open(self) -> None:
        """StoreClosedError if the store was shut down under a read: records it missed were in
        files closed meanwhile, not removed by retention, and must not be reported or passed over."""
        if self.commit_log.closed:
            raise StoreClosedError("the store was shut down during the read")

    # -- pulls ---------------------------------------------------------------------------------
    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32, tags: str | None = None
    ) -> GetResult:
        """Up to ``max_nums`` messages of a queue from ``offset``, filtered by tags (``"a || b"``)."""
        if (
            type(offset) is not int
            or type(queue_id) is not int
            or type(max_nums) is not int
            or type(topic) is not str
            or (tags is not None and type(tags) is not str)
        ):
            topic, queue_id, offset, max_nums, tags = check_arguments(  # only then: a pull is a hot path
                "get_message",
                topic=(topic, str),
                queue_id=(queue_id, int),
                offset=(offset, int),
                max_nums=(max_nums, int),
                tags=(tags, (str, type(None))),
            )
        cq = self.queues.find(topic, queue_id)
        min_offset = cq.min_offset_in_queue() if cq else 0
        max_offset = cq.max_offset_in_queue() if cq else 0
        # nextOffsetCorrection: a slave that does not check offsets keeps the consumer's own
        keep = self.config.broker_role == "SLAVE" and not self.config.offset_check_in_slave
        if max_offset == 0:
            return GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, [], offset if keep else 0, min_offset, max_offset)
        if offset < min_offset:
            next_offset = offset if keep else min_offset
            return GetResult(GetMessageStatus.OFFSET_TOO_SMALL, [], next_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, [], offset, min_offset, max_offset)
        if offset > max_offset:
            next_offset = offset if keep else max_offset
            return GetResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, [], next_offset, min_offset, max_offset)

        config = self.config
        accepted = subscription_tags(tags) if tags is not None else None
        wanted = tag_hashes(accepted)
        # the units whose place (i - offset) * 20 is under max(maxFilterMessageSize, maxMsgNums * 20), that
        # product a Java int's: at least the first
        window = max(config.max_filter_message_size, java_int_wrap(max_nums * CQ_STORE_UNIT_SIZE))
        max_filter_units = max(1, -(-window // CQ_STORE_UNIT_SIZE))
        want_units = max_filter_units if wanted is not None else min(max_filter_units, max(max_nums, 1))
        data = cq.read_units(offset, min(want_units, max_offset - offset))
        if not data:
            next_offset = offset if keep else cq.roll_next_file(offset)
            return GetResult(GetMessageStatus.OFFSET_FOUND_NULL, [], next_offset, min_offset, max_offset)
        max_phy = self.commit_log.max_offset()
        memory = _TOTAL_RAM * config.access_message_in_memory_max_ratio // 100
        if wanted is None:
            phys, sizes = unit_places(data)
            if max_phy - phys[0] <= memory:
                # everything in memory and no filter: the batch is a prefix of the units
                fast = self._pull_prefix(phys, sizes, max_nums, offset, min_offset, max_offset, max_phy, memory)
                if fast is not None:
                    return fast
            if want_units < max_filter_units:  # records missing or on disk: scan as far as RocketMQ does
                data = cq.read_units(offset, min(max_filter_units, max_offset - offset))
        units = zip(*unit_columns(data), strict=True)
        return self._pull_units(
            f"{topic}/{queue_id}", units, max_nums, accepted, wanted, offset, min_offset, max_offset, max_phy, memory
        )

    def _pull_prefix(
        self,
        phys: tuple[int, ...],
        sizes: tuple[int, ...],
        max_nums: int,
        offset: int,
        min_offset: int,
        max_offset: int,
        max_phy: int,
        memory: int,
    ) -> GetResult | None:
        """A pull where every unit is in memory and none is filtered (None if a record is missing)."""
        config = self.config
        limit = max(1, min(len(phys), max_nums, config.max_transfer_count_on_message_in_memory))
        byte_limit = min(config.max_transfer_bytes_on_message_in_memory, _MAX_PULL_SIZE)
        if limit < len(phys):
            phys, sizes = phys[:limit], sizes[:limit]
        if sum(sizes) > byte_limit:  # isTheBatchFull: the first message always goes
            ends = list(itertools.accumulate(sizes))
            keep = max(1, bisect.bisect_right(ends, byte_limit))
            phys, sizes = phys[:keep], sizes[:keep]
        messages = self.commit_log.read_records(phys, sizes)
        if not all(messages):
            return None
        suggest = max_phy - phys[-1] > memory
        return GetResult(GetMessageStatus.FOUND, messages, offset + len(phys), min_offset, max_offset, suggest)

    def _pull_units(
        self,
        queue: str,
        units: Iterable[tuple[int, int, int]],
        max_nums: int,
        accepted: frozenset[str] | None,
        wanted: frozenset[int] | None,
        offset: int,
        min_offset: int,
        max_offset: int,
        max_phy: int,
        memory: int,
    ) -> GetResult:
        """A pull unit by unit: filters, records being removed, in-disk limits (spec 16.2).

        A unit whose tags code is in ``wanted`` but whose message's tags are not in ``accepted``
        (a hash collision) is filtered too, as RocketMQ's consumer drops it after the broker's
        hash filter (PullAPIWrapper.processPullResult). A unit passing the hash filter whose record
        cannot be read is passed over, and named in the result's ``unreadable`` and in a warning
        about ``queue`` ("topic/queueId"), unless retention removed it (below the log's start)."""
        config = self.config
        commit_log = self.commit_log
        get_data = commit_log.get_data
        decode = rec.decode_record
        bytes_mem, count_mem = (
            config.max_transfer_bytes_on_message_in_memory,
            config.max_transfer_count_on_message_in_memory,
        )
        bytes_disk, count_disk = (
            config.max_transfer_bytes_on_message_in_disk,
            config.max_transfer_count_on_message_in_disk,
        )
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        messages: list[StoredMessage] = []
        total = 0
        next_offset = offset
        next_file_start = -1
        log_start = 0  # the commit log's first offset, read once a unit's segment is found gone
        last_phy = 0
        unreadable: list[tuple[int, int, str]] = []  # (queue offset, commit-log offset, why)
        for phy, size, code in units:
            last_phy = phy  # maxPhyOffsetPulling: every unit looked at, the one ending the batch too
            if messages:  # isTheBatchFull
                count = len(messages)
                if count >= max_nums or total + size > _MAX_PULL_SIZE:
                    break
                if max_phy - phy <= memory:
                    if total + size > bytes_mem or count > count_mem - 1:
                        break
                elif total + size > bytes_disk or count > count_disk - 1:
                    break
            next_offset += 1
            matched = True
            if wanted is not None and code >= EXT_ADDRESSES_BELOW:  # an ext address: the TAGS check below
                code32 = code & 0xFFFFFFFF
                matched = (code32 - (1 << 32) if code32 & 0x80000000 else code32) in wanted
            if phy < next_file_start:  # in a segment found gone
                if matched and phy >= log_start:
                    unreadable.append((next_offset - 1, phy, _NOT_HELD))
                continue
            if not matched:
                if not messages:  # the last unit looked at decides, as RocketMQ's getMessage
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            buf = get_data(phy, size)
            if buf is None:  # its segment is gone (or going): skip the units pointing into it
                if not messages:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_file_start = commit_log.roll_next_file(phy)
                log_start = commit_log.min_offset()  # below it retention removed them: nothing is damaged
                if phy >= log_start:
                    unreadable.append((next_offset - 1, phy, _NOT_HELD))
                continue
            message = decode(buf)
            if message is None:  # a damaged record (verify names it): RocketMQ serves its bytes, we skip it
                unreadable.append((next_offset - 1, phy, "it does not decode"))
                continue
            if accepted is not None and message.tags not in accepted:  # its tag's hash collides with one asked for
                if not messages:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            messages.append(message)
            total += size
            next_file_start = -1
            status = GetMessageStatus.FOUND
        suggest = max_phy - last_phy > memory
        if not unreadable:
            return GetResult(status, messages, next_offset, min_offset, max_offset, suggest)
        self._still_open()
        _warn_unreadable(queue, unreadable)
        passed = tuple(q for q, _phy, _why in unreadable)
        return GetResult(status, messages, next_offset, min_offset, max_offset, suggest, passed)

    # -- lookups ---------------------------------------------------------------------------------
    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None:
        if type(commit_log_offset) is not int or (size is not None and type(size) is not int):
            commit_log_offset, size = check_arguments(
                "look_message_by_offset", offset=(commit_log_offset, int), size=(size, (int, type(None)))
            )
        return self.commit_log.read_message(commit_log_offset, size)

    def look_message_by_msg_id(self, msg_id: str) -> StoredMessage | None:
        check_arguments("look_message_by_msg_id", msg_id=(msg_id, str))
        try:
            _, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            raise InvalidArgumentError(f"not an offset msgId (32 or 56 hex digits): {msg_id!r}") from None
        return self.commit_log.read_message(offset)

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int | None = None
    ) -> QueryResult:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) hold ``key``, stored within [begin, end]
        (epoch ms, both inclusive) at the index's resolution of whole seconds, as in RocketMQ: an
        index entry holds its message's store time as whole seconds since its index file's first
        message (spec 8.3), and that time, up to 999 ms before the store time, is what is compared.
        A message stored up to 999 ms after ``end`` can match, one stored up to 999 ms after
        ``begin`` can be missed.

        Index hits whose real key differs (hash collisions) are dropped, after ``max_num`` capped
        the hits read (as RocketMQ's maxNum): newer messages of such keys can leave fewer, or none;
        ``index_hits`` tells how many were read. Hits inside the log whose record does not decode
        are named in the result's ``unreadable`` and in a WARNING.
        """
        topic, key, max_num, begin, end = check_arguments(
            "query_message",
            topic=(topic, str),
            key=(key, str),
            max_num=(max_num, int),
            begin=(begin, int),
            end=(end, (int, type(None))),
        )
        end = JAVA_LONG[1] if end is None else end
        found: list[StoredMessage] = []
        unreadable: set[int] = set()
        last_query_ts = end
        last_ts = last_phy = 0  # the index's last update, told only when it gave offsets (as RocketMQ)
        hits = -1
        for _ in range(3):
            # at most maxMsgsNumBatch, read at each query as IndexService.queryOffset reads it
            offsets = self.index.query_offsets(
                topic, key, min(max_num, self.config.max_msgs_num_batch), begin, last_query_ts
            )
            if hits < 0:
                hits = len(offsets)
            if not offsets:
                break
            last_ts, last_phy = self.index.last_update()
            offsets.sort()
            first = True
            for phy in offsets:
                msg = self.commit_log.read_message(phy)
                if msg is None:
                    if self.commit_log.min_offset() <= phy < self.commit_log.max_offset():
                        unreadable.add(phy)
                    continue
                if first:
                    last_query_ts = msg.store_timestamp
                    first = False
                if msg.topic == topic and (msg.uniq_key == key or key in split_keys(msg.keys)):
                    found.append(msg)
            if found or last_query_ts < begin:
                break
        self._still_open()  # misses are not told apart from removed records once the log is closed
        unique = {m.commit_log_offset: m for m in found}
        if unreadable:
            log.warning(
                "query of %s key %r: the index points at %d record(s) that do not decode, at commit-log offset(s) %s "
                "(the message, or one of another key with the same hash); `rocketstore verify` tells more",
                topic,
                key,
                len(unreadable),
                ", ".join(map(str, sorted(unreadable))),
            )
        messages = [unique[o] for o in sorted(unique)][:max_num]
        return QueryResult(messages, last_ts, last_phy, max(hits, 0), tuple(sorted(unreadable)))

    # -- offsets and times ----------------------------------------------------------------------
    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        topic, queue_id, timestamp = check_arguments(
            "get_offset_in_queue_by_time", topic=(topic, str), queue_id=(queue_id, int), timestamp=(timestamp, int)
        )
        cq = self.queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self.commit_log.store_time_at, self.commit_log.min_offset())

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        topic, queue_id, offset = _queue_arguments("get_message_store_timestamp", topic, queue_id, offset)
        cq = self.queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq and offset >= 0 else None
        if unit is None:
            return -1
        return self.commit_log.store_time_at(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """Store time of the first message of a queue (queue 0 when ``queue_id`` is None), or of
        the whole log (``topic`` None); -1 if none."""
        topic, queue_id = check_arguments(
            "get_earliest_message_time", topic=(topic, (str, type(None))), queue_id=(queue_id, (int, type(None)))
        )
        if topic is None:
            first = self.commit_log.min_offset()
            if first < 0 or first >= self.commit_log.max_offset():
                return -1
            return self.commit_log.store_time_at(first, 0)
        cq = self.queues.find(topic, queue_id or 0)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id or 0, cq.min_offset_in_queue())

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        topic, queue_id, offset = _queue_arguments("get_commit_log_offset_in_queue", topic, queue_id, offset)
        cq = self.queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq else None
        return unit[0] if unit else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        if type(topic) is not str or type(queue_id) is not int:
            topic, queue_id = check_arguments("get_min_offset_in_queue", topic=(topic, str), queue_id=(queue_id, int))
        cq = self.queues.find(topic, queue_id)
        return cq.min_offset_in_queue() if cq else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        if type(topic) is not str or type(queue_id) is not int:
            topic, queue_id = check_arguments("get_max_offset_in_queue", topic=(topic, str), queue_id=(queue_id, int))
        cq = self.queues.find(topic, queue_id)
        return cq.max_offset_in_queue() if cq else 0
