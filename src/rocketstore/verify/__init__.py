"""Verifying a store against its commit log (``rocketstore verify``).

The store is mapped as it is on disk (read-only, no recovery) and audited:

1. the file layout: segment names and sizes in ``commitlog/``, the queue folders, ``index/``;
2. the commit log: every record from the first segment, with its body CRC, its PHYSICALOFFSET
   field and the 8 bytes a segment keeps free after it; every BLANK marker's size; where recovery
   would end the log (its first bad record that data follows), and past it every later record
   (each damaged stretch is skipped and reported; the queue units and index entries recovery
   would truncate with the log are one line);
3. the consume queues: every unit against the record it points at (start, size, tags code,
   topic, queue id, queue offset), and every queued record against its queue;
4. the index: headers, slot table and chains, every entry against its record, and a hash query
   (by slot chain, as ``IndexFile.selectPhyOffset`` walks it) for every key of every record;
5. the config files (topics, consumer and delay offsets, subscription groups): each one usable,
   or else what loading falls back to (its backup's older state, or nothing);
6. the checkpoint: no timestamp later than the data it claims is flushed.

The report ends with the next step for each kind of problem found (``verify.next_steps``).

Damage that a crash leaves and recovery repairs (a torn record at the end of the log, queue
units past the log end, records not dispatched yet, index files newer than the checkpoint) is a
*note* when the ``abort`` file is present and a *problem* when it is not: a clean shutdown must
not leave it. Anything else wrong is a problem. The comparisons are numpy array operations, so a
store of millions of records is checked in one pass over its files.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator

import numpy as np

from rocketstore.codec.record import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from rocketstore.codec.scan import STOP_BLANK, STOP_END
from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptStoreError
from rocketstore.files.mapped_file import MappedFile, holds_data
from rocketstore.log.walk import walk_segment
from rocketstore.meta.lockfile import describe_holder, lock_holder
from rocketstore.meta.root import require_store
from rocketstore.store import MessageStore
from rocketstore.verify import segment_scan
from rocketstore.verify.checkpoint import check_checkpoint
from rocketstore.verify.commit_log import join_segments, recovery_scope, report_past_cut
from rocketstore.verify.config_files import check_config_files
from rocketstore.verify.consume_queues import check_queues
from rocketstore.verify.index import check_index
from rocketstore.verify.layout import check_layout, check_sizes
from rocketstore.verify.log_columns import LogColumns
from rocketstore.verify.next_steps import add_next_steps, unreadable_config
from rocketstore.verify.report import VerifyReport, iter_problem_lines
from rocketstore.verify.segment_scan import SegmentScan, Stop, scan_segment, segment_label

__all__ = [
    "LogColumns",
    "SegmentScan",
    "VerifyReport",
    "iter_problem_lines",
    "join_segments",
    "recovery_scope",
    "live_tail",
    "note_live_tail",
    "scan_segment",
    "up_to",
    "verify_store",
]


def verify_store(
    path: str | os.PathLike[str],
    config: StoreConfig | None = None,
    *,
    max_problems: int | None = None,
    progress: Callable[[int], None] | None = None,
    check_log: Callable[[MessageStore, VerifyReport, int | None], LogColumns] | None = None,
) -> VerifyReport:
    """Audit the store at ``path`` without changing it; see the module docstring for what is checked.

    ``max_problems`` limits how many problems (and notes) are listed; all are counted. A store that
    cannot be loaded (a stray or wrong-size file) is reported as a problem, not raised, but for
    files that are all one size other than the configured one (the configuration is not the
    store's): CorruptStoreError naming the settings to give.
    ``progress(n)`` is called as commit-log bytes are scanned (``n`` more each time).
    ``check_log(store, report, tail)`` replaces the commit-log scan (``rocketstore spark verify``
    scans the segments as Spark tasks, then calls ``join_segments``); ``tail`` is ``live_tail``'s
    when another process holds the store, else None (see ``_check_log``: ``up_to``, ``note_live_tail``).
    """
    root = os.path.abspath(os.fspath(path))
    config = (config or StoreConfig()).copy(storePathRootDir=root)
    require_store(root, config)
    check_sizes(root, config)
    report = VerifyReport(store=root, abort_file=os.path.exists(os.path.join(root, "abort")), max_listed=max_problems)
    _note_in_use(report)
    reported = check_layout(root, config, report)
    found: dict[str, int] = {}
    log: LogColumns | None = None
    try:
        store = MessageStore.open(root, config, read_only=True, recover=False)
    except CorruptStoreError as exc:
        if exc.path is None or os.path.abspath(exc.path) not in reported:
            report.problem(f"the store cannot be loaded: {exc}")
        report.note("the store could not be loaded: records, queues and index were not checked")
        add_next_steps(report, found, reported, config.commit_log_folders, log)
        config_dir = os.path.join(root, "config")
        if exc.path is not None and os.path.dirname(os.path.abspath(exc.path)) == os.path.abspath(config_dir):
            report.next_steps.append(unreadable_config(exc.path))
        return report
    try:
        tail = live_tail(store) if report.lock_held_by is not None else None
        with _counted(report, found, "log"):
            log = _check_log(store, report, progress, tail) if check_log is None else check_log(store, report, tail)
        with _counted(report, found, "queues"):
            check_queues(store, log, report)
        with _counted(report, found, "index"):
            check_index(store, log, report)
        with _counted(report, found, "log"):
            report_past_cut(log, report)
        with _counted(report, found, "config"):
            check_config_files(store, report)
        if store.delay_offsets.load_problem is not None:  # recover's rewrite restarts delivery
            found["delay offsets"] = 1
        with _counted(report, found, "checkpoint"):
            check_checkpoint(store, log, report)
    finally:
        store.shutdown()
    add_next_steps(report, found, reported, config.commit_log_folders, log)
    return report


@contextlib.contextmanager
def _counted(report: VerifyReport, found: dict[str, int], kind: str) -> Iterator[None]:
    """Count the problems a check adds under ``kind`` (for the next steps)."""
    before = report.problem_count
    yield
    found[kind] = found.get(kind, 0) + report.problem_count - before


def _note_in_use(report: VerifyReport) -> None:
    """A store a process has open (it holds the lock) is checked as a crash would leave it: say so."""

    report.lock_held_by = lock_holder(report.store)
    if report.lock_held_by is not None:
        report.note(
            f"the store is in use: {describe_holder(report.lock_held_by)} has it open, so the records at its "
            "tail and the queue units and index entries behind them may be mid-write (checked as a crash "
            "would leave them); verify the store once it is shut down for a full verdict"
        )


_TOTAL_MAGIC = struct.Struct(">ii")


def live_tail(store: MessageStore) -> int:
    """Where the records end as verify starts, in a store another process holds (and may be
    writing): the log's last segment that holds data, walked record by record as recovery walks
    it (no CRCs; a BLANK marker ends it at the next segment). The writer appends only past it."""
    files = store.commit_log.queue.files
    for mapped in reversed(files):
        if not mapped.hold():
            continue
        try:
            empty = mapped.read(0, 8) == bytes(8)
        finally:
            mapped.release()
        if empty:
            continue
        pos, reason = walk_segment(mapped, 0, mapped.file_size, None, check_crc=False, checked_only_before=1 << 62)
        most = store.config.max_message_size + (1 << 16)  # a record (or batch) and its header
        if reason == STOP_BLANK or _damage_not_a_write(mapped, pos, most):
            return mapped.end_offset  # the scan checks the whole segment and reports what stopped the walk
        return mapped.file_from_offset + pos
    return files[0].file_from_offset if files else 0


def _damage_not_a_write(mapped: MappedFile, pos: int, most: int) -> bool:
    """Whether what stops the walk at ``pos`` is damage rather than a record being written: a
    writer puts a valid magic code with a size that fits, or none yet (zeros), and nothing past
    what it writes (the record; ``most`` bytes, the largest write, when its size is not there yet)."""
    if not mapped.hold():
        return False
    try:
        if pos + 8 > mapped.file_size:
            return False
        total, magic = _TOTAL_MAGIC.unpack(mapped.read(pos, 8))
        if magic == 0:
            return holds_data(mapped.mm, pos + most)
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or not 0 < total <= mapped.file_size - pos:
            return True
        return holds_data(mapped.mm, pos + total)
    finally:
        mapped.release()


def _check_log(
    store: MessageStore, report: VerifyReport, progress: Callable[[int], None] | None, tail: int | None
) -> LogColumns:
    """The commit-log audit (``check_commit_log``), each segment scanned once. ``tail``: the end
    of the records when verify started in a store another process holds: what the scan finds at
    or past it (records written since, zeros the writer fills as verify reads them) is not checked,
    and the queue units and index entries pointing there are notes (past the log end, which a
    store in use with its abort file shows as a crash would leave it). A segment file removed while
    verify reads it (a writer's shutdown deletes its pre-allocated segment, its cleanup the
    oldest) is left out with a note."""
    files = store.commit_log.queue.files
    delay, prop_crc = store.delay_millis, store.config.force_verify_prop_crc
    scans: dict[str, SegmentScan] = {}
    paths = [f.path for f in files if tail is None or f.file_from_offset < tail]
    by_path = {f.path: f for f in files}

    def scan_of(i: int) -> SegmentScan:
        path = paths[i]
        if path not in scans:
            scan = segment_scan.scan_segment(
                by_path[path], delay, report.max_listed, progress, prop_crc=prop_crc, root=report.store
            )
            scans[path] = scan if tail is None else up_to(scan, tail)
        return scans[path]

    removed: list[str] = []
    while True:
        part = VerifyReport(
            store=report.store,
            abort_file=report.abort_file,
            lock_held_by=report.lock_held_by,
            max_listed=report.max_listed,
        )
        try:
            log = join_segments(paths, scan_of, part, **recovery_scope(store, report.abort_file))
            break
        except FileNotFoundError as exc:
            if exc.filename not in paths:
                raise
            paths.remove(exc.filename)
            removed.append(exc.filename)
    for path in removed:
        report.note(f"{segment_label(path, report.store)}: removed while verifying (left out)")
    report.add_problems(part.problem_count, part.problems)
    report.add_notes(part.note_count, part.notes)
    report.commit_log_files = len(files) - len(removed)
    report.records, report.log_min_offset = part.records, part.log_min_offset
    report.log_end, report.log_end_reason = part.log_end, part.log_end_reason
    report.blanks_inside = part.blanks_inside
    if tail is not None:
        note_live_tail(report, tail)
    return log


def note_live_tail(report: VerifyReport, tail: int) -> None:
    """The note of a check bounded by ``tail`` (``live_tail``)."""
    report.note(
        f"commitlog: the records ended at offset {tail} when verify started; what the process holding the "
        "store writes past it (and the queue units and index entries pointing there) is not checked"
    )


def up_to(scan: SegmentScan, tail: int) -> SegmentScan:
    """A segment's scan cut at ``tail`` (the data ends there: the stops at or past it, where the
    scan met the writer, are dropped; its records past it too)."""
    limit = tail - scan.base
    if limit >= scan.size:
        return scan
    stops = [stop for stop in scan.stops if stop.pos < limit]
    for stop in stops:
        if stop.resume > limit:
            stop.resume = limit
    if not stops or stops[-1].resume >= 0:
        stops.append(Stop(limit, STOP_END))
    part = scan.part
    kept = int(np.searchsorted(part.offsets, tail))
    cut = LogColumns(min_offset=part.min_offset, end=min(part.end, tail), topics=part.topics)
    for name in LogColumns.COLUMNS:
        setattr(cut, name, getattr(part, name)[:kept])
    keys = part.key_records < kept
    cut.key_records, cut.key_hashes = part.key_records[keys], part.key_hashes[keys]
    return SegmentScan(scan.path, scan.base, scan.size, cut, scan.findings, stops)
