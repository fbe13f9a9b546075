"""One ConsumeQueue: 20-byte units (commit-log offset, record size, tags code) per topic/queue.

Files live in ``consumequeue/<topic>/<queueId>/`` and are named by their byte offset in the
queue (spec section 7). A message with queue offset ``q`` is the unit at byte ``q * 20``.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from rocketstore.codec.multi_dispatch import is_lmq
from rocketstore.codec.scan import D_OFFSET, D_QUEUE_OFFSET, D_SIZE, D_TAGS_CODE
from rocketstore.files.file_queue import MappedFileQueue

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE = 20
CQ_FIRST_RESERVE = 64 << 10  # disk a new consume-queue file gets at first (3,276 units)
UNIT = struct.Struct(">qiq")
UNIT_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tags", ">i8")])
FILLER_SIZE = 0x7FFFFFFF
PRE_BLANK = UNIT.pack(0, FILLER_SIZE, 0)  # fills a queue's first file up to its first unit
# a tags code below Integer.MIN_VALUE is an address in consumequeue_ext (enableConsumeQueueExt;
# RocketMQ's ConsumeQueueExt.isExtAddr), which is not read here: as RocketMQ when its lookup fails,
# such a unit passes a tag filter, and the record's TAGS decide
EXT_ADDRESSES_BELOW = -(2**31)


def record_end(phy: int, size: int) -> int:
    """Where a unit's record ends in the log; -1 for a filler unit, which has no record."""
    return -1 if phy == 0 and size == FILLER_SIZE else phy + size


_UNIT_RUNS: dict[int, struct.Struct] = {}
_CACHED_RUN = 64  # runs of up to this many units unpack with a compiled Struct kept for the process


def unit_columns(data: bytes) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Units as three columns (commit-log offsets, sizes, tags codes), for a pull's few units:
    one unpack of the whole run, then three slices (a longer run goes through numpy: a Struct
    kept for every length read would grow without bound)."""
    n = len(data) // CQ_STORE_UNIT_SIZE
    if n > _CACHED_RUN:
        units = units_of(data)
        return tuple(units["phy"].tolist()), tuple(units["size"].tolist()), tuple(units["tags"].tolist())
    run = _UNIT_RUNS.get(n)
    if run is None:
        run = _UNIT_RUNS[n] = struct.Struct(">" + "qiq" * n)
    flat = run.unpack_from(data)
    return flat[0::3], flat[1::3], flat[2::3]


_PLACE_RUNS: dict[int, struct.Struct] = {}


def unit_places(data: bytes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The commit-log offsets and sizes of units (``unit_columns`` without the tags codes, which
    a pull without a filter does not read)."""
    n = len(data) // CQ_STORE_UNIT_SIZE
    if n > _CACHED_RUN:
        units = units_of(data)
        return tuple(units["phy"].tolist()), tuple(units["size"].tolist())
    run = _PLACE_RUNS.get(n)
    if run is None:
        run = _PLACE_RUNS[n] = struct.Struct(">" + "qi8x" * n)
    flat = run.unpack_from(data)
    return flat[0::2], flat[1::2]


