"""``config/subscriptionGroup.json``: consumer groups and their settings (``SubscriptionGroupManager``)."""

from __future__ import annotations

import copy
import os
from typing import Any

from rocketstore.meta import fastjson
from rocketstore.meta.config_file import ConfigFile, decode_data_version, new_data_version, next_version, sorted_bean
from rocketstore.meta.json_files import as_bool, as_entry, as_int, as_table

__all__ = ["DEFAULT_RETRY_MAX_TIMES", "SubscriptionGroupManager"]

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


class SubscriptionGroupManager(ConfigFile):
    """``subscriptionGroup.json``: ``{"dataVersion":{...},"subscriptionGroupTable":{group:{...}}}``.

    New groups get the 4.9.8 fields; groups and top-level fields read from a 5.x file
    (``groupRetryPolicy``, ``forbiddenTable``, ...) are kept and written back.
    """

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        super().__init__(path, writable=writable)
        self.subscription_group_table: dict[str, dict[str, Any]] = {}
        self.data_version: dict[str, Any] = new_data_version()
        self._extra: dict[str, Any] = {}

    def _reset(self) -> None:
        self.subscription_group_table = {}
        self.data_version = new_data_version()
        self._extra = {}

    def _decode(self, obj: dict[Any, Any]) -> Any:
        table: dict[str, dict[str, Any]] = {}
        for name, raw in as_table(obj, "subscriptionGroupTable").items():
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
        return table, decode_data_version(obj.get("dataVersion")), extra

    def _apply(self, state: Any) -> None:
        table, data_version, extra = state
        self.subscription_group_table = table
        self.data_version = data_version if data_version is not None else new_data_version()
        self._extra = extra

    def encode(self) -> str:
        """subscriptionGroup.json text."""
        with self._lock:
            top: dict[str, Any] = dict(self._extra)
            top["dataVersion"] = sorted_bean(self.data_version)
            top["subscriptionGroupTable"] = {
                name: sorted_bean(cfg) for name, cfg in self.subscription_group_table.items()
            }
            return fastjson.dumps(sorted_bean(top))

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
                cfg = self.subscription_group_table[group] = sorted_bean(cfg)
                next_version(self.data_version)
            return copy.deepcopy(cfg)

    def setting(self, group: str, name: str) -> int:
        """The int setting ``name`` (``retryMaxTimes``, ``retryQueueNums``) of ``group``; its
        default (16, 1) if the group is unknown."""
        with self._lock:
            return int(self.subscription_group_table.get(group, _GROUP_DEFAULTS).get(name, _GROUP_DEFAULTS[name]))
