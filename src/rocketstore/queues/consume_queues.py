"""All consume queues of a store: load, recover, create on demand, flush (ConsumeQueueStore)."""

from __future__ import annotations

import logging
import os
import shutil
import threading

from rocketstore.codec.scan import java_int
from rocketstore.codec.topic import NEVER_REMOVED, queue_folder_ok
from rocketstore.errors import CorruptStoreError
from rocketstore.files.mapped_file import flush_each
from rocketstore.queues.consume_queue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue, record_end

log = logging.getLogger(__name__)


def queue_id_of(name: str) -> int | None:
    """The queue id a ``consumequeue/<topic>/`` entry named ``name`` is the folder of, or None: a
    Java int as ``Integer.toString`` writes it (a damaged record's id may be negative). ``int()``
    also takes a leading zero or sign, other scripts' digits and ids past the range: such a queue
    would not be read from the folder its files are in."""
    queue_id = java_int(name)
    return queue_id if queue_id is not None and str(queue_id) == name else None


def queues_reach(root: str) -> int:
    """How far into the commit log the consume queues under ``root`` reach, read from their files
    without loading them: the highest offset a queue's last unit's record ends at (-1: none). The
    last unit of each queue's last file is found by bisection (units are written from the start of
    a file, zeros follow them): a few reads a queue, whatever the file size."""
    reach = -1
    for folder, _dirs, files in os.walk(os.path.join(root, "consumequeue")):
        names = sorted(name for name in files if name.isdigit())
        try:
            with open(os.path.join(folder, names[-1]), "rb") as f:
                reach = max(reach, _last_unit_end(f.fileno()))
        except (IndexError, OSError):  # no file, or one that cannot be read: the store's open names it
            continue
    return reach


def _last_unit_end(fd: int) -> int:
    """Where the record of the last unit of the consume-queue file ``fd`` ends (-1: no unit, or a filler)."""
    lo, hi = 0, os.fstat(fd).st_size // CQ_STORE_UNIT_SIZE
    while lo < hi:  # the first unit of zeros
        mid = (lo + hi) // 2
        if os.pread(fd, CQ_STORE_UNIT_SIZE, mid * CQ_STORE_UNIT_SIZE).strip(b"\0"):
            lo = mid + 1
        else:
            hi = mid
    if not lo:
        return -1
    phy, size, _tags = UNIT.unpack(os.pread(fd, CQ_STORE_UNIT_SIZE, (lo - 1) * CQ_STORE_UNIT_SIZE))
    return record_end(phy, size) if phy >= 0 and size > 0 else -1


def deleted_leftover(topic: str, queue_end: int, deleted: dict[str, int]) -> bool:
    """Whether a queue of ``topic`` whose last record ends at ``queue_end`` in the log was left by
    a deletion cut short: the topic is in ``deleted`` (``config/deletedTopics.json``) and every
    unit points below the log end recorded there (a queue written again points at or after it)."""
    return topic in deleted and topic not in NEVER_REMOVED and queue_end <= deleted[topic]


