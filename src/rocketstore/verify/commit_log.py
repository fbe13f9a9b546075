"""The commit-log audit: every record from the first segment (body CRC, PHYSICALOFFSET, the free
bytes after it), BLANK markers, where the log ends and what lies after it. Segments are scanned
one by one (``scan_segment``, also run as Spark tasks) and joined into ``LogColumns``."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rocketstore.codec import record as rec
from rocketstore.codec.crc import crc32
from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_BAD, STOP_BLANK, STOP_END, STOP_LIMIT, scan_records
from rocketstore.errors import RecordError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.queues.index_service import index_keys
from rocketstore.store import MessageStore
from rocketstore.verify.report import VerifyReport, problems_at

_WINDOW = 16 << 20
_INT = struct.Struct(">i")


@dataclass
class LogColumns:
    """The good records of the log, as columns (log order), and the expected index keys."""

    min_offset: int = 0
    end: int = 0
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    topic_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    queue_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    queue_offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sys_flags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    store_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    key_records: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # record index per key
    key_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    topics: list[str] = field(default_factory=list)

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "offsets",
        "sizes",
        "topic_ids",
        "queue_ids",
        "queue_offsets",
        "tags",
        "sys_flags",
        "store_ts",
    )

    def find(self, phy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record index, whether a record starts exactly there) for each offset."""
        n = len(self.offsets)
        idx = np.searchsorted(self.offsets, phy)
        hit = np.zeros(len(phy), dtype=bool)
        if n:
            clipped = np.minimum(idx, n - 1)
            hit = (idx < n) & (self.offsets[clipped] == phy)
            idx = clipped
        return idx, hit

    def describe(self, i: int) -> str:
        return (
            f"{self.topics[int(self.topic_ids[i])]}/{int(self.queue_ids[i])} queue offset {int(self.queue_offsets[i])}"
        )


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
        name = f"commitlog/{mapped.file_name}"
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
            setattr(log, name, _joined(parts))
        log.key_records = _joined(self.keys)
        log.key_hashes = _joined(self.key_hashes)
        return log


def member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin`` by sorting and binary search (faster for millions of int64 keys)."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    pool = np.sort(pool)
    at = np.minimum(np.searchsorted(pool, values), len(pool) - 1)
    return pool[at] == values


def _longs_at(buf: Any, positions: np.ndarray) -> np.ndarray:
    """Big-endian longs at ``positions`` of a buffer (an mmap: the view does not outlive the call)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    try:
        picked = data[np.minimum(positions[:, None] + np.arange(8), len(data) - 1)]
    finally:
        del data
    return picked.view(">i8").reshape(-1).astype(np.int64)


def _nonzero(mapped: MappedFile, start: int, end: int | None = None) -> int:
    """How many bytes of ``[start, end)`` of a segment are not zero."""
    end = mapped.file_size if end is None else end
    count = 0
    for at in range(max(start, 0), end, _WINDOW):
        chunk = mapped.read(at, min(_WINDOW, end - at))
        count += len(chunk) - chunk.count(0)
    return count


@dataclass
class SegmentScan:
    """One commit-log segment read with CRC checks: where its records stop and why, their columns
    (``part``, topic ids local to the segment) and the findings on them. Scans of different
    segments are independent (``rocketstore spark verify`` runs them as tasks); ``join_segments``
    puts them together."""

    path: str
    base: int
    size: int
    pos: int
    reason: int
    part: LogColumns
    findings: VerifyReport
    blank_size: int = 0  # what the BLANK marker says (reason STOP_BLANK)
    why: str = ""  # what is wrong with the record at ``pos`` (reason STOP_BAD)
    dirty_after: int = 0  # non-zero bytes after the stop: past the BLANK header, the bad record, the data

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def scan_segment(
    mapped: MappedFile,
    delay_millis: tuple[int, ...],
    max_listed: int | None = None,
    progress: Callable[[int], None] | None = None,
    *,
    prop_crc: bool = False,
) -> SegmentScan:
    """Scan a whole segment with CRC checks (``progress(n)`` as ``n`` more bytes are read): the
    body CRCs, or with ``prop_crc`` (forceVerifyPropCRC) the ``__CRC32#`` properties, as recovery."""
    findings = VerifyReport(store="", max_listed=max_listed)
    collector = _Collector(findings)
    pos, reason = _scan_records(mapped, collector, delay_millis, progress, prop_crc)
    base = mapped.file_from_offset
    scan = SegmentScan(mapped.path, base, mapped.file_size, pos, reason, collector.result(base, base + pos), findings)
    if reason == STOP_BLANK:
        scan.blank_size = _INT.unpack(mapped.read(pos, 4))[0]
        scan.dirty_after = _nonzero(mapped, pos + 8)
    elif reason == STOP_BAD:
        scan.why, claimed = _diagnose(mapped, pos, prop_crc)
        scan.dirty_after = _nonzero(mapped, pos + max(claimed, 8))
    else:
        scan.dirty_after = _nonzero(mapped, pos)
    return scan


