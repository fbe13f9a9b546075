"""One commit-log segment read with every check (``scan_segment``, also run as Spark tasks): its
records' columns, the problems found on them, and where its records stop and why (``Stop``: a
damaged record, zeros, a BLANK marker), going on past damage at the next plausible record."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rocketstore.codec import record as rec
from rocketstore.codec.crc import crc32
from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_BAD, STOP_BLANK, STOP_END
from rocketstore.errors import RecordError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.log.walk import walk_segment
from rocketstore.meta.root import is_inside
from rocketstore.queues.index_service import index_keys
from rocketstore.store import MessageStore
from rocketstore.verify.log_columns import LogColumns, joined
from rocketstore.verify.report import VerifyReport, problems_at

WINDOW = 16 << 20  # bytes read at a time
_INT = struct.Struct(">i")


class _Collector:
    """Gathers the columns of each scanned window, with the record checks done on the way."""

    def __init__(self, report: VerifyReport) -> None:
        self.report = report
        self.topic_ids: dict[str, int] = {}
        self.columns: dict[str, list[np.ndarray]] = {k: [] for k in LogColumns.COLUMNS}
        self.keys: list[np.ndarray] = []
        self.key_hashes: list[np.ndarray] = []
        self.count = 0

    def add(self, mapped: MappedFile, records: Records) -> None:
        report = self.report
        n = len(records)
        base = mapped.file_from_offset
        positions = records.offsets - base
        phys = _longs_at(mapped.mm, positions + rec.PHYSICAL_OFFSET_POSITION)
        name = segment_label(mapped.path, report.store)
        problems_at(
            report,
            phys != records.offsets,
            lambda i: f"{name}@{positions[i]} (offset {records.offsets[i]}): the PHYSICALOFFSET field says {phys[i]}",
        )
        problems_at(
            report,
            positions + records.sizes + 8 > mapped.file_size,
            lambda i: f"{name}@{positions[i]}: fewer than 8 bytes are left after the record",
        )
        ids = self.topic_ids
        topic_ids = np.fromiter((ids.setdefault(t, len(ids)) for t in records.topics), dtype=np.int64, count=n)
        for name, values in (
            ("offsets", records.offsets),
            ("sizes", records.sizes),
            ("topic_ids", topic_ids),
            ("queue_ids", records.queue_ids),
            ("queue_offsets", records.queue_offsets),
            ("tags", records.tags),
            ("sys_flags", records.sys_flags),
            ("store_ts", records.store_ts),
        ):
            self.columns[name].append(np.asarray(values, dtype=np.int64))
        hashes, owners = index_keys(records)
        self.keys.append(owners + self.count)
        self.key_hashes.append(hashes)
        self.count += n

    def result(self, min_offset: int, end: int) -> LogColumns:
        log = LogColumns(min_offset=min_offset, end=end, topics=list(self.topic_ids))
        for name, parts in self.columns.items():
            setattr(log, name, joined(parts))
        log.key_records = joined(self.keys)
        log.key_hashes = joined(self.key_hashes)
        return log


def _longs_at(buf: Any, positions: np.ndarray) -> np.ndarray:
    """Big-endian longs at ``positions`` of a buffer (an mmap: the view does not outlive the call)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    try:
        picked = data[np.minimum(positions[:, None] + np.arange(8), len(data) - 1)]
    finally:
        del data
    return picked.view(">i8").reshape(-1).astype(np.int64)


def nonzero_bytes(mapped: MappedFile, start: int, end: int | None = None) -> int:
    """How many bytes of ``[start, end)`` of a segment are not zero."""
    end = mapped.file_size if end is None else end
    count = 0
    for at in range(max(start, 0), end, WINDOW):
        chunk = mapped.read(at, min(WINDOW, end - at))
        count += len(chunk) - chunk.count(0)
    return count


@dataclass
class Stop:
    """Where a run of good records in a segment stops, and why (a ``scan_records`` reason)."""

    pos: int
    reason: int
    why: str = ""  # what is wrong with the record at ``pos`` (STOP_BAD)
    blank_size: int = 0  # what the BLANK marker says (STOP_BLANK)
    claimed: int = 0  # how many bytes the bad record claims (0 when unknown)
    resume: int = -1  # where the scan went on in this segment (-1: it did not)
    dirty_after: int = 0  # non-zero bytes after the stop (past the BLANK header or the bad record)

    def ends_file(self, file_size: int) -> bool:
        """A BLANK marker that says what is left of its file, as RocketMQ writes one (any other is
        a damaged record: RocketMQ's recovery takes it for the file's end all the same)."""
        return self.reason == STOP_BLANK and self.blank_size == file_size - self.pos

    @property
    def skipped(self) -> bool:
        """A damaged record skipped by its own (trusted) TOTALSIZE."""
        return self.reason == STOP_BAD and self.claimed > 0 and self.resume == self.pos + self.claimed


