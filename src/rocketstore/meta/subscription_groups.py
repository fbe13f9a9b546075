"""``config/subscriptionGroup.json``: consumer groups and their settings (``SubscriptionGroupManager``)."""

from __future__ import annotations

import copy
from typing import Any

from rocketstore.meta.config_file import BeanTable, next_version, sorted_bean

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


class SubscriptionGroupManager(BeanTable):
    """``subscriptionGroup.json``: ``{"dataVersion":{...},"subscriptionGroupTable":{group:{...}}}``.

    New groups get the 4.9.8 fields; groups and top-level fields read from a 5.x file
    (``groupRetryPolicy``, ``forbiddenTable``, ...) are kept and written back.
    """

    TABLE = "subscriptionGroupTable"
    NAME = "groupName"
    WHAT = "group"
    DEFAULTS = _GROUP_DEFAULTS
    INT_FIELDS = _GROUP_INT_FIELDS
    BOOL_FIELDS = _GROUP_BOOL_FIELDS

    @property
    def subscription_group_table(self) -> dict[str, dict[str, Any]]:
        """Group name -> its config (the table itself)."""
        return self.table

    def ensure(self, group: str) -> dict[str, Any]:
        """A copy of ``group``'s config, creating it with the defaults (and a new dataVersion) if absent.

        Call ``persist`` afterwards to write a creation.
        """
        with self._lock:
            cfg = self.table.get(group)
            if cfg is None:
                cfg = dict(_GROUP_DEFAULTS)
                cfg["groupName"] = group
                cfg = self.table[group] = sorted_bean(cfg)
                next_version(self.data_version)
            return copy.deepcopy(cfg)

    def setting(self, group: str, name: str) -> int:
        """The int setting ``name`` (``retryMaxTimes``, ``retryQueueNums``) of ``group``; its
        default (16, 1) if the group is unknown."""
        with self._lock:
            return int(self.table.get(group, _GROUP_DEFAULTS).get(name, _GROUP_DEFAULTS[name]))
