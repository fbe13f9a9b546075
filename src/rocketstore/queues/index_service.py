"""The ``index/`` folder: index files named by creation time, built from dispatch and queried by key."""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np

from rocketstore.codec import sysflag as sf
from rocketstore.codec.ids import prefixed_hashes, token_hashes, topic_key_hash, topic_prefix_hash
from rocketstore.codec.message import JAVA_INT
from rocketstore.codec.record import PROPERTIES_MAX_LENGTH
from rocketstore.codec.records import D_KEYS, D_OFFSET, D_STORE_TS, D_SYSFLAG, D_TOPIC, D_UNIQ, Records
from rocketstore.errors import ConfigError, CorruptStoreError
from rocketstore.files.allocate import SegmentAllocator
from rocketstore.files.mapped_file import flush_each, remove_leftover
from rocketstore.meta.checkpoint import StoreCheckpoint
from rocketstore.queues.index_file import HASH_SLOT_SIZE, INDEX_HEADER_SIZE, IndexFile, index_file_size

log = logging.getLogger(__name__)
_ROLLBACK = sf.TRANSACTION_ROLLBACK_TYPE


def time_millis_to_human_string(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as UtilAll.timeMillisToHumanString."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


def index_keys(records: Records) -> tuple[np.ndarray, np.ndarray]:
    """(key hashes, record rows) of the index entries RocketMQ adds for these records, in its
    order: per record its UNIQ_KEY, then each of its KEYS (``topic#key`` each); ROLLBACK records
    add none (spec 8.5)."""
    empty = np.zeros(0, dtype=np.int64)
    keep = (records.sys_flags & _ROLLBACK) != _ROLLBACK
    kept = None if keep.all() else np.flatnonzero(keep)
    if kept is not None:
        records = records.select(keep)
    n = len(records)
    if not n:
        return empty, empty
    topics = set(records.topics)
    if len(topics) == 1:
        prefix: int | np.ndarray = topic_prefix_hash(next(iter(topics)))
    else:
        prefix = np.fromiter(map(topic_prefix_hash, records.topics), dtype=np.int64, count=n)
    if records.index_tokens is not None:
        tokens = [(h, o, ln) for h, ln, o in records.index_tokens]
    else:
        tokens = [
            token_hashes([t or "" for t in texts], split)
            for texts, split in ((records.uniqs, False), (records.keys, True))
        ]
    parts = []
    for (hashes, owners, lengths), rank in zip(tokens, (0, 1), strict=True):
        if len(hashes):
            own_prefix = prefix if type(prefix) is int else prefix[owners]
            parts.append((prefixed_hashes(hashes, lengths, own_prefix), owners, owners * 2 + rank))
    if not parts:
        return empty, empty
    if len(parts) == 1:
        h, owners, _ = parts[0]
    else:
        order = np.argsort(np.concatenate([p[2] for p in parts]), kind="stable")
        h = np.concatenate([p[0] for p in parts])[order]
        owners = np.concatenate([p[1] for p in parts])[order]
    h = h.view(np.int32).astype(np.int64)
    np.abs(h, out=h)
    h[h == 2147483648] = 0  # Math.abs(Integer.MIN_VALUE) stays negative: RocketMQ uses 0
    owners = np.asarray(owners, dtype=np.int64)
    return h, (owners if kept is None else kept[owners])


def index_entries(records: Records) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key hashes, offsets, store times) of the index entries for dispatched records."""
    hashes, rows = index_keys(records)
    return hashes, records.offsets[rows], records.store_ts[rows]


# a record's properties take at most PROPERTIES_MAX_LENGTH bytes, and each of its keys two of them
# (itself and a space): no record has more index entries than this (its UNIQ_KEY with them)
_MOST_ENTRIES_OF_A_RECORD = PROPERTIES_MAX_LENGTH // 2 + 1


def creation_order(
    found: list[tuple[str, IndexFile | None]], earliest: bool = True
) -> list[tuple[str, IndexFile | None]]:
    """Index files (path, file; given in name order) in the order they were made, by their headers:
    files with entries by the log range they cover, [beginPhyOffset, endPhyOffset] (a record's keys
    may run from a full file into the next), then files without entries (a new file holds none
    until its first key; its header carries the end of the file before).

    A file whose header is not to be trusted (it contradicts itself; None: of the wrong size) goes,
    with ``earliest`` (a load that drops it), where the log range its entries cover puts it when
    they show one (``IndexFile.entry_span``), else at the earliest place it may belong: before the first
    file that leaves room for records before it (begins after the end of the file before it, or
    after offset 0). Its name is no guide: a file named before it may have been made after it (a
    clock set back, or a time zone further west, in between), as one named after it may have been
    made before it. Dropping it then drops every file that may hold records after its own, and
    recovery indexes them again from the end of the files kept. (Where a file begins at the end of
    the one before, a file between them would hold nothing but keys of that one record: room only
    when one record's keys can fill a file.) Without ``earliest`` (a load that keeps every file,
    verify's, which checks each against the one before) it goes where it most likely belongs: where
    its name puts it (after the file named before it), or before a file named after it that covers
    an earlier range."""
    keys, spans, bad = {}, {}, []
    for i, (path, index) in enumerate(found):
        name = os.path.basename(path)
        if index is not None and index.header_problem() is None:
            entries = index.index_count > 1
            begin, end = index.begin_phy_offset, index.end_phy_offset
            keys[i] = (not entries, begin, end, entries and not index.is_write_full(), name)
        elif earliest and (span := index.entry_span() if index is not None else None) is not None:
            spans[i] = (False, *span, False, name)  # where its entries put it: a tail is dropped from there
        elif earliest:
            bad.append(i)
        else:
            before = found[i - 1][1] if i else None
            at = [before.end_phy_offset if before is not None else 0]
            at += [f.begin_phy_offset for _, f in found[i + 1 :] if f is not None]
            begin = max(0, min(at))
            keys[i] = (False, begin, begin - 1, False, name)  # before a file beginning there too
    for i, key in spans.items():  # a span across a trusted file's range is damage too: not a guide
        if any(key[1] < k[2] and k[1] < key[2] for k in keys.values() if not k[0]):
            bad.append(i)
        else:
            keys[i] = key
    order = sorted(keys, key=keys.__getitem__)
    if bad:
        at = _first_room([index for i in order if (index := found[i][1]) is not None])
        order[at:at] = bad
    return [found[i] for i in order]


def _first_room(files: list[IndexFile]) -> int:
    """Where among ``files`` (trusted, in the order they were made) another file may first lie: before
    the first one beginning after the end of the one before it (after offset 0, for the first)."""
    end = 0
    for at, index in enumerate(files):
        begin = index.begin_phy_offset
        if begin > end or (begin == end and index.index_num - 1 <= _MOST_ENTRIES_OF_A_RECORD):
            return at
        end = index.end_phy_offset
    return len(files)


class IndexService:
    """Index files in creation order; the last one takes new keys until it is full."""

    def __init__(
        self,
        store_root: str,
        slot_num: int,
        index_num: int,
        mode: str,
        checkpoint: StoreCheckpoint,
    ) -> None:
        if index_file_size(slot_num, index_num) > JAVA_INT[1]:  # RocketMQ's IndexFile size is an int
            raise ConfigError(
                f"maxHashSlotNum {slot_num} and maxIndexNum {index_num} make a "
                f"{index_file_size(slot_num, index_num)}-byte index file; at most {JAVA_INT[1]} bytes"
            )
        self.dir = os.path.join(store_root, "index")
        self.slot_num = slot_num
        self.index_num = index_num
        self.mode = mode
        self.checkpoint = checkpoint
        self.files: list[IndexFile] = []
        self._lock = threading.Lock()
        self.allocator: SegmentAllocator | None = None  # faults a new file's slot table in ahead of use

    @property
    def file_size(self) -> int:
        return index_file_size(self.slot_num, self.index_num)

    def load(self, last_exit_ok: bool) -> None:
        """Open the index files in creation order and drop the first one not known to be whole and
        every later one: recovery indexes the log again from the end of the files kept.

        Creation order is what the headers say (the log range each file covers, ``creation_order``),
        not the names: a name is the local wall-clock time of creation, which a time-zone change, a
        DST fall-back or a clock stepped back puts out of order. A file is not known whole after a
        crash when it is newer than the checkpoint, not full or of the wrong size; after any exit,
        when its header contradicts itself, its entries or the end of the file before it. A file of
        the wrong size after a clean exit is refused (CorruptStoreError). A copy-on-write load with
        ``last_exit_ok`` (verify's, or a read-only open of a store shut down cleanly) keeps every
        file as it is, for verify to report it."""
        if not os.path.isdir(self.dir):
            return
        found: list[tuple[str, IndexFile | None]] = []  # in name order; None: of the wrong size
        files: list[IndexFile] = []
        try:
            for name in sorted(os.listdir(self.dir)):
                path = os.path.join(self.dir, name)
                if remove_leftover(path, self.mode):
                    continue
                if not name.isdigit() or not os.path.isfile(path):
                    log.warning("skipping %s: not an index file", path)
                    continue
                size = os.path.getsize(path)
                if size == self.file_size:
                    found.append((path, IndexFile.open(path, self.slot_num, self.index_num, self.mode)))
                    continue
                wrong = (
                    f"index file is {size} bytes; maxHashSlotNum={self.slot_num} and "
                    f"maxIndexNum={self.index_num} give {self.file_size}"
                )
                if last_exit_ok:
                    raise CorruptStoreError(wrong, path)
                log.warning("dropping %s after a crash: %s; rebuilt by recovery", path, wrong)
                found.append((path, None))
            checked = self.mode == "rw" or not last_exit_ok  # else maybe verify's load: it keeps what it finds
            dropping = False  # from the first file not known whole on: rebuilt from there
            ordered = creation_order(found, earliest=checked)
            for k, (path, index) in enumerate(ordered):
                if index is None:  # of the wrong size
                    dropping = True
                    if self.mode == "rw":
                        os.unlink(path)
                    continue
                if dropping:
                    log.info("dropping index file %s after a dropped one, rebuilt by recovery", path)
                    index.destroy(0)
                    continue
                damage = index.header_problem(files[-1].end_phy_offset if files else None) if checked else None
                if damage is not None:
                    log.warning("dropping index file %s (a damaged header: %s); rebuilt by recovery", path, damage)
                elif not (last_exit_ok or (self._durable(index) and k < len(ordered) - 1)):
                    damage = "not known to be on disk whole"
                    log.info("dropping index file %s: %s, rebuilt by recovery", path, damage)
                if damage is not None:
                    dropping = True
                    index.destroy(0)
                    continue
                files.append(index)
        except BaseException:  # the files opened are nobody's yet: close them (closing a dropped one is a no-op)
            for _, index in found:
                if index is not None:
                    index.close()
            raise
        self.files = files

    def _durable(self, index: IndexFile) -> bool:
        """After a crash, an index file is trusted only if it was flushed whole: full and not newer
        than the checkpoint (its header is checked on every load, ``IndexFile.header_problem``),
        and not the last file (``load``): a full file is flushed before the next one is made, so
        the last may not be, even when it ended in the millisecond the checkpoint names (a file
        filled before it in the same millisecond set that)."""
        return (
            index.is_write_full()
            and 0 < index.end_timestamp <= self.checkpoint.index_msg_timestamp
            and index.begin_timestamp <= index.end_timestamp
        )

    # -- building --------------------------------------------------------------------------------
    def build_index(self, records: Records) -> None:
        """Index the keys and unique keys of dispatched records (skipping ones already indexed)."""
        if not len(records):
            return
        with self._lock:
            last = int(records.offsets[-1])
            self._next_file_if_full(last)
            self._build_index(records)
            self._next_file_if_full(last)

    def _next_file_if_full(self, after: int) -> None:
        """Make the next file when the last one is full (or there is none) and a record at ``after``
        comes after its last entry, keys or not (ROLLBACK too): RocketMQ's buildIndex gets the last
        file, or makes the next one, for every record dispatched. Making it flushes the full file
        and moves the checkpoint's indexMsgTimestamp (spec 8.4, 8.5). Called before a batch (the
        last file was full already) and after it (the batch filled it)."""
        last = self.files[-1] if self.files else None
        if last is None or (last.is_write_full() and after > last.end_phy_offset):
            self._writable_file()

    def _build_index(self, records: Records) -> None:
        """``build_index`` with the last file there."""
        end_phy = self.files[-1].end_phy_offset
        done_keys = 0
        if int(records.offsets[0]) <= end_phy:
            # records before the last indexed one are done; that one may be only partly done
            # (its keys can straddle two files, and a crash may have dropped the second)
            start = int(np.searchsorted(records.offsets, end_phy, side="left"))
            if start >= len(records):
                return
            if start:
                records = records.select(np.arange(len(records)) >= start)
            if int(records.offsets[0]) == end_phy:
                done_keys = self._indexed_keys_of(end_phy)  # dropped below, if that record has keys
        hashes, phy_arr, time_arr = index_entries(records)
        if done_keys:
            other = np.flatnonzero(phy_arr != phy_arr[0]) if len(phy_arr) else []
            done_keys = min(done_keys, int(other[0]) if len(other) else len(phy_arr))
            hashes, phy_arr, time_arr = hashes[done_keys:], phy_arr[done_keys:], time_arr[done_keys:]
        self._put_entries(hashes, phy_arr, time_arr)

    def _indexed_keys_of(self, phy: int) -> int:
        """How many keys of the record at ``phy`` (the last one indexed) the files already hold:
        its entries end the last file and may begin in the files before it (a file filled up)."""
        done = 0
        for index in reversed(self.files):
            here = index.trailing_entries_for(phy)
            done += here
            if here < index.index_count - 1:  # another record's entry comes before them
                break
        return done

    def put_entries(self, hashes: np.ndarray, phys: np.ndarray, timestamps: np.ndarray) -> None:
        """Add index entries (key hash, commit-log offset, store time) as they are, in order, rolling
        to new files as they fill: for rebuilds that computed them elsewhere (``index_entries``)."""
        with self._lock:
            self._put_entries(hashes, phys, timestamps)

    def _put_entries(self, hashes: np.ndarray, phys: np.ndarray, timestamps: np.ndarray) -> None:
        done = 0
        while done < len(hashes):
            done += self._writable_file().put_keys(hashes[done:], phys[done:], timestamps[done:])

    def build_index_requests(self, requests: list[tuple]) -> None:
        """``build_index`` for a few dispatch request tuples, key by key (no numpy set-up)."""
        requests = [r for r in requests if r[D_TOPIC] is not None]  # not end-of-file markers
        if not requests:
            return
        with self._lock:
            self._next_file_if_full(requests[-1][D_OFFSET])
            end_phy = self.files[-1].end_phy_offset
            entries = []
            add = entries.append
            for r in requests:
                topic = r[D_TOPIC]
                if r[D_SYSFLAG] & _ROLLBACK == _ROLLBACK:
                    continue
                phy = r[D_OFFSET]
                if phy < end_phy:
                    continue  # already indexed
                keys = [r[D_UNIQ]] if r[D_UNIQ] else []
                if r[D_KEYS]:
                    keys += [k for k in r[D_KEYS].split(" ") if k]
                if phy == end_phy:
                    keys = keys[self._indexed_keys_of(phy) :]
                store_ts = r[D_STORE_TS]
                for key in keys:
                    add((topic_key_hash(topic, key), phy, store_ts))
            while entries:
                entries = entries[self._writable_file().put_few(entries) :]
            self._next_file_if_full(requests[-1][D_OFFSET])

    def _writable_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_write_full():
            return last
        if last is not None:  # flushed whole before the next file exists: a failure raises here, and
            last.flush()  # the retried dispatch flushes it again (never vouched for by a later file)
            self.checkpoint.index_msg_timestamp = last.end_timestamp
            self.checkpoint.flush()
        if self.mode == "rw":
            os.makedirs(self.dir, exist_ok=True)
        now = int(time.time() * 1000)
        path = os.path.join(self.dir, time_millis_to_human_string(now))
        while os.path.exists(path) or any(f.path == path for f in self.files):
            now += 1
            path = os.path.join(self.dir, time_millis_to_human_string(now))
        end_phy = last.end_phy_offset if last is not None else 0
        end_ts = last.end_timestamp if last is not None else 0
        index = IndexFile.create(path, self.slot_num, self.index_num, self.mode, end_phy, end_ts)
        if self.allocator is not None:  # keys land on random slots: fault the slot table in at once
            self.allocator.populate_soon(index.mapped, 0, INDEX_HEADER_SIZE + self.slot_num * HASH_SLOT_SIZE)
        self.files = [*self.files, index]
        return index

    def truncate(self, offset: int) -> int | None:
        """Forget index entries for records at or past ``offset`` (the log was cut there).

        Entries cannot be taken out of a file's hash chains, so every file holding any goes, and
        the offset from which its records must be indexed again is returned (None: nothing went).
        """
        with self._lock:
            # an empty file goes too: its header carries the end of the file before it
            doomed = [f for f in self.files if f.end_phy_offset >= offset]
            if not doomed:
                return None
            first = min(f.begin_phy_offset for f in doomed)
            for f in doomed:
                f.destroy(0)
            self.files = [f for f in self.files if f not in doomed]
            return min(first, offset)

    # -- queries ---------------------------------------------------------------------------------
    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of entries whose hash matches ``topic#key`` within [begin, end], newest
        files first, at most ``max_num`` (collisions included; the caller caps it at maxMsgsNumBatch)."""
        max_num = max(0, max_num)
        out: list[int] = []
        key_hash = topic_key_hash(topic, key)
        for index in reversed(self.files):
            if not index.mapped.hold():  # being deleted by cleanup: its entries are below the log
                break
            try:
                if index.is_time_matched(begin, end):
                    index.select_phy_offsets(key_hash, max_num, begin, end, out)
            except ValueError:
                if not index.mapped.mm.closed:
                    raise
                break  # the mapping closed under the query: the store is shutting down
            finally:
                index.mapped.release()
            if index.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    def last_update(self) -> tuple[int, int]:
        """(end timestamp, end commit-log offset) of the newest index file, or (0, 0)."""
        last = self.files[-1] if self.files else None
        return (last.end_timestamp, last.end_phy_offset) if last else (0, 0)

    # -- lifecycle -------------------------------------------------------------------------------
    def delete_expired(self, min_offset: int) -> int:
        """Delete leading files (never the last) whose entries all point below ``min_offset``."""
        with self._lock:
            doomed = []
            for index in self.files[:-1]:
                if index.end_phy_offset >= min_offset:
                    break
                if not index.destroy(3000):
                    break
                doomed.append(index)
            if doomed:
                self.files = self.files[len(doomed) :]
            return len(doomed)

    def flush(self) -> None:
        """Flush every index file; one that refuses (FlushError) does not stop the others."""
        flush_each(list(self.files), IndexFile.flush)

    def close(self) -> None:
        for index in self.files:
            index.close()

    def destroy(self) -> None:
        for index in self.files:
            index.destroy(0)
        self.files = []
