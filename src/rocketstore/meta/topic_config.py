"""``config/topics.json``: the topic table (``TopicConfigManager``), 4.9.8 and 5.x shapes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from typing import Any

from rocketstore.codec.message import JAVA_INT
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.errors import StoreFileError
from rocketstore.meta.config_file import BeanTable, next_version

__all__ = ["DEFAULT_TOPIC_QUEUE_NUMS", "TopicConfigManager"]

# TopicConfig field defaults of the Java class (used for fields missing from a loaded file).
_TOPIC_CLASS_DEFAULTS: dict[str, Any] = {
    "order": False,
    "perm": 6,
    "readQueueNums": 16,
    "topicFilterType": "SINGLE_TAG",
    "topicSysFlag": 0,
    "writeQueueNums": 16,
}
_TOPIC_INT_FIELDS = ("perm", "readQueueNums", "topicSysFlag", "writeQueueNums")
DEFAULT_TOPIC_QUEUE_NUMS = 4
SCHEDULE_TOPIC_QUEUE_NUM = 18  # TopicConfigManager's SCHEDULE_TOPIC_XXXX: one queue per delay level


def _raise_not_removed(exc: BaseException, topics: list[str]) -> None:
    """A config file's StoreFileError that stopped a topic removal, raised again saying so."""
    if isinstance(exc, StoreFileError):
        raise StoreFileError.of(exc, f"no topic was removed ({', '.join(topics)})") from exc


class TopicConfigManager(BeanTable):
    """``topics.json``: ``{"dataVersion":{...},"topicConfigTable":{topic:{...}}}``.

    ``version`` picks the shape of what this manager creates: ``"4.x"`` (default ``"4.9.8"``) has no
    ``attributes`` and a dataVersion of counter/timestamp; ``"5.x"`` adds ``attributes: {}`` to new
    topics and ``stateVersion`` to a new dataVersion. Fields read from a file that this shape does
    not know are kept and written back.
    """

    TABLE = "topicConfigTable"
    NAME = "topicName"
    WHAT = "topic"
    DEFAULTS = _TOPIC_CLASS_DEFAULTS
    INT_FIELDS = _TOPIC_INT_FIELDS
    BOOL_FIELDS = {"order": False}

    def __init__(self, path: str | os.PathLike[str], version: str = "4.9.8", *, writable: bool = True) -> None:
        if not (version.startswith("4.") or version.startswith("5.")):
            raise ValueError(f"unsupported RocketMQ version {version!r} (expected 4.x or 5.x)")
        super().__init__(path, writable=writable, v5=version.startswith("5."))
        self.version = version

    @property
    def topic_config_table(self) -> dict[str, dict[str, Any]]:
        """Topic name -> its config (the table itself)."""
        return self.table

    def remove(self, topic: str) -> bool:
        """Drop ``topic``'s entry (``deleteTopicConfig``); True (and a new dataVersion) if it had one."""
        with self._lock:
            if self.table.pop(topic, None) is None:
                return False
            next_version(self.data_version)
            return True

    def remove_and_persist(self, topics: Iterable[str], then: Callable[[], object] | None = None) -> list[str]:
        """Drop ``topics``' entries and write the file without them (when writable), then call
        ``then`` (the rest of a deletion that must go with it); the topics that had one. When the
        write or ``then`` fails, the table and its dataVersion are put back as they were (and
        written again, after ``then``) before the error is raised: no topic is gone from memory
        that the file still lists, nor from the file when the deletion did not go through (a
        StoreFileError says so)."""
        topics = list(topics)
        with self._persist_lock, self._lock:  # in persist's order; nothing changes the table meanwhile
            table, data_version = dict(self.table), dict(self.data_version)

            def put_back() -> None:
                self.table.clear()
                self.table.update(table)
                self.data_version.clear()
                self.data_version.update(data_version)

            removed = [topic for topic in topics if self.remove(topic)]
            try:
                if self.writable:
                    self._write(self.encode())
            except BaseException as exc:
                put_back()
                _raise_not_removed(exc, topics)
                raise
            try:
                if then is not None:
                    then()
            except BaseException as exc:
                put_back()
                if self.writable:
                    with contextlib.suppress(OSError):  # it was written a moment ago: it most likely is again
                        self._write(self.encode())
                _raise_not_removed(exc, topics)
                raise
            return removed

    def ensure(self, topic: str, queue_id: int, *, queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> bool:
        """Make sure ``topic`` exists with a queue ``queue_id``; True (and a new dataVersion) if changed.

        A new topic gets ``max(queue_nums, queue_id + 1)`` read and write queues (SCHEDULE_TOPIC_XXXX
        at least 18, as RocketMQ registers it), perm 6; an existing one grows
        readQueueNums/writeQueueNums to ``queue_id + 1`` when smaller; counts stay Java ints
        (TopicConfig's fields), at most 2**31 - 1. Call ``persist`` afterwards to write the change.
        """
        if queue_id < 0:
            raise ValueError(f"queue id must not be negative: {queue_id}")
        if topic == SCHEDULE_TOPIC:
            queue_nums = max(queue_nums, SCHEDULE_TOPIC_QUEUE_NUM)
        need = min(queue_id + 1, JAVA_INT[1])  # a count Java reads: queue 2**31 - 1 gets 2**31 - 1
        with self._lock:
            cfg = self.table.get(topic)
            if cfg is None:
                nums = min(max(queue_nums, need), JAVA_INT[1])
                cfg = {
                    "order": False,
                    "perm": 6,
                    "readQueueNums": nums,
                    "topicFilterType": "SINGLE_TAG",
                    "topicName": topic,
                    "topicSysFlag": 0,
                    "writeQueueNums": nums,
                }
                if self._v5:
                    cfg["attributes"] = {}
                self.table[topic] = cfg
                next_version(self.data_version)
                return True
            changed = False
            for field in ("readQueueNums", "writeQueueNums"):
                if cfg.get(field, 0) < need:
                    cfg[field] = need
                    changed = True
            if changed:
                next_version(self.data_version)
            return changed

    def batch_cq_topics(self) -> list[str]:
        """Topics whose ``queue.type`` attribute (RocketMQ 5) asks for a BatchCQ consume queue."""
        attrs = {topic: cfg.get("attributes") for topic, cfg in self.table.items()}
        kinds = ("queue.type", "+queue.type")
        return [t for t, a in attrs.items() if isinstance(a, dict) and "BatchCQ" in map(a.get, kinds)]

    def topics(self) -> list[str]:
        """Topic names, in table order."""
        with self._lock:
            return list(self.table)
