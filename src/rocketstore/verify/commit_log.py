"""The commit-log audit: every record from the first segment (body CRC, PHYSICALOFFSET, the free
bytes after it), BLANK markers, where recovery would end the log, and every record after that too
(damaged stretches are skipped and reported). Segments are scanned one by one (``scan_segment``,
also run as Spark tasks) and joined into ``LogColumns``."""

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
from rocketstore.codec.scan import STOP_BAD, STOP_BLANK, STOP_END
from rocketstore.errors import RecordError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.log.recovery import abnormal_start
from rocketstore.log.walk import walk_segment
from rocketstore.meta.root import is_inside
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
    # where recovery cuts the log (the first bad record data follows in the files it checks: from
    # the checkpoint's after a crash, the last 3 after a clean shutdown); None: ``end``
    cut: int | None = None
    skipped: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # damaged [start, end)s
    torn_at: int | None = None  # a torn record that ends the data (nothing but zeros after it)
    other_damage: bool = False  # a damaged stretch other than a record whose body CRC alone fails
    checked_from: int = 0  # where the segments recovery checks begin (the last 3; after a crash the checkpoint's)
    crc_kept: list[int] = field(default_factory=list)  # bad body CRCs recovery keeps (checkCRCOnRecover=false)

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

    @property
    def recovery_end(self) -> int:
        """Where recovery ends the log: at the cut, or at the end of the data."""
        return self.end if self.cut is None else self.cut

    def in_skipped(self, phy: np.ndarray) -> np.ndarray:
        """Whether each offset lies in a damaged stretch the scan skipped (a unit or entry of a
        record lost there: the stretch is the problem)."""
        if not len(self.skipped):
            return np.zeros(len(phy), dtype=bool)
        at = np.searchsorted(self.skipped[:, 0], phy, side="right") - 1
        return (at >= 0) & (phy < self.skipped[np.maximum(at, 0), 1])

    def deleted(self, table: dict[str, int]) -> np.ndarray:
        """Per record: of a topic ``table`` (``config/deletedTopics.json``) names, below the log end
        recorded when it was deleted (the deleted topic's own records, not one put since)."""
        if not table or not len(self.offsets):
            return np.zeros(len(self.offsets), dtype=bool)
        ends = np.array([table.get(t, -1) for t in self.topics], dtype=np.int64)
        return self.offsets < ends[self.topic_ids]

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


def nonzero_bytes(mapped: MappedFile, start: int, end: int | None = None) -> int:
    """How many bytes of ``[start, end)`` of a segment are not zero."""
    end = mapped.file_size if end is None else end
    count = 0
    for at in range(max(start, 0), end, _WINDOW):
        chunk = mapped.read(at, min(_WINDOW, end - at))
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
        window=_WINDOW,
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


def recovery_scope(store: MessageStore, abort_file: bool) -> dict[str, Any]:
    """``join_segments``' keywords for what an open of ``store`` checks as it recovers: after a
    crash (``abort_file``) the segments from the checkpoint's on (``log.recovery.abnormal_start``),
    and body CRCs only with checkCRCOnRecover."""
    files = store.commit_log.queue.files
    start = None
    if abort_file and files:
        config = store.config
        first = abnormal_start(files, store.checkpoint, config.message_index_enable and config.message_index_safe)
        start = files[first].file_from_offset
    return {"crash_start": start, "check_crc": store.config.check_crc_on_recover}


