"""Delayed delivery (spec 17.2): ScheduleMessageService.

A message put with ``DELAY`` = L waits in ``SCHEDULE_TOPIC_XXXX`` queue L-1, whose consume-queue
units carry the delivery time as their tags code. For every level this service walks its queue
from the offset kept in ``delayOffset.json``; a unit whose time has come is read back and stored
again in its real topic and queue (``REAL_TOPIC``/``REAL_QID``), and the level's offset moves on.
One thread serves every level: it sleeps until the earliest level is due. Where RocketMQ gives each
level a timer task of its own, here the due levels take turns, each delivering at most
``UNITS_PER_ROUND`` units per turn, so a level's backlog holds no other level back; and the thread
leaves its work at the next unit when asked to stop (RocketMQ's ``isStarted()`` check).

As in RocketMQ, the redelivered record keeps the schedule record's properties string as it was
(``DELAY``, ``REAL_TOPIC`` and ``REAL_QID`` included), is not delayed again, and does not wait
for a SYNC flush (``WAIT=false``). A level's offset moves past a unit only once its message was
put, or dropped: a record that can never be delivered (no usable real topic or queue, or a put
refused as MESSAGE_ILLEGAL or PROPERTIES_SIZE_EXCEEDED) is logged as an error and skipped, as
RocketMQ drops it; any other refusal (not writeable, disk full, busy) is tried again in 10 s
(RocketMQ's ``DELAY_FOR_A_PERIOD``).
Offsets are persisted every ``flushDelayOffsetInterval`` (checked after every unit delivered, so
during a long backlog too) and at stop, each time once the commit log is flushed up to the copies delivered
(they are put without waiting for a flush). After a crash or a power loss the messages delivered
since the last persist are delivered again; none is lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rocketstore.codec.message import Message, StoredMessage
from rocketstore.codec.properties import REAL_QID, REAL_TOPIC
from rocketstore.codec.scan import java_int
from rocketstore.codec.topic import HALF_TOPIC, SCHEDULE_TOPIC, validate_topic
from rocketstore.errors import FlushError, InvalidMessageError, InvalidTopicError, RocketStoreError, StoreClosedError
from rocketstore.log.commitlog import CommitLog
from rocketstore.meta.offset_files import DelayOffsetManager
from rocketstore.queues.consume_queue import ConsumeQueue
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.reader import check_arguments
from rocketstore.reports import ScheduleLevel
from rocketstore.results import PutMessageStatus, PutResult
from rocketstore.services.base import Service

log = logging.getLogger(__name__)

FIRST_DELAY_MS = 1000  # the first round of each level, after start
DELAY_FOR_A_WHILE_MS = 100  # an idle level is looked at again after this
DELAY_FOR_A_PERIOD_MS = 10_000  # a level whose delivery the store refused (disk full, ...): as RocketMQ
UNITS_PER_ROUND = 500  # the units a level delivers (or skips) in one turn before the next due level's turn
UNKNOWN_LEVEL_DELAY_MS = 1000  # computeDeliverTimestamp for a level the table lacks
# refusals of a delivery that no later attempt changes (the record itself is at fault): dropped
REFUSED_FOR_GOOD = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})
_MAX_EXT_ADDR = -(2**31) - 1  # ConsumeQueueExt.isExtAddr: tags codes at or below it address the ext file

Reader = Callable[[int, int], "StoredMessage | None"]
Putter = Callable[[Message, int], PutResult]


def deliver_timestamp(level: int, store_timestamp: int, delay_millis: tuple[int, ...]) -> int:
    """RocketMQ's ``computeDeliverTimestamp``: store time + the level's delay (+1 s if unknown)."""
    if 1 <= level <= len(delay_millis):
        return store_timestamp + delay_millis[level - 1]
    return store_timestamp + UNKNOWN_LEVEL_DELAY_MS


def _within_queue(offset: int, cq: ConsumeQueue | None) -> int:
    """``offset`` brought into the queue's ``[min, max]`` (0 when there is no queue)."""
    if cq is None:
        return 0
    return min(max(offset, cq.min_offset_in_queue()), cq.max_offset_in_queue())


