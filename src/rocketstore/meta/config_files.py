"""Config JSON files of the broker (spec section 10.3): ConfigManager load/persist and four managers.

* :func:`load_json_file` and :func:`write_json_file` (from :mod:`rocketstore.meta.json_files`):
  ``ConfigManager.load`` with its ``.bak`` fallback, and ``MixAll.string2File`` made crash-safe.
* :class:`TopicConfigManager` (``config/topics.json``), :class:`ConsumerOffsetManager`
  (``config/consumerOffset.json``), :class:`DelayOffsetManager` (``config/delayOffset.json``) and
  :class:`SubscriptionGroupManager` (``config/subscriptionGroup.json``) write the 4.9.8 shapes in
  fastjson's pretty format (:mod:`rocketstore.meta.fastjson`) and read 4.9.8 and 5.x files.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

from rocketstore.codec.message import JAVA_INT
from rocketstore.codec.topic import SCHEDULE_TOPIC
from rocketstore.errors import StoreClosedError, StoreFileError
from rocketstore.meta import fastjson
from rocketstore.meta.json_files import (
    as_bool,
    as_dict,
    as_entry,
    as_int,
    load_json_file,
    read_json_file,
    write_json_file,
)

__all__ = [
    "ConsumerOffsetManager",
    "DelayOffsetManager",
    "SubscriptionGroupManager",
    "TopicConfigManager",
    "load_json_file",
    "read_json_file",
    "write_json_file",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

TOPIC_GROUP_SEPARATOR = "@"

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

# SubscriptionGroupConfig 4.9.8 fields and defaults (groupName added per group).
_GROUP_DEFAULTS: dict[str, Any] = {
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}
_GROUP_INT_FIELDS = ("brokerId", "retryMaxTimes", "retryQueueNums", "whichBrokerWhenConsumeSlowly")
DEFAULT_RETRY_MAX_TIMES = _GROUP_DEFAULTS["retryMaxTimes"]
# The boolean fields of a group, with their defaults (5.x's consumeMessageOrderly too, when present).
_GROUP_BOOL_FIELDS = {k: v for k, v in _GROUP_DEFAULTS.items() if isinstance(v, bool)} | {
    "consumeMessageOrderly": False
}


# ------------------------------------------------------------------------------------------ helpers


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _new_data_version(with_state_version: bool = False) -> dict[str, int]:
    if with_state_version:
        return {"counter": 0, "stateVersion": 0, "timestamp": _now_ms()}
    return {"counter": 0, "timestamp": _now_ms()}


def _next_version(data_version: dict[str, Any]) -> None:
    """``DataVersion.nextVersion()``: new timestamp, counter + 1 (5.x: stateVersion back to 0)."""
    data_version["timestamp"] = _now_ms()
    data_version["counter"] = int(data_version.get("counter", 0)) + 1
    if "stateVersion" in data_version:
        data_version["stateVersion"] = 0


def _decode_data_version(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    dv = dict(as_dict(value, "dataVersion"))
    dv["counter"] = as_int(dv.get("counter", 0), "dataVersion.counter", 64)
    dv["timestamp"] = as_int(dv.get("timestamp", 0), "dataVersion.timestamp", 64)
    if "stateVersion" in dv:
        dv["stateVersion"] = as_int(dv["stateVersion"], "dataVersion.stateVersion", 64)
    return dv


def _sorted_bean(bean: dict[str, Any]) -> dict[str, Any]:
    """Bean properties sorted alphabetically, as fastjson writes them."""
    return {key: bean[key] for key in sorted(bean)}


def _decode_int_map(value: Any, what: str) -> dict[int, int]:
    table = as_dict(value, what)
    return {as_int(k, f"{what} key", 32): as_int(v, f"{what} value", 64) for k, v in table.items()}


def _decode_extra(obj: dict[Any, Any]) -> dict[Any, Any]:
    """The top-level fields of an offset file besides ``offsetTable``, kept as read (a
    ``dataVersion`` must still be one)."""
    extra = {key: value for key, value in obj.items() if key != "offsetTable"}
    if "dataVersion" in extra:
        _decode_data_version(extra["dataVersion"])
    return extra


def _group_topic_map(read: dict[str, list[Any]], offset_table: dict[str, Any]) -> dict[str, list[Any]]:
    """The ``groupTopicMap`` read, with every group and topic of the offset table added."""
    out = {group: list(topics) for group, topics in read.items()}
    for key in offset_table:
        parts = key.split(TOPIC_GROUP_SEPARATOR)
        if len(parts) == 2:
            topics = out.setdefault(parts[1], [])
            if parts[0] not in topics:
                topics.append(parts[0])
    return out


def _raise_not_removed(exc: BaseException, topics: list[str]) -> None:
    """A config file's StoreFileError that stopped a topic removal, raised again saying so."""
    if isinstance(exc, StoreFileError):
        raise StoreFileError.of(exc, f"no topic was removed ({', '.join(topics)})") from exc