def join_segments(
    paths: list[str],
    scan_of: Callable[[int], SegmentScan],
    report: VerifyReport,
    *,
    crash_start: int | None = None,
    check_crc: bool = True,
) -> LogColumns:
    """The log from its segments' scans, in order: where recovery would end it (the first bad
    record or zeros that data follows: ``cut``; without an abort file only in the last 3 files,
    which is all an open after a clean shutdown checks; with one, in the segments from offset
    ``crash_start`` on, the checkpoint's, all of them for None; a record whose body CRC alone is
    wrong only with ``check_crc``: see ``recovery_scope``), every later damaged stretch (skipped:
    the records after it are checked too), where the data ends, and the records. ``scan_of(i)``
    gives the scan of ``paths[i]``."""
    report.commit_log_files = len(paths)
    if not paths:
        report.log_end_reason = "no commit-log files"
        report.log_min_offset = 0
        return LogColumns(min_offset=0, end=0)
    scans = [scan_of(i) for i in range(len(paths))]
    last = max((i for i, scan in enumerate(scans) if not scan.empty), default=0)
    if any(stop.reason == STOP_BLANK for stop in scans[last].stops) and last + 1 < len(scans):
        last += 1  # the log goes on in the next file, which holds nothing yet
    cut: int | None = None
    torn_at: int | None = None
    other_damage = False
    end = scans[last].base + scans[last].stops[-1].pos
    skipped: list[tuple[int, int]] = []
    crash_cut: int | None = None  # where only a recovery after a crash cuts the log (a clean shutdown's keeps it)
    crc_kept: list[int] = []
    for i, scan in enumerate(scans[: last + 1]):
        name = segment_label(scan.path, report.store)
        past_blank = False  # recovery reads nothing of a segment after a BLANK marker
        for stop in scan.stops:
            pos = stop.pos
            at = scan.base + pos
            where = f"{name}@{pos} (offset {at})"
            if past_blank:
                if stop.reason == STOP_BAD:
                    report.problem(f"{where}: {stop.why}; after a BLANK marker; {_went_on(scan, stop, i < last)}")
                continue
            if stop.reason == STOP_BLANK:
                past_blank = True
                room = scan.size - pos
                if not stop.ends_file(scan.size):
                    report.problem(
                        f"{name}@{pos}: the BLANK marker says {stop.blank_size} bytes, {room} are left in the file"
                    )
                if stop.dirty_after:
                    report.problem(
                        f"{name}@{pos}: {stop.dirty_after} non-zero bytes after the BLANK marker ("
                        + (
                            "recovery ends the log at it and drops them)"
                            if i == len(paths) - 1
                            else "recovery goes on in the next file: they are neither checked nor dispatched)"
                        )
                        + (f"; {_went_on(scan, stop, i < last)}" if stop.resume >= 0 else "")
                    )
                if i < len(paths) - 1 and stop.dirty_after and not stop.ends_file(scan.size):
                    report.blanks_inside += 1
                if i == len(paths) - 1 and stop.resume >= 0 and cut is None:  # the records after it are cut
                    cut = at
                    report.log_end_reason = f"a BLANK marker at {at} that does not end its file"
                elif i == len(paths) - 1:
                    end = scan.base + scan.size
                    report.log_end_reason = report.log_end_reason or "BLANK marker in the last file"
                continue
            checked = scan.base >= (crash_start or 0) if report.abort_file else i >= len(paths) - 3
            kept_crc = not check_crc and stop.skipped and stop.why.startswith("body CRC")  # recovery keeps it
            if i == last and stop is scan.stops[-1] and not stop.dirty_after:  # nothing but zeros follows
                if cut is None and stop.reason == STOP_BAD and kept_crc:
                    report.log_end_reason = "end of data"
                    crc_kept.append(at)
                    report.problem(f"{where}: {stop.why}; {KEPT_UNCHECKED_CRC}")
                elif cut is None and stop.reason == STOP_BAD:
                    torn_at = at
                    report.log_end_reason = f"a bad record at {at}"
                    report.damage(
                        f"{where}: {stop.why}: a torn record at the end of the log (recovery cuts the log here)"
                    )
                elif cut is None:
                    report.log_end_reason = "end of data"
                elif stop.reason == STOP_BAD:
                    report.problem(f"{where}: {stop.why}: a torn record at the end of the data")
                continue
            went_on = _went_on(scan, stop, i < last)
            skipped.append((at, scan.base + (stop.resume if stop.resume >= 0 else scan.size)))
            other_damage = other_damage or not (stop.skipped and stop.why.startswith("body CRC"))
            if cut is None and checked and not kept_crc:
                cut = at
                after = stop.dirty_after + sum(_nonzero_file(p) for p in paths[i + 1 :])
                _report_cut(report, scan, stop, after, went_on)
                continue
            kept = ""
            if cut is None and kept_crc:
                kept = KEPT_UNCHECKED_CRC + "; "
                crc_kept.append(at)
            elif cut is None and crash_cut is None:  # before the segments recovery checks
                crash_cut = at
                kept = KEPT_BEFORE_CHECKPOINT if report.abort_file else KEPT_AFTER_CLEAN_SHUTDOWN
            what = stop.why if stop.reason == STOP_BAD else "zeros where a record should start"
            report.problem(f"{where}: {what}; {kept}{went_on}")
    empty = len(scans) - last - 1
    if empty:
        report.note(f"commitlog: {empty} empty file(s) after the log end (pre-allocated; recovery deletes them)")
    for scan in scans[: last + 1]:
        report.add_problems(scan.findings.problem_count, scan.findings.problems)
        report.add_notes(scan.findings.note_count, scan.findings.notes)
    log = _join_parts([scan.part for scan in scans[: last + 1]], scans[0].base, end)
    log.cut, log.torn_at, log.other_damage = cut, torn_at, other_damage
    log.skipped = np.array(skipped, dtype=np.int64).reshape(-1, 2)
    log.checked_from = (crash_start or 0) if report.abort_file else scans[max(0, len(scans) - 3)].base
    log.crc_kept = crc_kept
    if cut is not None:
        report.log_end_reason += f"; the data goes on to {end}, which verify checked too"
    report.records = len(log.offsets)
    report.log_min_offset = scans[0].base
    report.log_end = log.recovery_end
    return log