def segment_label(path: str, root: str) -> str:
    """A segment's path as messages name it: relative to the store's folder when it lies in it
    (``commitlog/<segment>``, or another storePathCommitLog folder's), else in full."""
    if root and is_inside(path, root):  # as recover's copy advice tells inside from outside (links resolved)
        return os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    return os.path.abspath(path)


@dataclass
class SegmentScan:
    """One commit-log segment read with CRC checks: its good records' columns (``part``, topic
    ids local to the segment), the findings on them, and every place the records stop
    (``stops``: past a damaged record or a stretch of zeros the scan goes on at the next record;
    the last stop ends the segment's data). Scans of different segments are independent
    (``rocketstore spark verify`` runs them as tasks); ``join_segments`` puts them together."""

    path: str
    base: int
    size: int
    part: LogColumns
    findings: VerifyReport
    stops: list[Stop]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def empty(self) -> bool:
        """Nothing but zeros (a pre-allocated file)."""
        first = self.stops[0]
        return first.pos == 0 and first.reason == STOP_END and not first.dirty_after


def scan_segment(
    mapped: MappedFile,
    delay_millis: tuple[int, ...],
    max_listed: int | None = None,
    progress: Callable[[int], None] | None = None,
    *,
    prop_crc: bool = False,
    root: str = "",
) -> SegmentScan:
    """Scan a whole segment with CRC checks (``progress(n)`` as ``n`` more bytes are read): the
    body CRCs, or with ``prop_crc`` (forceVerifyPropCRC) the ``__CRC32#`` properties, as recovery.
    The scan goes on past a damaged record (by its TOTALSIZE when only its CRC fails, else at the
    next plausible record start) and past zeros followed by records. Problems name the segment
    relative to the store's ``root`` (in full without it)."""
    findings = VerifyReport(store=root, max_listed=max_listed)
    collector = _Collector(findings)
    base = mapped.file_from_offset
    stops: list[Stop] = []
    if not mapped.hold():
        stops.append(Stop(0, STOP_BAD, "the file could not be read"))
    else:
        try:
            pos = 0
            while not stops or stops[-1].resume >= 0:
                pos = stops[-1].resume if stops else 0
                pos, reason = _scan_records(mapped, collector, pos, delay_millis, progress, prop_crc)
                stops.append(_stop_at(mapped, pos, reason, prop_crc, first=not stops))
                if progress is not None:
                    progress(max(stops[-1].resume, pos) - pos)
        finally:
            mapped.release()
    end = base + stops[-1].pos
    return SegmentScan(mapped.path, base, mapped.file_size, collector.result(base, end), findings, stops)


def _scan_records(
    mapped: MappedFile,
    collector: _Collector,
    pos: int,
    delay_millis: tuple[int, ...],
    progress: Callable[[int], None] | None = None,
    prop_crc: bool = False,
) -> tuple[int, int]:
    """Every record of a segment from ``pos``, window by window, CRCs checked; (stop position,
    reason) as ``scan_records`` gives."""
    return walk_segment(
        mapped,
        pos,
        mapped.file_size,
        lambda records: collector.add(mapped, records),
        check_crc=True,
        prop_crc=prop_crc,
        delay_millis=delay_millis,
        window=WINDOW,
        strings=True,
        progress=progress,
    )


def _stop_at(mapped: MappedFile, pos: int, reason: int, prop_crc: bool, *, first: bool) -> Stop:
    """What stopped the scan at ``pos``, and where it goes on: past a bad record whose only fault
    is its CRC (its TOTALSIZE is then trusted), else at the next plausible record start; not when
    only zeros follow (non-zero bytes after the segment's first stop are counted for the report)."""
    if reason == STOP_BLANK:
        stop = Stop(
            pos, reason, blank_size=_INT.unpack(mapped.read(pos, 4))[0], dirty_after=nonzero_bytes(mapped, pos + 8)
        )
        if stop.dirty_after and not stop.ends_file(mapped.file_size):  # a damaged record: records may follow
            stop.resume = _resync(mapped, pos + 8)
        return stop
    if reason != STOP_BAD:  # zeros, or the file's end
        stop = Stop(pos, reason, dirty_after=nonzero_bytes(mapped, pos))
        stop.resume = _resync(mapped, pos) if stop.dirty_after else -1
        return stop
    why, claimed, trusted = diagnose(mapped, pos, prop_crc)
    stop = Stop(pos, reason, why, claimed=claimed)
    if first:
        stop.dirty_after = nonzero_bytes(mapped, pos + max(claimed, 8))
        if not stop.dirty_after:
            return stop  # a torn record at the end of the data
    stop.resume = pos + claimed if trusted else _resync(mapped, pos + 1)
    if stop.resume < 0 and not first:
        stop.dirty_after = nonzero_bytes(mapped, pos + max(claimed, 8))
    return stop