class ConfigFile(abc.ABC):
    """Shared load/persist plumbing (``ConfigManager``); each file's manager supplies the codec."""

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        self.path = os.fspath(path)
        self.writable = writable
        self._lock = threading.RLock()
        self._persist_lock = threading.Lock()
        self.load_problem: str | None = None  # what the last load found wrong (``read_json_file``)
        self._written: str | None = None  # the content last loaded or written
        self.sealed = False  # written for the last time (shutdown): later changes would be lost

    @abc.abstractmethod
    def _decode(self, obj: dict[Any, Any]) -> Any:
        """The state held in a parsed file; ValueError when the file does not hold one."""

    @abc.abstractmethod
    def _apply(self, state: Any) -> None:
        """Make a decoded state the current one."""

    @abc.abstractmethod
    def _reset(self) -> None:
        """Back to the state of a store without this file."""

    @abc.abstractmethod
    def encode(self) -> str:
        """The file content ``persist`` writes (fastjson pretty format)."""

    def _snapshot(self) -> Any:
        """A copy of the state, taken under the lock, that :meth:`_render` encodes (by default the
        encoded text itself: a manager whose table is large copies it instead, so that its users
        wait for the copy only, not for the encode and the write)."""
        return self.encode()

    def _render(self, snapshot: Any) -> str:
        """The file content of a :meth:`_snapshot`, encoded without the lock."""
        return str(snapshot)

    def load(self) -> bool:
        """Replace the in-memory state with the file's (or its ``.bak``'s); False if there was none."""
        state, self.load_problem = read_json_file(self.path, self._decode, writable=self.writable)
        with self._lock:
            if state is None:
                self._reset()
                self._written = None
                return False
            self._apply(state)
            self._written = self.encode()
            return True

    def persist(self, *, last: bool = False) -> None:
        """Write the state to the file (no-op when the manager is not writable); ``last`` (the
        store's shutdown) seals the state as it is copied for the write, so that no change slips in after."""
        if not self.writable:
            return
        with self._persist_lock:  # one write at a time, in the order of their snapshots
            with self._lock:
                snapshot = self._snapshot()
                self.sealed = self.sealed or last
            self._write(self._render(snapshot))

    def persist_if_changed(self) -> bool:
        """``persist`` when the state differs from what was last loaded or written; True if written
        (the state is encoded once). A change made while a persist encodes and writes its snapshot
        is not in that file, and the next call writes it: the state then differs from it."""
        if not self.writable:
            return False
        with self._persist_lock:
            with self._lock:
                snapshot = self._snapshot()
            text = self._render(snapshot)
            if text == self._written:
                return False
            self._write(text)
            return True

    def _write(self, text: str) -> None:
        write_json_file(self.path, text, self._decode, known=self._written)
        self._written = text


# ----------------------------------------------------------------------------------------- managers


