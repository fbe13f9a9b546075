"""Normal and abnormal recovery (spec section 12).

Both walk the commit log from a starting segment, check every record (CRC included when
``checkCRCOnRecover``), cut the log at the first record that fails, dispatch the records the
consume queues or the index do not have yet, remove consume-queue units past the new end, and
drop segments after it (the pre-allocated empty one included).

Where this goes beyond RocketMQ, it is to lose nothing:

* the walk starts early enough to rebuild index files that a crash made stale (RocketMQ's
  ``messageIndexSafe`` behaviour, always);
* records at or after the consume queues' end are dispatched during a normal recovery too (5.x
  skips a record starting exactly there);
* a queue whose tail recovery cut for damage is dispatched again from its own end (RocketMQ
  starts at the highest end over all queues), and so is a queue the walk finds short: a record of
  it lands past its end, or a record of it walked but not dispatched is past its end (units at
  its end zeroed, or its folder removed, after a clean exit, which no check of the queue alone
  can tell from never written); RocketMQ writes the record out of place. A queue short only of
  records before the segments walked stays short (finding it would take a walk of the whole log);
* records of a topic deleted since (``config/deletedTopics.json``) are not put in the consume
  queues again: the dispatcher skips them there, so a reopen does not bring the removed queue
  back (they are indexed again, as every record is);
* only the segments RocketMQ checks (the last three after a clean exit, from the checkpoint's
  segment after a crash) are ever cut: a bad record before them, met while rebuilding, ends the
  dispatch of its segment but keeps the log;
* given ``confirm_cut``, the walk only checks: where the log ends is known before a record is
  dispatched, so that a cut that may drop records can be refused with nothing written by the walk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rocketstore.codec import record as rec
from rocketstore.codec import sysflag as sf
from rocketstore.codec.records import Records
from rocketstore.codec.scan import STOP_BAD, STOP_BLANK, mismatched_size
from rocketstore.codec.topic import queue_folder_ok
from rocketstore.errors import NoRoomForBlankError
from rocketstore.files.mapped_file import MappedFile, holds_data
from rocketstore.log.commitlog import CommitLog
from rocketstore.log.walk import walk_segment
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.meta.lockfile import lock_holder
from rocketstore.meta.root import remove_abort
from rocketstore.queues.consume_queues import ConsumeQueueStore
from rocketstore.queues.dispatch import Dispatcher
from rocketstore.queues.index_service import IndexService

log = logging.getLogger(__name__)

NORMAL_CHECKED = 3  # segments an open after a clean shutdown checks (RocketMQ's recoverNormally)
_UNPARSED = 1 << 62  # a walk that only checks parses no properties (only dispatch needs them)


@dataclass
class RecoveryReport:
    """What a recovery found and did."""

    abnormal: bool
    consume_queue_end: int = -1  # end of the last record the consume queues held before recovery
    index_end: int = -1  # offset of the last record the index held before recovery
    start_file: str | None = None  # the first segment read (the queues may need records from before checked_from)
    checked_from: str | None = None  # the first segment whose records are checked and may be cut
    newest_kept: int = 0  # the latest store time of the records walked and kept
    process_offset: int = 0
    records_checked: int = 0
    records_dispatched: int = 0
    stopped_at_bad_record: bool = False
    # the log ends within 8 bytes of its segment's end, no BLANK marker there: no open writes to it
    no_room_for_blank: bool = False
    bytes_checked: int = 0
    dropped_files: list[str] = field(default_factory=list)
    # bad records not cut: before the checked segments, or a BLANK marker with data after it mid-file
    kept_bad_records: list[int] = field(default_factory=list)
    reindexed_from: int = -1  # index files held entries past the cut: records from here were indexed again
    # each queue's end as its files held it, less what recovery cut: the units below it were not
    # written by this recovery (a copy-on-write open leaves the files as they were)
    queue_ends_kept: dict[tuple[str, int], int] = field(default_factory=dict)
    # "topic/queueId" of the queues the walk found short of the log: dispatched again from their end
    queues_behind: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON can hold it: camelCase keys, queue ends under ``"topic/queueId"``."""
        out = {_camel_case(k): v for k, v in self.__dict__.items() if k != "queue_ends_kept"}
        out["queueEndsKept"] = {f"{t}/{q}": end for (t, q), end in sorted(self.queue_ends_kept.items())}
        return out


