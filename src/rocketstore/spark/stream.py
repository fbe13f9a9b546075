"""Streaming reads: ``spark.readStream.format("rocketstore").load(STORE)``.

Offsets are per queue, Kafka style: ``{"TopicA": {"0": 23, "1": 7}}`` holds the next offset to
read of every queue (the checkpoint keeps them, so a restarted query resumes exactly there).
``startingOffsets`` (default ``latest``) / ``startingTimestamp`` apply to a new query (JSON
``startingOffsets`` must name every selected queue the store has then, as Kafka's source requires:
-2 for earliest, -1 for latest); queues that appear later start at their earliest offset (above
0, retention removed messages of it before the stream saw it: data loss, as Kafka's "Added
partition ... starts from Y instead of 0"). A query started from ``startingTimestamp`` never
delivers a message stored before it: a queue whose messages are all older starts at its max
offset, and the rows are filtered by store time (the offsets keep it as ``@startingTimestamp``, so a restart
filters too). Keys starting with ``@`` or ``(`` (never in a topic name) are not queues: ``@start``
in batch 0's end offset keeps where batch 0 starts (Spark keeps only its end, and replays a batch
0 that did not commit from a new ``initialOffset``). A
starting offset past a queue's end is kept (also listed under ``"(ahead)"`` until the queue gets
there, so it is not taken for a queue that started over): nothing below it is read. A stream
has no end: ``endingOffsets`` and ``endingTimestamp`` are refused. ``maxOffsetsPerTrigger`` splits
a trigger's budget across queues in proportion to their backlog, at least one message for each
queue that has any.
Messages removed by retention before they were read fail the query (``failOnDataLoss``, the
default) or are skipped with a warning. So does a topic deleted and created again since the
offsets were planned: every offset keeps the deletion marks of the topics in it (``@deleted``, the
log end at each topic's last deletion, from ``config/deletedTopics.json``), and a topic of the
start whose mark changed has new queues whose offsets started over, whatever they are now; with
failOnDataLoss=false they are read from their earliest offsets (``partitions`` tells the same from
the start's and the end's marks, so a replayed batch reads the same). A queue that started over
otherwise (the store replaced by an older copy): a checkpointed offset above the queue's max
offset fails the query, or (failOnDataLoss=false) the stream warns and goes on from the queue's
max offset, as Kafka's source does when a partition's offsets went backwards (the batch's end
offset is the queue's latest, below its start, and the batch reads nothing of it): an older copy
of the store holds only messages that were delivered already. A queue a recovery cut back below
the offset (a torn record after a crash) that puts then took past it again is told by ``@last``:
the commit-log offset and store time of the message below each queue's offset, kept in every
offset, and another message there now is data loss (failOnDataLoss=false: the stream goes on from
its offset, the messages written below it since the cut unread). A queue in the offsets that is gone
from the store (its topic deleted) is data loss too, as in Kafka, even if the stream had read all
of it (the store keeps no trace of its max offset); with failOnDataLoss=false it is dropped from
the offsets, so a topic created again is a new queue, read from its earliest offset.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rocketstore.errors import InvalidArgumentError
from rocketstore.spark.options import EARLIEST, ReadOptions, parse_options
from rocketstore.spark.plan import (
    ReadPartition,
    Snapshot,
    changed_marks,
    check_start,
    data_loss,
    deletion_marks,
    marked_snapshot,
    offset_of,
    queue_partitions,
    unknown_queues,
    unlisted_queues,
    unmatched_topics,
)
from rocketstore.spark.read import read_partition
from rocketstore.spark.schema import requested_columns

Key = tuple[str, int]
log = logging.getLogger(__name__)


# Keys of the offset JSON that are not topics ('(' and '@' never occur in a topic name)
AHEAD = "(ahead)"  # the queues whose offset is a startingOffsets past their end
INITIAL = "@initial"  # true in what initialOffset returns: the start of a new query's batch 0
START = "@start"  # in batch 0's end offset: the offsets batch 0 starts at
FROM_TS = "@startingTimestamp"  # in every offset of a query started from startingTimestamp (epoch ms)
DELETED = "@deleted"  # the store's deletion marks (deletedTopics.json) of the offsets' topics, when planned
LAST = "@last"  # per queue, [commit-log offset, store time] of the message below its offset, when planned


def _reserved(key: str) -> bool:
    return key[:1] in ("(", "@")


def to_json(offsets: dict[Key, int], ahead: set[Key] | None = None) -> dict[str, dict[str, Any]]:
    """Per-queue offsets as the checkpoint keeps them (sorted, so equal offsets dump equally);
    ``ahead`` also under ``AHEAD``: starting offsets the queue has not reached yet."""
    out: dict[str, dict[str, Any]] = {}
    for topic, queue_id in sorted(offsets):
        out.setdefault(topic, {})[str(queue_id)] = int(offsets[(topic, queue_id)])
    if ahead:
        out[AHEAD] = to_json({k: offsets[k] for k in ahead})
    return out


def from_json(obj: dict[str, Any] | None) -> dict[Key, int]:
    """The per-queue offsets of an offset JSON (its reserved keys left out)."""
    out: dict[Key, int] = {}
    for topic, queues in (obj or {}).items():
        if not _reserved(topic):
            for queue_id, offset in queues.items():
                out[(topic, int(queue_id))] = int(offset)
    return out


def ahead_of(obj: dict[str, Any] | None) -> set[Key]:
    """The queues of ``obj`` whose offset is a starting offset they have not reached yet."""
    return set(from_json((obj or {}).get(AHEAD)))


def rate_limit(start: dict[Key, int], end: dict[Key, int], earliest: dict[Key, int], limit: int) -> dict[Key, int]:
    """Kafka's split of ``limit`` messages: each queue gets its share of the total backlog, rounded
    down, or one message when its share is below one."""
    sizes = {k: e - start.get(k, earliest.get(k, 0)) for k, e in end.items()}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return end
    out = {}
    for key, until in end.items():
        begin = start.get(key, earliest.get(key, 0))
        size = sizes[key]
        if size <= 0:
            out[key] = until
            continue
        share = limit * (size / total)
        out[key] = min(until, begin + (math.ceil(share) if share < 1 else math.floor(share)))
    return out


def _started_over(key: Key, offset: int, lo: int, hi: int, what: str = "checkpointed offset") -> str:
    return (
        f"{key[0]}/{key[1]}: the {what} {offset} is above the queue's max offset {hi} (min {lo}): the queue "
        f"started over (its topic deleted and created again, or the store replaced by an older copy), and "
        f"messages of it may have been missed"
    )


def last_read(snap: Snapshot, offsets: dict[Key, int], bounds: dict[Key, tuple[int, int]]) -> dict[str, Any]:
    """Per queue, [commit-log offset, store time] of the message below its offset in ``offsets``
    (``LAST``, as JSON keeps it): the next batch tells by it a queue that recovery cut back below
    that offset and puts then took past it again (its max offset alone cannot)."""
    store = snap.store
    out: dict[str, Any] = {}
    for (topic, queue_id), offset in sorted(offsets.items()):
        lo, hi = bounds.get((topic, queue_id), (0, 0))
        if lo < offset <= hi:
            at = store.get_message_store_timestamp(topic, queue_id, offset - 1)
            if at >= 0:
                phy = store.get_commit_log_offset_in_queue(topic, queue_id, offset - 1)
                out.setdefault(topic, {})[str(queue_id)] = [phy, at]
    return out


def rewritten(snap: Snapshot, start: dict[str, Any], begin: dict[Key, int], bounds: dict[Key, tuple[int, int]]) -> str:
    """The queues of ``begin`` whose message below their offset is not the one ``start``'s
    ``LAST`` says the stream read (a recovery cut the queue back, and puts wrote it again), in
    words; "" when there is none."""
    recorded = start.get(LAST) or {}
    now = last_read(snap, {k: v for k, v in begin.items() if str(k[1]) in recorded.get(k[0], {})}, bounds)
    changed = [
        f"{topic}/{queue_id}: the message at offset {begin[(topic, int(queue_id))] - 1}, the last the stream read, is "
        f"not the one it read (commit-log offset and store time {was} then, {now[topic][queue_id]} now)"
        for topic, queues in sorted(recorded.items())
        for queue_id, was in sorted(queues.items())
        if queue_id in now.get(topic, {}) and now[topic][queue_id] != was
    ]
    if not changed:
        return ""
    return (
        "; ".join(changed) + ": recovery cut the queue back below the stream's offset (a torn record after a "
        "crash) and new messages took it past it again; those stored below the stream's offset were not read"
    )


def deleted_since(start: dict, marks: dict[str, Any] | None, begin: dict[Key, int]) -> list[str]:
    """Topics of ``begin`` deleted since ``start`` was planned: their deletion mark is not the one
    ``start`` holds. None known for a ``start`` planned before the marks were kept."""
    before = start.get(DELETED)
    if before is None or marks is None:
        return []
    return changed_marks(before, marks, {topic for topic, _queue in begin})


def _recreated(topic: str, keys: list[Key]) -> str:
    queues = ", ".join(str(q) for _t, q in keys)
    return (
        f"{topic} (queues {queues}): the topic was deleted and created again since the last batch, and its "
        f"queue offsets started over: messages of it stored before the deletion may have been missed"
    )


def _gone(keys: list[Key]) -> str:
    names = ", ".join(f"{t}/{q}" for t, q in keys[:20]) + (f", ... ({len(keys)} in all)" if len(keys) > 20 else "")
    return (
        f"{names}: the queues are gone from the store (their topic deleted), and messages of them may have "
        f"been missed (the store keeps no trace of a deleted queue's max offset: whether the stream had read "
        f"all of it is unknown)"
    )


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver (one long-lived process); tasks read as batch reads do."""

    def __init__(self, options: Any, schema: Any) -> None:
        # an option refused here is raised by the first call instead: PySpark 4.3's runner stops the
        # reader in a finally, and a constructor's error ended in its UnboundLocalError ('reader')
        self._refused: Exception | None = None
        try:
            self._opts = parse_options(options, streaming=True)
            self._opts.columns = requested_columns(schema)
        except Exception as exc:
            self._refused = exc
        self.target: dict[Key, int] | None = None  # availableNow: the end fixed when the query started
        self.latest: dict[Key, int] | None = None
        # latestOffset's view of the store, kept for the partitions of the same micro-batch: an
        # open recovers the store (a walk of its last segments), once a trigger rather than twice
        self._snapshot: Snapshot | None = None

    def _fresh_snapshot(self) -> Snapshot:
        self._drop_snapshot()
        self._snapshot = marked_snapshot(self.opts)
        return self._snapshot

    def _drop_snapshot(self) -> None:
        snap, self._snapshot = self._snapshot, None
        if snap is not None:
            snap.close()

    def _bounds(self, snap: Snapshot) -> tuple[dict[Key, tuple[int, int]], set[Key]]:
        """(min, max) offsets of the selected queues, and the keys of every queue in the store."""
        sel = self.opts.selection
        every = snap.all_bounds()
        return {k: b for k, b in every.items() if sel.topic_ok(k[0]) and sel.queue_ok(*k)}, set(every)

    @property
    def opts(self) -> ReadOptions:
        """The parsed options; the error that refused them, raised again."""
        if self._refused is not None:
            raise self._refused
        return self._opts

    def initialOffset(self) -> dict:
        opts = self.opts
        sel = opts.selection
        out: dict[Key, int] = {}
        ahead: set[Key] = set()  # past the queue's end: kept, read once the queue gets there
        with marked_snapshot(opts) as snap:
            unmatched = unmatched_topics(snap, sel)
            if unmatched:  # a stream reads topics created later
                log.warning("%s: the stream reads them once they are created", unmatched)
            # the user's startingOffsets (never a checkpoint's: Spark asks for this offset only
            # for a new query)
            unknown = unknown_queues(snap, opts, streaming=True)
            if unknown:
                log.warning("%s; a queue created later is read from its earliest offset", unknown)
            unlisted = unlisted_queues(snap, opts, streaming=True)
            if unlisted:  # as Kafka's source: JSON offsets name every queue the stream starts with
                raise InvalidArgumentError(unlisted)
            for (topic, queue_id), (lo, hi) in snap.all_bounds().items():
                if not sel.topic_ok(topic) or not sel.queue_ok(topic, queue_id):
                    continue
                if opts.starting_ts is not None:
                    out[(topic, queue_id)] = max(lo, snap.offset_for_time(topic, queue_id, opts.starting_ts))
                elif isinstance(opts.starting, dict):
                    given = opts.starting.get(topic, {}).get(queue_id, EARLIEST)
                    offset = offset_of(given, lo, hi)
                    fail = opts.fail_on_data_loss
                    out[(topic, queue_id)] = check_start(topic, queue_id, offset, lo, max(offset, hi), fail)
                    if offset > hi:
                        ahead.add((topic, queue_id))
                else:
                    out[(topic, queue_id)] = lo if opts.starting == "earliest" else hi
            deleted = deletion_marks(snap, out)
        marks = {INITIAL: True} if opts.starting_ts is None else {INITIAL: True, FROM_TS: opts.starting_ts}
        return {**to_json(out, ahead), **marks, DELETED: deleted}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with Snapshot(self.opts.path, self.opts.config) as snap:
            self.target = {k: hi for k, (_lo, hi) in self._bounds(snap)[0].items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch. Batch 0's end also holds its start (``START``): Spark keeps
        only the end in the checkpoint, and replays a batch 0 that did not commit from a new
        initialOffset, which (latest, or earliest after retention) is not where it started."""
        snap = self._fresh_snapshot()
        bounds, present = self._bounds(snap)
        begin, ahead = from_json(start), ahead_of(start)
        self.latest = {k: hi for k, (_lo, hi) in bounds.items()}
        for topic in deleted_since(start, deletion_marks(snap), begin):
            again = sorted(k for k in begin if k[0] == topic and k in present)
            if again:  # created again (if not, it is gone: below): read as new queues, from their earliest
                then = f"read {topic} as created again, from its earliest offsets"
                data_loss(_recreated(topic, again), self.opts.fail_on_data_loss, then)
                for key in again:
                    del begin[key]
                    ahead.discard(key)  # a starting offset past the old queue's end means nothing now
        cut_back = rewritten(snap, start, begin, bounds)
        if cut_back:
            data_loss(cut_back, self.opts.fail_on_data_loss, "go on from the stream's offsets")
        gone = sorted(set(begin) - present)
        if gone:  # as Kafka's "... are gone. Some data may have been missed"
            then = "drop them from the stream's offsets (a topic created again is read from its earliest offset)"
            data_loss(_gone(gone), self.opts.fail_on_data_loss, then)
        end = {k: v for k, v in begin.items() if k in present}
        for key, (lo, hi) in bounds.items():
            if self.target is not None and key not in self.target:
                continue  # appeared after an availableNow query started: the next run reads it
            until = hi if self.target is None else min(hi, self.target[key])
            first = begin.get(key, lo)
            if first > hi and key in ahead:  # a starting offset the queue has not reached yet
                end[key] = first
            elif first > hi:  # the queue started over below the checkpoint's offset
                then = f"go on from the queue's max offset {hi} (what it holds below that is not read)"
                data_loss(_started_over(key, first, lo, hi), self.opts.fail_on_data_loss, then)
                end[key] = until  # below the start: the batch reads nothing of it, the next one starts there
            else:
                end[key] = max(first, until)
        if isinstance(limit, ReadMaxRows):
            earliest = {k: lo for k, (lo, _hi) in bounds.items()}
            # the budget counts only messages the store holds: not those retention removed
            held = {k: max(v, bounds[k][0]) if k in bounds else v for k, v in begin.items()}
            end = rate_limit(held, end, earliest, limit.max_rows)
        still_ahead = {k for k in ahead if k in end and (k not in bounds or end[k] > bounds[k][1])}
        marks = deletion_marks(snap, end)  # of the stream's topics only: another's deletion plans no batch
        last = last_read(snap, end, bounds)
        if end == from_json(start) and marks == start.get(DELETED) and not cut_back:  # no batch: Spark calls no
            self._drop_snapshot()  # partitions, so nothing holds the store's files
            if still_ahead == ahead and not start.get(INITIAL):
                return start  # as given: Spark compares the JSON, and plans no batch
        out = to_json(end, still_ahead)
        if start.get(INITIAL):
            out[START] = {**to_json(begin, ahead), DELETED: start.get(DELETED)}
        if start.get(FROM_TS) is not None:
            out[FROM_TS] = start[FROM_TS]
        out[DELETED] = marks
        if last:
            out[LAST] = last
        return out

    def reportLatestOffset(self) -> dict | None:
        return None if self.latest is None else to_json(self.latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        opts = self.opts
        # batch 0 starts where its end says (a replay's start is a new initialOffset)
        first = end.get(START, start)
        begin, until = from_json(first), from_json(end)
        for topic in deleted_since(first, end.get(DELETED), begin):  # created again: new queues (latestOffset)
            begin = {k: v for k, v in begin.items() if k[0] != topic}
        ranges = []
        # the snapshot latestOffset chose ``end`` by (a replayed batch, planned with no latestOffset
        # before it, opens its own)
        snap = self._snapshot or marked_snapshot(opts)
        self._snapshot = None
        with snap:
            # a replay (its own snapshot): a topic deleted since the batch was planned has new queues,
            # whose offsets are not the planned ones: its range is not read (the next batch reads
            # the topic created again from its earliest offsets)
            for topic in deleted_since(end, deletion_marks(snap), until):
                keys = sorted(k for k in until if k[0] == topic)
                again = any(k in snap.table for k in keys)
                text = f"{_recreated(topic, keys) if again else _gone(keys)}, after this batch was planned"
                data_loss(text, opts.fail_on_data_loss, f"read nothing of {topic} in this batch")
                until = {k: v for k, v in until.items() if k[0] != topic}
            for key in sorted(until):
                lo, hi = snap.bounds(*key)
                e = until[key]
                if key in begin and e <= begin[key]:
                    continue  # nothing to read, or the queue started over (latestOffset said so)
                if key in begin:
                    s = check_start(key[0], key[1], begin[key], lo, max(hi, e), opts.fail_on_data_loss, "stored offset")
                else:  # a new queue: from its earliest, which is 0 unless retention removed messages of it
                    s = lo
                    if lo > 0:  # Kafka's "Added partition ... starts from Y instead of 0"
                        text = (
                            f"{key[0]}/{key[1]}: the queue, new to the stream, starts at offset {lo} instead of 0: "
                            f"{lo} messages were removed from the store (retention) before the stream saw the queue"
                        )
                        data_loss(text, opts.fail_on_data_loss, f"read it from its minimum offset {lo}")
                if e > hi:
                    if key in snap.table:  # what latestOffset saw is gone: never checkpoint past what is read
                        text = _started_over(key, e, lo, hi, "end offset")
                        data_loss(text, opts.fail_on_data_loss, f"read up to {hi}")
                    e = hi
                if e > s:
                    ranges.append((key[0], key[1], s, e))
            spec = snap.spec(opts, opts.columns)
            if end.get(FROM_TS) is not None:  # a queue's start may be its max offset, not the timestamp's
                spec.time_from_us, spec.time_from_inclusive = int(end[FROM_TS]) * 1000, True
            return list(queue_partitions(snap, spec, ranges, opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadPartition):
            return iter(())
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in the query's checkpoint, and the store is never changed."""

    def stop(self) -> None:
        self._drop_snapshot()
