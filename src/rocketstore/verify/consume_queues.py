"""Consume-queue checks: every unit against the record it points at, every queued record against
its queue."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from rocketstore.codec.message import StoredMessage
from rocketstore.codec.multi_dispatch import is_copy
from rocketstore.codec.sysflag import (
    goes_to_consume_queue,
)
from rocketstore.codec.topic import NEVER_REMOVED, SCHEDULE_TOPIC
from rocketstore.queues.consume_queue import (
    CQ_STORE_UNIT_SIZE,
    EXT_ADDRESSES_BELOW,
    ConsumeQueue,
    units_of,
    valid_prefix,
)
from rocketstore.queues.consume_queues import deleted_leftover
from rocketstore.store import MessageStore
from rocketstore.verify.log_columns import LogColumns
from rocketstore.verify.report import VerifyReport, past_log_end, problems_at

_PRE_BLANK_SIZE = 0x7FFFFFFF


def check_queues(store: MessageStore, log: LogColumns, report: VerifyReport) -> None:
    covered = np.zeros(len(log.offsets), dtype=bool)  # records whose unit was found and right
    queue_ends: dict[tuple[int, int], int] = {}
    queue_starts: dict[tuple[int, int], int] = {}  # where in the log each queue's first unit points
    topic_ids = {t: i for i, t in enumerate(log.topics)}
    for (topic, queue_id), cq in sorted(store.queues.table.items()):
        report.queues += 1
        tid = topic_ids.get(topic, -1)
        end = _check_queue(cq, tid, log, covered, report, len(store.delay_millis), store.commit_log.read_message)
        if end >= 0 and deleted_leftover(topic, end, store.deleted_topics.table):
            report.note(
                f"consumequeue/{topic}/{queue_id}: a queue of a deleted topic that its deletion did not remove "
                "(cut short): the next writable open removes it"
            )
        if tid >= 0:
            queue_ends[(tid, queue_id)] = end
            first = cq.get_unit(0) if cq.min_offset_in_queue() == 0 else None  # written again from 0
            if first is not None and first[0] >= 0:
                queue_starts[(tid, queue_id)] = first[0]
    if report.multi_dispatch_units:
        report.note(
            f"{report.multi_dispatch_units} units are multi-dispatch copies (INNER_MULTI_DISPATCH, as light message "
            "queues %LMQ%... hold) of records in their own topics' queues: rocketstore reads them, but adds no copies "
            "of the messages it stores (as RocketMQ with enableMultiDispatch off)"
        )
    # a topic with neither a queue nor a topics.json entry was deleted (clean --delete-topic):
    # its records stay in the log until retention deletes them. Not the schedule and
    # transaction-op topics (never deleted), nor any topic when there is no topics.json to say so
    # (a store RocketMQ's broker did not manage): a queue folder gone is then damage
    with_queues = {topic for topic, _ in store.queues.table}
    deletable = [t not in NEVER_REMOVED for t in log.topics]
    if not any(os.path.exists(store.topics.path + suffix) for suffix in ("", ".bak")):
        deletable = [False] * len(log.topics)
    deleted = np.array(
        [
            ok and t not in with_queues and store.topics.find(t) is None
            for t, ok in zip(log.topics, deletable, strict=True)
        ],
        dtype=bool,
    )
    # a queue the topic has not used since it was written again has no (or an empty) consume
    # queue: its records older than the topic's first record since then are the deleted topic's.
    # Only for a topic shown to have been deleted: one of its queues starts again from offset 0
    # after records of its own (a queue folder of a live topic gone is damage, not a deletion)
    recreated = _recreated_topics(log, queue_starts)
    topic_starts: dict[int, int] = {}
    for (tid, _), start in queue_starts.items():
        if deletable[tid] and tid in recreated:
            topic_starts[tid] = min(start, topic_starts.get(tid, start))
    if topic_starts:
        pairs = np.unique((log.topic_ids.astype(np.int64) << 32) | log.queue_ids.astype(np.int64))
        for tid, queue_id in zip((pairs >> 32).tolist(), (pairs & 0xFFFFFFFF).tolist(), strict=True):
            cq = store.queues.find(log.topics[tid], queue_id) if tid in topic_starts else None
            if tid in topic_starts and (cq is None or cq.max_offset_in_queue() == 0):
                queue_starts[(tid, queue_id)] = topic_starts[tid]
    _excuse_batch_cq(store, log, covered, report)
    _check_missing(log, covered, queue_ends, report, deleted, queue_starts, log.deleted(store.deleted_topics.table))


def _excuse_batch_cq(store: MessageStore, log: LogColumns, covered: np.ndarray, report: VerifyReport) -> None:
    """Note, and take as covered, the records of topics topics.json gives BatchCQ queues (RocketMQ
    5 keeps those in batchconsumequeue/, which this store does not read)."""
    batch = set(store.topics.batch_cq_topics())
    ids = [i for i, topic in enumerate(log.topics) if topic in batch]
    if not ids:
        return
    of_batch = np.isin(log.topic_ids, ids) & goes_to_consume_queue(log.sys_flags) & ~covered
    if of_batch.any():
        names = sorted({log.topics[int(t)] for t in np.unique(log.topic_ids[of_batch])})
        report.note(
            f"{int(of_batch.sum())} records of BatchCQ topics ({', '.join(names)}) are not checked against their "
            "queues: RocketMQ 5 keeps those in batchconsumequeue/, which rocketstore does not read"
        )
        covered |= of_batch


def _recreated_topics(log: LogColumns, queue_starts: dict[tuple[int, int], int]) -> set[int]:
    """The topic ids with a queue whose consume queue starts (unit 0) after NOT/COMMIT records of
    that same queue in the log: the queue was removed and written again from offset 0."""
    if not queue_starts or not len(log.offsets):
        return set()
    keys = np.array([(tid << 32) | queue_id for tid, queue_id in queue_starts], dtype=np.int64)
    starts = np.array(list(queue_starts.values()), dtype=np.int64)
    order = np.argsort(keys)
    keys, starts = keys[order], starts[order]
    record_keys = (log.topic_ids.astype(np.int64) << 32) | log.queue_ids.astype(np.int64)
    at = np.minimum(np.searchsorted(keys, record_keys), len(keys) - 1)
    before = (keys[at] == record_keys) & (log.offsets < starts[at]) & goes_to_consume_queue(log.sys_flags)
    return set(np.unique(log.topic_ids[before]).tolist())


def _check_queue(
    cq: ConsumeQueue,
    tid: int,
    log: LogColumns,
    covered: np.ndarray,
    report: VerifyReport,
    levels: int,
    read: Callable[[int], StoredMessage | None],
) -> int:
    """One queue's files up to the first invalid unit; returns where its last record in the log ends.
    ``levels``: how many delay levels messageDelayLevel has; ``read``: the record at an offset."""
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
        end = _check_units(cq, where, tid, first, units, lead, log, covered, report, levels, read)
        queue_end = max(queue_end, end)
    return queue_end


def _check_units(
    cq: ConsumeQueue,
    where: str,
    tid: int,
    first: int,
    units: np.ndarray,
    lead: int,
    log: LogColumns,
    covered: np.ndarray,
    report: VerifyReport,
    levels: int,
    read: Callable[[int], StoredMessage | None],
) -> int:
    """Valid units of ``cq`` (``where`` names it; queue offsets from ``first``; the first ``lead`` are
    pre-blanks) against their records."""
    queue_id = cq.queue_id
    phy = units["phy"].astype(np.int64)
    size = units["size"].astype(np.int64)
    tags = units["tags"].astype(np.int64)
    index = first + np.arange(len(units), dtype=np.int64)
    check = np.ones(len(units), dtype=bool)
    check[:lead] = False
    report.units += int(check.sum())
    check &= phy >= log.min_offset  # below the log's first offset: cleaned up, nothing to compare
    past = check & (phy >= log.end)
    past_log_end(report, where, "unit", past, index, phy, log.end)
    check &= ~past
    report.units_past_cut += int((check & (phy >= log.recovery_end)).sum())
    rows, hit = log.find(phy)
    check &= hit | ~log.in_skipped(phy)  # a unit of a record lost in damage the log scan skipped
    problems_at(report, check & ~hit, lambda i: f"{where} unit {index[i]} -> {phy[i]}: no record starts there")
    check &= hit
    r = rows[check]
    not_queued = ~goes_to_consume_queue(log.sys_flags[r])
    tags_bad = log.tags[r] != tags[check]
    if tid >= 0 and log.topics[tid] == SCHEDULE_TOPIC:
        # a delivery time from an earlier messageDelayLevel: RocketMQ delivers by the unit's time.
        # Any level is a whole number of seconds (a number and s, m, h or d) after the store time.
        delay = tags[check] - log.store_ts[r]
        other_level = tags_bad & (delay > 0) & (delay % 1000 == 0)
        if other_level.any():
            served = (
                "they are delivered by those times"
                if queue_id < levels
                else f"no level serves this queue now (level {queue_id + 1}; messageDelayLevel has {levels}), "
                "so they are not delivered until one does"
            )
            report.note(
                f"{where}: {int(other_level.sum())} units hold delivery times the current messageDelayLevel "
                f"does not give (it changed since they were written); {served}"
            )
            tags_bad &= ~other_level
    ext = tags_bad & (tags[check] < EXT_ADDRESSES_BELOW)  # an address in consumequeue_ext
    if ext.any():
        report.note(
            f"{where}: {int(ext.sum())} units hold consume-queue ext addresses for tags codes "
            "(enableConsumeQueueExt): consumequeue_ext is not read, and a tag-filtered pull decides by the "
            "records' TAGS"
        )
        tags_bad &= ~ext
    elsewhere = (
        (log.topic_ids[r] != tid) | (log.queue_ids[r] != queue_id) | (log.queue_offsets[r] != index[check]) | not_queued
    )
    # a copy's record is of another topic: a queue of its own topic shifted by damage reads no record
    copies = _multi_dispatch_copies(
        cq, phy[check], index[check], elsewhere & ~not_queued & (log.topic_ids[r] != tid), read
    )
    report.multi_dispatch_units += int(copies.sum())
    elsewhere &= ~copies
    report.units_record_elsewhere += int(elsewhere.sum())  # the unit, or the record's header, is damaged
    bad = (log.sizes[r] != size[check]) | tags_bad | elsewhere
    covered[r[~bad & ~copies]] = True  # a copy's record belongs to its own queue, which must hold it
    unit = (index, phy, size, tags, rows)
    problems_at(report, np.flatnonzero(check)[bad], lambda i: _unit_mismatch(log, where, tid, queue_id, unit, i))
    in_log = np.flatnonzero((phy < log.end) & (np.arange(len(units)) >= lead))
    if not len(in_log):
        return -1
    last = int(in_log[-1])
    return int(phy[last] + size[last])


def _multi_dispatch_copies(
    cq: ConsumeQueue,
    phys: np.ndarray,
    index: np.ndarray,
    candidates: np.ndarray,
    read: Callable[[int], StoredMessage | None],
) -> np.ndarray:
    """Which ``candidates`` (units whose record is in another queue) are multi-dispatch copies: the
    record's INNER_MULTI_DISPATCH gives it this queue and this unit's queue offset."""
    copies = np.zeros(len(candidates), dtype=bool)
    for i in np.flatnonzero(candidates).tolist():
        msg = read(int(phys[i]))
        copies[i] = msg is not None and is_copy(msg.properties, cq.topic, cq.queue_id, int(index[i]), msg.queue_id)
    return copies


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
    if not goes_to_consume_queue(int(log.sys_flags[row])):
        diffs.append("the record is a prepared or rollback one")
    return f"{where} unit {index} -> {phy}: " + "; ".join(diffs)


def _check_missing(
    log: LogColumns,
    covered: np.ndarray,
    queue_ends: dict[tuple[int, int], int],
    report: VerifyReport,
    deleted: np.ndarray,
    queue_starts: dict[tuple[int, int], int],
    recorded: np.ndarray,
) -> None:
    """Every NOT/COMMIT record must be in its queue at its queue offset. Records of ``deleted``
    topics (by topic id), records older than their queue's first unit where the topic was
    deleted and written again (``queue_starts``: the commit-log offset each queue starts at), and
    ``recorded`` ones (by record: below the end config/deletedTopics.json holds for their topic)
    are noted instead."""
    missing = np.flatnonzero(goes_to_consume_queue(log.sys_flags) & ~covered)
    if len(missing) and len(deleted):
        earlier = np.array(
            [
                int(o) < queue_starts.get((int(t), int(q)), -1)
                for o, t, q in zip(log.offsets[missing], log.topic_ids[missing], log.queue_ids[missing], strict=True)
            ],
            dtype=bool,
        )
        of_deleted = deleted[log.topic_ids[missing]] | earlier | recorded[missing]
        if of_deleted.any():
            names = sorted({log.topics[int(t)] for t in np.unique(log.topic_ids[missing[of_deleted]])})
            report.note(
                f"{int(of_deleted.sum())} records of deleted topics ({', '.join(names)}: no consume queue and "
                "no topics.json entry, records older than the topic's queue written since, or below the log end "
                "config/deletedTopics.json holds for the topic) stay in the log until retention deletes them"
            )
            missing = missing[~of_deleted]
    if not len(missing):
        return
    if not report.abort_file:
        problems_at(
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
    problems_at(
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
