"""``config/consumerOffset.json`` and ``config/delayOffset.json``: the two offset tables
(``ConsumerOffsetManager``, ``DelayOffsetManager``), written in the 4.9.8 form, 5.x fields kept."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import Any

from rocketstore.config_values import java_split
from rocketstore.errors import StoreClosedError
from rocketstore.meta import fastjson
from rocketstore.meta.config_file import ConfigFile, decode_data_version, sorted_bean
from rocketstore.meta.json_files import as_dict, as_entry, as_int, as_table

__all__ = ["ConsumerOffsetManager", "DelayOffsetManager"]

TOPIC_GROUP_SEPARATOR = "@"


def _decode_int_map(value: Any, what: str) -> dict[int, int]:
    table = as_dict(value, what)
    return {as_int(k, f"{what} key", 32): as_int(v, f"{what} value", 64) for k, v in table.items()}


def _decode_extra(obj: dict[Any, Any]) -> dict[Any, Any]:
    """The top-level fields of an offset file besides ``offsetTable``, kept as read (a
    ``dataVersion`` must still be one)."""
    extra = {key: value for key, value in obj.items() if key != "offsetTable"}
    if "dataVersion" in extra:
        decode_data_version(extra["dataVersion"])
    return extra


def _topic_and_group(key: str) -> list[str] | None:
    """An offset table key split as RocketMQ splits it: [topic, group], or None when it is not
    exactly two parts (such a key is never a topic's offsets to RocketMQ)."""
    parts = java_split(key, TOPIC_GROUP_SEPARATOR)
    return parts if len(parts) == 2 else None


def _group_topic_map(offset_table: dict[str, Any]) -> dict[str, list[Any]]:
    """5.x's ``getGroupTopicMap``: group -> topics, built from the offset table at each write."""
    out: dict[str, list[Any]] = {}
    for key in offset_table:
        parts = _topic_and_group(key)
        if parts is not None:
            topics = out.setdefault(parts[1], [])
            if parts[0] not in topics:
                topics.append(parts[0])
    return out


class ConsumerOffsetManager(ConfigFile):
    """``consumerOffset.json``: ``offset_table["topic@group"][queue_id] = next offset to consume``.

    Written in the 4.9.8 form ``{"offsetTable":{...}}`` (queue ids ascending, bare integer keys).
    Other top-level fields of a 5.x file (``dataVersion``, ``groupTopicMap``, ``lmqOffsetTable``,
    ...) are written back as read, except ``groupTopicMap`` (group -> topics), which 5.x builds from
    the offset table at each write, as it is here.
    """

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        self.offset_table: dict[str, dict[int, int]] = {}
        self._extra: dict[str, Any] = {}
        self._dropping: frozenset[str] = frozenset()  # topics removed here, maybe not yet from the file
        # called with topics whose offsets the file holds no more (deletedTopics.json's offsetsPending)
        self.on_dropped: Callable[[frozenset[str]], None] | None = None

    def _reset(self) -> None:
        self.offset_table = {}
        self._extra = {}
        self._dropping = frozenset()

    def _decode(self, obj: dict[Any, Any]) -> Any:
        table = as_table(obj, "offsetTable")
        offsets = {
            str(key): _decode_int_map(as_entry(value, f"offsetTable[{key}]"), f"offsetTable[{key}]")
            for key, value in table.items()
        }
        extra = _decode_extra(obj)
        group_topics = as_dict(extra.get("groupTopicMap"), "groupTopicMap")
        if any(not isinstance(topics, list) for topics in group_topics.values()):
            raise ValueError("groupTopicMap values are not JSON arrays")
        return offsets, extra

    def _apply(self, state: Any) -> None:
        self.offset_table, self._extra = state

    def encode(self) -> str:
        """consumerOffset.json text, 4.9.8 form (with the top-level fields a 5.x file had); commits
        and queries wait for a copy of the table only, not for the encode."""
        with self._lock:
            snapshot = self._snapshot()
        return self._render(snapshot)

    def _snapshot(self) -> tuple[dict[str, Any], dict[str, dict[int, int]], frozenset[str]]:
        # commits change the queue dicts in place and add keys: both levels are copied (the
        # ``_extra`` values are replaced on load, never changed in place); with the topics removed
        return dict(self._extra), {key: dict(queues) for key, queues in self.offset_table.items()}, self._dropping

    def _render(self, snapshot: tuple[dict[str, Any], dict[str, dict[int, int]], frozenset[str]]) -> str:
        extra, offset_table, _ = snapshot
        top: dict[str, Any] = dict(extra)
        if "groupTopicMap" in top:
            top["groupTopicMap"] = _group_topic_map(offset_table)
        top["offsetTable"] = {key: dict(sorted(queues.items())) for key, queues in offset_table.items()}
        return fastjson.dumps(sorted_bean(top))

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next offset ``group`` consumes from ``topic``/``queue_id``."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            if self.sealed:  # a commit that raced the shutdown's last write: it would be lost
                raise StoreClosedError(f"{self.path} was written for the last time: the store is shut down")
            queues = self.offset_table.get(key)
            if queues is None:
                queues = self.offset_table[key] = {}
            queues[int(queue_id)] = int(offset)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 if unknown."""
        with self._lock:
            queues = self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group)
            if queues is None:
                return -1
            return queues.get(int(queue_id), -1)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        """Copy of queue id -> offset for ``group`` on ``topic`` (empty if unknown), ids ascending."""
        with self._lock:
            queues = self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group)
            return dict(sorted(queues.items())) if queues else {}

    def remove_topics(self, topics: Collection[str]) -> list[str]:
        """RocketMQ's ``cleanOffsetByTopic`` for each of ``topics``: every group's offsets of them
        go; the ``topic@group`` keys removed (persist to make it last: ``on_dropped`` is called with
        ``topics`` once the file is written without them)."""
        with self._lock:
            gone = [key for key in self.offset_table if (parts := _topic_and_group(key)) and parts[0] in topics]
            for key in gone:
                del self.offset_table[key]
            self._dropping = self._dropping | set(topics)
            return gone

    def _on_disk(self, snapshot: tuple[dict[str, Any], dict[str, dict[int, int]], frozenset[str]]) -> None:
        dropped = snapshot[2]
        if dropped:
            with self._lock:
                self._dropping = self._dropping - dropped
            if self.on_dropped is not None:
                self.on_dropped(dropped)

    def groups(self) -> list[str]:
        """Distinct consumer groups with offsets, in table order."""
        with self._lock:
            seen: dict[str, None] = {}
            for key in self.offset_table:
                parts = _topic_and_group(key)
                if parts is not None:
                    seen.setdefault(parts[1], None)
            return list(seen)


class DelayOffsetManager(ConfigFile):
    """``delayOffset.json``: delay level -> next consume-queue offset of ``SCHEDULE_TOPIC_XXXX``.

    Written in the 4.9.8 form ``{"offsetTable":{1:5,3:12\\n\\t}}`` (levels ascending); other
    top-level fields (a 5.x ``dataVersion``) are written back as read.
    """

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        self.offset_table: dict[int, int] = {}
        self._extra: dict[str, Any] = {}

    def _reset(self) -> None:
        self.offset_table = {}
        self._extra = {}

    def _decode(self, obj: dict[Any, Any]) -> Any:
        return _decode_int_map(as_table(obj, "offsetTable"), "offsetTable"), _decode_extra(obj)

    def _apply(self, state: Any) -> None:
        self.offset_table, self._extra = state

    def encode(self) -> str:
        """delayOffset.json text, 4.9.8 form (with the top-level fields a 5.x file had)."""
        with self._lock:
            top: dict[str, Any] = dict(self._extra)
            top["offsetTable"] = dict(sorted(self.offset_table.items()))
            return fastjson.dumps(sorted_bean(top))

    def get(self, level: int) -> int:
        """Next offset of ``level``; 0 if unknown (ScheduleMessageService starts there)."""
        with self._lock:
            return self.offset_table.get(int(level), 0)

    def set(self, level: int, offset: int) -> None:
        """Record the next offset of delay ``level``."""
        with self._lock:
            self.offset_table[int(level)] = int(offset)
