"""Verifying a store against its commit log (``rocketstore verify``).

The store is mapped as it is on disk (read-only, no recovery) and audited:

1. the file layout: segment names and sizes in ``commitlog/``, the queue folders, ``index/``;
2. the commit log: every record from the first segment, with its body CRC, its PHYSICALOFFSET
   field and the 8 bytes a segment keeps free after it; every BLANK marker's size; where the log
   ends and whether anything but zeros lies after that end;
3. the consume queues: every unit against the record it points at (start, size, tags code,
   topic, queue id, queue offset), and every queued record against its queue;
4. the index: headers, slot table and chains, every entry against its record, and a hash query
   (by slot chain, as ``IndexFile.selectPhyOffset`` walks it) for every key of every record.

Damage that a crash leaves and recovery repairs (a torn record at the end of the log, queue
units past the log end, records not dispatched yet, index files newer than the checkpoint) is a
*note* when the ``abort`` file is present and a *problem* when it is not: a clean shutdown must
not leave it. Anything else wrong is a problem. The comparisons are numpy array operations, so a
store of millions of records is checked in one pass over its files.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rocketstore.codec import record as rec
from rocketstore.codec.crc import crc32
from rocketstore.codec.ids import index_key_hash
from rocketstore.codec.properties import split_keys
from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_BAD, STOP_BLANK, STOP_END, STOP_LIMIT, scan_records
from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptStoreError, RecordError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue, units_of, valid_prefix
from rocketstore.queues.index_file import HASH_SLOT_SIZE, INDEX_HEADER_SIZE, IndexFile, index_file_size
from rocketstore.queues.index_service import index_keys
from rocketstore.store import MessageStore

_SEGMENT_NAME = re.compile(r"\d{20}")
_WINDOW = 16 << 20
_PRE_BLANK_SIZE = 0x7FFFFFFF
_INT_MAX = 2**31 - 1
_ROLLBACK = 0xC
_HEADER = struct.Struct(">qqqqii")
_INT = struct.Struct(">i")


# -- the report ------------------------------------------------------------------------------------
@dataclass
class VerifyReport:
    """What ``verify_store`` checked and found. ``problems``/``notes`` list at most ``max_listed``
    each; ``problem_count``/``note_count`` count them all."""

    store: str
    abort_file: bool = False
    commit_log_files: int = 0
    records: int = 0
    log_min_offset: int = -1
    log_end: int = 0
    log_end_reason: str = ""
    queues: int = 0
    units: int = 0
    index_files: int = 0
    index_entries: int = 0
    keys: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem_count: int = 0
    note_count: int = 0
    max_listed: int | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is wrong (notes allowed)."""
        return self.problem_count == 0

    def _room(self, listed: list[str]) -> int:
        return 1 << 62 if self.max_listed is None else max(0, self.max_listed - len(listed))

    def problem(self, text: str) -> None:
        self.add_problems(1, (text,))

    def note(self, text: str) -> None:
        self.add_notes(1, (text,))

    def add_problems(self, count: int, texts: Iterable[str]) -> None:
        """Count ``count`` problems; list as many of ``texts`` (made lazily) as there is room for."""
        self.problems.extend(itertools.islice(texts, min(count, self._room(self.problems))))
        self.problem_count += count

    def add_notes(self, count: int, texts: Iterable[str]) -> None:
        self.notes.extend(itertools.islice(texts, min(count, self._room(self.notes))))
        self.note_count += count

    def damage(self, text: str) -> None:
        """Damage recovery repairs after a crash: a note with the abort file, a problem without."""
        (self.note if self.abort_file else self.problem)(text)

    def add_damage(self, count: int, texts: Iterable[str]) -> None:
        (self.add_notes if self.abort_file else self.add_problems)(count, texts)

    def summary_rows(self) -> list[tuple[str, Any]]:
        return [
            ("last exit", "abnormal (abort file present)" if self.abort_file else "normal (no abort file)"),
            ("commit-log files", self.commit_log_files),
            ("records", self.records),
            ("log", f"{self.log_min_offset} .. {self.log_end} ({self.log_end_reason})"),
            ("consume queues", self.queues),
            ("units", self.units),
            ("index files", self.index_files),
            ("index entries", self.index_entries),
            ("keys looked up", self.keys),
            ("notes", self.note_count),
            ("problems", self.problem_count),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "ok": self.ok,
            "abortFile": self.abort_file,
            "counts": {
                "commitLogFiles": self.commit_log_files,
                "records": self.records,
                "queues": self.queues,
                "units": self.units,
                "indexFiles": self.index_files,
                "indexEntries": self.index_entries,
                "keys": self.keys,
            },
            "logMinOffset": self.log_min_offset,
            "logEnd": self.log_end,
            "logEndReason": self.log_end_reason,
            "problemCount": self.problem_count,
            "noteCount": self.note_count,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


def _problems_at(report: VerifyReport, rows: np.ndarray, text: Callable[[int], str]) -> None:
    """A problem for each row (a bool mask or indices), its text made only if it is listed."""
    at = np.flatnonzero(rows) if rows.dtype == bool else rows
    report.add_problems(len(at), (text(int(i)) for i in at))


def _damage_at(report: VerifyReport, rows: np.ndarray, text: Callable[[int], str]) -> None:
    at = np.flatnonzero(rows) if rows.dtype == bool else rows
    report.add_damage(len(at), (text(int(i)) for i in at))


def verify_store(
    path: str | os.PathLike[str],
    config: StoreConfig | None = None,
    *,
    max_problems: int | None = None,
    progress: Callable[[int], None] | None = None,
    check_log: Callable[[MessageStore, VerifyReport], LogColumns] | None = None,
) -> VerifyReport:
    """Audit the store at ``path`` without changing it; see the module docstring for what is checked.

    ``max_problems`` limits how many problems (and notes) are listed; all are counted. A store that
    cannot be loaded (a stray or wrong-size file) is reported as a problem, not raised.
    ``progress(n)`` is called as commit-log bytes are scanned (``n`` more each time).
    ``check_log`` replaces the commit-log scan (``rocketstore spark verify`` scans the segments
    as Spark tasks, then calls ``join_segments``).
    """
    root = os.path.abspath(os.fspath(path))
    if not os.path.isdir(root):
        raise FileNotFoundError(f"no store at {root}")
    config = (config or StoreConfig()).copy(storePathRootDir=root)
    report = VerifyReport(store=root, abort_file=os.path.exists(os.path.join(root, "abort")), max_listed=max_problems)
    reported = _check_layout(root, config, report)
    try:
        store = MessageStore.open(root, config, read_only=True, recover=False)
    except CorruptStoreError as exc:
        if exc.path is None or os.path.abspath(exc.path) not in reported:
            report.problem(f"the store cannot be loaded: {exc}")
        report.note("the store could not be loaded: records, queues and index were not checked")
        return report
    try:
        if check_log is None:
            log = _check_commit_log(store, report, progress)
        else:
            log = check_log(store, report)
        _check_queues(store, log, report)
        _check_index(store, log, report)
    finally:
        store.shutdown()
    return report


# -- layout ------------------------------------------------------------------------------------------
def _check_layout(root: str, config: StoreConfig, report: VerifyReport) -> set[str]:
    """File names and sizes, as loading needs them; returns the paths reported as problems."""
    bad: set[str] = set()

    def problem(path: str, text: str) -> None:
        bad.add(os.path.abspath(path))
        report.problem(f"{os.path.relpath(path, root)}: {text}")

    found: dict[str, str] = {}
    for folder in config.commit_log_paths:
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                found.setdefault(name, os.path.join(folder, name))
    _check_segments(found, config.mapped_file_size_commit_log, problem, report, root)

    cq_root = os.path.join(root, "consumequeue")
    for topic in sorted(os.listdir(cq_root)) if os.path.isdir(cq_root) else []:
        topic_dir = os.path.join(cq_root, topic)
        if not os.path.isdir(topic_dir):
            report.note(f"consumequeue/{topic}: not a topic folder, skipped")
            continue
        for qid in sorted(os.listdir(topic_dir)):
            queue_dir = os.path.join(topic_dir, qid)
            if not qid.isdigit() or not os.path.isdir(queue_dir):
                report.note(f"consumequeue/{topic}/{qid}: not a queue folder, skipped")
                continue
            files = {name: os.path.join(queue_dir, name) for name in os.listdir(queue_dir)}
            _check_segments(files, config.cq_file_size, problem, report, root)

    index_dir = os.path.join(root, "index")
    if config.message_index_enable and os.path.isdir(index_dir):
        size = index_file_size(config.max_hash_slot_num, config.max_index_num)
        for name in sorted(os.listdir(index_dir)):
            full = os.path.join(index_dir, name)
            if not name.isdigit() or not os.path.isfile(full):
                report.note(f"index/{name}: not an index file, skipped")
            elif os.path.getsize(full) != size:
                problem(
                    full,
                    f"{os.path.getsize(full)} bytes; maxHashSlotNum={config.max_hash_slot_num} and "
                    f"maxIndexNum={config.max_index_num} give {size}",
                )

    checkpoint = os.path.join(root, "checkpoint")
    if os.path.isfile(checkpoint) and os.path.getsize(checkpoint) < 24:
        problem(checkpoint, f"{os.path.getsize(checkpoint)} bytes, fewer than its three timestamps")
    return bad


def _check_segments(
    found: dict[str, str],
    size: int,
    problem: Callable[[str, str], None],
    report: VerifyReport,
    root: str,
) -> None:
    """One mapped-file queue folder: 20-digit names, the configured size, contiguous offsets (an
    empty last file is what a crash while creating it leaves: loading drops it)."""
    names = []
    for name, full in sorted(found.items()):
        if os.path.isdir(full):
            problem(full, "a folder where only segment files belong")
        elif not _SEGMENT_NAME.fullmatch(name):
            problem(full, "a stray file: segment files are named by their 20-digit start offset (loading fails)")
        else:
            names.append(name)
    if names and os.path.getsize(found[names[-1]]) == 0:
        report.note(f"{os.path.relpath(found[names[-1]], root)}: an empty last file (a crash while creating it)")
        names.pop()
    expect = None
    for name in names:
        full, offset = found[name], int(name)
        actual = os.path.getsize(full)
        if actual != size:
            problem(full, f"{actual} bytes, the configured size is {size} (loading fails)")
        if offset % size:
            problem(full, f"the start offset is not a multiple of the file size {size}")
        elif expect is not None and offset != expect:
            problem(full, f"a gap: the file should start at {expect}")
        expect = offset + size


# -- commit log --------------------------------------------------------------------------------------
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
        _problems_at(
            report,
            phys != records.offsets,
            lambda i: f"{name}@{positions[i]} (offset {records.offsets[i]}): the PHYSICALOFFSET field says {phys[i]}",
        )
        _problems_at(
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


def _member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
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
) -> SegmentScan:
    """Scan a whole segment with CRC checks (``progress(n)`` as ``n`` more bytes are read)."""
    findings = VerifyReport(store="", max_listed=max_listed)
    collector = _Collector(findings)
    pos, reason = _scan_records(mapped, collector, delay_millis, progress)
    base = mapped.file_from_offset
    scan = SegmentScan(mapped.path, base, mapped.file_size, pos, reason, collector.result(base, base + pos), findings)
    if reason == STOP_BLANK:
        scan.blank_size = _INT.unpack(mapped.read(pos, 4))[0]
        scan.dirty_after = _nonzero(mapped, pos + 8)
    elif reason == STOP_BAD:
        scan.why, claimed = _diagnose(mapped, pos)
        scan.dirty_after = _nonzero(mapped, pos + max(claimed, 8))
    else:
        scan.dirty_after = _nonzero(mapped, pos)
    return scan


def _scan_records(
    mapped: MappedFile,
    collector: _Collector,
    delay_millis: tuple[int, ...],
    progress: Callable[[int], None] | None = None,
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


def _diagnose(mapped: MappedFile, pos: int) -> tuple[str, int]:
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
    actual = crc32(msg.body) & 0x7FFFFFFF
    if msg.body_len > 0 and actual != msg.body_crc:
        return f"body CRC {msg.body_crc}, the body gives {actual}", total
    return f"a record that fails the reader's checks (TOTALSIZE {total})", total


def _check_commit_log(
    store: MessageStore, report: VerifyReport, progress: Callable[[int], None] | None = None
) -> LogColumns:
    files = store.commit_log.queue.files
    delay = store.delay_millis
    return join_segments(
        [f.path for f in files], lambda i: scan_segment(files[i], delay, report.max_listed, progress), report
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
            if after:
                report.problem(f"{where}; {after} non-zero bytes follow it, which recovery drops (the log is cut here)")
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


# -- consume queues ----------------------------------------------------------------------------------
def _check_queues(store: MessageStore, log: LogColumns, report: VerifyReport) -> None:
    covered = np.zeros(len(log.offsets), dtype=bool)  # records whose unit was found and right
    queue_ends: dict[tuple[int, int], int] = {}
    topic_ids = {t: i for i, t in enumerate(log.topics)}
    for (topic, queue_id), cq in sorted(store.queues.table.items()):
        report.queues += 1
        tid = topic_ids.get(topic, -1)
        end = _check_queue(cq, tid, log, covered, report)
        if tid >= 0:
            queue_ends[(tid, queue_id)] = end
    _check_missing(log, covered, queue_ends, report)


def _check_queue(cq: ConsumeQueue, tid: int, log: LogColumns, covered: np.ndarray, report: VerifyReport) -> int:
    """One queue's files up to the first invalid unit; returns where its last record in the log ends."""
    where = f"consumequeue/{cq.topic}/{cq.queue_id}"
    ended = seen_real = False
    queue_end = -1
    for mapped in cq.queue.files:
        data = mapped.read(0, mapped.file_size)
        name = f"{where}/{mapped.file_name}"
        first = mapped.file_from_offset // CQ_STORE_UNIT_SIZE
        if ended:
            dirty = len(data) - data.count(0)
            if dirty:
                report.damage(f"{name}: {dirty} non-zero bytes after the end of the queue")
            continue
        units = units_of(data)
        valid = valid_prefix(units)
        if valid < len(units):
            ended = True
            dirty = len(data) - valid * CQ_STORE_UNIT_SIZE - data.count(0, valid * CQ_STORE_UNIT_SIZE)
            if dirty:
                report.damage(
                    f"{name}: the queue ends at unit {first + valid} (an invalid unit), "
                    f"but {dirty} non-zero bytes follow it"
                )
        units = units[:valid]
        lead = 0
        if not seen_real:  # pre-blank units fill a queue's first file up to its first real unit
            real = np.flatnonzero((units["phy"] != 0) | (units["size"] != _PRE_BLANK_SIZE))
            lead = int(real[0]) if len(real) else valid
            seen_real = len(real) > 0
        end = _check_units(where, cq.queue_id, tid, first, units, lead, log, covered, report)
        queue_end = max(queue_end, end)
    return queue_end


def _check_units(
    where: str,
    queue_id: int,
    tid: int,
    first: int,
    units: np.ndarray,
    lead: int,
    log: LogColumns,
    covered: np.ndarray,
    report: VerifyReport,
) -> int:
    """Valid units (queue offsets from ``first``; the first ``lead`` are pre-blanks) against their records."""
    phy = units["phy"].astype(np.int64)
    size = units["size"].astype(np.int64)
    tags = units["tags"].astype(np.int64)
    index = first + np.arange(len(units), dtype=np.int64)
    check = np.ones(len(units), dtype=bool)
    check[:lead] = False
    report.units += int(check.sum())
    check &= phy >= log.min_offset  # below the log's first offset: cleaned up, nothing to compare
    past = check & (phy >= log.end)
    _damage_at(report, past, lambda i: f"{where} unit {index[i]} -> {phy[i]}: at or past the log end {log.end}")
    check &= ~past
    rows, hit = log.find(phy)
    _problems_at(report, check & ~hit, lambda i: f"{where} unit {index[i]} -> {phy[i]}: no record starts there")
    check &= hit
    r = rows[check]
    flags = log.sys_flags[r] & _ROLLBACK
    bad = (
        (log.sizes[r] != size[check])
        | (log.tags[r] != tags[check])
        | (log.topic_ids[r] != tid)
        | (log.queue_ids[r] != queue_id)
        | (log.queue_offsets[r] != index[check])
        | ((flags != 0) & (flags != 8))
    )
    covered[r[~bad]] = True
    unit = (index, phy, size, tags, rows)
    _problems_at(report, np.flatnonzero(check)[bad], lambda i: _unit_mismatch(log, where, tid, queue_id, unit, i))
    in_log = np.flatnonzero((phy < log.end) & (np.arange(len(units)) >= lead))
    if not len(in_log):
        return -1
    last = int(in_log[-1])
    return int(phy[last] + size[last])


def _unit_mismatch(log: LogColumns, where: str, tid: int, queue_id: int, unit: tuple[np.ndarray, ...], i: int) -> str:
    index, phy, size, tags, row = (int(column[i]) for column in unit)
    diffs = []
    if int(log.sizes[row]) != size:
        diffs.append(f"size {size}, record {int(log.sizes[row])}")
    if int(log.tags[row]) != tags:
        diffs.append(f"tags code {tags}, record {int(log.tags[row])}")
    record_topic = log.topics[int(log.topic_ids[row])]
    if int(log.topic_ids[row]) != tid or int(log.queue_ids[row]) != queue_id:
        diffs.append(f"the record is in {record_topic}/{int(log.queue_ids[row])}")
    if int(log.queue_offsets[row]) != index:
        diffs.append(f"the record's queue offset is {int(log.queue_offsets[row])}")
    flags = int(log.sys_flags[row]) & _ROLLBACK
    if flags not in (0, 8):
        diffs.append("the record is a prepared or rollback one")
    return f"{where} unit {index} -> {phy}: " + "; ".join(diffs)


def _check_missing(
    log: LogColumns, covered: np.ndarray, queue_ends: dict[tuple[int, int], int], report: VerifyReport
) -> None:
    """Every NOT/COMMIT record must be in its queue at its queue offset."""
    flags = log.sys_flags & _ROLLBACK
    missing = np.flatnonzero(((flags == 0) | (flags == 8)) & ~covered)
    if not len(missing):
        return
    if not report.abort_file:
        _problems_at(
            report, missing, lambda i: f"record at {log.offsets[i]} ({log.describe(i)}): not in its consume queue"
        )
        return
    ends = np.array(
        [
            queue_ends.get((int(t), int(q)), -1)
            for t, q in zip(log.topic_ids[missing], log.queue_ids[missing], strict=True)
        ],
        dtype=np.int64,
    )
    hole = log.offsets[missing] + log.sizes[missing] <= ends
    _problems_at(
        report,
        missing[hole],
        lambda i: (
            f"record at {log.offsets[i]} ({log.describe(i)}): not in its consume queue, which holds later "
            "records (recovery does not add it)"
        ),
    )
    lag = int((~hole).sum())
    if lag:
        report.note(f"{lag} records are not in their consume queues yet; abnormal recovery dispatches them")


# -- index -------------------------------------------------------------------------------------------
def _check_index(store: MessageStore, log: LogColumns, report: VerifyReport) -> None:
    index = store.index
    if index is None:
        report.note("messageIndexEnable is false: the index was not checked")
        return
    kept = []
    for f in index.files:
        if report.abort_file and f.end_timestamp > store.checkpoint.index_msg_timestamp:
            report.note(f"index/{f.file_name}: newer than the checkpoint; abnormal recovery rebuilds it")
        else:
            kept.append(f)
    report.index_files = len(index.files)
    key_of_record = log.key_records.astype(np.int64) << 32 | log.key_hashes
    found: list[np.ndarray] = []
    below = 0
    for f in kept:
        got, under = _check_index_file(f, log, key_of_record, report)
        found.append(got)
        below += under
    if below:
        report.note(f"{below} index entries point below the log's first offset (cleaned-up data)")
    _check_keys_found(store, log, kept, np.concatenate(found) if found else np.zeros(0, np.int64), report)


def _check_index_file(
    f: IndexFile, log: LogColumns, expected_keys: np.ndarray, report: VerifyReport
) -> tuple[np.ndarray, int]:
    """One index file as written; returns the record keys a query finds in it, and how many entries
    point below the log."""
    where = f"index/{f.file_name}"
    begin_ts, end_ts, begin_phy, end_phy, slot_count, raw_count = _HEADER.unpack(f.mapped.read(0, INDEX_HEADER_SIZE))
    nothing = np.zeros(0, np.int64)
    if not 0 <= raw_count <= f.index_num:
        report.problem(f"{where}: indexCount {raw_count} is out of range (at most {f.index_num})")
        return nothing, 0
    if begin_ts > 0 and end_ts > 0 and begin_ts > end_ts:
        report.problem(f"{where}: beginTimestamp {begin_ts} is after endTimestamp {end_ts}")
    count = max(raw_count, 1)
    entries = f.entries()[: count - 1]
    k = len(entries)
    report.index_entries += k
    slots_n = f.slot_num
    slot_table = np.frombuffer(f.mapped.read(INDEX_HEADER_SIZE, slots_n * HASH_SLOT_SIZE), dtype=">i4").astype(np.int64)
    hashes = entries["hash"].astype(np.int64)
    phy = entries["phy"].astype(np.int64)
    diffs = entries["diff"].astype(np.int64)
    prevs = entries["prev"].astype(np.int64)
    numbers = np.arange(1, k + 1, dtype=np.int64)

    _check_chains(where, hashes, prevs, slot_table, slot_count, report)

    # entries against their records
    under = phy < log.min_offset
    past = ~under & (phy >= log.end)
    _damage_at(report, past, lambda i: f"{where} entry {numbers[i]} -> {phy[i]}: at or past the log end {log.end}")
    rows, hit = log.find(phy)
    _problems_at(
        report, ~under & ~past & ~hit, lambda i: f"{where} entry {numbers[i]} -> {phy[i]}: no record starts there"
    )
    at_record = ~under & ~past & hit
    keys = rows.astype(np.int64) << 32 | hashes
    matched = at_record & _member(keys, expected_keys)
    _problems_at(
        report,
        at_record & ~matched,
        lambda i: f"{where} entry {numbers[i]} -> {phy[i]}: key hash {hashes[i]} matches no key of the record",
    )
    if k and begin_ts > 0 and at_record.any():
        later = at_record.copy()
        later[0] = False  # the first entry's time is taken against the begin time before it was set
        delta = log.store_ts[rows] - begin_ts
        want_diff = np.clip(np.sign(delta) * (np.abs(delta) // 1000), 0, _INT_MAX)
        _problems_at(
            report,
            later & (diffs != want_diff),
            lambda i: f"{where} entry {numbers[i]}: time diff {diffs[i]}, expected {want_diff[i]}",
        )
    if k:
        if (begin_phy, end_phy) != (int(phy[0]), int(phy[-1])):
            report.problem(f"{where}: header offsets {begin_phy}..{end_phy}, entries {int(phy[0])}..{int(phy[-1])}")
        if at_record[0] and at_record[-1]:
            first_ts, last_ts = int(log.store_ts[rows[0]]), int(log.store_ts[rows[-1]])
            if (begin_ts, end_ts) != (first_ts, last_ts):
                report.problem(f"{where}: header times {begin_ts}..{end_ts}, records {first_ts}..{last_ts}")
    reachable = _found_by_query(slot_table, hashes, diffs, prevs, count, slots_n)
    return keys[matched & reachable], int(under.sum())


def _check_chains(
    where: str, hashes: np.ndarray, prevs: np.ndarray, slot_table: np.ndarray, slot_count: int, report: VerifyReport
) -> None:
    """Each entry links to the previous entry of its slot, each slot holds its newest entry, and
    hashSlotCount counts the slots used (spec 8.3)."""
    k = len(hashes)
    numbers = np.arange(1, k + 1, dtype=np.int64)
    _problems_at(report, hashes < 0, lambda i: f"{where} entry {numbers[i]}: negative key hash {hashes[i]}")
    slots = hashes % len(slot_table)
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    same = np.zeros(k, dtype=bool)
    same[1:] = sorted_slots[1:] == sorted_slots[:-1]
    want_prev = np.zeros(k, dtype=np.int64)
    want_sorted = np.zeros(k, dtype=np.int64)
    want_sorted[1:][same[1:]] = numbers[order][:-1][same[1:]]
    want_prev[order] = want_sorted
    _problems_at(
        report,
        prevs != want_prev,
        lambda i: f"{where} entry {numbers[i]}: previous entry {prevs[i]}, expected {want_prev[i]}",
    )
    want_table = np.zeros(len(slot_table), dtype=np.int64)
    last_of_slot = np.ones(k, dtype=bool)
    last_of_slot[:-1] = ~same[1:]
    want_table[sorted_slots[last_of_slot]] = numbers[order][last_of_slot]
    _problems_at(
        report,
        slot_table != want_table,
        lambda s: f"{where} hash slot {s}: holds entry {slot_table[s]}, expected {want_table[s]}",
    )
    used = int(np.count_nonzero(last_of_slot))
    if slot_count != used:
        report.problem(f"{where}: hashSlotCount {slot_count}, the entries use {used} slots")


def _found_by_query(
    slot_table: np.ndarray, hashes: np.ndarray, diffs: np.ndarray, prevs: np.ndarray, count: int, slots_n: int
) -> np.ndarray:
    """Which entries a query for their own hash reaches: walking every slot's chain from the slot
    table through the prev links, as ``selectPhyOffset`` does (stopping at a negative time diff,
    a link out of range or to itself)."""
    k = len(hashes)
    found = np.zeros(k + 1, dtype=bool)
    visited = np.zeros(k + 1, dtype=bool)
    chain = np.flatnonzero((slot_table > 0) & (slot_table < count))
    cur = slot_table[chain]
    while len(cur):
        fresh = ~visited[cur]
        cur, chain = cur[fresh], chain[fresh]
        visited[cur] = True
        alive = diffs[cur - 1] >= 0
        cur, chain = cur[alive], chain[alive]
        found[cur] |= hashes[cur - 1] % slots_n == chain
        nxt = prevs[cur - 1]
        go = (nxt > 0) & (nxt < count) & (nxt != cur)
        cur, chain = nxt[go], chain[go]
    return found[1:]


def _check_keys_found(
    store: MessageStore, log: LogColumns, kept: list[IndexFile], found: np.ndarray, report: VerifyReport
) -> None:
    """Every key of every record must be found by a query, unless the record is newer than the index."""
    rows = log.key_records
    report.keys = len(rows)
    if not len(rows):
        return
    keys = rows << 32 | log.key_hashes
    hit = _member(keys, found)
    index_end = -1
    if kept and (kept[-1].index_count > 1 or kept[-1].end_phy_offset > 0):
        index_end = kept[-1].end_phy_offset  # a file made after a full one starts with its end values
    # RocketMQ (re)indexes every record at or after the newest file's endPhyOffset (spec 8.5): the
    # last record's keys may have gone partly into a newer file that a crash dropped
    newer = log.offsets[rows] >= index_end
    _problems_at(report, ~hit & ~newer, lambda i: _key_problem(store, log, int(rows[i]), int(log.key_hashes[i])))
    late = np.flatnonzero(~hit & newer)
    if len(late):
        records = len(np.unique(rows[late]))
        report.damage(
            f"index: {len(late)} keys of {records} records at or after the index's last entry (offset {index_end}) "
            "are not indexed" + ("; abnormal recovery indexes them" if report.abort_file else "")
        )


def _key_problem(store: MessageStore, log: LogColumns, row: int, key_hash: int) -> str:
    offset = int(log.offsets[row])
    msg = store.look_message_by_offset(offset)
    name = f"(hash {key_hash})"
    if msg is not None:
        candidates = ([msg.uniq_key] if msg.uniq_key else []) + split_keys(msg.keys)
        for key in candidates:
            if index_key_hash(f"{msg.topic}#{key}") == key_hash:
                name = repr(f"{msg.topic}#{key}")
                break
    return f"index: key {name} of the record at {offset} ({log.describe(row)}) is not found by a query"


def iter_problem_lines(report: VerifyReport) -> Iterator[str]:
    """The report as text lines: notes, then problems, then the verdict."""
    for note in report.notes:
        yield f"note: {note}"
    if report.note_count > len(report.notes):
        yield f"note: ... and {report.note_count - len(report.notes)} more"
    for problem in report.problems:
        yield f"problem: {problem}"
    if report.problem_count > len(report.problems):
        yield f"problem: ... and {report.problem_count - len(report.problems)} more"
    yield f"{report.problem_count} problem(s)" if report.problem_count else "clean"