_MAGICS = tuple(_INT.pack(m) for m in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2))
_LONG = struct.Struct(">q")


def _resync(mapped: MappedFile, start: int) -> int:
    """The first position at or after ``start`` where a plausible record starts: a magic code, a
    TOTALSIZE that fits in the file and a PHYSICALOFFSET field naming that very offset; -1 if none."""
    mm, size, base = mapped.mm, mapped.file_size, mapped.file_from_offset
    found = {magic: mm.find(magic, start + 4) for magic in _MAGICS}
    while True:
        hits = [(at, magic) for magic, at in found.items() if at >= 0]
        if not hits:
            return -1
        at, magic = min(hits)
        pos = at - 4
        if pos + rec.PHYSICAL_OFFSET_POSITION + 8 <= size:
            total = _INT.unpack(mapped.read(pos, 4))[0]
            phy = _LONG.unpack(mapped.read(pos + rec.PHYSICAL_OFFSET_POSITION, 8))[0]
            if 91 <= total <= size - pos and phy == base + pos:
                return pos
        found[magic] = mm.find(magic, at + 1)


def diagnose(mapped: MappedFile, pos: int, prop_crc: bool = False) -> tuple[str, int, bool]:
    """Why the record at ``pos`` fails, how many bytes it claims (0 when unknown), and whether
    that TOTALSIZE can be trusted (the record is well formed; only its CRC fails)."""
    room = mapped.file_size - pos
    if room < 8:
        return f"{room} bytes that are not zeros and too few for a record", 0, False
    head = mapped.read(pos, 8)
    total, magic = struct.unpack(">ii", head)
    if magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2):
        return f"bad magic code 0x{magic & 0xFFFFFFFF:08X} (TOTALSIZE {total})", 0, False
    if total < 91:
        return f"TOTALSIZE {total} is below the smallest record's 91 bytes", 0, False
    if total > room:
        return f"TOTALSIZE {total} does not fit in the {room} bytes left in the file", 0, False
    raw = mapped.read(pos, total)
    try:
        msg = rec.decode(raw)
    except RecordError as exc:  # it decoded the record alone: its text gives no position
        what = str(exc).replace("the record ", f"the record at {mapped.file_from_offset + pos} ", 1)
        return f"a malformed record: {what}", total, False
    if prop_crc and not rec.check_crc_property(raw):
        return "its __CRC32# property is missing or does not match the record (forceVerifyPropCRC)", total, True
    actual = crc32(msg.body) & 0x7FFFFFFF
    if not prop_crc and msg.body_len > 0 and actual != msg.body_crc:
        return f"body CRC {msg.body_crc}, the body gives {actual}", total, True
    return f"a record that fails the reader's checks (TOTALSIZE {total})", total, False


def damaged_record_at(store: MessageStore, offset: int) -> str | None:
    """What is wrong with a record that starts at commit-log ``offset`` but fails its checks
    (``commitlog/<segment>@<position>: why``), its segment scanned from the start to tell a record
    start from any other offset; None when no damaged record starts there."""
    for mapped in store.commit_log.queue.files:
        if not mapped.file_from_offset <= offset < mapped.end_offset:
            continue
        pos = offset - mapped.file_from_offset
        scan = scan_segment(mapped, store.delay_millis, 0, prop_crc=store.config.force_verify_prop_crc)
        where = f"{segment_label(mapped.path, store.root)}@{pos}"
        for stop in scan.stops:
            if stop.pos == pos and stop.reason == STOP_BAD:
                return f"{where}: {stop.why}"
        if offset in scan.part.offsets and mapped.hold():
            try:
                phy = int(_longs_at(mapped.mm, np.array([pos + rec.PHYSICAL_OFFSET_POSITION]))[0])
            finally:
                mapped.release()
            return None if phy == offset else f"{where}: the PHYSICALOFFSET field says {phy}"
        return None
    return None
