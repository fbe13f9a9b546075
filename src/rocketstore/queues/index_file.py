"""One IndexFile: a 40-byte header, hash slots, and 20-byte entries chained per slot (spec 8).

Keys are added in bulk: ``put_keys`` computes every entry's slot chain, time difference and the
slot table updates with numpy, then writes the entries in one copy, which is what the put path's
dispatch and rebuilds need. ``select_phy_offsets`` walks one slot's chain for a query.
"""

from __future__ import annotations

import logging
import struct

import numpy as np

from rocketstore.files.mapped_file import RESERVE_STEP, MappedFile

log = logging.getLogger(__name__)
INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 2**31 - 1

HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
_INT = struct.Struct(">i")
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])


def index_file_size(slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


class IndexFile:
    """An index file mapped in memory; the header fields are kept in attributes and written back."""

    def __init__(self, mapped: MappedFile, slot_num: int, index_num: int) -> None:
        self.mapped = mapped
        self.slot_num = slot_num
        self.index_num = index_num
        self.path = mapped.path
        self.file_name = mapped.file_name
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = HEADER.unpack(mapped.read(0, INDEX_HEADER_SIZE))
        self._count_over = self.index_count > index_num
        if self.index_count <= 0:
            self.index_count = 1
        elif self._count_over:  # a damaged header: RocketMQ finds such a file full
            log.warning("%s: indexCount %d is over maxIndexNum %d", mapped.path, self.index_count, index_num)
            self.index_count = index_num
        self._entries_at = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE

    @classmethod
    def create(
        cls, path: str, slot_num: int, index_num: int, mode: str, end_phy: int = 0, end_ts: int = 0
    ) -> IndexFile:
        """A new file whose header starts at the previous file's end (when there was one)."""
        # disk for the header and the slot table (written anywhere) at once, for the entries as written
        reserve = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE + RESERVE_STEP
        mapped = MappedFile.create(path, 0, index_file_size(slot_num, index_num), mode, reserve)
        index = cls(mapped, slot_num, index_num)
        if end_phy > 0:
            index.begin_phy_offset = index.end_phy_offset = end_phy
        if end_ts > 0:
            index.begin_timestamp = index.end_timestamp = end_ts
        index._write_header(index_count=0)  # as RocketMQ's: indexCount is written by the first put
        return index

    @classmethod
    def open(cls, path: str, slot_num: int, index_num: int, mode: str) -> IndexFile:
        mapped = MappedFile.open(path, 0, index_file_size(slot_num, index_num), mode, sparse=True)
        return cls(mapped, slot_num, index_num)

    def _write_header(self, index_count: int | None = None) -> None:
        """Write the header fields (``index_count``: written in place of the file's own)."""
        self.mapped.write_at(
            0,
            HEADER.pack(
                self.begin_timestamp,
                self.end_timestamp,
                self.begin_phy_offset,
                self.end_phy_offset,
                self.hash_slot_count,
                self.index_count if index_count is None else index_count,
            ),
        )

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def room(self) -> int:
        return max(0, self.index_num - self.index_count)

    # -- writing -------------------------------------------------------------------------------
    def put_key(self, key_hash: int, phy: int, timestamp: int) -> bool:
        """Add one entry (spec 8.3); False when full."""
        return self.put_few([(key_hash, phy, timestamp)]) == 1

    def put_few(self, entries: list[tuple[int, int, int]]) -> int:
        """Add (key hash, commit-log offset, store time) entries one by one, as spec 8.3 defines,
        writing the header once at the end; returns how many fit. ``put_keys`` does the same in
        bulk with numpy, which pays from a few dozen entries on."""
        count = self.index_count
        room = self.index_num - count
        if room <= 0:
            return 0
        if len(entries) > room:
            entries = entries[:room]
        self._reserve_for(count, len(entries))
        mm = self.mapped.mm
        slot_num, entries_at = self.slot_num, self._entries_at
        unpack_slot, pack_slot, pack_entry = _INT.unpack_from, _INT.pack_into, ENTRY.pack_into
        begin = self.begin_timestamp
        new_slots = 0
        for key_hash, phy, timestamp in entries:
            slot_pos = INDEX_HEADER_SIZE + (key_hash % slot_num) * HASH_SLOT_SIZE
            prev = unpack_slot(mm, slot_pos)[0]
            if prev <= INVALID_INDEX or prev > count:
                prev = INVALID_INDEX
                new_slots += 1
            diff = 0 if begin <= 0 or timestamp < begin else min((timestamp - begin) // 1000, INT_MAX)
            pack_entry(mm, entries_at + count * INDEX_SIZE, key_hash, phy, diff, prev)
            if count <= 1:
                self.begin_phy_offset = phy
                self.begin_timestamp = begin = timestamp
            self.index_count = count + 1  # counted before the slot points at it (see ``_publish``)
            pack_slot(mm, slot_pos, count)
            count += 1
        self.hash_slot_count += new_slots
        self._publish(count, entries[-1][1], entries[-1][2])
        return len(entries)

    def _publish(self, count: int, end_phy: int, end_timestamp: int) -> None:
        """The new entries count (and the header is written) before any slot points at them: a
        query reads a slot, then the count, and gives up on a slot past the count (as RocketMQ's
        putKey, which writes the entry, then the slot, then raises the count, never shows one)."""
        self.index_count = count
        self.end_phy_offset, self.end_timestamp = end_phy, end_timestamp
        self._write_header()

    def _reserve_for(self, count: int, n: int) -> None:
        """Disk for the slot table and ``n`` entries after ``count``, before anything is written:
        a full disk fails here with ENOSPC (not SIGBUS in a write), the file as it was."""
        end = self._entries_at + (count + n) * INDEX_SIZE
        if end > self.mapped.allocated:
            self.mapped.reserve(end)

    def put_keys(self, hashes: np.ndarray, phys: np.ndarray, timestamps: np.ndarray) -> int:
        """Add entries (index key hash, commit-log offset, store time) in order; returns how many fit."""
        n = min(len(hashes), self.room())
        if n <= 0:
            return 0
        hashes = hashes[:n].astype(np.int64)
        phys = phys[:n].astype(np.int64)
        timestamps = timestamps[:n].astype(np.int64)
        count0 = self.index_count
        numbers = count0 + np.arange(n, dtype=np.int64)
        slots = hashes % self.slot_num

        self._reserve_for(count0, n)
        slot_table = np.frombuffer(self.mapped.mm, dtype=">i4", count=self.slot_num, offset=INDEX_HEADER_SIZE)
        try:
            current = slot_table[slots].astype(np.int64)
            current[(current <= 0) | (current > count0)] = INVALID_INDEX
            # chain: an entry's predecessor is the previous entry of this batch with the same slot,
            # or what the slot held before the batch
            order = np.argsort(slots, kind="stable")
            sorted_slots = slots[order]
            same_as_before = np.empty(n, dtype=bool)
            same_as_before[0] = False
            same_as_before[1:] = sorted_slots[1:] == sorted_slots[:-1]
            prev_sorted = current[order]
            prev_sorted[1:][same_as_before[1:]] = numbers[order][:-1][same_as_before[1:]]
            prev = np.empty(n, dtype=np.int64)
            prev[order] = prev_sorted
            last_of_slot = np.ones(n, dtype=bool)
            last_of_slot[:-1] = ~same_as_before[1:]

            begin = self.begin_timestamp
            diffs = np.empty(n, dtype=np.int64)
            diffs[0] = _time_diff(int(timestamps[0]), begin)
            if count0 <= 1:
                self.begin_phy_offset = int(phys[0])
                self.begin_timestamp = begin = int(timestamps[0])
            if n > 1:
                if begin <= 0:
                    diffs[1:] = 0
                else:
                    delta = timestamps[1:] - begin
                    diffs[1:] = np.clip(np.sign(delta) * (np.abs(delta) // 1000), 0, INT_MAX)

            entries = np.empty(n, dtype=ENTRY_DTYPE)
            entries["hash"] = hashes
            entries["phy"] = phys
            entries["diff"] = diffs
            entries["prev"] = prev
            at = self._entries_at + count0 * INDEX_SIZE
            self.mapped.write_at(at, entries.tobytes())

            self.hash_slot_count += int(np.count_nonzero(prev == INVALID_INDEX))
            self._publish(count0 + n, int(phys[-1]), int(timestamps[-1]))
            # the slots last: a query reading one finds its entries written and counted (``_publish``)
            slot_table[sorted_slots[last_of_slot]] = numbers[order][last_of_slot]
        finally:
            del slot_table
        return n

    # -- reading -------------------------------------------------------------------------------
    def is_time_matched(self, begin: int, end: int) -> bool:
        """RocketMQ's IndexFile.isTimeMatched, which differs from an overlap test when the file's
        end time is before its begin time (store times that went back)."""
        first, last = self.begin_timestamp, self.end_timestamp
        return (begin < first and end > last) or first <= begin <= last or first <= end <= last

    def select_phy_offsets(self, key_hash: int, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of entries in ``key_hash``'s chain stored within [begin, end]."""
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * HASH_SLOT_SIZE
        slot_value = _INT.unpack(self.mapped.read(slot_pos, 4))[0]
        count = self.index_count
        if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
            return
        i = slot_value
        seen = 0
        while len(out) < max_num and seen <= count:
            seen += 1
            raw = self.mapped.read(self._entries_at + i * INDEX_SIZE, INDEX_SIZE)
            hash_read, phy, diff, prev = ENTRY.unpack(raw)
            if diff < 0:
                break
            t = self.begin_timestamp + diff * 1000
            if hash_read == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == i or t < begin:
                break
            i = prev

    def trailing_entries_for(self, phy: int) -> int:
        """How many of the last entries belong to the record at ``phy`` (its keys already here)."""
        count = 0
        i = self.index_count - 1
        while i >= 1:
            if ENTRY.unpack(self.mapped.read(self._entries_at + i * INDEX_SIZE, INDEX_SIZE))[1] != phy:
                break
            count += 1
            i -= 1
        return count

    def entries(self) -> np.ndarray:
        """Every written entry (1 .. indexCount-1), for verification."""
        count = self.index_count - 1
        if count <= 0:
            return np.zeros(0, dtype=ENTRY_DTYPE)
        raw = self.mapped.read(self._entries_at + INDEX_SIZE, count * INDEX_SIZE)
        return np.frombuffer(raw, dtype=ENTRY_DTYPE)

    def entry_span(self) -> tuple[int, int] | None:
        """The log range [first, last] its entries cover, read from the entries alone (written from
        entry 1 on, in log order, up to the first left as zeros), for a file whose header is not
        to be trusted; None when they show none, or not in log order."""
        raw = self.mapped.read(self._entries_at + INDEX_SIZE, (self.index_num - 1) * INDEX_SIZE)
        entries = np.frombuffer(raw, dtype=ENTRY_DTYPE)
        unwritten = np.flatnonzero((entries["hash"] == 0) & (entries["phy"] == 0) & (entries["diff"] == 0))
        phys = entries["phy"][: unwritten[0] if len(unwritten) else len(entries)]
        if not len(phys) or phys[0] < 0 or (len(phys) > 1 and bool((np.diff(phys) < 0).any())):
            return None
        return int(phys[0]), int(phys[-1])

    def header_problem(self, previous_end: int | None = None) -> str | None:
        """What in the header contradicts itself, its entries or the end of the file made before
        (``previous_end``: files cover the log in the order they were made), as damage would; None
        for a header RocketMQ could have written.

        Entries are added in log order: the first sets beginPhyOffset, each one endPhyOffset, and
        one new slot counts in hashSlotCount. A file without entries carries the ends of the one
        before. (An indexCount over maxIndexNum is taken as "full", as RocketMQ takes it.)
        """
        begin, end, entries = self.begin_phy_offset, self.end_phy_offset, self.index_count - 1
        if min(self.begin_timestamp, self.end_timestamp, begin) < 0 or begin > end:
            return f"beginPhyOffset {begin}, endPhyOffset {end}, timestamps {self.begin_timestamp}-{self.end_timestamp}"
        if not 0 <= self.hash_slot_count <= min(self.slot_num, entries):
            return f"hashSlotCount {self.hash_slot_count} for {entries} entries in {self.slot_num} slots"
        if previous_end is not None and begin < previous_end:
            return f"beginPhyOffset {begin} is before the previous file's end {previous_end}"
        if entries == 0:
            if any(self.mapped.read(self._entries_at + INDEX_SIZE, INDEX_SIZE)):
                return f"indexCount {self.index_count} (no entries), yet entry 1 is written"
            if begin != end or (previous_end is not None and begin != previous_end):
                return f"no entries, yet beginPhyOffset {begin} and endPhyOffset {end}"
            if self.begin_timestamp != self.end_timestamp:
                return f"no entries, yet beginTimestamp {self.begin_timestamp} and endTimestamp {self.end_timestamp}"
        elif not self._count_over:
            first = ENTRY.unpack(self.mapped.read(self._entries_at + INDEX_SIZE, INDEX_SIZE))[1]
            _, last, diff, _ = ENTRY.unpack(self.mapped.read(self._entries_at + entries * INDEX_SIZE, INDEX_SIZE))
            if (first, last) != (begin, end):
                return f"beginPhyOffset {begin} and endPhyOffset {end}; its entries run from {first} to {last}"
            # the last entry's time is endTimestamp, kept as seconds after beginTimestamp (the first
            # entry's: the first entry's own is counted from the file before, so not checked)
            if entries > 1 and diff != _time_diff(self.end_timestamp, self.begin_timestamp):
                return (
                    f"beginTimestamp {self.begin_timestamp} and endTimestamp {self.end_timestamp}; "
                    f"the last entry is {diff} s after the first"
                )
        return None

    def flush(self) -> None:
        self.mapped.force()

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        return self.mapped.destroy(interval_forcibly_ms)

    def close(self) -> None:
        self.mapped.close()

    def header_dict(self) -> dict[str, int]:
        return {
            "beginTimestamp": self.begin_timestamp,
            "endTimestamp": self.end_timestamp,
            "beginPhyOffset": self.begin_phy_offset,
            "endPhyOffset": self.end_phy_offset,
            "hashSlotCount": self.hash_slot_count,
            "indexCount": self.index_count,
        }


def _time_diff(ts: int, begin: int) -> int:
    if begin <= 0:
        return 0
    delta = ts - begin
    diff = abs(delta) // 1000 * (1 if delta >= 0 else -1)  # Java's truncating division
    return min(max(diff, 0), INT_MAX)