def units_of(data: bytes) -> np.ndarray:
    """Units as a structured array (phy, size, tags)."""
    return np.frombuffer(data, dtype=UNIT_DTYPE, count=len(data) // CQ_STORE_UNIT_SIZE)


def valid_prefix(units: np.ndarray) -> int:
    """How many leading units are valid (phy >= 0 and size > 0); an invalid unit ends the data."""
    bad = np.flatnonzero((units["phy"] < 0) | (units["size"] <= 0))
    return int(bad[0]) if len(bad) else len(units)


def _written(units: np.ndarray) -> int:
    """How many of ``units`` hold anything (are not all zeros)."""
    return int(np.count_nonzero((units["phy"] != 0) | (units["size"] != 0) | (units["tags"] != 0)))


class ConsumeQueue:
    """The queue of one topic/queueId."""

    def __init__(self, topic: str, queue_id: int, root: str, file_size: int, mode: str = "rw") -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.path = os.path.join(root, topic, str(queue_id))
        # disk as units are written: most queues of a broker hold few of a file's 300,000 units
        self.queue = MappedFileQueue(
            self.path, file_size, mode, reserve=CQ_FIRST_RESERVE, size_setting="mappedFileSizeConsumeQueue"
        )
        self.max_physic_offset = -1  # end (offset + size) of the last unit's record
        self.cut_units = 0  # written units that recovery cut after an invalid one (damage)
        self.damaged = False  # units may be missing at the end: recovery dispatches them again
        # recovery: a unit landing past the end is not written; the queue is marked ``behind``
        # (units at its end were lost) and dispatched again from its end (ConsumeQueueStore.hold_gaps)
        self.hold_gaps = False
        self.empty_starts_anywhere = False  # with hold_gaps: the first unit of an empty queue may be past 0
        self.behind = False
        self.min_logic_offset = 0  # bytes
        self._order_warned = False

    # -- load and recovery ---------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()
        self.damaged = self.queue.dropped_empty_last  # the file may have held units

    def recover(self) -> None:
        """Find the end of valid units from the third-to-last file on; drop what lies past it."""
        files = self.queue.files
        if not files:
            return
        index = max(0, len(files) - 3)
        while True:
            mapped = files[index]
            units = units_of(mapped.read(0, mapped.file_size))
            valid = valid_prefix(units)
            if valid:
                last = units[valid - 1]
                self.max_physic_offset = record_end(int(last["phy"]), int(last["size"]))
            if valid * CQ_STORE_UNIT_SIZE == mapped.file_size and index + 1 < len(files):
                index += 1
                continue
            break
        process = files[index].file_from_offset + valid * CQ_STORE_UNIT_SIZE
        self.cut_units = _written(units[valid:]) + sum(
            _written(units_of(f.read(0, f.file_size))) for f in files[index + 1 :]
        )
        if self.cut_units:
            self.damaged = True
            log.warning(
                "consume queue %s/%d: %d written units after the invalid one at queue offset %d are cut; %s",
                self.topic,
                self.queue_id,
                self.cut_units,
                process // CQ_STORE_UNIT_SIZE,
                "they are multi-dispatch copies (a light message queue), which nothing makes again: a writable "
                "open cuts them for good"
                if is_lmq(self.topic)
                else "their records are dispatched again from the commit log",
            )
        self.queue.flushed_where = self.queue.committed_where = process
        self.queue.truncate_dirty_files(process)
        if self.max_physic_offset < 0 and process > files[0].file_from_offset:
            last = self.get_unit(process // CQ_STORE_UNIT_SIZE - 1)  # the end fell at a file start
            if last is not None and last[1] > 0:
                self.max_physic_offset = record_end(last[0], last[1])

    def truncate_untrusted(self, phy_offset: int) -> None:
        """After a crash: keep only the leading units that are valid and point below ``phy_offset``.

        What lies beyond may have been written after the last flush, and a power loss can leave
        holes or torn units there that look valid; the walk from ``phy_offset`` rebuilds it. Files
        are examined from the end until one is wholly trusted.
        """
        files = self.queue.files
        i = len(files) - 1
        while i >= 0:
            units = units_of(files[i].read(0, files[i].file_size))
            trusted = (units["size"] > 0) & (units["phy"] >= 0) & (units["phy"] < phy_offset)
            if trusted.all():
                break
            i -= 1
        # files[: i + 1] stay whole; the next one is cut at its first untrusted unit
        self.max_physic_offset = -1
        keep_units = 0
        if i + 1 < len(files):
            units = units_of(files[i + 1].read(0, files[i + 1].file_size))
            trusted = (units["size"] > 0) & (units["phy"] >= 0) & (units["phy"] < phy_offset)
            bad = np.flatnonzero(~trusted)
            keep_units = int(bad[0]) if len(bad) else len(units)
        cut = (files[i + 1].file_from_offset if i + 1 < len(files) else files[-1].end_offset) if files else 0
        cut += keep_units * CQ_STORE_UNIT_SIZE
        for _ in range(len(files) - (i + 2)):
            self.queue.delete_last_file()
        if i + 1 < len(files):
            if keep_units:
                files[i + 1].truncate(keep_units * CQ_STORE_UNIT_SIZE)
            else:
                self.queue.delete_last_file()
        self.queue.flushed_where = self.queue.committed_where = min(self.queue.flushed_where, cut)
        if cut > (files[0].file_from_offset if files else 0):
            last = self.get_unit(cut // CQ_STORE_UNIT_SIZE - 1)
            if last is not None:
                self.max_physic_offset = record_end(last[0], last[1])

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Remove units whose record starts at or after ``phy_offset`` (the log was cut there)."""
        self.max_physic_offset = phy_offset
        while True:
            mapped = self.queue.last
            if mapped is None:
                break
            units = units_of(mapped.read(0, mapped.file_size))
            if len(units) and units["phy"][0] >= phy_offset:
                self.queue.delete_last_file()
                continue
            # (RocketMQ keeps the first unit unchecked; an empty one would then leave a hole in the queue)
            valid = valid_prefix(units)
            keep = valid
            beyond = np.flatnonzero(units["phy"][:valid] >= phy_offset)
            if len(beyond):
                keep = int(beyond[0])
            if keep == 0:  # nothing of this file stays: the file before may still hold units to cut
                self.queue.delete_last_file()
                continue
            self.queue.truncate_dirty_files(mapped.file_from_offset + keep * CQ_STORE_UNIT_SIZE)
            if keep:
                last = units[keep - 1]
                self.max_physic_offset = record_end(int(last["phy"]), int(last["size"]))
            break

    def correct_min_offset(self, min_phy: int) -> None:
        """Move the logical minimum to the first unit whose record is still in the log."""
        files = self.queue.files
        if not files:
            return
        max_bytes = self.queue.max_offset()
        for mapped in files:
            units = units_of(mapped.read(0, mapped.read_position))
            filler = (units["phy"] == 0) & (units["size"] == FILLER_SIZE)
            ok = (units["phy"] >= min_phy) & (units["size"] > 0) & ~filler
            hit = np.flatnonzero(ok)
            if len(hit):
                self.min_logic_offset = mapped.file_from_offset + int(hit[0]) * CQ_STORE_UNIT_SIZE
                return
        self.min_logic_offset = max_bytes

    # -- writing -------------------------------------------------------------------------------
    def put_units(self, requests: list[tuple]) -> None:
        """Append a unit for each dispatch request of this queue (see codec.scan), in log order."""
        phys, sizes, tags, queue_offsets = (
            np.array([r[c] for r in requests], dtype=np.int64) for c in (D_OFFSET, D_SIZE, D_TAGS_CODE, D_QUEUE_OFFSET)
        )
        packed = np.empty(len(requests), dtype=UNIT_DTYPE)
        packed["phy"], packed["size"], packed["tags"] = phys, sizes, tags
        self.put_unit_arrays(phys, sizes, queue_offsets, packed.tobytes())

    def put_unit_arrays(
        self,
        phys: np.ndarray | Sequence[int],
        sizes: np.ndarray | Sequence[int],
        queue_offsets: np.ndarray | Sequence[int],
        packed: bytes,
    ) -> None:
        """Append ``packed`` units (their commit-log offsets, sizes and queue offsets alongside, as
        arrays or lists), in log order.

        Units already built are skipped (by commit-log offset and by queue offset), so dispatching
        the same records again is harmless.
        """
        n = len(phys)
        start = 0
        if self.max_physic_offset >= 0 and int(phys[0] + sizes[0]) <= self.max_physic_offset:
            start = int(np.searchsorted(np.add(phys, sizes), self.max_physic_offset, side="right"))
        if start == n:
            return
        cq_offset = int(queue_offsets[start])
        if self.hold_gaps and self._leaves_gap(cq_offset, int(phys[start])):
            return
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mapped = self.queue.last_mapped_file(expect)
        if mapped.first_create_in_queue and cq_offset != 0 and mapped.wrote_position == 0:
            # the first file of a queue that starts past 0: fillers up to its first unit, flushed
            # with the units (a power cut must not leave zeros where recovery expects fillers)
            self.min_logic_offset = expect
            self.queue.flushed_where = self.queue.committed_where = mapped.file_from_offset
            mapped.append(PRE_BLANK * ((expect - mapped.file_from_offset) // CQ_STORE_UNIT_SIZE))
        # units whose queue offset is already in the queue were built before: skipped, offset 0's
        # too (RocketMQ skips no unit of offset 0: a queue dispatched again from its start, past a
        # last unit pointing back, got one more; a batch would get them all)
        current = mapped.file_from_offset + mapped.wrote_position
        if expect < current:
            start = int(np.searchsorted(queue_offsets, current // CQ_STORE_UNIT_SIZE, side="left"))
            if start == n:
                return
        if int(queue_offsets[start]) * CQ_STORE_UNIT_SIZE != current and not self._order_warned:
            self._order_warned = True
            log.warning(
                "[BUG] logic queue order maybe wrong: %s-%d expects offset %d, the queue is at %d",
                self.topic,
                self.queue_id,
                int(queue_offsets[start]),
                current // CQ_STORE_UNIT_SIZE,
            )
        data = packed[start * CQ_STORE_UNIT_SIZE :] if start else packed
        while True:
            room = mapped.file_size - mapped.wrote_position
            mapped.append(data[:room])
            if len(data) <= room:
                break
            # the units written so far count as built before the next file is made: if making it
            # fails, the retried dispatch skips them (RocketMQ writes and counts unit by unit)
            data = data[room:]
            last = n - 1 - len(data) // CQ_STORE_UNIT_SIZE
            self.max_physic_offset = int(phys[last] + sizes[last])
            mapped = self.queue.last_mapped_file(mapped.end_offset)
        self.max_physic_offset = int(phys[-1] + sizes[-1])

    def _leaves_gap(self, cq_offset: int, phy: int) -> bool:
        """(recovery) Whether a unit of queue offset ``cq_offset`` lands past the queue's end: the
        units before it were lost (zeroed or removed after a clean exit, which recovery cannot
        tell from never written). The queue is then marked ``behind`` and nothing more is written
        until recovery dispatches it again from its own end."""
        if self.behind:
            return True
        if cq_offset <= self.max_offset_in_queue() or (not self.queue.files and self.empty_starts_anywhere):
            return False
        self.mark_behind(cq_offset, phy)
        return True

    def mark_behind(self, cq_offset: int, phy: int) -> None:
        """(recovery) The log holds a record of this queue, of queue offset ``cq_offset`` at
        ``phy``, that the queue lacks at its end: it is dispatched again from its end."""
        self.behind = True
        log.warning(
            "consume queue %s/%d %s, but the commit log holds its record of queue offset %d at %d: units "
            "at its end were lost; its records are dispatched again from the commit log",
            self.topic,
            self.queue_id,
            f"ends at queue offset {self.max_offset_in_queue()}" if self.queue.files else "has no units",
            cq_offset,
            phy,
        )

    # -- reading -------------------------------------------------------------------------------
    def max_offset_in_queue(self) -> int:
        return self.queue.max_offset() // CQ_STORE_UNIT_SIZE

    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def message_total(self) -> int:
        return self.max_offset_in_queue() - self.min_offset_in_queue()

    def read_units(self, index: int, max_count: int) -> bytes:
        """Raw units from ``index`` up to ``max_count`` of them, within one file (b"" if none)."""
        offset = index * CQ_STORE_UNIT_SIZE
        if index < 0 or offset < self.min_logic_offset:
            return b""
        mapped = self.queue.find_by_offset(offset)
        if mapped is None:
            return b""
        pos = offset - mapped.file_from_offset
        end = min(mapped.read_position, pos + max_count * CQ_STORE_UNIT_SIZE)
        if end <= pos:
            return b""
        try:
            return mapped.read(pos, end - pos)
        except ValueError:  # the file was unmapped by cleanup
            return b""

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        data = self.read_units(index, 1)
        return UNIT.unpack(data) if data else None

    def iter_units(self, start: int, end: int, chunk: int = 8192) -> Iterator[tuple[int, np.ndarray]]:
        """(first index, units array) chunks covering ``[start, end)`` of the queue."""
        index = max(start, self.min_offset_in_queue())
        while index < end:
            data = self.read_units(index, min(chunk, end - index))
            if not data:
                if index < self.min_offset_in_queue():  # cleanup deleted what was next: go on after it
                    index = self.min_offset_in_queue()
                    continue
                return
            units = units_of(data)
            yield index, units
            index += len(units)

    def roll_next_file(self, index: int) -> int:
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int], min_phy: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (LOWER boundary)."""
        files = self.queue.files
        if not files:
            return 0
        low_index, high_index = self.min_offset_in_queue(), self.max_offset_in_queue() - 1
        if high_index < low_index:
            return self.max_offset_in_queue()

        def time_at(index: int) -> int:
            unit = self.get_unit(index)
            if unit is None or unit[0] < min_phy:
                return -1
            return store_time_of(unit[0], unit[1])

        if time_at(high_index) < timestamp:
            return high_index + 1
        lo, hi = low_index, high_index
        while lo < hi:  # first index with time >= timestamp; units below the log count as early
            mid = (lo + hi) // 2
            if time_at(mid) < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- flush and lifecycle -------------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        """Flush dirty units; True when nothing advanced. A file queue's flush covers one file:
        with ``least_pages`` 0 (a thorough flush, shutdown) every file the queue moved through
        since the last one is flushed, not just the first."""
        nothing = self.queue.flush(least_pages)
        if least_pages == 0 and not nothing:
            for _ in range(len(self.queue.files)):
                if self.queue.flush(0):
                    break
        return nothing

    def delete_expired_files(self, min_phy: int) -> int:
        """Delete leading files whose last unit points below the commit log's minimum offset."""
        doomed = []
        files = self.queue.files
        for mapped in files[:-1]:
            if mapped.available:
                last = mapped.read(mapped.file_size - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE)
                phy = UNIT.unpack(last)[0] if len(last) == CQ_STORE_UNIT_SIZE else -1
                if phy >= min_phy:
                    break
            # else: doomed by an earlier round but held then (hanged): destroyed again now
            if not mapped.destroy(60000):
                break
            doomed.append(mapped)
        self.queue.delete_files(doomed)
        self.correct_min_offset(min_phy)
        return len(doomed)

    def close(self) -> None:
        self.queue.close()

    def destroy(self) -> None:
        self.queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0
