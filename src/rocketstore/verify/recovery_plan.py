"""What recovery would do to the commit log, learnt before anything changes (``rocketstore recover``
asks first): the store's own recovery run in memory (a read-only open, as export's), then
verify's segment scan from where that recovery ends the log: what is wrong there, and the records
after it that pass every check, CRC included, which a cut there drops.

Records past the end may be stale: RocketMQ's cut (truncateDirtyFiles) only moves positions, so
the records after it stay on disk until new ones overwrite them, and a store that was cut once
and then got fewer new bytes than the old tail keeps them past its end. They are told from lost
messages by their queue offset, below their queue's end at the cut (the offset was given again to
a record kept). A record whose queue offset continues past its queue's end counts as a message the
cut loses even when it was stored before the newest record kept: store times are no proof of order
(a clock set back between runs; RocketMQ never orders them), so such records are only said to be
maybe stale, and recover still asks for --force. PREPARED and ROLLBACK records, which enter no
queue (their queue offset is always 0), cannot be told so: past the end they count as lost.

An open for writing that recovers the store refuses such a cut as recover does without --force
(``lossy_cut_guard``): the command line's writing commands and the Spark sink (``cut_refused``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rocketstore.codec.scan import STOP_BLANK
from rocketstore.codec.sysflag import goes_to_consume_queue
from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptStoreError
from rocketstore.files.mapped_file import MappedFile, holds_data
from rocketstore.log.recovery import NORMAL_CHECKED, ConfirmCut, RecoveryReport
from rocketstore.meta.lockfile import held
from rocketstore.store import MessageStore
from rocketstore.verify.segment_scan import SegmentScan, diagnose, scan_segment, segment_label


@dataclass
class BadRecord:
    """Where recovery ends the log while something follows: a record that fails its checks, or
    zeros where a record should start."""

    file: str  # the segment's path, relative to the store's folder when inside it (``commitlog/<segment>``)
    position: int
    offset: int
    problem: str
    body_crc_only: bool = False  # a well-formed record whose body CRC alone does not match

    def describe(self) -> str:
        return f"{self.file}@{self.position} (offset {self.offset}): {self.problem}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "position": self.position,
            "offset": self.offset,
            "problem": self.problem,
            "bodyCrcOnly": self.body_crc_only,
        }


@dataclass
class RecoveryPlan:
    """What an open for writing would do to the commit log (``recovery``: its in-memory run)."""

    root: str
    recovery: RecoveryReport
    segments: int  # commit-log segments before recovery
    checked_from: str | None  # the first segment recovery checks (None: no segment)
    unchecked: int  # segments before it, which recovery does not check (nor cut)
    end: int  # where recovery ends the log
    bad: BadRecord | None = None  # what is at ``end`` (None: the end of the data)
    intact_records: int = 0  # records past ``end`` that pass every check: recovery drops them
    intact_bytes: int = 0
    stale_records: int = 0  # records past ``end`` left by an earlier cut (see the module): no data lost
    stale_bytes: int = 0
    maybe_stale: int = 0  # of the intact records, those stored before the newest record kept
    crc_keeps_all: bool = False  # with checkCRCOnRecover=false recovery would drop no intact record
    kept_bad: list[int] = field(default_factory=list)  # bad records recovery does not cut at: kept

    @property
    def loses_data(self) -> bool:
        """Recovery would drop records that pass their checks (more than a torn tail)."""
        return self.intact_records > 0

    def checked(self) -> str:
        """What recovery checks, in words."""
        if self.checked_from is None:
            return "nothing (no commit-log segment)"
        if self.recovery.abnormal:
            return f"every segment from {self.checked_from} on (after a crash: from the checkpoint's segment)"
        if self.unchecked:
            return (
                f"the last {self.segments - self.unchecked} of {self.segments} segments, from {self.checked_from} "
                "(after a clean shutdown, as RocketMQ)"
            )
        return f"all {self.segments} segment(s) (after a clean shutdown, the last {NORMAL_CHECKED} are checked)"

    def stale(self) -> str | None:
        """The stale records of an earlier cut past the end, in words (None: there are none)."""
        if not self.stale_records:
            return None
        return (
            f"{self.stale_records} stale record(s) ({self.stale_bytes} bytes) of an earlier cut follow, left on disk "
            "as RocketMQ's cut leaves them (their queue offsets were given again to records kept): they go with "
            "the cut, no message is lost"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked(),
            "checkedFrom": self.checked_from,
            "uncheckedSegments": self.unchecked,
            "logEnd": self.end,
            "badRecord": None if self.bad is None else self.bad.to_dict(),
            "intactRecordsAfter": self.intact_records,
            "intactBytesAfter": self.intact_bytes,
            "staleRecordsAfter": self.stale_records,
            "staleBytesAfter": self.stale_bytes,
            "maybeStaleOfIntact": self.maybe_stale,
            "checkCrcOffKeepsAll": self.crc_keeps_all,
            "keptBadRecords": list(self.kept_bad),
        }


def plan_recovery(root: str, config: StoreConfig, *, last_exit_ok: bool | None = None) -> RecoveryPlan:
    """Run the store's recovery in memory and scan the log from where it ends it (nothing on disk
    changes); its log messages are held back (the caller reports the plan). ``last_exit_ok``: plan
    the recovery after a clean exit (True) or a crash (False) whatever ``abort`` says (an open for
    writing has written its own)."""
    with quiet_store_logs(), MessageStore.open(root, config, read_only=True, last_exit_ok=last_exit_ok) as store:
        report = store.recovery
        queue_ends = {key: cq.max_offset_in_queue() for key, cq in store.queues.table.items()}
    assert report is not None  # a read-only open recovers
    with quiet_store_logs(), MessageStore.open(root, config, read_only=True, recover=False) as raw:
        files = list(raw.commit_log.queue.files)
        first = _first_checked(files, report)
        plan = RecoveryPlan(
            raw.root,
            report,
            len(files),
            None if first is None else files[first].file_name,
            first or 0,
            report.process_offset,
            kept_bad=list(report.kept_bad_records),
        )
        _look_past_end(plan, files, raw.delay_millis, config.force_verify_prop_crc, queue_ends)
    return plan


def lossy_recovery(root: str, config: StoreConfig) -> RecoveryPlan | None:
    """The plan of a recovery that would drop intact records (``loses_data``), for a job that
    writes past where it ends the log (a rebuild); None when it would drop none, or when the store
    cannot be opened to plan it (queue or index files a rebuild is there to replace)."""
    try:
        plan = plan_recovery(root, config)
    except CorruptStoreError:
        return None
    return plan if plan.loses_data else None


def cut_refused(plan: RecoveryPlan) -> CorruptStoreError:
    """The library's refusal of an open for writing whose recovery would drop intact records (a
    Spark write's), in ``recover``'s words: what would be lost, why, and the ways on."""
    assert plan.bad is not None
    root = plan.root
    crc = (
        "; or give checkCRCOnRecover=false to keep that record and every one after it (only its body CRC fails)"
        if plan.crc_keeps_all
        else ""
    )
    return CorruptStoreError(
        "opening the store for writing recovers it first, and its recovery would cut the commit log at offset "
        f"{plan.end} and drop the {plan.intact_records} intact record(s) ({plan.intact_bytes} bytes) after it; "
        f"nothing was changed. The cause: {plan.bad.describe()}. `rocketstore recover --dry-run {root}` shows "
        f"them; `rocketstore recover --force {root}` (with the same settings, as --set) cuts the log there as "
        f"RocketMQ does, those records lost: copy the store first (cp -a {root} {root}.bak){crc}",
        root,
    )


Refusal = Callable[[RecoveryPlan], BaseException]  # the error refusing a recovery that drops intact records
Planner = Callable[..., RecoveryPlan]  # plan_recovery's signature


def lossy_cut_guard(
    root: str, config: StoreConfig, refused: Refusal = cut_refused, *, plan: Planner = plan_recovery
) -> ConfirmCut | None:
    """What an open for writing gives ``MessageStore.open`` so that it refuses a recovery that drops
    intact records, as ``rocketstore recover`` refuses it without --force: ``refused(plan)`` is
    raised, nothing changed. The open asks only when its recovery would end the log where records
    may follow (a sound store is not planned). After a crash (``abort``) recovery writes before it
    knows where the log ends, so the plan is made first, under the store's lock (StoreLockedError
    when another process holds it): refused, or None when the recovery drops no intact record.
    ``plan`` makes the plan (``plan_recovery``)."""

    def refuse_if_lossy(last_exit_ok: bool | None = None) -> None:
        found = plan(root, config, last_exit_ok=last_exit_ok)
        if found.loses_data:
            raise refused(found)

    if not os.path.exists(os.path.join(root, "abort")):  # planned as opened: its own abort is no crash's
        return lambda report: refuse_if_lossy(last_exit_ok=not report.abnormal)
    with held(root):
        refuse_if_lossy()
    return None


def _first_checked(files: list[MappedFile], report: RecoveryReport) -> int | None:
    if not files:
        return None
    names = [f.file_name for f in files]
    return names.index(report.checked_from) if report.checked_from in names else 0


def _look_past_end(
    plan: RecoveryPlan,
    files: list[MappedFile],
    delay: tuple[int, ...],
    prop_crc: bool,
    queue_ends: dict[tuple[str, int], int],
) -> None:
    """What is at the end recovery finds and what follows it (segments holding only zeros there
    are not scanned)."""
    end = plan.end
    later = [f for f in files if f.end_offset > end]
    if not any(_holds_data(f, max(end - f.file_from_offset, 0)) for f in later):
        return
    scans = [scan_segment(f, delay, 0, prop_crc=prop_crc) for f in later]
    kept = [s.part.store_ts[s.part.offsets < end] for s in scans]
    newest = max([plan.recovery.newest_kept, *(int(ts.max()) for ts in kept if len(ts))])
    live = [_live(s, end, queue_ends) for s in scans]
    for scan, alive in zip(scans, live, strict=True):
        stale = (scan.part.offsets >= end) & ~alive
        plan.intact_records += int(alive.sum())
        plan.maybe_stale += int((alive & (scan.part.store_ts < newest)).sum())
        plan.intact_bytes += int(scan.part.sizes[alive].sum())
        plan.stale_records += int(stale.sum())
        plan.stale_bytes += int(scan.part.sizes[stale].sum())
    holder = later[0]
    pos = end - holder.file_from_offset
    if plan.recovery.stopped_at_bad_record:
        why, _claimed, trusted = diagnose(holder, pos, prop_crc)
        plan.bad = BadRecord(segment_label(holder.path, plan.root), pos, end, why, trusted and not prop_crc)
    elif pos == 0 and files.index(holder) > 0 and bool((scans[0].part.offsets == end).any()):
        # a record starts at the end: the one before it fills its segment
        before = files[files.index(holder) - 1]
        plan.bad = BadRecord(
            segment_label(before.path, plan.root),
            before.file_size,
            end,
            "a record fills the segment to its last byte, leaving no room for the BLANK marker: RocketMQ's "
            "recovery ends the log at the segment's end (the records of the segments after it are dropped)",
        )
    else:
        blank = next((s for s in scans[0].stops if s.pos == pos and s.reason == STOP_BLANK), None)
        follow = "data follows" if plan.intact_records else "only stale records of an earlier cut follow"
        what = (
            f"zeros where a record should start ({follow} them)"
            if blank is None
            else f"a BLANK marker that says {blank.blank_size} bytes where {holder.file_size - pos} are left, in "
            f"the last segment, where RocketMQ's recovery ends the log ({follow} it)"
        )
        plan.bad = BadRecord(segment_label(holder.path, plan.root), pos, end, what)
    plan.crc_keeps_all = plan.bad.body_crc_only and _intact_after_other_damage(scans, live, end) == 0


def _live(scan: SegmentScan, end: int, queue_ends: dict[tuple[str, int], int]) -> np.ndarray:
    """Per record of a segment: past ``end`` and not stale (see the module): its queue offset is not
    below its queue's end as recovery leaves it (``queue_ends``; a queue that has none ends at -1).
    A PREPARED or ROLLBACK record enters no queue and has queue offset 0, which proves nothing: it
    is live wherever it lies past ``end``."""
    part = scan.part
    after = part.offsets >= end
    if not after.any():
        return after
    at = np.flatnonzero(after)
    pairs = zip(part.topic_ids[at].tolist(), part.queue_ids[at].tolist(), strict=True)
    ends = np.full(len(after), -1, dtype=np.int64)
    ends[at] = [queue_ends.get((part.topics[t], q), -1) for t, q in pairs]
    return after & ((part.queue_offsets >= ends) | ~goes_to_consume_queue(part.sys_flags))


def _intact_after_other_damage(scans: list[SegmentScan], live: list[np.ndarray], end: int) -> int:
    """Records that pass every check past the first damage at or after ``end`` other than a body
    CRC (where recovery with checkCRCOnRecover=false would end the log); stale ones not counted."""
    for scan in scans:
        for stop in scan.stops:
            at = scan.base + stop.pos
            if at < end or stop.reason == STOP_BLANK or stop.skipped:  # skipped: only its CRC fails
                continue
            return sum(int(((s.part.offsets >= at) & alive).sum()) for s, alive in zip(scans, live, strict=True))
    return 0


def _holds_data(mapped: MappedFile, start: int) -> bool:
    """Whether a byte of a segment from ``start`` on is not zero."""
    if not mapped.hold():
        return False
    try:
        return holds_data(mapped.mm, start)
    finally:
        mapped.release()


@contextlib.contextmanager
def quiet_store_logs() -> Iterator[None]:
    """The store's log messages held back: an in-memory recovery's "commit log cut at N" is for
    whoever opened the store to report (the plan; a command's later writable open)."""
    logger = logging.getLogger("rocketstore")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)
