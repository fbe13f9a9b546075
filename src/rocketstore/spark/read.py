"""Reading one partition on a worker: consume-queue slices or commit-log ranges -> Arrow batches.

Tasks map the files themselves (nothing but paths, offsets and the few in-memory queue units
travels through Spark), never write anything, and never run a recovery: the driver's plan says
where the valid data ends.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketstore.codec import record as rec
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.errors import DataLossError, RecordError, RocketStoreError
from rocketstore.meta.deleted_topics import DeletedTopics
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, EXT_ADDRESSES_BELOW, UNIT_DTYPE
from rocketstore.spark.columns import (
    STOP_BAD,
    STOP_BLANK,
    STOP_LIMIT,
    Headers,
    as_strings,
    binary_ranges,
    build_batch,
    find_record,
    read_headers,
    walk,
)
from rocketstore.spark.plan import LogRange, QueueSlice, ReadPartition, ReadSpec, changed_marks
from rocketstore.spark.schema import arrow_schema

log = logging.getLogger(__name__)
WINDOW = 32 << 20  # commit-log bytes walked per step
BATCH_BYTES = 4 << 20  # Arrow batches of a few MiB reach the JVM fastest (32 MiB ones take twice as long)


def chunks(sizes: np.ndarray, max_rows: int, max_bytes: int = BATCH_BYTES) -> list[tuple[int, int]]:
    """[a, b) row ranges of at most ``max_rows`` rows and about ``max_bytes`` bytes each."""
    n = len(sizes)
    if not n:
        return []
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, np.arange(max_bytes, int(ends[-1]), max_bytes), side="right")
    bounds = sorted({0, n, *cuts.tolist(), *range(0, n, max_rows)})
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


class Segment:
    """A commit-log segment mapped read-only, as a numpy array and an Arrow buffer."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self.mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else None
        self.data = np.frombuffer(self.mm, dtype=np.uint8) if self.mm is not None else np.zeros(0, np.uint8)
        self.buffer = pa.py_buffer(self.mm) if self.mm is not None else pa.py_buffer(b"")
        self.size = size

    def close(self) -> None:
        del self.data, self.buffer
        if self.mm is not None:
            with contextlib.suppress(BufferError):  # a view still alive: the mapping goes with it
                self.mm.close()


_QUEUE_REMOVERS = "retention or a topic deletion"  # what removes consume-queue files (segments: retention)
_TOPIC_DELETION = "a deletion of its topic after this read was planned"


def _lost(spec: ReadSpec, text: str, by: str = "retention") -> None:
    """``text`` (a consume-queue range or a segment) was removed ``by`` what removes it after the
    read was planned: DataLossError, or a warning with failOnDataLoss=false."""
    if spec.fail_on_data_loss:
        raise DataLossError(
            f"{text}: it was removed (by {by}) before this query read it. Set failOnDataLoss=false to skip it."
        )
    log.warning("%s: removed before it was read; skipped (failOnDataLoss=false)", text)


class RowFilter:
    """The row conditions a task applies: selected topics/queues (commit-log mode), store time."""

    def __init__(self, spec: ReadSpec, by_topic: bool) -> None:
        self.spec = spec
        sel = spec.selection
        self.by_topic = by_topic and (
            sel.names is not None or bool(sel.patterns) or sel.queues is not None or sel.queues_by_topic is not None
        )
        self.timed = spec.time_from_us is not None or spec.time_to_us is not None

    def mask(self, data: np.ndarray, buffer: pa.Buffer, h: Headers) -> np.ndarray | None:
        spec = self.spec
        keep = None
        if self.timed:
            us = h["store_ts"] * 1000
            keep = np.ones(h.n, dtype=bool)
            if spec.time_from_us is not None:
                keep &= us >= spec.time_from_us if spec.time_from_inclusive else us > spec.time_from_us
            if spec.time_to_us is not None:
                keep &= us <= spec.time_to_us if spec.time_to_inclusive else us < spec.time_to_us
        if self.by_topic:
            topics = as_strings(binary_ranges(data, buffer, h.topic_at, h.topic_len))
            sel = spec.selection
            chosen = np.zeros(h.n, dtype=bool)
            qids = h["qid"]
            for topic in topics.unique().to_pylist():
                if not sel.topic_ok(topic):
                    continue
                rows = pc.equal(topics, topic).to_numpy(zero_copy_only=False)
                if sel.queues is not None or sel.queues_by_topic is not None:
                    allowed = [q for q in np.unique(qids[rows]).tolist() if sel.queue_ok(topic, q)]
                    rows &= np.isin(qids, allowed)
                chosen |= rows
            keep = chosen if keep is None else keep & chosen
        return keep


