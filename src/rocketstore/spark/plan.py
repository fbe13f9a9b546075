"""Planning a read on the driver: the store's recovered state, offsets, and partitions.

The driver opens the store read-only (copy-on-write: a store that needs recovery is recovered in
memory, nothing on disk changes) and learns what RocketMQ would serve: the log's valid end, each
queue's min and max offsets, and which queue units exist only in memory because recovery
dispatched records the consume-queue files on disk lack. Tasks read the consume-queue files and
commit-log segments themselves; only those in-memory units travel inside the partitions.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from pyspark.sql.datasource import InputPartition

from rocketstore.config import StoreConfig
from rocketstore.errors import DataLossError
from rocketstore.meta.deleted_topics import DeletedTopics
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, units_of, valid_prefix
from rocketstore.spark.options import EARLIEST, LATEST, ReadOptions, Selection
from rocketstore.store import MessageStore

log = logging.getLogger(__name__)
SIZE_SAMPLE = 64  # queue units per queue whose sizes give the average record size


@dataclass
class QueueSlice:
    """Queue offsets [start, end) of one queue: [start, disk_end) from the files on disk, the rest
    from ``tail`` (packed units the driver's recovery built in memory)."""

    topic: str
    queue_id: int
    start: int
    end: int
    disk_end: int
    tail: bytes = b""


@dataclass
class LogRange:
    """Bytes [start, end) of one commit-log segment; ``sync``: the start is not known to be a
    record boundary (a large segment split in several ranges), find the first record from it."""

    base: int
    start: int
    end: int
    sync: bool = False


@dataclass
class ReadSpec:
    """What every task of a read needs besides its own slices (shipped with each partition)."""

    mode: str
    columns: list[str]
    cq_root: str
    cq_file_size: int
    segment_size: int
    segments: dict[int, str]
    log_end: int
    selection: Selection = field(default_factory=Selection)
    tags: frozenset[str] | None = None
    tag_codes: frozenset[int] | None = None
    time_from_us: int | None = None  # rows with storeTimestamp >= (or > when not inclusive)
    time_from_inclusive: bool = True
    time_to_us: int | None = None
    time_to_inclusive: bool = False
    fail_on_data_loss: bool = True
    batch_rows: int = 32768
    deleted_topics_path: str = ""  # config/deletedTopics.json, and its marks when the read was planned
    deletion_marks: dict[str, int] = field(default_factory=dict)


@dataclass
class ReadPartition(InputPartition):
    index: int
    spec: ReadSpec
    slices: list[QueueSlice] = field(default_factory=list)
    ranges: list[LogRange] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.value = self.index


class Snapshot:
    """A store opened read-only on the driver, and what the tasks need to know about it."""

    def __init__(self, path: str, config: StoreConfig) -> None:
        self.store = MessageStore.open(path, config, read_only=True)
        store = self.store
        self.config = store.config
        self.root = store.root
        self.table = store.queues.table
        self.log_min = max(store.commit_log.min_offset(), 0)
        self.log_end = store.commit_log.max_offset()
        self.segment_size = store.commit_log.file_size
        self.segments = {m.file_from_offset: m.path for m in store.commit_log.queue.files}
        self._disk_ends: dict[tuple[str, int], int] | None = None
        self._average: float | None = None
        recovery = store.recovery
        if recovery is not None and recovery.consume_queue_end > 0 and self.log_end <= self.log_min:
            # (a storePathCommitLog not given, a folder moved away): the read has no row, and says why
            log.warning(
                "%s: the commit log holds no record but the consume queues hold units: every message is gone",
                self.root,
            )

    def close(self) -> None:
        self.store.shutdown()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        cq = self.table.get((topic, queue_id))
        return (cq.min_offset_in_queue(), cq.max_offset_in_queue()) if cq is not None else (0, 0)

    def all_bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        return {key: (cq.min_offset_in_queue(), cq.max_offset_in_queue()) for key, cq in sorted(self.table.items())}

    def disk_end(self, topic: str, queue_id: int) -> int:
        """Queue units below this offset are on disk exactly as recovered; the rest only in memory."""
        if self._disk_ends is None:
            self._disk_ends = self._compute_disk_ends()
        return self._disk_ends.get((topic, queue_id), 0)

    def _compute_disk_ends(self) -> dict[tuple[str, int], int]:
        recovered = {key: cq.max_offset_in_queue() for key, cq in self.table.items()}
        report = self.store.recovery
        if report is None:
            return recovered  # no recovery ran: the queues are the files
        kept = report.queue_ends_kept
        return {key: min(end, kept.get(key, 0)) for key, end in recovered.items()}

    def units(self, topic: str, queue_id: int, start: int, end: int) -> bytes:
        """Packed units [start, end) of a recovered queue (from memory)."""
        cq = self.table[(topic, queue_id)]
        parts = []
        index = start
        while index < end:
            data = cq.read_units(index, end - index)
            if not data:
                raise DataLossError(f"{topic}/{queue_id}: units from offset {index} cannot be read")
            parts.append(data)
            index += len(data) // CQ_STORE_UNIT_SIZE
        return b"".join(parts)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        return self.store.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def average_size(self) -> float:
        """About the average record's size: the mean of the sizes the queue units give (the last
        ``SIZE_SAMPLE`` units of each queue), 1024 when no queue has a unit. Not the log's size
        over the unit count: a record without a unit (a deleted topic's, a prepared transaction's)
        counts in the one but not the other, and a log of mostly such records would look like
        one of a few huge records (commitlog mode then planned it as a single partition)."""
        if self._average is None:
            total = count = 0
            for cq in self.table.values():
                end = cq.max_offset_in_queue()
                index = max(cq.min_offset_in_queue(), end - SIZE_SAMPLE)
                while index < end:  # the units may span two files
                    units = units_of(cq.read_units(index, end - index))
                    valid = valid_prefix(units)
                    total += int(units["size"][:valid].sum())
                    count += valid
                    if not len(units) or valid < len(units):
                        break
                    index += len(units)
            self._average = max(1.0, total / count) if count else 1024.0
        return self._average

    def spec(self, opts: ReadOptions, columns: list[str], mode: str | None = None) -> ReadSpec:
        return ReadSpec(
            mode=mode or opts.mode,
            columns=columns,
            cq_root=self.store.queues.root,
            cq_file_size=self.store.queues.file_size,
            segment_size=self.segment_size,
            segments=dict(self.segments),
            log_end=self.log_end,
            selection=opts.selection,
            tags=opts.tags,
            tag_codes=opts.tag_codes,
            fail_on_data_loss=opts.fail_on_data_loss,
            batch_rows=opts.batch_rows,
            deleted_topics_path=self.store.deleted_topics.path,
            deletion_marks=deletion_marks(self),
        )


def deletion_marks(snap: Snapshot, keys: Iterable[tuple[str, int]] | None = None) -> dict[str, int]:
    """The deletion marks (deletedTopics.json: the log end at each topic's last deletion) of the
    topics of ``keys`` (every topic's with None)."""
    table = snap.store.deleted_topics.table
    topics = None if keys is None else {topic for topic, _queue in keys}
    return {t: int(end) for t, end in sorted(table.items()) if topics is None or t in topics}


def marked_snapshot(opts: ReadOptions, tries: int = 3) -> Snapshot:
    """A snapshot whose deletion marks and queues are of one moment: the open reads
    deletedTopics.json before the consume queues, and a topic deleted and created again in between
    would pair the new queues with the old marks (the next batch would take the topic for deleted
    again, and read it twice). The file is read again once the queues are loaded, and the store
    opened again if a selected topic's mark changed."""
    selected = opts.selection.topic_ok
    for attempt in range(tries):
        snap = Snapshot(opts.path, opts.config)
        loaded = snap.store.deleted_topics
        again = DeletedTopics(loaded.path, writable=False)
        again.load()
        changed = changed_marks(loaded.table, again.table, loaded.table.keys() | again.table.keys())
        if not any(map(selected, changed)) or attempt == tries - 1:
            return snap
        snap.close()
    raise AssertionError("unreachable")


def changed_marks(before: Mapping[str, int], after: Mapping[str, int], topics: Iterable[str]) -> list[str]:
    """The ``topics`` whose deletion mark (deletedTopics.json) is not the same in ``after`` as in
    ``before``: deleted since (a mark gone is a deletion too: one is dropped only when its topic
    has no queue)."""
    return sorted(t for t in set(topics) if before.get(t) != after.get(t))


def unmatched_topics(snap: Snapshot, selection: Selection) -> str | None:
    """What is wrong when the ``topics`` option matches no topic of the store (else None)."""
    if selection.names is None and not selection.patterns:
        return None
    present = sorted({topic for topic, _ in snap.table})
    if any(selection.topic_ok(t) for t in present):
        return None
    given = ",".join([*sorted(selection.names or ()), *(p.pattern for p in selection.patterns)])
    shown = ", ".join(present[:30]) or "none"
    if len(present) > 30:
        shown += f", ... ({len(present)} in all)"
    return f"option topics: no topic of {snap.root} matches {given!r} (it has: {shown})"


# -- offsets ------------------------------------------------------------------------------------


def _held(snap: Snapshot, selection: Selection) -> str:
    """The queues of the store's topics ``topics`` selects, as ``TopicA 0-3, TopicB 0,2``."""
    held: dict[str, list[int]] = {}
    for topic, queue_id in sorted(snap.table):
        if selection.topic_ok(topic):
            held.setdefault(topic, []).append(queue_id)
    shown = []
    for topic, ids in list(held.items())[:30]:
        runs: list[list[int]] = []
        for q in ids:
            if runs and q == runs[-1][1] + 1:
                runs[-1][1] = q
            else:
                runs.append([q, q])
        shown.append(f"{topic} " + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    text = ", ".join(shown) or "none"
    return text + (f", ... ({len(held)} topics in all)" if len(held) > 30 else "")


def missing_queues(snap: Snapshot, selection: Selection) -> str | None:
    """What the ``queues`` option names that no queue of the store among the selected topics is:
    ``TopicA/9`` of ``{"TopicA":[9]}`` (also a topic ``topics`` leaves out), or an id of ``0,9``
    that none of the selected topics has. None when every one is there."""
    keys = [key for key in snap.table if selection.topic_ok(key[0])]
    if selection.queues_by_topic is not None:
        present = set(keys)
        named = sorted(f"{t}/{q}" for t, ids in selection.queues_by_topic.items() for q in ids if (t, q) not in present)
        if named:
            return f"option queues names {', '.join(named[:20])}" + (
                f", ... ({len(named)} in all)" if len(named) > 20 else ""
            )
    if selection.queues is not None:
        ids = sorted(selection.queues - {q for _, q in keys})
        if ids:
            return f"option queues names queue id{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids[:20]))}"
    return None


def unknown_queues(snap: Snapshot, opts: ReadOptions, *, streaming: bool = False) -> str | None:
    """What is wrong when the ``queues`` option, or ``startingOffsets``/``endingOffsets`` JSON,
    names a queue that is not among the read's (no such topic or queue in the store, or one
    ``topics``/``queues`` leave out); None when every one is. A batch read's (not ``streaming``)
    also says what ``unlisted_queues`` finds.

    A batch read refuses it, a stream warns (a queue created later is read once it appears).
    ``queues`` in commitlog mode is only warned about here: a deleted topic's records stay in the
    log without its queues, as an unmatched ``topics`` is only warned about in that mode."""
    selected = {key for key in snap.table if opts.selection.topic_ok(key[0]) and opts.selection.queue_ok(*key)}
    problems = []
    missing = missing_queues(snap, opts.selection)
    if missing:
        text = f"{missing}: the store has no such queue among the topics read (it has: {_held(snap, opts.selection)})"
        if opts.mode == "commitlog":
            log.warning("%s; commitlog mode reads the records of such a queue that are still in the log", text)
        else:
            problems.append(f"{text}; a typo'd topic or queue id would silently read nothing")
    for name, offsets in (("startingOffsets", opts.starting), ("endingOffsets", opts.ending)):
        if not isinstance(offsets, dict):
            continue
        unknown = sorted(f"{t}/{q}" for t, per in offsets.items() for q in per if (t, q) not in selected)
        if unknown:
            shown = sorted({t for t, _ in selected})
            listed = ", ".join(shown[:30]) or "none"
            problems.append(
                f"option {name} names {', '.join(unknown[:20])}: no such queue among those the read covers (the "
                f"store's selected topics: {listed}); a typo'd topic would silently be read from earliest"
            )
    unlisted = None if streaming else unlisted_queues(snap, opts)
    if unlisted:
        problems.append(unlisted)
    return "; ".join(problems) or None


UNLISTED_SHOWN = 8  # queues named in the error before "and N more"


def unlisted_queues(snap: Snapshot, opts: ReadOptions, *, streaming: bool = False) -> str | None:
    """What is wrong when ``startingOffsets``/``endingOffsets`` JSON leaves out a queue the read
    selects (``topics``/``queues``) that the store has; None when it names every one.

    Kafka's source refuses such JSON ("you must specify all TopicPartitions"): a queue left out
    was silently read from earliest (or to latest). Both a batch read and a new stream refuse it
    (a stream checks only the user's JSON, never its checkpoint's offsets: a queue created later
    is read from its earliest offset). JSON a timestamp takes precedence over is not used, and
    not checked for this."""
    sel = opts.selection
    selected = sorted(key for key in snap.table if sel.topic_ok(key[0]) and sel.queue_ok(*key))
    if streaming:
        give = "give -2 for a queue to read from its earliest offset or -1 for its latest"
    else:
        give = "give -2 for a queue to read from its earliest offset (a batch read takes no -1)"
    problems = []
    for name, offsets, timestamp, fill in (
        ("startingOffsets", opts.starting, opts.starting_ts, give),
        ("endingOffsets", opts.ending, opts.ending_ts, "give -1 for a queue to read up to its latest offset"),
    ):
        if not isinstance(offsets, dict) or timestamp is not None:
            continue
        left_out = [f"{t}/{q}" for t, q in selected if q not in offsets.get(t, {})]
        if not left_out:
            continue
        shown = ", ".join(left_out[:UNLISTED_SHOWN])
        if len(left_out) > UNLISTED_SHOWN:
            shown += f" and {len(left_out) - UNLISTED_SHOWN} more"
        problems.append(
            f"option {name} gives no offset for {shown}: JSON offsets must name every queue the read covers "
            f"(the topics and queues options select them), as in Kafka's source; {fill}"
        )
    return "; ".join(problems) or None


def offset_of(given: int, lo: int, hi: int) -> int:
    """A JSON offset (-2 earliest, -1 latest, else the offset) of a queue whose bounds are [lo, hi]."""
    return lo if given == EARLIEST else hi if given == LATEST else given


def check_start(
    topic: str, queue_id: int, start: int, lo: int, hi: int, fail_on_data_loss: bool, what: str = "starting offset"
) -> int:
    """``start`` within [lo, hi]; below ``lo`` (removed by retention) fails or warns."""
    if start < lo:
        text = (
            f"{topic}/{queue_id}: the {what} {start} is below the queue's minimum offset {lo}: "
            f"{lo - start} messages were removed from the store (retention) before they were read"
        )
        data_loss(text, fail_on_data_loss, f"skip them and continue from the minimum offset {lo}")
        return lo
    return min(start, hi)


def data_loss(text: str, fail_on_data_loss: bool, then: str) -> None:
    """Fail with DataLossError naming ``text``, or (failOnDataLoss=false) warn and go on as
    ``then`` says ("skip them and continue from ...")."""
    if fail_on_data_loss:
        raise DataLossError(f"{text}. Set failOnDataLoss=false to {then}.")
    log.warning("%s; failOnDataLoss=false: going on to %s", text, then)


def batch_ranges(
    snap: Snapshot, opts: ReadOptions, selection: Selection, time_lo_ms: int | None, time_hi_ms: int | None
) -> list[tuple[str, int, int, int]]:
    """(topic, queue, start, end) of every selected queue for a batch read."""
    out = []
    for (topic, queue_id), (lo, hi) in snap.all_bounds().items():
        if not selection.topic_ok(topic) or not selection.queue_ok(topic, queue_id):
            continue
        if opts.starting_ts is not None:
            start = snap.offset_for_time(topic, queue_id, opts.starting_ts)
        elif isinstance(opts.starting, dict):
            given = opts.starting.get(topic, {}).get(queue_id, EARLIEST)
            start = check_start(topic, queue_id, offset_of(given, lo, hi), lo, hi, opts.fail_on_data_loss)
        else:
            start = lo if opts.starting == "earliest" else hi
        if opts.ending_ts is not None:
            end = snap.offset_for_time(topic, queue_id, opts.ending_ts)
        elif isinstance(opts.ending, dict):
            end = min(offset_of(opts.ending.get(topic, {}).get(queue_id, LATEST), lo, hi), hi)
            if end < lo:  # every message asked for is gone (Kafka: "beginning offset ... after the ending")
                text = (
                    f"{topic}/{queue_id}: the ending offset {end} is below the queue's minimum offset {lo}: "
                    f"the messages before it were removed from the store (retention) before they were read"
                )
                data_loss(text, opts.fail_on_data_loss, "read nothing of the queue")
        else:
            end = hi
        if time_lo_ms is not None:
            start = max(start, snap.offset_for_time(topic, queue_id, time_lo_ms))
        if time_hi_ms is not None:
            end = min(end, snap.offset_for_time(topic, queue_id, time_hi_ms))
        start = max(start, lo)
        if end > start:
            out.append((topic, queue_id, start, end))
    return out


# -- partitions -----------------------------------------------------------------------------------


def queue_partitions(
    snap: Snapshot, spec: ReadSpec, ranges: list[tuple[str, int, int, int]], opts: ReadOptions
) -> list[ReadPartition]:
    """Queue offset ranges cut where the commit log is cut: partition k holds, of every selected
    queue, the messages stored in the k-th stretch of the log, about ``maxPartitionBytes`` of them.

    Each task thus reads one stretch of the log front to back (each page by one task only), and
    the stretches are chosen by message counts so the tasks get equal shares.
    """
    average = snap.average_size()
    count = sum(e - s for _, _, s, e in ranges)
    parts = min(max(opts.min_partitions, math.ceil(count * average / opts.partition_bytes)), max(count, 1))
    cuts = {(t, q): [s, e] for t, q, s, e in ranges}
    if parts > 1:
        cuts = _cut_by_log(snap, ranges, parts)
    groups = []
    for k in range(max(len(c) for c in cuts.values()) - 1 if cuts else 0):
        slices = []
        for topic, queue_id, _start, _end in ranges:
            s, e = cuts[(topic, queue_id)][k], cuts[(topic, queue_id)][k + 1]
            if e > s:
                disk_end = snap.disk_end(topic, queue_id)
                tail_from = max(s, disk_end)
                tail = snap.units(topic, queue_id, tail_from, e) if tail_from < e else b""
                slices.append(QueueSlice(topic, queue_id, s, e, disk_end, tail))
        if slices:
            groups.append(slices)
    return [ReadPartition(i, spec, slices=g) for i, g in enumerate(groups)]


def _cut_by_log(
    snap: Snapshot, ranges: list[tuple[str, int, int, int]], parts: int
) -> dict[tuple[str, int], list[int]]:
    """Per queue, the queue offsets where ``parts`` partitions of about equal message counts begin,
    the partitions being consecutive stretches of the commit log."""
    grid = parts * 4

    def phy(topic: str, queue_id: int, index: int) -> int:
        unit = snap.table[(topic, queue_id)].get_unit(index)
        return unit[0] if unit is not None else -1

    lo = min(phy(t, q, s) for t, q, s, _ in ranges)
    hi = max(phy(t, q, e - 1) for t, q, _, e in ranges) + 1
    points = np.array([lo + (hi - lo) * k // grid for k in range(1, grid)], dtype=np.int64)
    # fine[i]: range i's start, the first offset whose record lies at or after each point, its end
    fine = np.empty((len(ranges), grid + 1), dtype=np.int64)
    for i, (topic, queue_id, start, end) in enumerate(ranges):
        fine[i, 0], fine[i, grid] = start, end
        fine[i, 1:grid] = start + _units_below(snap, topic, queue_id, start, end, points)
    cells = np.diff(fine, axis=1).sum(axis=0).tolist()
    target = sum(cells) / parts
    chosen = [0]
    done = 0
    for k, cell in enumerate(cells[:-1]):
        done += cell
        if done >= target * len(chosen) and len(chosen) < parts:
            chosen.append(k + 1)
    chosen.append(grid)
    picked = fine[:, chosen].tolist()
    return {(t, q): picked[i] for i, (t, q, _, _) in enumerate(ranges)}


def _units_below(snap: Snapshot, topic: str, queue_id: int, start: int, end: int, points: np.ndarray) -> np.ndarray:
    """For each of the ascending ``points``, how many units of queue offsets [start, end) hold a
    record that starts below it: the queue's commit-log offsets are read once, a file at a time,
    and each file is cut with one ``searchsorted`` (units grow with the log)."""
    below = np.zeros(len(points), dtype=np.int64)
    for _index, units in snap.table[(topic, queue_id)].iter_units(start, end, chunk=max(1, end - start)):
        below += np.searchsorted(units["phy"].astype(np.int64), points, side="left")
    return below


def log_partitions(snap: Snapshot, spec: ReadSpec, opts: ReadOptions) -> list[ReadPartition]:
    """Whole segments (several per partition) or, for segments over the budget, large byte ranges.

    The budget is never below the average record, so that (as in consumequeue mode) a read has
    about as many partitions as messages at most, whatever minPartitions or maxPartitionBytes ask."""
    pieces = []
    for base in sorted(snap.segments):
        readable = min(snap.segment_size, snap.log_end - base)
        if base < snap.log_min or readable <= 0:
            continue
        pieces.append((base, readable))
    total = sum(r for _, r in pieces)
    wanted = max(opts.min_partitions, math.ceil(total / opts.partition_bytes))
    budget = max(math.ceil(snap.average_size()), math.ceil(total / wanted))
    groups: list[list[LogRange]] = []
    current: list[LogRange] = []
    used = 0
    for base, readable in pieces:
        if readable > budget:
            if current:
                groups.append(current)
                current, used = [], 0
            count = math.ceil(readable / budget)
            step = math.ceil(readable / count)
            for a in range(0, readable, step):
                groups.append([LogRange(base, a, min(readable, a + step), sync=a > 0)])
            continue
        if used + readable > budget and current:
            groups.append(current)
            current, used = [], 0
        current.append(LogRange(base, 0, readable))
        used += readable
    if current:
        groups.append(current)
    return [ReadPartition(i, spec, ranges=g) for i, g in enumerate(groups)]
