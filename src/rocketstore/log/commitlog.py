"""The commit log: appending records under the put lock, and reading them back by offset.

Appends assign queue offsets from the topic-queue table, stamp the store time, write the bytes
into the last segment (an end-of-file marker and a new segment when they do not fit) and hand
the dispatch request of every record to the reput service, so dispatch does not need to parse
back what was just written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.message import StoredMessage
from rocketstore.errors import RecordError
from rocketstore.files.allocate import SegmentAllocator
from rocketstore.files.file_queue import MappedFileQueue
from rocketstore.files.mapped_file import MappedFile
from rocketstore.results import PutMessageStatus

_INT = rec._INT
_TX_MASK = sf.TRANSACTION_ROLLBACK_TYPE


class AppendResult:
    """What ``CommitLog.append`` did (AppendMessageResult)."""

    __slots__ = ("detail", "offsets", "queue_offset", "status", "store_timestamp", "wrote_bytes", "wrote_offset")

    def __init__(
        self,
        status: PutMessageStatus,
        wrote_offset: int = -1,
        wrote_bytes: int = 0,
        queue_offset: int = -1,
        store_timestamp: int = 0,
        offsets: list[int] | None = None,
        detail: str = "",
    ) -> None:
        self.status = status
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self.offsets = offsets
        self.detail = detail


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
    ) -> None:
        self.file_size = file_size
        self.mode = mode
        self.queue = MappedFileQueue(paths, file_size, mode, allocator=allocator, path_is_full=path_is_full)
        self.allocator = allocator
        self.put_lock = threading.Lock()
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.handoff: list[tuple] = []  # dispatch requests of appended records, for the reput service
        self.on_append: Callable[[], None] | None = None
        self.confirm_offset = -1
        self._last_store_ts = 0
        self._current: MappedFile | None = None
        self._prefault_at = 0
        self.begin_time_in_lock = 0.0

    # -- load --------------------------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    # -- appending ---------------------------------------------------------------------------------
    def append(
        self, topic: str, queue_id: int, items: list[tuple[rec.Prepared, int, str | None, str | None]]
    ) -> AppendResult:
        """Append records of one topic/queue as consecutive records with one store time.

        ``items`` are (prepared record, tags code, KEYS, UNIQ_KEY). A batch never straddles two
        segments. PREPARED and ROLLBACK records get queue offset 0 and advance nothing.
        """
        total = 0
        for item in items:
            total += item[0].total
        if total + rec.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return AppendResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                detail=f"{total} bytes of records cannot fit a {self.file_size}-byte commit-log segment",
            )
        sys_flag = items[0][0].sys_flag
        queued = (sys_flag & _TX_MASK) in (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)
        handoff = self.handoff
        with self.put_lock:
            self.begin_time_in_lock = time.monotonic()
            now = time.time_ns() // 1_000_000
            if now < self._last_store_ts:
                now = self._last_store_ts  # store times never go back in log order
            self._last_store_ts = now
            mapped = self._current
            if mapped is None or mapped.wrote_position >= mapped.file_size:
                mapped = self._roll_to_writable()
                if mapped is None:
                    self.begin_time_in_lock = 0.0
                    return AppendResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, detail="no segment to append to")
            pos = mapped.wrote_position
            if pos + total + rec.END_FILE_MIN_BLANK_LENGTH > mapped.file_size:
                left = mapped.file_size - pos
                mapped.append(rec.blank_record(left))
                mapped.wrote_position = mapped.file_size
                mapped.store_timestamp = now
                handoff.append((None, 0, mapped.file_from_offset + pos, left, 0, now, 0, None, None, 0))
                mapped = self._roll_to_writable()
                if mapped is None:
                    self.begin_time_in_lock = 0.0
                    return AppendResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, detail="no segment to roll to")
                pos = 0
            key = (topic, queue_id)
            queue_offset = self.topic_queue_table.get(key, 0) if queued else 0
            phy = mapped.file_from_offset + pos
            first_phy = phy
            render = rec.render
            if len(items) == 1:
                p, tags, keys, uniq = items[0]
                data = render(p, queue_offset, phy, now)
                handoff.append((topic, queue_id, phy, p.total, tags, now, queue_offset, keys, uniq, p.sys_flag))
                offsets = None
            else:
                parts = []
                offsets = []
                q = queue_offset
                for p, tags, keys, uniq in items:
                    parts.append(render(p, q, phy, now))
                    handoff.append((topic, queue_id, phy, p.total, tags, now, q, keys, uniq, p.sys_flag))
                    offsets.append(phy)
                    phy += p.total
                    if queued:
                        q += 1
                data = b"".join(parts)
            mapped.append(data)
            mapped.store_timestamp = now
            if queued:
                self.topic_queue_table[key] = queue_offset + len(items)
            if mapped.wrote_position >= self._prefault_at and self.allocator is not None:
                self._prefault_at = self.allocator.advise(mapped, mapped.wrote_position)
            self.begin_time_in_lock = 0.0
        if self.on_append is not None:
            self.on_append()
        return AppendResult(PutMessageStatus.PUT_OK, first_phy, total, queue_offset, now, offsets)

    def _roll_to_writable(self) -> MappedFile | None:
        try:
            mapped = self.queue.last_mapped_file(0)
        except OSError:
            return None
        self._current = mapped
        self._prefault_at = mapped.prefaulted if mapped is not None else 0
        return mapped

    def take_handoff(self) -> list[tuple]:
        """The dispatch requests appended since the last call (taken under the put lock)."""
        with self.put_lock:
            taken, self.handoff = self.handoff, []
        return taken

    def reset_topic_queue_table(self, table: dict[tuple[str, int], int]) -> None:
        with self.put_lock:
            self.topic_queue_table = dict(table)
            self._current = None

    # -- offsets -------------------------------------------------------------------------------
    def min_offset(self) -> int:
        """First readable offset (-1 when empty); a first segment being deleted does not count."""
        first = self.queue.first
        if first is None:
            return -1
        if first.available:
            return first.file_from_offset
        return self.roll_next_file(first.file_from_offset)

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
        mapped = self.queue.find_by_offset(offset, offset == 0)
        if mapped is None:
            return None
        pos = offset - mapped.file_from_offset
        if pos < 0 or pos + size > mapped.read_position:
            return None
        try:
            return mapped.mm[pos : pos + size]
        except ValueError:  # unmapped by cleanup in the meantime
            return None

    def record_size_at(self, offset: int) -> int:
        head = self.get_data(offset, 4)
        return _INT.unpack(head)[0] if head else -1

    def read_message(self, offset: int, size: int | None = None) -> StoredMessage | None:
        """Decode the record at ``offset`` (``lookMessageByOffset``); None past the end or on bad data."""
        if size is None:
            size = self.record_size_at(offset)
            if size <= 0:
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
        self._current = None
        self.queue.close()
