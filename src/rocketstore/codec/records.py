"""Records as columns: what the consume queues and the index are built from.

Dispatch requests come as tuples (one record, or a whole batch from the put path; both described
in ``codec.scan``) or straight from the segment scanner. ``Records`` holds them one row per record,
in log order: numpy columns for the numbers, lists for topics, and the index keys either as
strings (from the put path) or already hashed (from the scanner, which hashes them where they lie
in the segment instead of making a string of each).
"""

from __future__ import annotations

import itertools
from operator import itemgetter

import numpy as np

# Positions in a dispatch request tuple (one record). A batch request, from the put path, has the
# first record's fields with lists for the tags codes, keys and unique keys, plus the sizes.
D_TOPIC, D_QUEUE_ID, D_OFFSET, D_SIZE, D_TAGS_CODE, D_STORE_TS, D_QUEUE_OFFSET, D_KEYS, D_UNIQ, D_SYSFLAG = range(10)

REQUEST_LEN = 10
BATCH_LEN = 11
D_SIZES = 10  # in a batch request: the size of each record (D_SIZE holds their sum)


def batch_request(
    topic: str,
    queue_id: int,
    first_offset: int,
    sizes: list[int],
    tags_codes: list[int],
    store_timestamp: int,
    first_queue_offset: int,
    keys: list[str | None],
    uniq_keys: list[str | None],
) -> tuple:
    """The request of a batch of plain records stored back to back."""
    return (
        topic,
        queue_id,
        first_offset,
        sum(sizes),
        tags_codes,
        store_timestamp,
        first_queue_offset,
        keys,
        uniq_keys,
        0,
        sizes,
    )


_INT_FIELDS = (D_OFFSET, D_SIZE, D_TAGS_CODE, D_STORE_TS, D_QUEUE_OFFSET, D_SYSFLAG, D_QUEUE_ID)
_GETTERS = {f: itemgetter(f) for f in (*_INT_FIELDS, D_TOPIC, D_KEYS, D_UNIQ)}
_SIZES = itemgetter(D_SIZES)
_EMPTY = np.zeros(0, dtype=np.int64)

# Index tokens: (hashes as uint32, token lengths, owning row) for the UNIQ_KEYs and for the KEYS.
Tokens = tuple[np.ndarray, np.ndarray, np.ndarray]