def _finish(batch: pa.RecordBatch, spec: ReadSpec, schema: pa.Schema) -> pa.RecordBatch | None:
    """Exact tag filter, then only the requested columns."""
    if spec.tags is not None and batch.num_rows:
        batch = batch.filter(pc.is_in(batch.column("tags"), value_set=pa.array(sorted(spec.tags), pa.string())))
    if not batch.num_rows:
        return None
    if batch.schema.names != schema.names:
        batch = pa.RecordBatch.from_arrays([batch.column(n) for n in schema.names], schema=schema)
    return batch


def _decode_columns(spec: ReadSpec) -> list[str]:
    columns = list(spec.columns)
    if spec.tags is not None and "tags" not in columns:
        columns.append("tags")
    return columns


def read_partition(part: ReadPartition) -> Iterator[pa.RecordBatch]:
    """Every row of a partition, as Arrow batches of the spec's columns."""
    spec = part.spec
    if spec.mode == "consumequeue":
        yield from _read_queues(part.slices, spec)
    else:
        for r in part.ranges:
            yield from _read_range(r, spec)


# -- consume-queue mode ------------------------------------------------------------------------------


def _disk_units(spec: ReadSpec, s: QueueSlice, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """Units [start, end) of a queue read from its files, and the queue offset of each. A file
    missing or shorter than planned (retention removed it after the read was planned) loses only
    its own units: ``_lost`` names their offsets, the rest is read."""
    folder = os.path.join(spec.cq_root, s.topic, str(s.queue_id))
    size = spec.cq_file_size
    runs: list[tuple[int, bytearray]] = []  # (first byte, bytes) of each stretch read without a gap
    at, stop = start * CQ_STORE_UNIT_SIZE, end * CQ_STORE_UNIT_SIZE
    while at < stop:
        file_from = at - at % size
        n = min(stop, file_from + size) - at
        try:
            with open(os.path.join(folder, f"{file_from:020d}"), "rb") as f:
                data = os.pread(f.fileno(), n, at - file_from)
        except FileNotFoundError:
            data = b""
        if data and runs and runs[-1][0] + len(runs[-1][1]) == at:
            runs[-1][1].extend(data)
        elif data:
            runs.append((at, bytearray(data)))
        at += n
    units, offsets = [], []
    done = start  # the queue offsets below this are read or reported lost
    for first, data in runs:
        a = -(-first // CQ_STORE_UNIT_SIZE)  # whole units only (a unit may straddle two files)
        b = (first + len(data)) // CQ_STORE_UNIT_SIZE
        if b <= a:
            continue
        if a > done:
            _lost(spec, f"consume queue {s.topic}/{s.queue_id} offsets {done} to {a - 1}", _QUEUE_REMOVERS)
        units.append(np.frombuffer(data, dtype=UNIT_DTYPE, count=b - a, offset=a * CQ_STORE_UNIT_SIZE - first))
        offsets.append(np.arange(a, b, dtype=np.int64))
        done = b
    if done < end:
        _lost(spec, f"consume queue {s.topic}/{s.queue_id} offsets {done} to {end - 1}", _QUEUE_REMOVERS)
    if not units:
        return np.zeros(0, dtype=UNIT_DTYPE), np.zeros(0, np.int64)
    return np.concatenate(units), np.concatenate(offsets)


@dataclass
class Unreadable:
    """A queue unit whose record fails its checks (or is in a missing segment): not read."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.topic}/{self.queue_id} queue offset {self.queue_offset} (commit-log offset "
            f"{self.commit_log_offset}, {self.size} bytes) cannot be read: {self.reason}"
        )


def _slice_units(spec: ReadSpec, s: QueueSlice) -> tuple[np.ndarray, np.ndarray]:
    """The units of a slice, and the queue offset of each."""
    disk_to = min(s.end, s.disk_end)
    pieces, offsets = [], []
    if s.start < disk_to:
        units, queue_offsets = _disk_units(spec, s, s.start, disk_to)
        pieces.append(units)
        offsets.append(queue_offsets)
    if s.tail:
        tail = np.frombuffer(s.tail, dtype=UNIT_DTYPE)
        first = max(s.start, s.disk_end)
        pieces.append(tail)
        offsets.append(np.arange(first, first + len(tail), dtype=np.int64))
    if not pieces:
        return np.zeros(0, dtype=UNIT_DTYPE), np.zeros(0, np.int64)
    return np.concatenate(pieces), np.concatenate(offsets)


def _why(data: np.ndarray, at: int, size: int, limit: int) -> str:
    """Why the record of a unit cannot be read, as the record decoder says it."""
    if at < 0 or at + size > limit:
        return "the commit log does not hold it (past its end)"
    try:
        rec.decode(data[at : at + size].tobytes())
    except (RecordError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return "it is not the size its queue unit gives"


def _checked_chunks(
    slices: list[QueueSlice], spec: ReadSpec, lost: list[Unreadable] | None = None
) -> Iterator[tuple[Segment, np.ndarray, Headers, list[Unreadable]]]:
    """(segment, record positions, their headers, the units that cannot be read) per chunk of the
    slices' units in log order; positions and headers are those of the records that pass their
    checks. A missing segment: ``_lost`` (a read), or its units added to ``lost`` (a check). The
    slices of a topic deleted since the read was planned are not read: lost to that deletion (a
    read), or left out (a check: the units are unknown, and the read tells of the deletion)."""
    slices = _deleted_since_planned(spec, slices, lost=lost is None)
    phys, sizes, keys, offs = [], [], [], []
    for k, s in enumerate(slices):
        units, offsets = _slice_units(spec, s)
        phy = units["phy"].astype(np.int64)
        size = units["size"].astype(np.int64)
        keep = (phy >= 0) & (size > 0) & (size < 0x7FFFFFFF)
        if spec.tag_codes is not None and s.topic != SCHEDULE_TOPIC:
            tags = units["tags"].astype(np.int64)  # an ext address passes: TAGS decide (EXT_ADDRESSES_BELOW)
            keep &= np.isin(tags, np.array(sorted(spec.tag_codes), dtype=np.int64)) | (tags < EXT_ADDRESSES_BELOW)
        phys.append(phy[keep])
        sizes.append(size[keep])
        keys.append(np.full(int(keep.sum()), k, dtype=np.int64))
        offs.append(offsets[keep])
    phy = np.concatenate(phys) if phys else np.zeros(0, np.int64)
    if not len(phy):  # no slices, or the tag filter left no unit
        return
    order = np.argsort(phy, kind="stable")
    phy, size = phy[order], np.concatenate(sizes)[order]
    key, qoff = np.concatenate(keys)[order], np.concatenate(offs)[order]

    def unit(i: int, reason: str) -> Unreadable:
        s = slices[int(key[i])]
        return Unreadable(s.topic, s.queue_id, int(qoff[i]), int(phy[i]), int(size[i]), reason)

    def held(a: int, b: int) -> str:
        """The queue offsets of units a..b-1, per queue: what a segment gone took away."""
        keys, offsets = key[a:b], qoff[a:b]
        named = []
        for k in np.unique(keys).tolist():
            mine = offsets[keys == k]
            named.append(f"{slices[k].topic}/{slices[k].queue_id} offsets {int(mine.min())} to {int(mine.max())}")
        return ", ".join(named)

    seg_size = spec.segment_size
    bases = phy - phy % seg_size
    bounds = np.flatnonzero(np.diff(bases)) + 1
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(phy)], strict=True):
        base = int(bases[a])
        path = spec.segments.get(base)
        segment = None
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                segment = Segment(path)
        if segment is None:
            if lost is None:
                _lost(spec, f"commit-log segment {base:020d} ({b - a} messages: {held(a, b)})")
            else:
                lost.extend(unit(i, f"its commit-log segment {base:020d} is missing") for i in range(a, b))
            continue
        try:
            limit = min(segment.size, spec.log_end - base)
            for c0, d0 in chunks(size[a:b], spec.batch_rows):
                c, d = a + c0, a + d0
                pos = phy[c:d] - base
                h = read_headers(segment.data, pos, limit, size[c:d])
                bad: list[Unreadable] = []
                if not h.ok.all():
                    bad = [
                        unit(c + i, _why(segment.data, int(pos[i]), int(size[c + i]), limit))
                        for i in np.flatnonzero(~h.ok).tolist()
                    ]
                    rows = np.flatnonzero(h.ok)
                    h, pos = h.select(rows), pos[rows]
                yield segment, pos, h, bad
        finally:
            segment.close()


def _unreadable(spec: ReadSpec, bad: list[Unreadable]) -> None:
    """Fail the read (failOnDataLoss) naming the units whose records cannot be read, or warn."""
    if not bad:
        return
    if spec.fail_on_data_loss:
        more = f" (and {len(bad) - 1} more in this part of the read)" if len(bad) > 1 else ""
        raise DataLossError(
            f"{bad[0]}{more}: the record fails its checks (see rocketstore verify). Set failOnDataLoss=false "
            "to skip such records (rocketstore spark export does, and lists them)."
        )
    for item in bad:
        log.warning("%s; skipped (failOnDataLoss=false)", item)


def _deleted_since_planned(spec: ReadSpec, slices: list[QueueSlice], lost: bool = True) -> list[QueueSlice]:
    """The slices left once those of topics deleted since the read was planned (their mark in
    deletedTopics.json changed) are dropped, and, when ``lost``, lost to it (``_lost``): their
    queue files now hold the new queue's units, if the topic came back, whose records are past the
    planned log end (not damage). A marks file that cannot be read now tells nothing: every slice
    is kept."""
    topics = {s.topic for s in slices}
    if not spec.deleted_topics_path or not topics:
        return slices
    now = DeletedTopics(spec.deleted_topics_path, writable=False)
    try:
        now.load()
    except RocketStoreError:
        return slices
    if now.load_problem is not None:  # read from its .bak, or not at all: not the marks of now
        return slices
    deleted = set(changed_marks(spec.deletion_marks, now.table, topics))
    kept = []
    for s in slices:
        if s.topic not in deleted:
            kept.append(s)
        elif lost:
            _lost(spec, f"consume queue {s.topic}/{s.queue_id} offsets {s.start} to {s.end - 1}", _TOPIC_DELETION)
    return kept


def _read_queues(slices: list[QueueSlice], spec: ReadSpec) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(spec.columns)
    columns = _decode_columns(spec)
    decode_schema = arrow_schema(columns)
    row_filter = RowFilter(spec, by_topic=False)
    for segment, pos, h, bad in _checked_chunks(slices, spec):
        _unreadable(spec, bad)
        extra = row_filter.mask(segment.data, segment.buffer, h)
        if extra is not None and not extra.all():
            rows = np.flatnonzero(extra)
            h, pos = h.select(rows), pos[rows]
        batch = _finish(build_batch(segment.data, segment.buffer, h, pos, columns, decode_schema), spec, schema)
        if batch is not None:
            yield batch


def unreadable_units(part: ReadPartition) -> list[Unreadable]:
    """The units of a consume-queue partition whose records a read would not give (they fail
    their checks, or their segment is missing): what ``jobs.export_parquet`` reports."""
    found: list[Unreadable] = []
    if part.spec.mode != "consumequeue":
        return found
    for _segment, _pos, _h, bad in _checked_chunks(part.slices, part.spec, found):
        found.extend(bad)
    return found


# -- commit-log mode ------------------------------------------------------------------------------------


def _read_range(r: LogRange, spec: ReadSpec) -> Iterator[pa.RecordBatch]:
    path = spec.segments.get(r.base)
    try:
        segment = Segment(path) if path is not None else None
    except FileNotFoundError:
        segment = None
    if segment is None:
        _lost(spec, f"commit-log segment {r.base:020d}")
        return
    schema = arrow_schema(spec.columns)
    columns = _decode_columns(spec)
    decode_schema = arrow_schema(columns)
    row_filter = RowFilter(spec, by_topic=True)
    try:
        data, buffer = segment.data, segment.buffer
        limit = min(segment.size, spec.log_end - r.base)
        pos = r.start
        if r.sync:
            found = find_record(data, pos, r.end, limit, r.base)
            if found is None:
                return
            pos = found
        while pos < r.end:
            starts, stop, reason = walk(segment.mm, pos, limit, min(r.end, pos + WINDOW))
            bad_at = stop if reason == STOP_BAD else None
            if len(starts):
                h = read_headers(data, starts, limit)
                if not h.ok.all():
                    first_bad = int(np.argmin(h.ok))
                    bad_at = int(starts[first_bad])
                    starts = starts[:first_bad]
                    h = h.select(np.arange(first_bad))
                for c, d in chunks(h["total"], spec.batch_rows):
                    rows = np.arange(c, d)
                    hc, pc_ = h.select(rows), starts[rows]
                    keep = row_filter.mask(data, buffer, hc)
                    if keep is not None and not keep.all():
                        kept = np.flatnonzero(keep)
                        hc, pc_ = hc.select(kept), pc_[kept]
                    batch = _finish(build_batch(data, buffer, hc, pc_, columns, decode_schema), spec, schema)
                    if batch is not None:
                        yield batch
            if bad_at is not None:
                if bad_at >= r.end:
                    return
                text = f"commit-log offset {r.base + bad_at}: a record that fails its checks (see rocketstore verify)"
                if spec.fail_on_data_loss:
                    raise DataLossError(
                        f"{text}. Set failOnDataLoss=false to skip it and read on from the next record."
                    )
                log.warning("%s; reading on from the next record (failOnDataLoss=false)", text)
                found = find_record(data, bad_at + 1, r.end, limit, r.base)
                if found is None:
                    return
                pos = found
                continue
            if reason != STOP_LIMIT or stop >= r.end:
                return
            pos = stop
    finally:
        segment.close()


__all__ = ["STOP_BLANK", "Segment", "read_partition"]