class ConsumeQueueStore:
    """The ``consumequeue/`` folder: one ConsumeQueue per (topic, queueId)."""

    def __init__(self, store_root: str, file_size: int, mode: str = "rw") -> None:
        self.root = os.path.join(store_root, "consumequeue")
        self.file_size = file_size
        self.mode = mode
        self.table: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self._gaps = (False, False)  # (hold_gaps, empty_starts_anywhere) for every queue, new ones too

    def load(self) -> None:
        """Map every ``consumequeue/<topic>/<queueId>/`` folder; other entries are skipped."""
        for topic, queue_id in self.folders():
            self.load_queue(topic, queue_id)

    def folders(self) -> list[tuple[str, int]]:
        """The (topic, queue id) of every queue folder on disk; other entries are skipped (warned about)."""
        if not os.path.isdir(self.root):
            return []
        found = []
        for topic in sorted(os.listdir(self.root)):
            topic_dir = os.path.join(self.root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in sorted(os.listdir(topic_dir)):
                queue_id = queue_id_of(qid)
                if queue_id is None or not os.path.isdir(os.path.join(topic_dir, qid)):
                    log.warning("skipping %s: not a queue folder", os.path.join(topic_dir, qid))
                    continue
                found.append((topic, queue_id))
        return found

    def load_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Map the files of one queue folder (CorruptStoreError for a file of the wrong size)."""
        cq = ConsumeQueue(topic, queue_id, self.root, self.file_size, self.mode)
        cq.load()
        self.table[(topic, queue_id)] = cq
        return cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.table.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.table.get((topic, queue_id))
        if cq is None:
            if not queue_folder_ok(topic):  # callers skip such records: nothing is made outside the store
                raise CorruptStoreError(f"a record's topic {topic!r} cannot name a consume-queue folder")
            with self._lock:
                cq = self.table.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.root, self.file_size, self.mode)
                    cq.hold_gaps, cq.empty_starts_anywhere = self._gaps
                    self.table = {**self.table, (topic, queue_id): cq}
        return cq

    def queues(self) -> list[ConsumeQueue]:
        return list(self.table.values())

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in sorted(self.table):
            out.setdefault(topic, []).append(qid)
        return out

    # -- recovery ---------------------------------------------------------------------------------
    def recover(self) -> None:
        for cq in self.table.values():
            cq.recover()

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.table.values()), default=-1)

    def damaged_end(self) -> int | None:
        """The lowest end of the queues that may miss units at their end (recovery cut written
        units, or load left out an empty last file): their records are dispatched again from
        there. None when no queue was damaged."""
        return _lowest_end([cq for cq in self.table.values() if cq.damaged])

    def hold_gaps(self, hold: bool, empty_starts_anywhere: bool = False) -> None:
        """(recovery) While ``hold``, a unit that would land past its queue's end is not written
        and the queue is marked ``behind``; ``empty_starts_anywhere``: the walk starts at the log's
        first segment, so an empty queue's first record found is its first (fillers before it)."""
        self._gaps = (hold, empty_starts_anywhere)
        for cq in self.table.values():
            cq.hold_gaps, cq.empty_starts_anywhere = self._gaps

    def behind(self) -> list[ConsumeQueue]:
        """The queues recovery found short of the log (``hold_gaps``)."""
        return [cq for cq in self.table.values() if cq.behind]

    def behind_end(self) -> int | None:
        """The lowest end of the queues found ``behind``: their records are dispatched again from
        there (0 for an empty one: from the log's first segment). None when none is behind."""
        return _lowest_end(self.behind())

    def truncate_dirty(self, phy_offset: int) -> None:
        for cq in self.table.values():
            if cq.max_physic_offset > phy_offset:
                cq.truncate_dirty_logic_files(phy_offset)

    def truncate_untrusted(self, phy_offset: int) -> None:
        for cq in self.table.values():
            cq.truncate_untrusted(phy_offset)

    def correct_min_offsets(self, min_phy: int) -> None:
        for cq in self.table.values():
            cq.correct_min_offset(min_phy)

    def offset_table(self) -> dict[tuple[str, int], int]:
        """(topic, queueId) -> max offset: where the next message of each queue goes."""
        return {key: cq.max_offset_in_queue() for key, cq in self.table.items()}

    # -- lifecycle -------------------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> None:
        """Flush every queue; one whose file refuses (FlushError) does not keep the others dirty."""
        flush_each(list(self.table.values()), lambda cq: cq.flush(least_pages))

    def destroy_all(self) -> None:
        for cq in self.table.values():
            cq.destroy()
        self.table = {}
        if self.mode == "rw" and os.path.isdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)

    def unused_topics(self, keep: set[str]) -> list[str]:
        """The topics with queues that ``delete_topics(keep)`` removes."""
        return sorted({t for t, _ in self.table if t not in keep and t not in NEVER_REMOVED})

    def delete_topics(self, keep: set[str]) -> list[str]:
        """Remove the queues of every topic not in ``keep`` (cleanUnusedTopic), but never the
        schedule topic's or the transaction op topic's."""
        gone = self.unused_topics(keep)
        self._remove(gone)
        return gone

    def remove_deleted_leftovers(self, deleted: dict[str, int]) -> list[tuple[str, int]]:
        """Remove the queues a deletion that was cut short left (a crash after
        ``config/deletedTopics.json`` was written, before the folders went): a queue of a topic in
        ``deleted`` whose units all point below the topic's offset there. (A queue of a topic
        written again after its deletion points at or after it.) A copy-on-write store only drops
        them from the table. Returns their keys."""
        doomed = [key for key, cq in self.table.items() if deleted_leftover(key[0], cq.max_physic_offset, deleted)]
        done = "removed now" if self.mode == "rw" else "left out (read-only: the next writable open removes it)"
        for key in doomed:
            log.warning(
                "consumequeue/%s/%d: a queue of a deleted topic that its deletion did not remove (cut short); %s",
                *key,
                done,
            )
        if doomed:
            self._remove_keys(doomed)
        return doomed

    def _remove(self, gone: list[str]) -> None:
        topics = set(gone)
        self._remove_keys([key for key in self.table if key[0] in topics])

    def _remove_keys(self, keys: list[tuple[str, int]]) -> None:
        """Destroy the queues ``keys`` and drop them from the table; a writable store removes their
        folders, and a topic's folder when none of its queues is left."""
        for key in keys:
            self.table[key].destroy()
        doomed = set(keys)
        with self._lock:  # find_or_create adds to the table under it
            self.table = {k: v for k, v in self.table.items() if k not in doomed}
        if self.mode != "rw":
            return
        left = {t for t, _ in self.table}
        for topic, queue_id in keys:
            if topic in left:
                shutil.rmtree(os.path.join(self.root, topic, str(queue_id)), ignore_errors=True)
        for topic in {t for t, _ in keys} - left:
            shutil.rmtree(os.path.join(self.root, topic), ignore_errors=True)

    def close(self) -> None:
        for cq in self.table.values():
            cq.close()


def _lowest_end(queues: list[ConsumeQueue]) -> int | None:
    """The lowest end (record end of the last unit; 0 for an empty queue) of ``queues``, or None."""
    return min((max(cq.max_physic_offset, 0) for cq in queues), default=None)