def _scan_records(
    mapped: MappedFile,
    collector: _Collector,
    delay_millis: tuple[int, ...],
    progress: Callable[[int], None] | None = None,
    prop_crc: bool = False,
) -> tuple[int, int]:
    """Every record of a segment, window by window; (stop position, reason) as ``scan_records`` gives."""
    if not mapped.hold():
        return 0, STOP_BAD
    try:
        mm, pos, end = mapped.mm, 0, mapped.file_size
        while True:
            before = pos
            records, pos, reason = scan_records(
                mm,
                pos,
                end,
                mapped.file_from_offset,
                check_crc=True,
                prop_crc=prop_crc,
                delay_millis=delay_millis,
                limit=min(end, pos + _WINDOW),
                strings=True,
            )
            if len(records):
                collector.add(mapped, records)
            if progress is not None:
                progress(pos - before)
            if reason != STOP_LIMIT:
                return pos, reason
            if pos >= end:
                return pos, STOP_END
    finally:
        mapped.release()


def _diagnose(mapped: MappedFile, pos: int, prop_crc: bool = False) -> tuple[str, int]:
    """Why the record at ``pos`` fails, and how many bytes it claims (0 when unknown)."""
    room = mapped.file_size - pos
    if room < 8:
        return f"{room} bytes that are not zeros and too few for a record", 0
    head = mapped.read(pos, 8)
    total, magic = struct.unpack(">ii", head)
    if magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2):
        return f"bad magic code 0x{magic & 0xFFFFFFFF:08X} (TOTALSIZE {total})", 0
    if total < 91 or total > room:
        return f"TOTALSIZE {total} does not fit in the {room} bytes left in the file", 0
    raw = mapped.read(pos, total)
    try:
        msg = rec.decode(raw)
    except RecordError as exc:
        return f"a malformed record: {exc}", total
    if prop_crc and not rec.check_crc_property(raw):
        return "its __CRC32# property is missing or does not match the record (forceVerifyPropCRC)", total
    actual = crc32(msg.body) & 0x7FFFFFFF
    if not prop_crc and msg.body_len > 0 and actual != msg.body_crc:
        return f"body CRC {msg.body_crc}, the body gives {actual}", total
    return f"a record that fails the reader's checks (TOTALSIZE {total})", total


def check_commit_log(
    store: MessageStore, report: VerifyReport, progress: Callable[[int], None] | None = None
) -> LogColumns:
    files = store.commit_log.queue.files
    delay, prop_crc = store.delay_millis, store.config.force_verify_prop_crc
    return join_segments(
        [f.path for f in files],
        lambda i: scan_segment(files[i], delay, report.max_listed, progress, prop_crc=prop_crc),
        report,
    )