ConfirmCut = Callable[[RecoveryReport], None]  # asked before a cut that may drop records; raises to refuse it


def no_room_end(left: int) -> str | None:
    """Where a segment's records end when the ``left`` bytes after them are too few for the BLANK
    marker every writer leaves ("at its last byte", ...); None when there is room for it."""
    if left >= rec.END_FILE_MIN_BLANK_LENGTH:
        return None
    return "at its last byte" if left == 0 else f"{left} byte(s) before its end"


def _camel_case(name: str) -> str:
    """``consume_queue_end`` -> ``consumeQueueEnd`` (the JSON key style)."""
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def recover(
    commit_log: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    checkpoint: StoreCheckpoint,
    dispatcher: Dispatcher,
    *,
    last_exit_ok: bool,
    check_crc: bool,
    delay_millis: tuple[int, ...],
    message_index_safe: bool = False,
    prop_crc: bool = False,
    confirm_cut: ConfirmCut | None = None,
) -> RecoveryReport:
    """Recover the commit log and the queues in place (or in memory, for a copy-on-write store).

    ``check_crc`` (checkCRCOnRecover) checks each record's body CRC, or with ``prop_crc``
    (forceVerifyPropCRC) its ``__CRC32#`` property; the log ends before the first that fails.

    ``confirm_cut`` is called with the report (``process_offset``: where the log is to end) when
    that end may drop records: the walk stopped at a bad record, later segments hold records, or
    the queues or the index held records past it. Given it, the walk dispatches nothing: it is
    called before recovery has written anything but what the queues' own recovery and, after a
    crash, ``truncate_untrusted`` write first; an exception it raises ends recovery there."""
    queues.recover()
    max_phy_cq = queues.max_physic_offset()
    files = commit_log.queue.files
    report = RecoveryReport(abnormal=not last_exit_ok, consume_queue_end=max_phy_cq)
    if index is not None and index.files:
        report.index_end = index.files[-1].end_phy_offset
    if not files:
        commit_log.queue.flushed_where = commit_log.queue.committed_where = 0
        queues.destroy_all()
        if index is not None:
            index.destroy()
        return report

    if not last_exit_ok:
        # after a crash nothing written after the checkpoint's safe time is trusted in the queues:
        # their units from the start segment on are rebuilt from the log (a power loss can leave a
        # torn unit there that still looks valid)
        start = abnormal_start(files, checkpoint, message_index_safe)
        queues.truncate_untrusted(files[start].file_from_offset)
        max_phy_cq = queues.max_physic_offset()

    # where the consume queues and the index need records from (a queue whose tail recovery cut
    # needs its own records again: RocketMQ starts from the highest end and leaves it short)
    cq_from = max(max_phy_cq, 0)
    damaged = queues.damaged_end()
    if damaged is not None:
        cq_from = min(cq_from, damaged)
    index_from = cq_from
    if index is not None:  # the files kept cover the log up to the last one's end (load keeps a prefix)
        index_from = index.files[-1].end_phy_offset if index.files else files[0].file_from_offset
    dispatch_from = min(cq_from, index_from)

    # RocketMQ checks (and may cut) the log from ``trusted`` on: the last three segments after a
    # clean exit, the checkpoint's segment after a crash. The queues may need records from earlier:
    # the walk starts there, but a bad record before ``trusted`` only ends its segment's dispatch.
    trusted = max(0, len(files) - NORMAL_CHECKED) if last_exit_ok else start
    start = min(trusted, _last_file_starting_at_or_before(files, dispatch_from))
    report.start_file = files[start].file_name
    report.checked_from = files[trusted].file_name
    before = {key: cq.max_offset_in_queue() for key, cq in queues.table.items()}
    newest = [0]  # the latest store time of the records kept
    lasts: dict[tuple[str, int], tuple[int, int]] = {}  # of the records walked, not dispatched
    defer = confirm_cut is not None  # the walk only checks: dispatch waits until the end is confirmed

    def on_records(records: Records) -> None:
        report.records_checked += len(records)
        if len(records):
            newest[0] = max(newest[0], int(records.store_ts.max()))
        _note_last_of_each_queue(records, int(np.searchsorted(records.offsets, dispatch_from)), lasts)
        if defer or records.offsets[-1] < dispatch_from:
            return
        if records.offsets[0] < dispatch_from:
            records = records.select(records.offsets >= dispatch_from)
        report.records_dispatched += len(records)
        dispatcher.dispatch_records(records)

    # a queue whose record lands past its end lost units there: it is caught up after the walk
    queues.hold_gaps(True, empty_starts_anywhere=dispatch_from <= files[0].file_from_offset)
    process_offset = files[start].file_from_offset
    i, begin, cut_in = start, 0, ""
    while i < len(files):
        mapped = files[i]
        early = i < trusted  # dispatched as RocketMQ's reput reads it: CRCs unchecked
        pos, reason = walk_segment(
            mapped,
            begin,
            mapped.file_size,
            on_records,
            check_crc=check_crc and not early,
            prop_crc=prop_crc,
            delay_millis=delay_millis,
            checked_only_before=_UNPARSED if defer else dispatch_from,  # records before it are not dispatched
        )
        process_offset = mapped.file_from_offset + pos
        report.bytes_checked += pos - begin
        begin = 0
        if reason == STOP_BLANK and i + 1 < len(files):
            said = int.from_bytes(mapped.mm[pos : pos + 4], "big", signed=True)
            damaged = said != mapped.file_size - pos and holds_data(mapped.mm, pos + 8)  # not the file's end
            if damaged:
                log.error(
                    "commit log: a BLANK marker at %d (%s) says %d bytes where %d are left and data follows it; "
                    "recovery goes on in the next file, as RocketMQ's, so the rest of the segment is neither "
                    "checked nor dispatched",
                    process_offset,
                    mapped.file_name,
                    said,
                    mapped.file_size - pos,
                )
                report.kept_bad_records.append(process_offset)
            i += 1
            continue
        if early and reason != STOP_BLANK:  # flushed long ago: kept, not cut (verify names it)
            skip = mismatched_size(mapped.mm, pos, mapped.file_size) if reason == STOP_BAD else 0
            log.error(
                "commit log: the record at %d (%s) fails its checks; it is before the segment recovery "
                "checks (%s), so the log is kept and %s is not dispatched",
                process_offset,
                mapped.file_name,
                files[trusted].file_name,
                "that record" if skip else "the rest of the segment",
            )
            report.kept_bad_records.append(process_offset)
            if skip:  # its lengths alone disagree: RocketMQ's reput skips that record and goes on
                begin = pos + skip
            else:
                i += 1
            continue
        if reason == STOP_BAD:
            report.stopped_at_bad_record, cut_in = True, mapped.file_name
        break  # a BLANK in the last segment ends the log where it stands, as in RocketMQ

    report.process_offset = process_offset
    where = no_room_end(files[i].file_size - pos)
    report.no_room_for_blank = reason != STOP_BLANK and where is not None
    if report.no_room_for_blank and commit_log.queue.mode != "cow":
        if last_exit_ok:  # refused before recovery wrote anything: the open leaves no abort behind
            remove_abort(os.path.dirname(checkpoint.path))
        raise NoRoomForBlankError(
            f"the segment's records end {where} (offset {process_offset}), leaving no room for the BLANK marker "
            "RocketMQ's writer always leaves: RocketMQ's recovery, as this store's, ends the log there at every "
            "open, so a message stored after it would be lost at the next open. Opening for writing is refused; "
            "copy the readable messages into a new store (rocketstore export, then import into a new one)",
            files[i].path,
        )
    report.dropped_files = [f.file_name for f in files if f.file_from_offset > process_offset]
    # the segments after the one the walk ended in: one starting at the end (a record filled the
    # segment before to its last byte, leaving no room for the BLANK marker) is kept, emptied
    holding = [f.file_name for f in files[i + 1 :] if f.mm is not None and f.mm[:4] != b"\0\0\0\0"]
    if confirm_cut is not None and _may_drop_records(report, holding):
        confirm_cut(report)
    if cut_in:
        log.warning("commit log cut at %d: the record there fails its checks (%s)", process_offset, cut_in)
    if defer:
        report.records_dispatched = _dispatch(commit_log, dispatcher, dispatch_from, process_offset, delay_millis)
    queues.truncate_dirty(process_offset)
    _find_short_queues(queues, lasts, dispatcher.deleted)
    report.queues_behind = _catch_up(commit_log, queues, dispatcher, process_offset, delay_millis)
    report.queue_ends_kept = {
        key: min(before.get(key, 0), cq.max_offset_in_queue()) for key, cq in queues.table.items()
    }
    if index is not None:
        again = index.truncate(process_offset)
        if again is not None:  # index entries for cut records went with their files: index the rest again
            report.reindexed_from = again
            _reindex(commit_log, index, again, process_offset, delay_millis)
    if holding and _in_use(commit_log, checkpoint):
        # a read-only view of a store a process is writing maps its segments one after another:
        # the writer may have filled one and begun the next meanwhile. Nothing on disk is dropped
        log.info(
            "this read-only view ends the commit log at %d; the process holding the store has written "
            "past it (%s), which a later read sees",
            process_offset,
            ", ".join(holding),
        )
    elif holding:  # not just segments made ahead: records past a zeroed or torn one go with them
        log.warning(
            "commit log ends at %d; %d later segment(s) holding records are dropped with it: %s",
            process_offset,
            len(holding),
            ", ".join(holding),
        )
    elif (
        not cut_in
        and max(report.consume_queue_end, report.index_end) > process_offset
        and not _in_use(commit_log, checkpoint)
    ):
        if reason == STOP_BLANK:
            what = "a BLANK marker in the last segment"
        elif pos == files[i].file_size:
            what = "a segment's end, filled to the last byte with no BLANK marker"
        else:
            what = "zeros where a record should start"
        log.warning(
            "commit log ends at %d (%s), though the consume queues and index held records up to %d: the "
            "records past the end are dropped, as RocketMQ's recovery drops them (rocketstore recover "
            "--dry-run counts them)",
            process_offset,
            what,
            max(report.consume_queue_end, report.index_end),
        )
    commit_log.queue.flushed_where = commit_log.queue.committed_where = process_offset
    commit_log.queue.truncate_dirty_files(process_offset)
    commit_log.confirm_offset = process_offset
    report.newest_kept = newest[0]
    _claim_only_what_is_kept(checkpoint, index, newest[0])
    commit_log.store_times_from(newest[0])  # never back across a restart, as within a run
    return report


