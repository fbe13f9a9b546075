"""``config/deletedTopics.json``: the topics ``delete_topics``/``clean_unused_topics`` removed, and
where the commit log ended when they did. A file of rocketstore's own (RocketMQ neither writes nor
reads it)::

    {
        "deletedTopicTable":{
            "Orders":123456
        }
    }

Every record of a topic removed when the log ended at ``X`` starts below ``X``; records of that
topic at or after ``X`` were put after the deletion (the topic came back, from queue offset 0).
Dispatch, recovery, rebuilds and verify take a record of a deleted topic below its ``X`` as
deleted: it is not dispatched to a consume queue or the index again (a reopen or a rebuild would
otherwise bring the old queue back, under the new one's offsets), and it is not missing from
them. The table is written like the broker's config files (``.tmp``, ``.bak``, rename, fsynced);
an entry whose ``X`` is at or below the commit log's first offset (retention removed every old
record) is dropped when the file is next written, unless its topic has queues again (a stream's
offsets tell by the entry that the topic was created again). A store without the file has no
deleted topics.
The log is flushed up to ``X`` before ``X`` is recorded; still, an entry above the log's end after
a recovery is lowered to that end (``lower_to``): no record of the topic is past it, and every
record put after the recovery is at or above it (a lost tail would otherwise hide new records).

``offsetsPending`` (written only when not empty) lists the deleted topics whose consumer offsets
``consumerOffset.json`` may still hold: a topic goes in with its deletion's entry, and out once
the offsets file is written without it. The next writable open drops the offsets of the topics
still listed (a crash cut their deletion short) and nothing else: an offset a group commits to a
deleted topic afterwards stays, as one of a topic that never existed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterable
from typing import Any

from rocketstore.codec.message import JAVA_LONG
from rocketstore.meta import fastjson
from rocketstore.meta.config_file import ConfigFile

FILE_NAME = "deletedTopics.json"

log = logging.getLogger(__name__)


class DeletedTopics(ConfigFile):
    """``config/deletedTopics.json``: topic -> the commit-log offset its deleted records are below."""

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        self.table: dict[str, int] = {}  # replaced, never changed in place (dispatch reads it unlocked)
        self.offsets_pending: frozenset[str] = frozenset()  # deleted topics whose offsets may be left

    def _reset(self) -> None:
        self.table = {}
        self.offsets_pending = frozenset()

    def _decode(self, obj: dict[Any, Any]) -> Any:
        pending = obj.get("offsetsPending", [])
        if not isinstance(pending, list) or not all(isinstance(topic, str) for topic in pending):
            raise ValueError("offsetsPending is not a JSON array of topic names")
        return self._decode_table(obj), frozenset(pending)

    def _decode_table(self, obj: dict[Any, Any]) -> dict[str, int]:
        raw = obj.get("deletedTopicTable")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise ValueError("deletedTopicTable is not a JSON object")
        table: dict[str, int] = {}
        for topic, end in raw.items():
            if isinstance(end, bool) or not isinstance(end, int) or not 0 <= end <= JAVA_LONG[1]:
                raise ValueError(f"deletedTopicTable {topic}: not a commit-log offset: {end!r}")
            table[str(topic)] = end
        return table

    def _apply(self, state: Any) -> None:
        self.table, self.offsets_pending = state

    def encode(self) -> str:
        with self._lock:
            top: dict[str, Any] = {"deletedTopicTable": dict(sorted(self.table.items()))}
            if self.offsets_pending:
                top["offsetsPending"] = sorted(self.offsets_pending)
            return fastjson.dumps(top)

    def record(self, topics: list[str], end: int, min_offset: int, live: Collection[str] = ()) -> dict[str, int]:
        """``topics`` were removed when the log ended at ``end``: each one's offset becomes ``end``
        (a topic deleted again keeps the highest), entries at or below ``min_offset`` (the log's
        first offset: no record of theirs is left) are dropped but those of ``live`` topics (with
        queues again: a stream's offsets tell by the entry that the topic was created again), and
        the file is written (when writable); when the write fails the table is as it was. Returns
        the new table. The topics' consumer offsets are pending until :meth:`offsets_dropped`."""
        with self._lock:
            before = self.table, self.offsets_pending
            table = dict(before[0])
            for topic in topics:
                table[topic] = max(end, table.get(topic, 0))
            self.table = {t: x for t, x in table.items() if x > max(min_offset, 0) or t in live}
            self.offsets_pending = self.offsets_pending | set(topics)
        try:
            self.persist()
        except BaseException:  # not written: not recorded (a later write must not finish it)
            self.table, self.offsets_pending = before
            raise
        return self.table

    def offsets_dropped(self, topics: Iterable[str]) -> None:
        """``consumerOffset.json`` was written without ``topics``' offsets: they are pending no more
        (the file is written when that changes something). A failed write is logged, not raised:
        the deletion is done, and the next open only drops those topics' offsets again."""
        with self._lock:
            if not self.offsets_pending & set(topics):
                return
            self.offsets_pending = self.offsets_pending - set(topics)
        try:
            self.persist()
        except OSError as exc:
            log.warning("%s not written (%s): the next open drops the offsets of %s again", self.path, exc, topics)

    def lower_to(self, end: int) -> dict[str, int]:
        """After a recovery that ended the log at ``end``: every entry above ``end`` becomes
        ``end`` (no record of a deleted topic is past it, every record put from now on is at or
        above it); the file is written when an entry changed (when writable). Returns the table."""
        with self._lock:
            if all(x <= end for x in self.table.values()):
                return self.table
            self.table = {t: min(x, max(end, 0)) for t, x in self.table.items()}
        self.persist()
        return self.table