class Records:
    """One row per record: numpy columns for numbers, lists for strings."""

    __slots__ = (
        "index_tokens",
        "keys",
        "offsets",
        "queue_ids",
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
        self.keys: list[str | None] | None = []
        self.uniqs: list[str | None] | None = []
        self.index_tokens: tuple[Tokens, Tokens] | None = None
        self.offsets = self.sizes = self.tags = self.store_ts = self.queue_offsets = _EMPTY
        self.sys_flags = self.queue_ids = _EMPTY

    def __len__(self) -> int:
        return len(self.topics)

    @property
    def queue_keys(self) -> list[tuple[str, int]]:
        return list(zip(self.topics, self.queue_ids.tolist(), strict=True))

    @classmethod
    def of(cls, requests: list[tuple]) -> Records:
        """Lay out dispatch requests (records, batches; end-of-file markers skipped) one row per record."""
        out = cls()
        if not any(len(r) == BATCH_LEN for r in requests):
            rows = [r for r in requests if r[D_TOPIC] is not None]
            n = len(rows)
            if not n:
                return out
            ints = [np.fromiter(map(_GETTERS[f], rows), dtype=np.int64, count=n) for f in _INT_FIELDS]
            out._set_ints(ints)
            out.topics = list(map(_GETTERS[D_TOPIC], rows))
            out.keys = list(map(_GETTERS[D_KEYS], rows))
            out.uniqs = list(map(_GETTERS[D_UNIQ], rows))
            return out
        if all(len(r) == BATCH_LEN for r in requests):
            out._lay_out_batches(requests)
            return out
        columns: dict[int, list] = {f: [] for f in _INT_FIELDS}
        topics, keys, uniqs = out.topics, out.keys, out.uniqs
        assert keys is not None and uniqs is not None
        for r in requests:
            topic = r[D_TOPIC]
            if topic is None:
                continue
            if len(r) == REQUEST_LEN:
                for f in _INT_FIELDS:
                    columns[f].append(r[f])
                topics.append(topic)
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
            columns[D_QUEUE_ID].extend([r[D_QUEUE_ID]] * n)
            topics.extend([topic] * n)
            keys.extend(r[D_KEYS])
            uniqs.extend(r[D_UNIQ])
        out._set_ints([np.array(columns[f], dtype=np.int64) for f in _INT_FIELDS])
        return out

    def _lay_out_batches(self, batches: list[tuple]) -> None:
        """``of`` for batch requests only (a stream of ``put_batch`` calls): the columns a batch
        shares are repeated and its offsets summed up by numpy, not record by record. A batch
        holds at least one record (``put_batch`` refuses an empty one)."""
        m = len(batches)
        counts = np.fromiter(map(len, map(_GETTERS[D_TAGS_CODE], batches)), dtype=np.int64, count=m)
        n = int(counts.sum())
        starts = np.cumsum(counts) - counts
        sizes = np.fromiter(itertools.chain.from_iterable(map(_SIZES, batches)), dtype=np.int64, count=n)
        before = np.cumsum(sizes) - sizes  # bytes of the round's records before each one
        firsts = np.fromiter(map(_GETTERS[D_OFFSET], batches), dtype=np.int64, count=m)
        first_queue_offsets = np.fromiter(map(_GETTERS[D_QUEUE_OFFSET], batches), dtype=np.int64, count=m)
        self.offsets = np.repeat(firsts - before[starts], counts) + before
        self.queue_offsets = np.repeat(first_queue_offsets - starts, counts) + np.arange(n, dtype=np.int64)
        self.sizes = sizes
        self.tags = np.fromiter(
            itertools.chain.from_iterable(map(_GETTERS[D_TAGS_CODE], batches)), dtype=np.int64, count=n
        )
        self.store_ts, self.sys_flags, self.queue_ids = (
            np.repeat(np.fromiter(map(_GETTERS[f], batches), dtype=np.int64, count=m), counts)
            for f in (D_STORE_TS, D_SYSFLAG, D_QUEUE_ID)
        )
        self.topics = list(
            itertools.chain.from_iterable(map(itertools.repeat, map(_GETTERS[D_TOPIC], batches), counts.tolist()))
        )
        self.keys = list(itertools.chain.from_iterable(map(_GETTERS[D_KEYS], batches)))
        self.uniqs = list(itertools.chain.from_iterable(map(_GETTERS[D_UNIQ], batches)))

    def _set_ints(self, ints: list[np.ndarray]) -> None:
        self.offsets, self.sizes, self.tags, self.store_ts, self.queue_offsets, self.sys_flags, self.queue_ids = ints

    def to_requests(self) -> list[tuple]:
        """One dispatch request tuple per record (keys as strings; needs ``keys``/``uniqs``)."""
        if self.keys is None or self.uniqs is None:
            raise ValueError("these records carry hashed index keys, not strings")
        return list(
            zip(
                self.topics,
                self.queue_ids.tolist(),
                self.offsets.tolist(),
                self.sizes.tolist(),
                self.tags.tolist(),
                self.store_ts.tolist(),
                self.queue_offsets.tolist(),
                self.keys,
                self.uniqs,
                self.sys_flags.tolist(),
                strict=True,
            )
        )

    def select(self, mask: np.ndarray) -> Records:
        """The rows where ``mask`` is true."""
        if mask.all():
            return self
        out = Records()
        rows = np.flatnonzero(mask)
        out.offsets, out.sizes, out.tags = self.offsets[rows], self.sizes[rows], self.tags[rows]
        out.store_ts, out.queue_offsets = self.store_ts[rows], self.queue_offsets[rows]
        out.sys_flags, out.queue_ids = self.sys_flags[rows], self.queue_ids[rows]
        picked = rows.tolist()
        out.topics = [self.topics[i] for i in picked]
        out.keys = None if self.keys is None else [self.keys[i] for i in picked]
        out.uniqs = None if self.uniqs is None else [self.uniqs[i] for i in picked]
        if self.index_tokens is not None:
            new_row = np.full(len(self), -1, dtype=np.int64)
            new_row[rows] = np.arange(len(rows), dtype=np.int64)
            kept = []
            for hashes, lengths, owners in self.index_tokens:
                moved = new_row[owners]
                keep = moved >= 0
                kept.append((hashes[keep], lengths[keep], moved[keep]))
            out.index_tokens = (kept[0], kept[1])
        return out