def _may_drop_records(report: RecoveryReport, holding: list[str]) -> bool:
    """Whether the end the walk found may drop records (``confirm_cut`` is asked): more than the end
    of the data, which a sound store's queues and index do not pass either."""
    end = report.process_offset
    return report.stopped_at_bad_record or bool(holding) or max(report.consume_queue_end, report.index_end) > end


def _in_use(commit_log: CommitLog, checkpoint: StoreCheckpoint) -> bool:
    """A copy-on-write (read-only) view of a store some process holds open (its ``lock``)."""
    return commit_log.queue.mode == "cow" and lock_holder(os.path.dirname(checkpoint.path)) is not None


def _claim_only_what_is_kept(checkpoint: StoreCheckpoint, index: IndexService | None, newest: int) -> None:
    """After a cut the checkpoint may name store times of records that are gone (written before a
    power cut took them); it is brought back to the data kept, so that the next abnormal recovery
    starts early enough and ``verify`` finds it consistent."""
    checkpoint.physic_msg_timestamp = min(checkpoint.physic_msg_timestamp, newest)  # 0: no record kept
    checkpoint.logics_msg_timestamp = min(checkpoint.logics_msg_timestamp, newest)
    if index is not None and index.files:
        checkpoint.index_msg_timestamp = min(checkpoint.index_msg_timestamp, max(f.end_timestamp for f in index.files))