class TopicConfigManager(ConfigFile):
    """``topics.json``: ``{"dataVersion":{...},"topicConfigTable":{topic:{...}}}``.

    ``version`` picks the shape of what this manager creates: ``"4.x"`` (default ``"4.9.8"``) has no
    ``attributes`` and a dataVersion of counter/timestamp; ``"5.x"`` adds ``attributes: {}`` to new
    topics and ``stateVersion`` to a new dataVersion. Fields read from a file that this shape does
    not know are kept and written back.
    """

    def __init__(self, path: str | os.PathLike[str], version: str = "4.9.8", *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        if not (version.startswith("4.") or version.startswith("5.")):
            raise ValueError(f"unsupported RocketMQ version {version!r} (expected 4.x or 5.x)")
        self.version = version
        self._v5 = version.startswith("5.")
        self.topic_config_table: dict[str, dict[str, Any]] = {}
        self.data_version: dict[str, Any] = _new_data_version(self._v5)
        self._extra: dict[str, Any] = {}

    def _reset(self) -> None:
        self.topic_config_table = {}
        self.data_version = _new_data_version(self._v5)
        self._extra = {}

    def _decode(self, obj: dict[Any, Any]) -> Any:
        table: dict[str, dict[str, Any]] = {}
        for name, raw in as_dict(obj.get("topicConfigTable"), "topicConfigTable").items():
            cfg = dict(_TOPIC_CLASS_DEFAULTS)
            cfg["topicName"] = str(name)
            cfg.update(as_entry(raw, f"topic {name}"))
            for field in _TOPIC_INT_FIELDS:
                cfg[field] = as_int(cfg[field], f"topic {name} {field}", 32)
            cfg["order"] = as_bool(cfg["order"], f"topic {name} order", False)
            table[str(name)] = cfg
        extra = {k: v for k, v in obj.items() if k not in ("dataVersion", "topicConfigTable")}
        return table, _decode_data_version(obj.get("dataVersion")), extra

    def _apply(self, state: Any) -> None:
        table, data_version, extra = state
        self.topic_config_table = table
        self.data_version = data_version if data_version is not None else _new_data_version(self._v5)
        self._extra = extra

    def encode(self) -> str:
        """topics.json text (4.9.8 shape unless fields of another shape were loaded)."""
        with self._lock:
            top: dict[str, Any] = dict(self._extra)
            top["dataVersion"] = _sorted_bean(self.data_version)
            top["topicConfigTable"] = {name: _sorted_bean(cfg) for name, cfg in self.topic_config_table.items()}
            return fastjson.dumps(_sorted_bean(top))

    def remove(self, topic: str) -> bool:
        """Drop ``topic``'s entry (``deleteTopicConfig``); True (and a new dataVersion) if it had one."""
        with self._lock:
            if self.topic_config_table.pop(topic, None) is None:
                return False
            _next_version(self.data_version)
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
            table, data_version = dict(self.topic_config_table), dict(self.data_version)

            def put_back() -> None:
                self.topic_config_table.clear()
                self.topic_config_table.update(table)
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
            cfg = self.topic_config_table.get(topic)
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
                self.topic_config_table[topic] = cfg
                _next_version(self.data_version)
                return True
            changed = False
            for field in ("readQueueNums", "writeQueueNums"):
                if cfg.get(field, 0) < need:
                    cfg[field] = need
                    changed = True
            if changed:
                _next_version(self.data_version)
            return changed

    def find(self, topic: str) -> dict[str, Any] | None:
        """A copy of ``topic``'s config, or None."""
        with self._lock:
            cfg = self.topic_config_table.get(topic)
            return copy.deepcopy(cfg) if cfg is not None else None

    def batch_cq_topics(self) -> list[str]:
        """Topics whose ``queue.type`` attribute (RocketMQ 5) asks for a BatchCQ consume queue."""
        attrs = {topic: cfg.get("attributes") for topic, cfg in self.topic_config_table.items()}
        kinds = ("queue.type", "+queue.type")
        return [t for t, a in attrs.items() if isinstance(a, dict) and "BatchCQ" in map(a.get, kinds)]

    def topics(self) -> list[str]:
        """Topic names, in table order."""
        with self._lock:
            return list(self.topic_config_table)


class ConsumerOffsetManager(ConfigFile):
    """``consumerOffset.json``: ``offset_table["topic@group"][queue_id] = next offset to consume``.

    Written in the 4.9.8 form ``{"offsetTable":{...}}`` (queue ids ascending, bare integer keys).
    Other top-level fields of a 5.x file (``dataVersion``, ``groupTopicMap``, ``lmqOffsetTable``,
    ...) are written back as read, except ``groupTopicMap`` (group -> topics), which also gets
    every group and topic of the offset table so that it stays consistent with it.
    """

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        self.offset_table: dict[str, dict[int, int]] = {}
        self._extra: dict[str, Any] = {}

    def _reset(self) -> None:
        self.offset_table = {}
        self._extra = {}

    def _decode(self, obj: dict[Any, Any]) -> Any:
        table = as_dict(obj.get("offsetTable"), "offsetTable")
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

    def _snapshot(self) -> tuple[dict[str, Any], dict[str, dict[int, int]]]:
        # commits change the queue dicts in place and add keys: both levels are copied (the
        # ``_extra`` values are replaced on load, never changed in place)
        return dict(self._extra), {key: dict(queues) for key, queues in self.offset_table.items()}

    def _render(self, snapshot: tuple[dict[str, Any], dict[str, dict[int, int]]]) -> str:
        extra, offset_table = snapshot
        top: dict[str, Any] = dict(extra)
        if "groupTopicMap" in top:
            top["groupTopicMap"] = _group_topic_map(top["groupTopicMap"], offset_table)
        top["offsetTable"] = {key: dict(sorted(queues.items())) for key, queues in offset_table.items()}
        return fastjson.dumps(_sorted_bean(top))

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
        go; the ``topic@group`` keys removed (persist to make it last)."""
        with self._lock:
            gone = [key for key in self.offset_table if key.split(TOPIC_GROUP_SEPARATOR)[0] in topics]
            for key in gone:
                del self.offset_table[key]
            return gone

    def groups(self) -> list[str]:
        """Distinct consumer groups with offsets, in table order."""
        with self._lock:
            seen: dict[str, None] = {}
            for key in self.offset_table:
                parts = key.split(TOPIC_GROUP_SEPARATOR)
                if len(parts) == 2:
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
        return _decode_int_map(obj.get("offsetTable"), "offsetTable"), _decode_extra(obj)

    def _apply(self, state: Any) -> None:
        self.offset_table, self._extra = state

    def encode(self) -> str:
        """delayOffset.json text, 4.9.8 form (with the top-level fields a 5.x file had)."""
        with self._lock:
            top: dict[str, Any] = dict(self._extra)
            top["offsetTable"] = dict(sorted(self.offset_table.items()))
            return fastjson.dumps(_sorted_bean(top))

    def get(self, level: int) -> int:
        """Next offset of ``level``; 0 if unknown (ScheduleMessageService starts there)."""
        with self._lock:
            return self.offset_table.get(int(level), 0)

    def set(self, level: int, offset: int) -> None:
        """Record the next offset of delay ``level``."""
        with self._lock:
            self.offset_table[int(level)] = int(offset)


class SubscriptionGroupManager(ConfigFile):
    """``subscriptionGroup.json``: ``{"dataVersion":{...},"subscriptionGroupTable":{group:{...}}}``.

    New groups get the 4.9.8 fields; groups and top-level fields read from a 5.x file
    (``groupRetryPolicy``, ``forbiddenTable``, ...) are kept and written back.
    """

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        self.subscription_group_table: dict[str, dict[str, Any]] = {}
        self.data_version: dict[str, Any] = _new_data_version()
        self._extra: dict[str, Any] = {}

    def _reset(self) -> None:
        self.subscription_group_table = {}
        self.data_version = _new_data_version()
        self._extra = {}

    def _decode(self, obj: dict[Any, Any]) -> Any:
        table: dict[str, dict[str, Any]] = {}
        for name, raw in as_dict(obj.get("subscriptionGroupTable"), "subscriptionGroupTable").items():
            cfg = dict(_GROUP_DEFAULTS)
            cfg["groupName"] = str(name)
            cfg.update(as_entry(raw, f"group {name}"))
            for field in _GROUP_INT_FIELDS:
                cfg[field] = as_int(cfg[field], f"group {name} {field}", 32)
            for field, default in _GROUP_BOOL_FIELDS.items():
                if field in cfg:
                    cfg[field] = as_bool(cfg[field], f"group {name} {field}", default)
            table[str(name)] = cfg
        extra = {k: v for k, v in obj.items() if k not in ("dataVersion", "subscriptionGroupTable")}
        return table, _decode_data_version(obj.get("dataVersion")), extra

    def _apply(self, state: Any) -> None:
        table, data_version, extra = state
        self.subscription_group_table = table
        self.data_version = data_version if data_version is not None else _new_data_version()
        self._extra = extra

    def encode(self) -> str:
        """subscriptionGroup.json text."""
        with self._lock:
            top: dict[str, Any] = dict(self._extra)
            top["dataVersion"] = _sorted_bean(self.data_version)
            top["subscriptionGroupTable"] = {
                name: _sorted_bean(cfg) for name, cfg in self.subscription_group_table.items()
            }
            return fastjson.dumps(_sorted_bean(top))

    def find(self, group: str) -> dict[str, Any] | None:
        """A copy of ``group``'s config, or None."""
        with self._lock:
            cfg = self.subscription_group_table.get(group)
            return copy.deepcopy(cfg) if cfg is not None else None

    def ensure(self, group: str) -> dict[str, Any]:
        """A copy of ``group``'s config, creating it with the defaults (and a new dataVersion) if absent.

        Call ``persist`` afterwards to write a creation.
        """
        with self._lock:
            cfg = self.subscription_group_table.get(group)
            if cfg is None:
                cfg = dict(_GROUP_DEFAULTS)
                cfg["groupName"] = group
                cfg = self.subscription_group_table[group] = _sorted_bean(cfg)
                _next_version(self.data_version)
            return copy.deepcopy(cfg)

    def setting(self, group: str, name: str) -> int:
        """The int setting ``name`` (``retryMaxTimes``, ``retryQueueNums``) of ``group``; its
        default (16, 1) if the group is unknown."""
        with self._lock:
            return int(self.subscription_group_table.get(group, _GROUP_DEFAULTS).get(name, _GROUP_DEFAULTS[name]))
