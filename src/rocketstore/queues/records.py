"""Dispatch requests as columns: what the consume queues and the index are built from.

A request is either one record or, from the put path, a whole batch of records of one
topic/queue (both described in ``codec.scan``). ``Records.of`` lays them out one row per record,
in log order, so the builders work on arrays instead of tuples.
"""

from __future__ import annotations

import itertools
from operator import itemgetter

import numpy as np

from rocketstore.codec.scan import (
    BATCH_LEN,
    D_KEYS,
    D_OFFSET,
    D_QUEUE_ID,
    D_QUEUE_OFFSET,
    D_SIZE,
    D_SIZES,
    D_STORE_TS,
    D_SYSFLAG,
    D_TAGS_CODE,
    D_TOPIC,
    D_UNIQ,
    REQUEST_LEN,
)

_INT_FIELDS = (D_OFFSET, D_SIZE, D_TAGS_CODE, D_STORE_TS, D_QUEUE_OFFSET, D_SYSFLAG)
_GETTERS = {f: itemgetter(f) for f in (*_INT_FIELDS, D_TOPIC, D_QUEUE_ID, D_KEYS, D_UNIQ)}
_QUEUE_KEY = itemgetter(D_TOPIC, D_QUEUE_ID)


class Records:
    """One row per record: numpy columns for numbers, lists for strings."""

    __slots__ = (
        "keys",
        "offsets",
        "queue_keys",
        "queue_offsets",
        "sizes",
        "store_ts",
        "sys_flags",
        "tags",
        "topics",
        "uniqs",
    )

    def __init__(self) -> None:
        self.topics: list[str] = []
        self.queue_keys: list[tuple[str, int]] = []
        self.keys: list[str | None] = []
        self.uniqs: list[str | None] = []
        self.offsets = self.sizes = self.tags = self.store_ts = self.queue_offsets = self.sys_flags = np.zeros(
            0, dtype=np.int64
        )

    def __len__(self) -> int:
        return len(self.topics)

    @classmethod
    def of(cls, requests: list[tuple]) -> Records:
        """Lay out requests (records, batches; end-of-file markers skipped) one row per record."""
        out = cls()
        if not any(len(r) == BATCH_LEN for r in requests):
            rows = [r for r in requests if r[D_TOPIC] is not None]
            n = len(rows)
            if not n:
                return out
            ints = [np.fromiter(map(_GETTERS[f], rows), dtype=np.int64, count=n) for f in _INT_FIELDS]
            out.offsets, out.sizes, out.tags, out.store_ts, out.queue_offsets, out.sys_flags = ints
            out.topics = list(map(_GETTERS[D_TOPIC], rows))
            out.queue_keys = list(map(_QUEUE_KEY, rows))
            out.keys = list(map(_GETTERS[D_KEYS], rows))
            out.uniqs = list(map(_GETTERS[D_UNIQ], rows))
            return out
        columns: dict[int, list] = {f: [] for f in _INT_FIELDS}
        topics, queue_keys, keys, uniqs = out.topics, out.queue_keys, out.keys, out.uniqs
        for r in requests:
            topic = r[D_TOPIC]
            if topic is None:
                continue
            if len(r) == REQUEST_LEN:
                for f in _INT_FIELDS:
                    columns[f].append(r[f])
                topics.append(topic)
                queue_keys.append((topic, r[D_QUEUE_ID]))
                keys.append(r[D_KEYS])
                uniqs.append(r[D_UNIQ])
                continue
            sizes = r[D_SIZES]
            n = len(sizes)
            columns[D_OFFSET].extend(itertools.accumulate(sizes[:-1], initial=r[D_OFFSET]))
            columns[D_SIZE].extend(sizes)
            columns[D_TAGS_CODE].extend(r[D_TAGS_CODE])
            columns[D_STORE_TS].extend([r[D_STORE_TS]] * n)
            columns[D_QUEUE_OFFSET].extend(range(r[D_QUEUE_OFFSET], r[D_QUEUE_OFFSET] + n))
            columns[D_SYSFLAG].extend([r[D_SYSFLAG]] * n)
            topics.extend([topic] * n)
            queue_keys.extend([(topic, r[D_QUEUE_ID])] * n)
            keys.extend(r[D_KEYS])
            uniqs.extend(r[D_UNIQ])
        ints = [np.array(columns[f], dtype=np.int64) for f in _INT_FIELDS]
        out.offsets, out.sizes, out.tags, out.store_ts, out.queue_offsets, out.sys_flags = ints
        return out

    def select(self, mask: np.ndarray) -> Records:
        """The rows where ``mask`` is true."""
        if mask.all():
            return self
        out = Records()
        rows = np.flatnonzero(mask).tolist()
        out.offsets, out.sizes, out.tags = self.offsets[mask], self.sizes[mask], self.tags[mask]
        out.store_ts, out.queue_offsets, out.sys_flags = (
            self.store_ts[mask],
            self.queue_offsets[mask],
            self.sys_flags[mask],
        )
        out.topics = [self.topics[i] for i in rows]
        out.queue_keys = [self.queue_keys[i] for i in rows]
        out.keys = [self.keys[i] for i in rows]
        out.uniqs = [self.uniqs[i] for i in rows]
        return out