def join_segments(paths: list[str], scan_of: Callable[[int], SegmentScan], report: VerifyReport) -> LogColumns:
    """The log from its segments' scans, in order: where it ends (as recovery finds it), what lies
    past that end, and the records before it. ``scan_of(i)`` gives the scan of ``paths[i]``; it is
    asked only for segments up to the log's end."""
    report.commit_log_files = len(paths)
    if not paths:
        report.log_end_reason = "no commit-log files"
        report.log_min_offset = 0
        return LogColumns(min_offset=0, end=0)
    scans: list[SegmentScan] = []
    for i in range(len(paths)):
        scan = scan_of(i)
        scans.append(scan)
        name, pos = f"commitlog/{scan.name}", scan.pos
        end = scan.base + pos
        if scan.reason == STOP_BLANK:
            room = scan.size - pos
            if scan.blank_size != room:
                report.problem(
                    f"{name}@{pos}: the BLANK marker says {scan.blank_size} bytes, {room} are left in the file"
                )
            if scan.dirty_after:
                report.problem(f"{name}@{pos}: {scan.dirty_after} non-zero bytes after the BLANK marker")
            if i + 1 < len(paths):
                continue
            end = scan.base + scan.size
            report.log_end_reason = "BLANK marker in the last file"
            break
        after = scan.dirty_after + sum(_nonzero_file(p) for p in paths[i + 1 :])
        if scan.reason == STOP_BAD:
            report.log_end_reason = f"a bad record at {end}"
            where = f"{name}@{pos} (offset {end}): {scan.why}"
            if after and (report.abort_file or i >= len(paths) - 3):
                report.problem(f"{where}; {after} non-zero bytes follow it, which recovery drops (the log is cut here)")
            elif after:  # a clean shutdown's open checks the last three files only (RocketMQ's recoverNormally)
                report.problem(
                    f"{where}; {after} non-zero bytes follow it, which a recovery after a crash drops (the log "
                    "is cut here; an open after a clean shutdown checks only the last 3 files and keeps them)"
                )
            else:
                report.damage(f"{where}: a torn record at the end of the log (recovery cuts the log here)")
        else:
            report.log_end_reason = "end of data"
            if after:
                report.damage(
                    f"commitlog: the log ends at {end} (zeros in {scan.name} at {pos}); "
                    f"recovery drops the {after} non-zero bytes after it"
                )
        break
    empty = [os.path.basename(p) for p in paths[len(scans) :] if not _nonzero_file(p)]
    if empty:
        report.note(f"commitlog: {len(empty)} empty file(s) after the log end (pre-allocated; recovery deletes them)")
    for scan in scans:
        report.add_problems(scan.findings.problem_count, scan.findings.problems)
        report.add_notes(scan.findings.note_count, scan.findings.notes)
    log = _join_parts([scan.part for scan in scans], scans[0].base, end)
    report.records = len(log.offsets)
    report.log_min_offset = scans[0].base
    report.log_end = end
    return log


def _join_parts(parts: list[LogColumns], min_offset: int, end: int) -> LogColumns:
    """One log of consecutive parts, their topic ids mapped to one numbering."""
    topics: dict[str, int] = {}
    columns: dict[str, list[np.ndarray]] = {name: [] for name in LogColumns.COLUMNS}
    keys: list[np.ndarray] = []
    count = 0
    for part in parts:
        remap = np.array([topics.setdefault(t, len(topics)) for t in part.topics], dtype=np.int64)
        for name in LogColumns.COLUMNS:
            values = getattr(part, name)
            columns[name].append(remap[values] if name == "topic_ids" and len(values) else values)
        keys.append(part.key_records + count)
        count += len(part.offsets)
    log = LogColumns(min_offset=min_offset, end=end, topics=list(topics))
    for name, values in columns.items():
        setattr(log, name, _joined(values))
    log.key_records = _joined(keys)
    log.key_hashes = _joined([part.key_hashes for part in parts])
    return log


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)


def _nonzero_file(path: str) -> int:
    """How many bytes of a file are not zero."""
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(_WINDOW):
            count += len(chunk) - chunk.count(0)
    return count
