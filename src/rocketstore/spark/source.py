"""The ``rocketstore`` PySpark data source: batch reads (this module), streaming reads
(``stream``) and writes (``sink``).

``spark.read.format("rocketstore").load(STORE)`` gives one row per message. Options are in
``rocketstore.spark.options``; MessageStoreConfig keys (``mappedFileSizeCommitLog`` ...) and
``config`` (a broker.conf) describe the store's geometry.
"""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyspark

if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):  # pragma: no cover
    raise ImportError(
        f"rocketstore's Spark data source needs PySpark 4.2 or newer (filters, Arrow stream writers and "
        f"read limits of the Python data source API); this is PySpark {pyspark.__version__}"
    )

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rocketstore.errors import InvalidArgumentError
from rocketstore.spark.options import parse_options
from rocketstore.spark.plan import (
    ReadPartition,
    batch_ranges,
    log_partitions,
    marked_snapshot,
    queue_partitions,
    unknown_queues,
    unmatched_topics,
)
from rocketstore.spark.read import read_partition
from rocketstore.spark.schema import DDL, flag_option, requested_columns
from rocketstore.timestamps import EPOCH

log = logging.getLogger(__name__)


class RocketStoreDataSource(DataSource):
    """Apache RocketMQ store folders as a Spark data source (format ``rocketstore``)."""

    @classmethod
    def name(cls) -> str:
        return "rocketstore"

    def schema(self) -> str:
        return DDL

    def reader(self, schema: Any) -> DataSourceReader:
        if flag_option(self.options, "pushFilters", False) and _pushdown_enabled():
            return PushdownBatchReader(self.options, schema)
        return BatchReader(self.options, schema)

    def streamReader(self, schema: Any) -> Any:
        from rocketstore.spark.stream import StreamReader

        return StreamReader(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from rocketstore.spark.sink import BatchWriter

        return BatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from rocketstore.spark.sink import StreamWriter

        return StreamWriter(self.options, schema, overwrite)


def _pushdown_enabled() -> bool:
    """Whether Spark will call ``pushFilters`` for this read.

    A reader that overrides ``pushFilters`` fails when ``spark.sql.python.filterPushdown.enabled``
    is off, and the data source is not told the setting. The planning worker that calls
    ``reader()`` does know it: it is the pushdown worker, or the plain planner with a local
    ``enable_pushdown``. Without either, the reader without pushdown is the safe choice.
    """
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith("data_source_pushdown_filters.py"):
            return True
        if name.endswith("plan_data_source_read.py") and "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back
    return False


class BatchReader(DataSourceReader):
    """Plans partitions on the driver (opening the store read-only) and reads them on workers."""

    def __init__(self, options: Any, schema: Any) -> None:
        self.opts = parse_options(options)
        self.opts.columns = requested_columns(schema)
        self.topics: frozenset[str] | None = None
        self.queues: frozenset[int] | None = None
        self.time_from: tuple[int, bool] | None = None  # (µs, inclusive)
        self.time_to: tuple[int, bool] | None = None

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        selection = opts.selection.narrowed(self.topics, self.queues)
        time_from, time_to = self.time_from, self.time_to
        if opts.mode == "commitlog":
            if opts.starting_ts is not None:
                time_from = _tighter(time_from, (opts.starting_ts * 1000, True), max)
            if opts.ending_ts is not None:
                time_to = _tighter(time_to, (opts.ending_ts * 1000, False), min)
        with marked_snapshot(opts) as snap:  # the marks the tasks compare against are the queues' own
            unmatched = unmatched_topics(snap, opts.selection)
            if unmatched and opts.mode == "consumequeue":
                raise InvalidArgumentError(unmatched)
            if unmatched:  # commitlog mode: records of a deleted topic's queues are still in the log
                log.warning("%s", unmatched)
            unknown = unknown_queues(snap, opts)
            if unknown:
                raise InvalidArgumentError(unknown)
            spec = snap.spec(opts, opts.columns)
            spec.selection = selection
            if time_from is not None:
                spec.time_from_us, spec.time_from_inclusive = time_from
            if time_to is not None:
                spec.time_to_us, spec.time_to_inclusive = time_to
            if opts.mode == "consumequeue":
                lo_ms = None if time_from is None else time_from[0] // 1000
                hi_ms = None if time_to is None else (time_to[0] // 1000 + 1 if time_to[1] else -(-time_to[0] // 1000))
                ranges = batch_ranges(snap, opts, selection, lo_ms, hi_ms)
                parts: list[InputPartition] = list(queue_partitions(snap, spec, ranges, opts))
            else:
                parts = list(log_partitions(snap, spec, opts))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadPartition):
            return iter(())
        return read_partition(partition)


def _tighter(current: tuple[int, bool] | None, new: tuple[int, bool], pick: Any) -> tuple[int, bool]:
    """The stricter of two time bounds (``pick`` is max for lower bounds, min for upper)."""
    if current is None:
        return new
    if current[0] == new[0]:
        return (current[0], current[1] and new[1])
    return current if pick(current[0], new[0]) == current[0] else new


def _micros(value: Any) -> int | None:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        delta = value - EPOCH
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


class PushdownBatchReader(BatchReader):
    """The batch reader with filter pushdown (option ``pushFilters=true`` and
    ``spark.sql.python.filterPushdown.enabled``): topic and queueId equality / IN, and
    storeTimestamp ranges, become the queues and offsets read (and exact row conditions in the
    tasks).

    Opt-in because PySpark 4.3 keeps the read planned with pushed filters on the relation (the
    data source instance every scan of it shares; later Spark scopes it to one scan): a later
    query of the *same* DataFrame reuses it and misses rows, and so does each branch of a
    self-union, which all get the last branch's read. Give each filtered query its own ``load()``.
    """

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        return [f for f in filters if not self._push(f)]

    def _push(self, f: Filter) -> bool:
        if not isinstance(f, (EqualTo, In, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            return False  # Not (for != and NOT IN), IsNull, string matches ...: Spark applies them
        column = f.attribute[0] if len(f.attribute) == 1 else None
        if column == "topic" and isinstance(f, (EqualTo, In)):
            values = [f.value] if isinstance(f, EqualTo) else list(f.value)
            if not all(isinstance(v, str) for v in values):
                return False
            wanted = frozenset(values)
            self.topics = wanted if self.topics is None else self.topics & wanted
            return True
        if column == "queueId" and isinstance(f, (EqualTo, In)):
            values = [f.value] if isinstance(f, EqualTo) else list(f.value)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return False
            wanted_q = frozenset(values)
            self.queues = wanted_q if self.queues is None else self.queues & wanted_q
            return True
        if column == "storeTimestamp" and isinstance(
            f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
        ):
            us = _micros(f.value)
            if us is None:
                return False
            if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)):
                self.time_from = _tighter(self.time_from, (us, not isinstance(f, GreaterThan)), max)
            if isinstance(f, (EqualTo, LessThan, LessThanOrEqual)):
                self.time_to = _tighter(self.time_to, (us, not isinstance(f, LessThan)), min)
            return True
        return False