KEPT_BEFORE_CHECKPOINT = (
    "the recovery after this crash checks the log from the checkpoint's segment on, after this one, "
    "and keeps it and the log after it; "
)
KEPT_UNCHECKED_CRC = "recovery keeps it (checkCRCOnRecover=false)"
KEPT_AFTER_CLEAN_SHUTDOWN = (
    "an open after a clean shutdown checks only the last 3 files and keeps it and the log after it "
    "(a recovery after a crash would cut the log here); "
)


def _went_on(scan: SegmentScan, stop: Stop, later_files: bool) -> str:
    """What verify skipped past a stop, and where it went on."""
    if stop.resume >= 0:
        return f"verify skipped {stop.resume - stop.pos} bytes and went on at offset {scan.base + stop.resume}"
    rest = f"the rest of the file ({scan.size - stop.pos} bytes, no record start found)"
    return f"verify skipped {rest}" + (" and went on in the next file" if later_files else "")


def _report_cut(report: VerifyReport, scan: SegmentScan, stop: Stop, after: int, went_on: str) -> None:
    """The first damage that data follows where recovery checks the log: where it cuts the log."""
    at = scan.base + stop.pos
    if stop.reason != STOP_BAD:
        report.log_end_reason = "end of data"
        report.damage(
            f"commitlog: the log ends at {at} (zeros in {scan.name} at {stop.pos}); "
            f"recovery drops the {after} non-zero bytes after it; {went_on}"
        )
        return
    report.log_end_reason = f"a bad record at {at}"
    label = segment_label(scan.path, report.store)
    report.problem(
        f"{label}@{stop.pos} (offset {at}): {stop.why}; {after} non-zero bytes follow it, which recovery drops "
        f"(the log is cut here); {went_on}"
    )


def report_past_cut(log: LogColumns, report: VerifyReport) -> None:
    """One line for the queue units and index entries that point where recovery cuts the log
    (``check_queues`` and ``check_index`` count them)."""
    units, entries = report.units_past_cut, report.entries_past_cut
    if units or entries:
        report.damage(
            f"commitlog: {units} consume-queue units and {entries} index entries point at or past offset "
            f"{log.cut}, where recovery cuts the log (it truncates them with it)"
        )


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