def _note_last_of_each_queue(records: Records, upto: int, lasts: dict[tuple[str, int], tuple[int, int]]) -> None:
    """Note in ``lasts`` the (queue offset, log offset) of each queue's last queued record among
    the first ``upto`` of ``records`` (records walked but not dispatched: recovery then finds the
    queues that lack some of them). One sort per window, not a dict entry per record."""
    if not upto:
        return
    topics, queue_ids = records.topics[:upto], records.queue_ids[:upto]
    queued = sf.goes_to_consume_queue(records.sys_flags[:upto])  # NOT and COMMIT records
    codes = queue_ids.astype(np.int64) & 0xFFFFFFFF
    names = dict.fromkeys(topics)
    if len(names) > 1:
        ids = {t: i for i, t in enumerate(names)}
        codes |= np.fromiter(map(ids.__getitem__, topics), dtype=np.int64, count=upto) << 32
    _, first = np.unique(np.where(queued, codes, -1)[::-1], return_index=True)
    for row in (upto - 1 - first).tolist():
        if queued[row]:
            lasts[(topics[row], int(queue_ids[row]))] = (int(records.queue_offsets[row]), int(records.offsets[row]))


def _find_short_queues(
    queues: ConsumeQueueStore, lasts: dict[tuple[str, int], tuple[int, int]], deleted: dict[str, int]
) -> None:
    """Mark ``behind`` each queue that lacks the last of its records walked before the dispatch
    start (``lasts``): units at its end were lost, or its folder (then made again, empty). A
    deleted topic's records before its deletion belong to no queue."""
    for (topic, queue_id), (queue_offset, phy) in lasts.items():
        if phy < deleted.get(topic, -1) or not queue_folder_ok(topic):  # (a damaged record's: never queued)
            continue
        cq = queues.find_or_create(topic, queue_id)
        if not cq.behind and queue_offset >= cq.max_offset_in_queue():
            cq.mark_behind(queue_offset, phy)


