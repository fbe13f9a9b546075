"""Config JSON files of the broker (spec section 10.3): what every one of them shares.

:class:`ConfigFile` is RocketMQ's ``ConfigManager``: load with the ``.bak`` fallback and a crash-safe
persist (:func:`~rocketstore.meta.json_files.read_json_file`,
:func:`~rocketstore.meta.json_files.write_json_file`), around a codec each file's manager supplies.
The ``dataVersion`` helpers serve the files that carry one; :class:`BeanTable` is a table of named
beans with one (topics, subscription groups). The managers:
:mod:`rocketstore.meta.topic_config` (``topics.json``), :mod:`rocketstore.meta.subscription_groups`
(``subscriptionGroup.json``) and :mod:`rocketstore.meta.offset_files` (``consumerOffset.json``,
``delayOffset.json``), all in fastjson's pretty format (:mod:`rocketstore.meta.fastjson`).
"""

from __future__ import annotations

import abc
import copy
import os
import threading
import time
from typing import Any

from rocketstore.meta import fastjson
from rocketstore.meta.json_files import as_bool, as_dict, as_entry, as_int, as_table, read_json_file, write_json_file

__all__ = ["BeanTable", "ConfigFile", "decode_data_version", "new_data_version", "next_version", "sorted_bean"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_data_version(with_state_version: bool = False) -> dict[str, int]:
    if with_state_version:
        return {"counter": 0, "stateVersion": 0, "timestamp": _now_ms()}
    return {"counter": 0, "timestamp": _now_ms()}


def next_version(data_version: dict[str, Any]) -> None:
    """``DataVersion.nextVersion()``: new timestamp, counter + 1 (5.x: stateVersion back to 0)."""
    data_version["timestamp"] = _now_ms()
    counter = int(data_version.get("counter", 0)) + 1  # an AtomicLong: Long.MAX_VALUE + 1 wraps
    data_version["counter"] = counter - 2**64 if counter >= 2**63 else counter
    if "stateVersion" in data_version:
        data_version["stateVersion"] = 0


def decode_data_version(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    dv = dict(as_dict(value, "dataVersion"))
    dv["counter"] = as_int(dv.get("counter", 0), "dataVersion.counter", 64)
    dv["timestamp"] = as_int(dv.get("timestamp", 0), "dataVersion.timestamp", 64)
    if "stateVersion" in dv:
        dv["stateVersion"] = as_int(dv["stateVersion"], "dataVersion.stateVersion", 64)
    return dv


def sorted_bean(bean: dict[str, Any]) -> dict[str, Any]:
    """Bean properties sorted alphabetically, as fastjson writes them."""
    return {key: bean[key] for key in sorted(bean)}


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
            self._on_disk(snapshot)

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
                self._on_disk(snapshot)
                return False
            self._write(text)
            self._on_disk(snapshot)
            return True

    def _on_disk(self, snapshot: Any) -> None:  # noqa: B027 (a hook: most files need none)
        """The file holds the state of ``snapshot`` now (written, or found so)."""

    def _write(self, text: str) -> None:
        write_json_file(self.path, text, self._decode, known=self._written)
        self._written = text


class BeanTable(ConfigFile):
    """A file of one table of named beans and a ``dataVersion`` (``topics.json``,
    ``subscriptionGroup.json``): ``{"dataVersion":{...},TABLE:{name:{...}}}``. Each bean read gets
    the Java class's ``DEFAULTS`` for missing fields and its name in ``NAME``; ``INT_FIELDS`` must
    be Java ints and ``BOOL_FIELDS`` (with their defaults) read as fastjson casts them, when
    present. Other top-level fields, and bean fields this shape does not know, are written back."""

    TABLE = ""  # the table's key in the file
    NAME = ""  # the field holding each bean's name
    WHAT = ""  # a bean, in error messages
    DEFAULTS: dict[str, Any] = {}
    INT_FIELDS: tuple[str, ...] = ()
    BOOL_FIELDS: dict[str, bool] = {}

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True, v5: bool = False) -> None:
        super().__init__(path, writable=writable)
        self._v5 = v5  # a new dataVersion has 5.x's stateVersion
        self.table: dict[str, dict[str, Any]] = {}
        self.data_version: dict[str, Any] = new_data_version(v5)
        self._extra: dict[str, Any] = {}

    def _reset(self) -> None:
        self.table = {}
        self.data_version = new_data_version(self._v5)
        self._extra = {}

    def _decode(self, obj: dict[Any, Any]) -> Any:
        table: dict[str, dict[str, Any]] = {}
        for name, raw in as_table(obj, self.TABLE).items():
            cfg = dict(self.DEFAULTS)
            cfg[self.NAME] = str(name)
            cfg.update(as_entry(raw, f"{self.WHAT} {name}"))
            for field in self.INT_FIELDS:
                cfg[field] = as_int(cfg[field], f"{self.WHAT} {name} {field}", 32)
            for field, default in self.BOOL_FIELDS.items():
                if field in cfg:
                    cfg[field] = as_bool(cfg[field], f"{self.WHAT} {name} {field}", default)
            table[str(name)] = cfg
        extra = {k: v for k, v in obj.items() if k not in ("dataVersion", self.TABLE)}
        return table, decode_data_version(obj.get("dataVersion")), extra

    def _apply(self, state: Any) -> None:
        table, data_version, extra = state
        self.table = table
        self.data_version = data_version if data_version is not None else new_data_version(self._v5)
        self._extra = extra

    def encode(self) -> str:
        with self._lock:
            top: dict[str, Any] = dict(self._extra)
            top["dataVersion"] = sorted_bean(self.data_version)
            top[self.TABLE] = {name: sorted_bean(cfg) for name, cfg in self.table.items()}
            return fastjson.dumps(sorted_bean(top))

    def find(self, name: str) -> dict[str, Any] | None:
        """A copy of bean ``name``, or None."""
        with self._lock:
            cfg = self.table.get(name)
            return copy.deepcopy(cfg) if cfg is not None else None
