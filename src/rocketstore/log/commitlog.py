"""The commit log: appending records under the put lock, and reading them back by offset.

Appends assign queue offsets from the topic-queue table, stamp the store time, write the bytes
into the last segment (an end-of-file marker and a new segment when they do not fit) and hand
the dispatch request of every record to the reput service, so dispatch does not need to parse
back what was just written.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from operator import itemgetter

from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.message import StoredMessage
from rocketstore.codec.scan import batch_request
from rocketstore.errors import RecordError
from rocketstore.files.allocate import SegmentAllocator
from rocketstore.files.file_queue import MappedFileQueue
from rocketstore.files.mapped_file import LOG_FD_RESERVE, MappedFile
from rocketstore.results import PutMessageStatus

_INT = rec._INT
_time_ns = time.time_ns
_TX_MASK = sf.TRANSACTION_ROLLBACK_TYPE
DELIVER_AFTER = "deliver-after"  # a prepared record's tags code (DELIVER_AFTER, ms): the store time plus ms


class AppendResult(tuple):
    """What ``CommitLog.append`` did (AppendMessageResult): status, wrote offset, wrote bytes,
    first queue offset, store time, per-record offsets (batches), detail."""

    __slots__ = ()
    status: PutMessageStatus = property(itemgetter(0))  # type: ignore[assignment]
    wrote_offset: int = property(itemgetter(1))  # type: ignore[assignment]
    wrote_bytes: int = property(itemgetter(2))  # type: ignore[assignment]
    queue_offset: int = property(itemgetter(3))  # type: ignore[assignment]
    store_timestamp: int = property(itemgetter(4))  # type: ignore[assignment]
    offsets: list[int] | None = property(itemgetter(5))  # type: ignore[assignment]
    detail: str = property(itemgetter(6))  # type: ignore[assignment]


def _refused(status: PutMessageStatus, detail: str) -> AppendResult:
    return AppendResult((status, -1, 0, -1, 0, None, detail))


log = logging.getLogger(__name__)


def _reserved(mapped: MappedFile, size: int) -> bool:
    """Whether the disk blocks for ``size`` more bytes at the wrote position exist or could be had
    (a segment written elsewhere may be sparse); False when the disk is full."""
    try:
        mapped.reserve(mapped.wrote_position + size)
    except OSError as exc:
        log.error("no disk space to append to %s: %s", mapped.path, exc)
        return False
    return True


def too_big_for_segment(total: int, file_size: int) -> str | None:
    """Why ``total`` bytes of records cannot go into a ``file_size``-byte segment (records never
    straddle two, and an end-of-file marker must fit after them); None when they can."""
    if total + rec.END_FILE_MIN_BLANK_LENGTH > file_size:
        return f"{total} bytes of records cannot fit a {file_size}-byte commit-log segment"
    return None


class CommitLog:
    """Segments of ``mappedFileSizeCommitLog`` bytes under one or several folders."""

    def __init__(
        self,
        paths: list[str],
        file_size: int,
        mode: str = "rw",
        *,
        allocator: SegmentAllocator | None = None,
        path_is_full: Callable[[str], bool] | None = None,
        pool: object | None = None,
        read_only_paths: list[str] | None = None,
    ) -> None:
        self.file_size = file_size
        self.mode = mode
        self.closed = False  # a read that finds its segment gone asks this: closed is not removed
        self.queue = MappedFileQueue(
            paths,
            file_size,
            mode,
            allocator=allocator,
            path_is_full=path_is_full,
            pool=pool,
            read_only_paths=read_only_paths,
            keep_fds=LOG_FD_RESERVE,
        )
        self.allocator = allocator
        self.put_lock = threading.Lock()
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # dispatch requests of appended records, for the reput service (deque: thread-safe, no lock)
        self.handoff: collections.deque[tuple] = collections.deque()
        self.wake_event: threading.Event | None = None  # set after an append (wakes the reput service)
        self.on_new_queue: Callable[[tuple[str, int]], None] | None = None  # first record of a queue
        self.confirm_offset = -1
        self._last_store_ts = 0
        # delayed records stamped ahead of the clock (it stepped back): commit-log offset -> (the
        # unit's tags code, the due time by the clock, as RocketMQ's record stamped by the clock would
        # be due); the schedule service uses it for the unit of that tags code only (a record put
        # there since is another), and takes it out as it delivers it (in memory: after a restart
        # the stamp decides)
        self.due_by_clock: dict[int, tuple[int, int]] = {}
        self._current: MappedFile | None = None
        self._prefault_at = 0
        self.begin_time_in_lock = 0  # store time (ms) at which the put lock was taken, 0 when free
        self.refusing = False  # set by refuse_appends: no record is appended any more
        self.roll_error = ""  # why the last new segment could not be made ("" once one was): logged once

    # -- load --------------------------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    # -- appending ---------------------------------------------------------------------------------
    def append(self, topic: str, queue_id: int, items: list[rec.Prepared]) -> AppendResult:
        """Append prepared records of one topic/queue as consecutive records with one store time.

        A batch never straddles two segments. PREPARED and ROLLBACK records get queue offset 0
        and advance nothing.
        """
        if len(items) == 1:
            total = items[0][1]
        else:
            total = sum([p[1] for p in items])
        too_big = too_big_for_segment(total, self.file_size)
        if too_big:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, too_big)
        tx = items[0][6] & _TX_MASK
        queued = tx == sf.TRANSACTION_NOT_TYPE or tx == sf.TRANSACTION_COMMIT_TYPE
        handoff = self.handoff
        render = rec.render
        with self.put_lock:
            try:
                clock = now = _time_ns() // 1_000_000
                if now < self._last_store_ts:
                    now = self._last_store_ts  # store times never go back in log order
                self._last_store_ts = self.begin_time_in_lock = now
                mapped = self._room_for(total, now)
                if type(mapped) is AppendResult:
                    return mapped
                key = (topic, queue_id)
                if key not in self.topic_queue_table and self.on_new_queue is not None:
                    self.on_new_queue(key)
                queue_offset = self.topic_queue_table.get(key, 0) if queued else 0
                phy = mapped.file_from_offset + mapped.wrote_position
                if len(items) == 1:
                    p = items[0]
                    mapped.append(render(p, queue_offset, phy, now))
                    if type(p[15]) is int:
                        tags = p[15]
                    else:  # (DELIVER_AFTER, delay)
                        tags = now + p[15][1]
                        if clock < now:
                            self.due_by_clock[phy] = (tags, clock + p[15][1])
                    handoff.append((topic, queue_id, phy, p[1], tags, now, queue_offset, p[16], p[17], p[6]))
                    offsets = None
                else:
                    parts = []
                    entries = []
                    offsets = []
                    q = queue_offset
                    at = phy
                    for p in items:  # every record rendered before any is stored or handed off
                        parts.append(render(p, q, at, now))
                        entries.append((topic, queue_id, at, p[1], p[15], now, q, p[16], p[17], p[6]))
                        offsets.append(at)
                        at += p[1]
                        if queued:
                            q += 1
                    mapped.append(b"".join(parts))
                    handoff.extend(entries)
                mapped.store_timestamp = now
                if queued:
                    self.topic_queue_table[key] = queue_offset + len(items)
                if mapped.wrote_position >= self._prefault_at and self.allocator is not None:
                    self._prefault_at = self.allocator.advise(mapped, mapped.wrote_position)
            finally:
                self.begin_time_in_lock = 0
        wake = self.wake_event
        if wake is not None and not wake.is_set():
            wake.set()
        return AppendResult((PutMessageStatus.PUT_OK, phy, total, queue_offset, now, offsets, ""))

    def plain_appender(self, host: bytes) -> Callable[..., tuple[int, int, int]]:
        """The common single put as a function: a V1 record, sysFlag 0, ``host`` (IPv4) as born
        and store host.

        ``append(topic, queue_id, key, body, tail, total, crc, flag, now, tags, keys, uniq)``
        has the effect of ``append`` with one prepared record, ``now`` being the born time and (if
        no later record was stored before) the store time. It returns (offset, queue offset, store
        time); the offset is -1 when no segment can be created, -2 when the record cannot fit one. It is a closure over
        the log's state so the put path, the store's hottest code, does no attribute lookups it
        can avoid; the table and the handoff list it captures are never replaced, only changed.
        """
        pack = rec.HEADERS[0].pack
        file_size = self.file_size
        acquire, release = self.put_lock.acquire, self.put_lock.release
        table = self.topic_queue_table
        get_offset = table.get
        handoff_add = self.handoff.append
        log = self
        magic = rec.MESSAGE_MAGIC_CODE
        join = b"".join

        def append(
            topic: str,
            queue_id: int,
            key: tuple[str, int],
            body: bytes,
            tail: bytes,
            total: int,
            crc: int,
            flag: int,
            born_ts: int,
            tags: int,
            keys: str | None,
            uniq: str,
        ) -> tuple[int, int, int]:
            if total + rec.END_FILE_MIN_BLANK_LENGTH > file_size:  # too_big_for_segment, inlined
                return -2, -1, born_ts
            acquire()
            try:
                now = born_ts
                if now < log._last_store_ts:
                    now = log._last_store_ts  # store times never go back in log order
                log._last_store_ts = log.begin_time_in_lock = now
                mapped = log._current
                if mapped is None or mapped.wrote_position + total + 8 > mapped.file_size:
                    mapped = log._writable_for(total, now)
                    if mapped is None:
                        return -1, -1, now
                pos = mapped.wrote_position
                if pos + total > mapped.allocated and not _reserved(mapped, total):  # written elsewhere: sparse?
                    return -1, -1, born_ts
                queue_offset = get_offset(key)
                if queue_offset is None:
                    queue_offset = 0
                    if log.on_new_queue is not None:
                        log.on_new_queue(key)
                phy = mapped.file_from_offset + pos
                data = join(
                    (
                        pack(
                            total,
                            magic,
                            crc,
                            queue_id,
                            flag,
                            queue_offset,
                            phy,
                            0,
                            born_ts,
                            host,
                            now,
                            host,
                            0,
                            0,
                            len(body),
                        ),
                        body,
                        tail,
                    )
                )
                end = pos + total
                if mapped.write_buffer is None:
                    mapped.mm[pos:end] = data
                    mapped.committed_position = end
                else:
                    mapped.write_buffer[pos:end] = data
                mapped.wrote_position = end
                handoff_add((topic, queue_id, phy, total, tags, now, queue_offset, keys, uniq, 0))
                mapped.store_timestamp = now
                table[key] = queue_offset + 1
                if end >= log._prefault_at and log.allocator is not None:
                    log._prefault_at = log.allocator.advise(mapped, end)
            finally:
                log.begin_time_in_lock = 0
                release()
            wake = log.wake_event
            if wake is not None and not wake.is_set():
                wake.set()
            return phy, queue_offset, now

        return append

    def append_plain_batch(
        self, topic: str, queue_id: int, columns: tuple[list, ...], born_ts: int, host: bytes
    ) -> AppendResult:
        """``append`` for a batch of plain records (what ``plain_appender`` writes, several at once).

        ``columns`` are lists with one item per record: bodies, tails (topic and properties),
        sizes, body CRCs, flags, tags codes, KEYS, UNIQ_KEYs.
        """
        bodies, tails, sizes, crcs, flags, codes, keys, uniqs = columns
        total = sum(sizes)
        too_big = too_big_for_segment(total, self.file_size)
        if too_big:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, too_big)
        pack = rec.HEADERS[0].pack
        magic = rec.MESSAGE_MAGIC_CODE
        key = (topic, queue_id)
        with self.put_lock:
            try:
                now = born_ts if born_ts >= self._last_store_ts else self._last_store_ts
                self._last_store_ts = self.begin_time_in_lock = now
                mapped = self._room_for(total, now)
                if type(mapped) is AppendResult:
                    return mapped
                first_queue_offset = self.topic_queue_table.get(key)
                if first_queue_offset is None:
                    first_queue_offset = 0
                    if self.on_new_queue is not None:
                        self.on_new_queue(key)
                first = mapped.file_from_offset + mapped.wrote_position
                offsets = list(itertools.accumulate(sizes[:-1], initial=first))
                headers = [
                    pack(size, magic, crc, queue_id, flag, q, phy, 0, born_ts, host, now, host, 0, 0, len(body))
                    for size, crc, flag, q, phy, body in zip(
                        sizes, crcs, flags, itertools.count(first_queue_offset), offsets, bodies
                    )
                ]
                mapped.append(b"".join(itertools.chain.from_iterable(zip(headers, bodies, tails, strict=True))))
                self.handoff.append(
                    batch_request(topic, queue_id, first, sizes, codes, now, first_queue_offset, keys, uniqs)
                )
                mapped.store_timestamp = now
                self.topic_queue_table[key] = first_queue_offset + len(sizes)
                if mapped.wrote_position >= self._prefault_at and self.allocator is not None:
                    self._prefault_at = self.allocator.advise(mapped, mapped.wrote_position)
            finally:
                self.begin_time_in_lock = 0
        wake = self.wake_event
        if wake is not None and not wake.is_set():
            wake.set()
        return AppendResult((PutMessageStatus.PUT_OK, first, total, first_queue_offset, now, offsets, ""))

    def _room_for(self, total: int, now: int) -> MappedFile | AppendResult:
        """The segment the next ``total`` bytes go to, with disk for them; else the refusal.
        Called under the put lock."""
        mapped = self._current
        if mapped is None or mapped.wrote_position + total + 8 > mapped.file_size:
            mapped = self._writable_for(total, now)
            if mapped is None:
                return _refused(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, self.no_room())
        if mapped.wrote_position + total > mapped.allocated and not _reserved(mapped, total):
            return _refused(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, self.no_room())
        return mapped

    def no_room(self) -> str:
        """Why an append just found no room (under the put lock): the new segment could not be
        made, or the disk has no space for the records (or an end-of-file marker)."""
        if self.roll_error:
            return f"no new commit-log segment: {self.roll_error}"
        return "no disk space for the records"

    def refuse_appends(self) -> None:
        """Append nothing from now on (the store shuts down): an append already past the store's
        own checks, waiting for the put lock, finds no segment (``refusing`` tells why). Returns
        once an append in progress is done, so the final flush covers it."""
        with self.put_lock:
            self.refusing = True
            self._current = None  # every append looks for a segment: _writable_for refuses

    def _writable_for(self, total: int, now: int) -> MappedFile | None:
        """The segment ``total`` bytes go to: the current one, or (after its end-of-file marker)
        a new one; None when there is none (or appends are refused). Called under the put lock."""
        if self.refusing:
            return None
        mapped = self._current
        if mapped is None or mapped.wrote_position >= mapped.file_size:
            mapped = self._roll_to_writable()
            if mapped is None:
                return None
        pos = mapped.wrote_position
        if pos + total + rec.END_FILE_MIN_BLANK_LENGTH > mapped.file_size:
            left = mapped.file_size - pos
            if not _reserved(mapped, 8):
                return None
            # a reused buffer holds old bytes: the file gets zeros, written before the marker fills
            # the segment (the commit may then hand a full segment's buffer back to the pool)
            buffer = mapped.write_buffer
            if buffer is not None:
                buffer[pos + 8 : mapped.file_size] = bytes(left - 8)
            mapped.append(rec.blank_record(left))
            mapped.wrote_position = mapped.file_size
            if buffer is None:  # written straight to the file: committed as far
                mapped.committed_position = mapped.file_size
            mapped.store_timestamp = now
            self.handoff.append((None, 0, mapped.file_from_offset + pos, left, 0, now, 0, None, None, 0))
            mapped = self._roll_to_writable()
        return mapped

    def _roll_to_writable(self) -> MappedFile | None:
        try:
            mapped = self.queue.last_mapped_file(0)
        except OSError as exc:
            if str(exc) != self.roll_error:  # logged once, not for every put it fails
                log.warning("no new commit-log segment: %s", exc)
            self.roll_error = str(exc)
            return None
        self.roll_error = ""
        self._current = mapped
        self._prefault_at = mapped.prefaulted if mapped is not None else 0
        return mapped

    def take_handoff(self) -> list[tuple]:
        """The dispatch requests appended since the last call.

        Appends and this take work on the two ends of a deque, which is safe across threads
        without the put lock, so the reput service never makes a put wait.
        """
        handoff = self.handoff
        n = len(handoff)
        if not n:
            return []
        take = handoff.popleft
        return [take() for _ in range(n)]

    def store_times_from(self, newest: int) -> None:
        """Store times go on from ``newest``, the latest of the records recovery kept: a clock found
        behind the log at an open does not stamp new records earlier than those (abnormal recovery
        picks the first segment it checks by store time, and would start past unflushed data)."""
        with self.put_lock:
            self._last_store_ts = max(self._last_store_ts, newest)

    def reset_topic_queue_table(self, table: dict[tuple[str, int], int]) -> None:
        with self.put_lock:
            self.topic_queue_table.clear()
            self.topic_queue_table.update(table)
            self._current = None

    def forget_topics(self, topics: set[str], *, locked: bool = False) -> None:
        """Drop the next queue offsets of deleted ``topics``: if they come back, they start at 0.
        ``locked``: the caller holds the put lock."""
        with contextlib.nullcontext() if locked else self.put_lock:
            for key in [k for k in self.topic_queue_table if k[0] in topics]:
                del self.topic_queue_table[key]

    # -- offsets -------------------------------------------------------------------------------
    def min_offset(self) -> int:
        """First readable offset (-1 when empty). Segments being deleted do not count: a cleanup
        round destroys up to ``deleteFileBatchMax`` of them before it drops them from the list
        (RocketMQ's getMinOffset skips only the first, naming a deleted one for a second)."""
        files = self.queue.files  # a snapshot: the list is replaced, never changed in place
        if not files:
            return -1
        for mapped in files:
            if mapped.available:
                return mapped.file_from_offset
        return self.roll_next_file(files[-1].file_from_offset)

    def max_offset(self) -> int:
        return self.queue.max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    # -- reading -------------------------------------------------------------------------------
    def get_data(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` if they are all readable, else None."""
        files = self.queue.files
        if not files:
            return None
        file_size = self.file_size
        index = offset // file_size - files[0].file_from_offset // file_size
        if index < 0 or index >= len(files):
            return None
        mapped = files[index]
        pos = offset - mapped.file_from_offset
        if pos < 0 or pos + size > mapped.read_position or not mapped.available:  # not: being deleted
            return None
        try:
            return mapped.mm[pos : pos + size]
        except ValueError:  # unmapped by cleanup in the meantime
            return None

    def read_records(self, offsets: Sequence[int], sizes: Sequence[int]) -> list[StoredMessage | None]:
        """Decode the records at ``offsets`` (of ``sizes`` bytes each); None where one is not
        readable or not valid. The bulk form of ``read_message``, for pulls and scans."""
        files = self.queue.files
        if not files or not offsets:
            return [None] * len(offsets)
        file_size = self.file_size
        first = files[0].file_from_offset // file_size
        count = len(files)
        decode = rec.decode_record
        # the usual pull: every record in one segment, decoded in one comprehension
        low = min(offsets)
        index = low // file_size - first
        if 0 <= index < count:
            mapped = files[index]
            base = mapped.file_from_offset
            if low >= base and max(offsets) + max(sizes) <= base + mapped.read_position and mapped.available:
                mm = mapped.mm
                try:
                    return [decode(mm[p - base : p - base + s]) for p, s in zip(offsets, sizes, strict=True)]
                except ValueError:  # unmapped by cleanup in the meantime: record by record below
                    pass
        out: list[StoredMessage | None] = []
        add = out.append
        # the segment of the first record, kept while the next ones lie in it (the usual case)
        mapped = None
        base = readable = 0
        mm = None
        for offset, size in zip(offsets, sizes, strict=True):
            pos = offset - base
            if mapped is None or pos < 0 or pos + size > readable:
                index = offset // file_size - first
                if not 0 <= index < count:
                    add(None)
                    continue
                mapped = files[index]
                readable = mapped.read_position if mapped.available else 0  # 0: being deleted
                base, mm = mapped.file_from_offset, mapped.mm
                pos = offset - base
                if pos + size > readable:
                    add(None)
                    continue
            try:
                add(decode(mm[pos : pos + size]))
            except ValueError:  # unmapped by cleanup in the meantime
                add(None)
        return out

    def record_size_at(self, offset: int) -> int:
        head = self.get_data(offset, 4)
        return _INT.unpack(head)[0] if head else -1

    def read_message(self, offset: int, size: int | None = None) -> StoredMessage | None:
        """Decode the record at ``offset`` (``lookMessageByOffset``); None past the end or on bad data."""
        if size is None:
            size = self.record_size_at(offset)
        if size <= 0:  # no record has that size (a negative one sliced the map from its end)
            return None
        data = self.get_data(offset, size)
        if data is None:
            return None
        try:
            return rec.decode(data)
        except RecordError:
            return None

    def store_time_at(self, offset: int, size: int) -> int:
        """Store timestamp of the record at ``offset`` (``pickupStoreTimestamp``), -1 if unreadable."""
        if offset < self.min_offset():
            return -1
        head = self.get_data(offset, 76)
        if head is None or offset + size > self.max_offset():
            return -1
        flag = _INT.unpack_from(head, rec.SYSFLAG_POSITION)[0]
        return rec._LONG.unpack_from(head, rec.store_timestamp_position(flag))[0]

    def close(self) -> None:
        self.closed = True
        self._current = None
        self.queue.close()
