"""The commit log as verify reads it: one column per record field (``LogColumns``), the keys of
every record, and where recovery would end the log; the parts of segments joined in log order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np


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
    # where recovery cuts the log (the first bad record data follows in the files it checks: from
    # the checkpoint's after a crash, the last 3 after a clean shutdown); None: ``end``
    cut: int | None = None
    skipped: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # damaged [start, end)s
    torn_at: int | None = None  # a torn record that ends the data (nothing but zeros after it)
    no_room: bool = False  # the cut is a segment's records ending without room for the BLANK marker
    other_damage: bool = False  # a damaged stretch other than a record whose body CRC alone fails
    checked_from: int = 0  # where the segments recovery checks begin (the last 3; after a crash the checkpoint's)
    crc_kept: list[int] = field(default_factory=list)  # bad body CRCs recovery keeps (checkCRCOnRecover=false)

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

    @property
    def recovery_end(self) -> int:
        """Where recovery ends the log: at the cut, or at the end of the data."""
        return self.end if self.cut is None else self.cut

    def in_skipped(self, phy: np.ndarray) -> np.ndarray:
        """Whether each offset lies in a damaged stretch the scan skipped (a unit or entry of a
        record lost there: the stretch is the problem)."""
        if not len(self.skipped):
            return np.zeros(len(phy), dtype=bool)
        at = np.searchsorted(self.skipped[:, 0], phy, side="right") - 1
        return (at >= 0) & (phy < self.skipped[np.maximum(at, 0), 1])

    def deleted(self, table: dict[str, int]) -> np.ndarray:
        """Per record: of a topic ``table`` (``config/deletedTopics.json``) names, below the log end
        recorded when it was deleted (the deleted topic's own records, not one put since)."""
        if not table or not len(self.offsets):
            return np.zeros(len(self.offsets), dtype=bool)
        ends = np.array([table.get(t, -1) for t in self.topics], dtype=np.int64)
        return self.offsets < ends[self.topic_ids]

    def describe(self, i: int) -> str:
        return (
            f"{self.topics[int(self.topic_ids[i])]}/{int(self.queue_ids[i])} queue offset {int(self.queue_offsets[i])}"
        )


def member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin`` by sorting and binary search (faster for millions of int64 keys)."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    pool = np.sort(pool)
    at = np.minimum(np.searchsorted(pool, values), len(pool) - 1)
    return pool[at] == values


def join_parts(parts: list[LogColumns], min_offset: int, end: int) -> LogColumns:
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
        setattr(log, name, joined(values))
    log.key_records = joined(keys)
    log.key_hashes = joined([part.key_hashes for part in parts])
    return log


def joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)
