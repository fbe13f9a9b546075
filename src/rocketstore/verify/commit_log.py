"""The commit-log audit: the segments' scans (``segment_scan``: every record from the first segment,
body CRC, PHYSICALOFFSET, the free bytes after it, BLANK markers) joined in log order into
``LogColumns``, with where recovery would end the log and what it would cut or keep (damaged
stretches are skipped, and the records after them checked too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rocketstore.codec.scan import STOP_BAD, STOP_BLANK
from rocketstore.log.recovery import abnormal_start, no_room_end
from rocketstore.store import MessageStore
from rocketstore.verify.log_columns import LogColumns, join_parts
from rocketstore.verify.report import VerifyReport
from rocketstore.verify.segment_scan import WINDOW, SegmentScan, Stop, segment_label


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
    other_damage = no_room = False
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
                if cut is None and (where_end := no_room_end(scan.size - stop.pos)) is not None:
                    no_room = _report_no_room(report, scan, stop, where_end, "")
                elif cut is None and stop.reason == STOP_BAD and kept_crc:
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
                no_room = _report_cut(report, scan, stop, after, went_on)
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
    log = join_parts([scan.part for scan in scans[: last + 1]], scans[0].base, end)
    log.cut, log.torn_at, log.other_damage, log.no_room = cut, torn_at, other_damage, no_room
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


def _report_no_room(report: VerifyReport, scan: SegmentScan, stop: Stop, where: str, dropped: str) -> bool:
    """The log ends in ``scan`` ``where`` (``no_room_end``; as recovery's ``no_room_for_blank``):
    no open for writing takes the store. A problem after a crash too (no recovery repairs it)."""
    report.log_end_reason = "a segment's records ending without room for the BLANK marker"
    report.problem(
        f"commitlog: the log ends at {scan.base + stop.pos}, where the records of {scan.name} end {where}, leaving "
        f"no room for the BLANK marker every writer leaves: recovery reads nothing past it, at any open{dropped}"
    )
    return True


def _report_cut(report: VerifyReport, scan: SegmentScan, stop: Stop, after: int, went_on: str) -> bool:
    """The first damage that data follows where recovery checks the log: where it cuts the log.
    True when that is a segment whose records end without room for the BLANK marker."""
    at = scan.base + stop.pos
    where = no_room_end(scan.size - stop.pos)
    if where is not None:
        return _report_no_room(report, scan, stop, where, f", and drops the {after} non-zero bytes after it; {went_on}")
    if stop.reason != STOP_BAD:
        report.log_end_reason = "end of data"
        report.damage(
            f"commitlog: the log ends at {at} (zeros in {scan.name} at {stop.pos}); "
            f"recovery drops the {after} non-zero bytes after it; {went_on}"
        )
        return False
    report.log_end_reason = f"a bad record at {at}"
    label = segment_label(scan.path, report.store)
    report.problem(
        f"{label}@{stop.pos} (offset {at}): {stop.why}; {after} non-zero bytes follow it, which recovery drops "
        f"(the log is cut here); {went_on}"
    )
    return False


def report_past_cut(log: LogColumns, report: VerifyReport) -> None:
    """One line for the queue units and index entries that point where recovery cuts the log
    (``check_queues`` and ``check_index`` count them)."""
    units, entries = report.units_past_cut, report.entries_past_cut
    if units or entries:
        report.damage(
            f"commitlog: {units} consume-queue units and {entries} index entries point at or past offset "
            f"{log.cut}, where recovery cuts the log (it truncates them with it)"
        )


def _nonzero_file(path: str) -> int:
    """How many bytes of a file are not zero."""
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(WINDOW):
            count += len(chunk) - chunk.count(0)
    return count