def _catch_up(
    commit_log: CommitLog,
    queues: ConsumeQueueStore,
    dispatcher: Dispatcher,
    end: int,
    delay_millis: tuple[int, ...],
) -> list[str]:
    """Dispatch the log again to the queues the walk found ``behind``, from the lowest of their
    ends (the log's first segment for one that is empty) up to ``end``; the other queues hold
    those records already and skip them. Returns the queues caught up, as ``"topic/queueId"``."""
    queues.hold_gaps(False)
    start = queues.behind_end()
    if start is None:
        return []
    behind = queues.behind()
    for cq in behind:
        cq.behind = False
    _dispatch(commit_log, dispatcher, start, end, delay_millis, index=False)
    return sorted(f"{cq.topic}/{cq.queue_id}" for cq in behind)


def _dispatch(
    commit_log: CommitLog,
    dispatcher: Dispatcher,
    start: int,
    end: int,
    delay_millis: tuple[int, ...],
    *,
    index: bool = True,
) -> int:
    """Dispatch the records in ``[start, end)`` of the log (checked by the walk: CRCs are not
    checked again), reading them as the walk does: a record whose lengths alone disagree is
    skipped, any other bad record ends its segment's dispatch. Returns the records dispatched."""
    count = [0]

    def on_records(records: Records) -> None:
        if records.offsets[-1] < start:
            return
        if records.offsets[0] < start:
            records = records.select(records.offsets >= start)
        count[0] += len(records)
        dispatcher.dispatch_records(records, index=index)

    for mapped in commit_log.queue.files:
        if mapped.end_offset <= start or mapped.file_from_offset >= end:
            continue
        stop, pos = min(end, mapped.end_offset) - mapped.file_from_offset, 0
        while pos < stop:
            pos, reason = walk_segment(
                mapped, pos, stop, on_records, check_crc=False, delay_millis=delay_millis, checked_only_before=start
            )
            skip = mismatched_size(mapped.mm, pos, mapped.file_size) if reason == STOP_BAD else 0
            if not skip:
                break
            pos += skip
    return count[0]


def _reindex(
    commit_log: CommitLog,
    index: IndexService,
    start: int,
    end: int,
    delay_millis: tuple[int, ...],
) -> None:
    """Index the records in ``[start, end)`` of the log again (deleted topics' too, as RocketMQ)."""
    for mapped in commit_log.queue.files:
        if mapped.end_offset <= start or mapped.file_from_offset >= end:
            continue
        begin = max(start, mapped.file_from_offset) - mapped.file_from_offset
        stop = min(end, mapped.end_offset) - mapped.file_from_offset
        walk_segment(mapped, begin, stop, index.build_index, check_crc=False, delay_millis=delay_millis)


def _last_file_starting_at_or_before(files: list[MappedFile], offset: int) -> int:
    for i in range(len(files) - 1, -1, -1):
        if files[i].file_from_offset <= offset:
            return i
    return 0


def abnormal_start(files: list[MappedFile], checkpoint: StoreCheckpoint, index_safe: bool) -> int:
    """The last segment whose first record was stored before the checkpoint's safe time."""
    limit = checkpoint.min_timestamp_index() if index_safe else checkpoint.min_timestamp()
    for i in range(len(files) - 1, -1, -1):
        head = files[i].read(0, 76)
        _total, magic = rec._INT2.unpack_from(head, 0)
        if magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2):
            continue
        flag = rec._INT.unpack_from(head, rec.SYSFLAG_POSITION)[0]
        store_ts = rec._LONG.unpack_from(head, rec.store_timestamp_position(flag))[0]
        if store_ts != 0 and store_ts <= limit:
            return i
    return 0