def correct_delay_offsets(
    offsets: DelayOffsetManager, queues: ConsumeQueueStore, levels: int
) -> dict[int, tuple[int, int]]:
    """Bring each level's offset into its queue's ``[min, max]`` (``correctDelayOffset``); the
    changes as ``{level: (old, new)}``. Levels without an offset are left alone; a level without a
    queue has an empty one (``findOrCreateConsumeQueue``): its offset goes back to 0."""
    changed = {}
    for level in range(1, levels + 1):
        if level not in offsets.offset_table:
            continue
        cq = queues.find(SCHEDULE_TOPIC, level - 1)
        old = offsets.get(level)
        new = _within_queue(old, cq) if cq is not None else 0
        if new != old:
            log.warning("delay level %d: offset %d corrected to %d (queue bounds)", level, old, new)
            offsets.set(level, new)
            changed[level] = (old, new)
    return changed


def real_destination(props: Mapping[str, str]) -> tuple[str, int] | None:
    """The real topic and queue a schedule record with ``props`` is delivered to (``REAL_TOPIC``,
    ``REAL_QID``); None for one delivery passes over quietly (no ``REAL_TOPIC``: not a delayed
    message; a half message's topic). InvalidMessageError (InvalidTopicError for the topic) when
    delivery could never store it: a real topic RocketMQ does not take, or the schedule topic
    itself (delivered there, it would be delayed again, for ever); a queue id Java's
    Integer.parseInt does not read as an int >= 0. The writer refuses such a record; delivery
    drops one stored anyway."""
    topic, qid = props.get(REAL_TOPIC), props.get(REAL_QID)
    if topic is None or topic == HALF_TOPIC:
        return None
    try:
        validate_topic(topic)
    except InvalidTopicError as exc:
        raise InvalidTopicError(f"its REAL_TOPIC is not a topic RocketMQ takes: {exc}") from None
    if topic == SCHEDULE_TOPIC:
        raise InvalidTopicError(f"its REAL_TOPIC is {SCHEDULE_TOPIC} itself: it would be delayed again, for ever")
    if qid is None:
        raise InvalidMessageError("it has no REAL_QID property (the queue to deliver it to)")
    queue_id = java_int(qid)  # as Integer.parseInt: None for "1_0" or " 2", which int() takes
    if queue_id is None or queue_id < 0:
        raise InvalidMessageError(f"its REAL_QID {qid!r} is not a queue id (an int >= 0, as Java reads it)")
    return topic, queue_id


def redelivered(stored: StoredMessage, quiet: bool = False) -> tuple[Message, int] | None:
    """The message RocketMQ's ``messageTimeup`` stores for a due schedule record, and its queue;
    None for a record that must not be delivered (``real_destination``: no real topic or a half
    message's, quietly; no usable real topic/queue, logged as an error unless ``quiet``, for a
    caller that only asks)."""
    props = stored.properties
    try:
        destination = real_destination(props)
        if destination is None:
            return None
        topic, queue_id = destination
        message = stored.copy_to(topic, props, store_host=stored.store_host)
    except (ValueError, RocketStoreError) as exc:
        if not quiet:
            log.error(
                "schedule record at %d has no usable real topic/queue (%s): skipped", stored.commit_log_offset, exc
            )
        return None
    return message, queue_id


@dataclass
class LevelStats:
    """What one level has done since the service started."""

    delivered: int = 0
    skipped: int = 0
    failed_puts: int = 0
    due_at: int = 0  # epoch ms of the level's next round
    backing_off: bool = False  # due_at is DELAY_FOR_A_PERIOD_MS on, after a refused delivery


class ScheduleMessageService(Service):
    """Delivers delayed messages of every level when they are due."""

    name = "schedule"

    def __init__(
        self,
        queues: ConsumeQueueStore,
        read: Reader,
        put: Putter,
        offsets: DelayOffsetManager,
        delay_millis: tuple[int, ...],
        flush_delay_offset_interval_ms: int,
        clock: Callable[[], float] = time.time,
        units_per_round: int = UNITS_PER_ROUND,
        commit_log: CommitLog | None = None,
    ) -> None:
        """``commit_log``: the log the copies are put in, flushed up to the last of them before
        ``delayOffset.json`` is written (None: not flushed here)."""
        super().__init__(DELAY_FOR_A_WHILE_MS)
        self.commit_log = commit_log
        self.queues = queues
        self.read = read
        self.put = put
        self.offsets = offsets
        self.delay_millis = delay_millis
        self.flush_interval_ms = flush_delay_offset_interval_ms
        self.clock = clock
        self.units_per_round = units_per_round
        now = self._now()
        self.levels = {level: LevelStats(due_at=now + FIRST_DELAY_MS) for level in range(1, len(delay_millis) + 1)}
        self._last_persist = now
        self._dirty = False
        self._delivered_end = 0  # commit-log offset just past the last copy delivered
        self._progress = threading.Condition()
        correct_delay_offsets(offsets, queues, len(delay_millis))

    def _now(self) -> int:
        return int(self.clock() * 1000)

    @property
    def delivered(self) -> int:
        """Messages delivered to their real topics since start."""
        return sum(s.delivered for s in self.levels.values())

    def wait_seconds(self) -> float:
        due = min(s.due_at for s in self.levels.values()) if self.levels else self._now() + DELAY_FOR_A_WHILE_MS
        return min(max(0.0, (due - self._now()) / 1000), DELAY_FOR_A_WHILE_MS / 1000)

    def run_once(self, now: int | None = None) -> int:
        """One round: every level due at ``now`` (epoch ms; the clock if None) takes a turn of at
        most ``units_per_round`` units; the number delivered. The service's thread leaves the round
        at the next unit once it is asked to stop. Tests pass a ``now`` in the future instead of
        waiting: then every level is looked at, and rounds follow one another until nothing due
        at ``now`` is left."""
        forced = now is not None
        count = 0
        while True:
            at = now if now is not None else self._now()
            more = False
            for level, stats in self.levels.items():
                if self._stopping():
                    return count
                # a level is never set due more than FIRST_DELAY_MS ahead (DELAY_FOR_A_PERIOD_MS
                # backing off): further ahead, the clock stepped back since, and the level is
                # looked at now (as RocketMQ's 100 ms timer would)
                ahead = DELAY_FOR_A_PERIOD_MS if stats.backing_off else FIRST_DELAY_MS
                if forced or stats.due_at <= at or stats.due_at - at > ahead:
                    before = stats.delivered
                    stats.due_at = self._deliver_level(level, stats, now)
                    more |= stats.due_at <= at  # the turn ended with units still due
                    if stats.delivered > before:
                        count += stats.delivered - before
                        with self._progress:
                            self._progress.notify_all()
                    self._persist_on_interval(at if forced else None)
            if not (forced and more):
                return count

    def _stopping(self) -> bool:
        """The service's own thread was asked to stop (a direct call by a test always goes on)."""
        return self._stopped.is_set() and threading.current_thread() is self._thread

    def _persist_on_interval(self, now: int | None) -> None:
        """Persist when ``flushDelayOffsetInterval`` has passed since the last time, by a fresh
        clock reading (or by ``now``, a test's time in the future, if later)."""
        if not self._dirty:
            return
        at = self._now() if now is None else max(now, self._now())
        if at - self._last_persist >= self.flush_interval_ms or at < self._last_persist:  # (the clock stepped back)
            self.persist()

    def _deliver_level(self, level: int, stats: LevelStats, given: int | None) -> int:
        """One turn of level ``level``: deliver what is due, at most ``units_per_round`` units;
        when to look at it again (epoch ms; now when units are left for the next turn). Due is
        judged by the clock read for each unit, as RocketMQ reads it (a unit stored during the
        turn is not "too far ahead"), or by ``given``, a test's time."""
        now = self._now() if given is None else given
        stats.backing_off = False
        cq = self.queues.find(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return now + DELAY_FOR_A_WHILE_MS
        end = cq.max_offset_in_queue()
        offset = max(self.offsets.get(level), cq.min_offset_in_queue())
        if offset > end:  # the queue was made again (cleaned, rebuilt): go on from its end, as RocketMQ
            log.error("delay level %d: offset %d is past the queue's end %d; reset to it", level, offset, end)
            offset = end
            self._set_offset(level, end)
        delay = self.delay_millis[level - 1]
        stop_at = min(end, offset + max(1, self.units_per_round))
        reached = offset
        for first, units in cq.iter_units(offset, stop_at, chunk=1024):
            for i, (phy, size, deliver) in enumerate(units.tolist()):
                if self._stopping():  # the offset stays at this unit: the next start delivers it
                    self._set_offset(level, first + i, create=False)
                    return now
                stored = None
                if given is None:
                    now = self._now()
                if deliver <= _MAX_EXT_ADDR:  # not a delivery time: take it from the message
                    stored = self.read(phy, size)
                    deliver = deliver_timestamp(level, stored.store_timestamp, self.delay_millis) if stored else now
                noted = self.commit_log.due_by_clock.get(phy) if self.commit_log is not None else None
                if noted is not None and noted[0] == deliver:  # stamped ahead of the clock: due by it
                    deliver = min(deliver, noted[1])
                if deliver > now + delay:  # correctDeliverTimestamp: a time too far ahead means now
                    deliver = now
                if deliver > now:  # looked at again within 100 ms, as RocketMQ: a clock stepping back is met soon
                    self._set_offset(level, first + i, create=False)
                    return min(deliver, now + DELAY_FOR_A_WHILE_MS)
                stored = stored or self.read(phy, size)
                try:
                    target = redelivered(stored) if stored is not None else None
                    result = self.put(*target) if target is not None else None
                    if result is not None and result.status in REFUSED_FOR_GOOD:
                        result.raise_for_status()
                except StoreClosedError:
                    raise
                except RocketStoreError as exc:  # it can never be put (RocketMQ: "drop it")
                    log.error("delay level %d: the message at %d cannot be delivered, dropped: %s", level, phy, exc)
                    target = None
                if target is None:
                    stats.skipped += 1
                else:
                    if not result.ok:
                        stats.failed_puts += 1
                        log.warning("delay level %d: redelivery refused (%s): retried in 10 s", level, result.status)
                        self._set_offset(level, first + i, create=False)
                        stats.backing_off = True
                        return now + DELAY_FOR_A_PERIOD_MS
                    stats.delivered += 1
                    self._delivered_end = max(self._delivered_end, result.commit_log_offset + result.wrote_bytes)
                reached = first + i + 1
                self._set_offset(level, reached)  # only past a unit whose message was put (or dropped)
                if self.commit_log is not None:
                    self.commit_log.due_by_clock.pop(phy, None)
                self._persist_on_interval(given)  # within a turn too: a crash then redelivers one interval's
        if reached == stop_at < end:  # the turn is over, not the level's due work: on at once, after the others
            return now
        return now + DELAY_FOR_A_WHILE_MS

    def _set_offset(self, level: int, offset: int, create: bool = True) -> None:
        """Record a level's next offset. Staying at a unit (not due, its put refused, a stop)
        makes no entry for a level that has none: RocketMQ 4.9.8 only reschedules its timer then,
        and its delayOffset.json names only the levels that delivered (or were loaded)."""
        table = self.offsets.offset_table
        if (self.offsets.get(level) == offset) if level in table else not create:
            return
        self.offsets.set(level, offset)
        self._dirty = True

    def persist(self) -> None:
        """Write delayOffset.json now, once the commit log is flushed up to the last copy delivered:
        an offset written past a copy a power loss then takes would lose that message. A failed
        flush or write leaves the offsets to be written at the next interval."""
        self._dirty = False
        self._last_persist = self._now()
        try:
            self._flush_delivered()
            self.offsets.persist()
        except BaseException:
            self._dirty = True
            raise

    def _flush_delivered(self) -> None:
        """Flush the commit log up to ``_delivered_end`` with its own commit (the transient pool's
        buffers first) and flush, as the store's flush does; FlushError if it does not get there."""
        if self.commit_log is None:
            return
        queue, end = self.commit_log.queue, self._delivered_end
        for _ in range(len(queue.files) + 1):  # a commit or flush covers one segment
            if queue.flushed_where >= end:
                return
            if queue.pool is not None:
                queue.commit(0)
            queue.flush(0)
        if queue.flushed_where < end:
            raise FlushError(f"the commit log is flushed up to {queue.flushed_where}, not to {end}")

    def wait_delivered(self, count: int, timeout: float) -> bool:
        """Block until ``count`` messages have been delivered since start; False on timeout."""
        with self._progress:
            return self._progress.wait_for(lambda: self.delivered >= count, timeout)

    def on_stop(self) -> None:
        self.persist()


def schedule_report(
    queues: ConsumeQueueStore, offsets: DelayOffsetManager, level_names: list[str], now: int | None = None
) -> list[ScheduleLevel]:
    """Per delay level with a queue or an offset: the delivered offset, the queue's end, the
    messages still waiting (lag) and when the next one is due (``now``: epoch ms, an int)."""
    (now,) = check_arguments("schedule_report", now=(now, (int, type(None))))
    now = int(time.time() * 1000) if now is None else now
    rows: list[ScheduleLevel] = []
    for level, name in enumerate(level_names, 1):
        cq = queues.find(SCHEDULE_TOPIC, level - 1)
        if cq is None and level not in offsets.offset_table:
            continue
        high = cq.max_offset_in_queue() if cq else 0
        offset = _within_queue(offsets.get(level), cq)
        unit = cq.get_unit(offset) if cq and offset < high else None
        rows.append(
            {
                "level": level,
                "delay": name,
                "offset": offset,
                "maxOffset": high,
                "lag": high - offset,
                "nextDeliverTimestamp": unit[2] if unit else None,
                "nextDueInMs": max(0, unit[2] - now) if unit else None,
            }
        )
    return rows
